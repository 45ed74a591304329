#!/usr/bin/env python3
"""Generate ``gateway/schemas/gateway.openapi.json``, the OpenAPI document of the gateway.

Usage (from anywhere)::

    uv run python scripts/gen_openapi.py          # rewrite the document
    uv run python scripts/gen_openapi.py --check  # exit 1 if the committed file differs

The team-feed route (``GET /v1/teams/{team}/events``, seed operation ``subscribeTeam``),
the run stream route (``GET /v1/threads/{thread_id}/runs/{run_id}/events``, seed
operation ``subscribeRun``) and every component schema they and the run-feed routes need
(the seed's ``ag-ui-1``, ``ag-ui-1_RunAgentInput``, ``SseMessage``, ...) are copied from
the seed, the OpenAPI 3.2.0 document "threads host API".  The seed is read from the
package copy ``gateway/schemas/threads-host-api.openapi.json`` (so this works offline and
in CI), else from ``../shared/seeds/threads-host-api.openapi.json`` beside the
repository.  Everything the gateway adds (publishing, the AG-UI run feeds, attaching,
health, metrics, authentication, its extra error codes) is Python data below.  The
output is deterministic: same seed, same bytes.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "gateway" / "schemas" / "gateway.openapi.json"
SEED_CANDIDATES = (
    ROOT / "gateway" / "schemas" / "threads-host-api.openapi.json",
    ROOT.parent / "shared" / "seeds" / "threads-host-api.openapi.json",
)

SCHEMA_PREFIX = "#/components/schemas/"
TEAM_EVENTS = "/v1/teams/{team}/events"
RUN_UI = "/v1/threads/{thread_id}/runs/{run_id}/ui/ag-ui"
RUN_EVENTS = "/v1/threads/{thread_id}/runs/{run_id}/events"
AGENT_UI = "/v1/ui/ag-ui/{agent}"
FEEDS = "/v1/feeds"
#: Page sizes of GET /v1/feeds (gateway.http.feed_listing; a test checks they agree).
FEEDS_DEFAULT_LIMIT = 20
FEEDS_MAX_LIMIT = 100
#: The opaque ``after`` of the listings (gateway.http.feed_listing MAX_AFTER).
MAX_AFTER = 400
RUNS = "/v1/runs"
RUN_HEARTBEAT = "/v1/threads/{thread_id}/runs/{run_id}/heartbeat"
#: A run's lease (gateway.run_lease; a test checks they agree): the default
#: GATEWAY_RUN_LEASE_SECONDS and the bounds of what a producer may ask for.
DEFAULT_LEASE_SECONDS = 60
MIN_LEASE_SECONDS = 5
MAX_LEASE_SECONDS = 3600
RUN_AI_SDK = "/v1/threads/{thread_id}/runs/{run_id}/ui/ai-sdk"
AI_SDK_RECONNECT = "/v1/ui/ai-sdk/{agent}/{chat_id}/stream"
#: An AI SDK chunk id E:O:K, or a feed cursor E:O (contract D10).
CHUNK_ID_PATTERN = "^[0-9]+:[0-9]+(:[0-9]+)?$"
#: Thread and run ids of run feeds (contract D1; gateway.feed, a test checks they agree).
RUN_PART_PATTERN = "^[A-Za-z0-9_.-]{1,128}$"
#: Longest Idempotency-Key of a run publish (gateway.producer; a test checks it).
MAX_IDEMPOTENCY_KEY = 200
CURSOR_PATTERN = "^[0-9]+:[0-9]+$"
#: Largest publish array (gateway.validate.MAX_BATCH_ITEMS; a test checks they agree).
MAX_BATCH_ITEMS = 1000
#: The seed's docs-page dump lost the angle-bracket text of its cursor descriptions:
#: "its id <epoch>:<offset>" reads "its id :".  The route texts below restore it.
CURSOR_TEXT = "`<epoch>:<offset>`"
#: Error codes the gateway answers that neither of the seed's code enums has.
GATEWAY_ERROR_CODES = [
    "unsupported_media_type",
    "method_not_allowed",
    "rate_limited",
    "internal",
    "run_ended",
]
#: A run's end is final (contract, "Runs end"): what the run publish routes say of it.
RUN_END_TEXT = """\
**A run's end is final.** Once the run feed holds the run's end ({end}), a new event is \
409 run_ended and nothing of the body is appended; an exact retry of what the run holds \
still answers its first cursor; a body with anything after its end is 409 run_ended as \
a whole. The producer starts a new run with another run id."""
#: Seed schemas the gateway's routes refer to; their transitive closure is copied.
SEED_ROOTS = (
    "TeamItem",
    "TeamCursor",
    "TeamSource",
    "ErrorBody",
    "Failure",
    "events_Event",
    "events_TeamId",
    "ag-ui-1",
    "ag-ui-1_RunAgentInput",
    "SseMessage",
    "ai-sdk-ui",
    "ChatKey",
)
#: Seed response components copied as they are (the seed 4XX responses of its routes).
SEED_RESPONSES = ("SubscribeTeamError", "SubscribeRunError", "UiCursorError", "UiReconnectError")


# -- the seed -----------------------------------------------------------------------------


def seed_path() -> Path:
    for candidate in SEED_CANDIDATES:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        "seed not found; looked for " + ", ".join(str(p) for p in SEED_CANDIDATES)
    )


def load_seed(path: Path | None = None) -> dict[str, Any]:
    with open(path or seed_path(), encoding="utf-8") as f:
        seed: dict[str, Any] = json.load(f)
    return seed


def refs(node: Any) -> Iterator[str]:
    """Every ``$ref`` string inside ``node``, depth first, in document order."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def closure(schemas: dict[str, Any], roots: Iterable[str]) -> list[str]:
    """Names of ``roots`` and every schema they reach through ``$ref``, in seed order."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in schemas:
            raise KeyError(f"the seed has no schema {name!r}")
        seen.add(name)
        for ref in refs(schemas[name]):
            if not ref.startswith(SCHEMA_PREFIX):
                raise ValueError(f"{name}: cannot copy the reference {ref!r}")
            todo.append(ref[len(SCHEMA_PREFIX) :])
    return [name for name in schemas if name in seen]


def seed_codes(seed: dict[str, Any]) -> set[str]:
    """The seed's public failure codes (events_ErrorCode and api_ApiErrorCode)."""
    schemas = seed["components"]["schemas"]
    return set(schemas["events_ErrorCode"]["enum"]) | set(schemas["api_ApiErrorCode"]["enum"])


# -- building blocks ----------------------------------------------------------------------


def ref(name: str) -> dict[str, str]:
    return {"$ref": SCHEMA_PREFIX + name}


def error_response(description: str, codes: list[str], known: set[str]) -> dict[str, Any]:
    """A JSON error response: the error body with ``error.code`` restricted to ``codes``.

    Mirrors the seed's per-route responses (allOf of ErrorBody and an enum on
    error.code).  Codes the seed does not know need GatewayErrorBody, whose code may
    also be one of GatewayErrorCode; ErrorBody alone could never match them.
    """
    body = "ErrorBody" if set(codes) <= known else "GatewayErrorBody"
    return {
        "description": description,
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [
                        ref(body),
                        {"properties": {"error": {"properties": {"code": {"enum": codes}}}}},
                    ]
                }
            }
        },
    }


def restore_cursor_text(text: str) -> str:
    """Put the lost ``<epoch>:<offset>`` back into a seed route text."""
    return text.replace("cursor, :.", f"cursor, {CURSOR_TEXT}.").replace(
        "its id :.", f"its id {CURSOR_TEXT}."
    )


def page_parameters(noun: str) -> list[dict[str, Any]]:
    """The paging parameters of a listing (``GET /v1/feeds``, ``GET /v1/runs``):
    ``limit`` and ``after``, with ``noun`` naming what a page holds."""
    return [
        {
            "name": "limit",
            "in": "query",
            "required": False,
            "description": f"{noun} per page, at most {FEEDS_MAX_LIMIT}.",
            "schema": {
                "type": "integer",
                "minimum": 1,
                "maximum": FEEDS_MAX_LIMIT,
                "default": FEEDS_DEFAULT_LIMIT,
            },
        },
        {
            "name": "after",
            "in": "query",
            "required": False,
            "description": (
                "The `next` of the previous page, as it was (opaque). Anything else is "
                "400 invalid_request."
            ),
            "schema": {"type": "string", "minLength": 1, "maxLength": MAX_AFTER},
        },
    ]


def page_answer(schema: str) -> dict[str, Any]:
    """A listing's 200: one page of ``schema``, never cached."""
    return {
        "description": "One page of the listing.",
        "headers": {
            "Cache-Control": {
                "description": "Always `no-store`: the listing changes all the time.",
                "schema": {"type": "string", "const": "no-store"},
            }
        },
        "content": json_content(ref(schema)),
    }


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def access_token_param() -> dict[str, Any]:
    return {
        "name": "access_token",
        "in": "query",
        "required": False,
        "description": (
            "The bearer JWT, for EventSource clients that cannot set the Authorization "
            "header (contract D5). A request carries one token: an Authorization header "
            "or another access_token with a different token beside it is 401 "
            "unauthenticated. Query strings are never logged; prefer short-lived tokens "
            "here."
        ),
        "schema": {"type": "string", "minLength": 1},
    }


def sse_headers() -> dict[str, Any]:
    """The response headers of every SSE route."""
    return {
        "Cache-Control": {
            "description": "Always `no-cache`: the stream is live.",
            "schema": {"type": "string", "const": "no-cache"},
        },
        "X-Accel-Buffering": {
            "description": "Always `no`: tells nginx-style proxies not to buffer the stream.",
            "schema": {"type": "string", "const": "no"},
        },
    }


# -- hand-written parts -------------------------------------------------------------------

INFO_DESCRIPTION = f"""\
The HTTP routes of the fan-out gateway for AI-agent event streams. Its contract is \
`docs/contract.md` (D1-D8); this document describes the HTTP routes only (not the WebSocket \
protocol, `GET /v1/ws`).

**Seed.** `GET {TEAM_EVENTS}` follows the seed's OpenAPI 3.2.0 document "threads host \
API" (version 1, operation `subscribeTeam`, x-api `Team.events`): its parameters, its \
200 `text/event-stream` response with `x-sse-data` TeamItem, its 4XX response and its \
`x-error-codes` are the seed's. `GET {RUN_EVENTS}` is the seed's `subscribeRun` \
(x-api `Host.subscribe`, 200 with `x-sse-data` SseMessage, its 4XX), with additions its \
description lists (contract D7b). The component schemas TeamItem, TeamCursor, \
TeamSource, ErrorBody, Failure, events_Event, ag-ui-1 (AG-UI 1.0), \
ag-ui-1_RunAgentInput, SseMessage and everything they reference are copied from the seed \
unchanged. This document is OpenAPI 3.1.0 so that common tools read it; it uses nothing \
that needs 3.2.

**Where the gateway adds to the seed's subscribeTeam.** (1) The route is served: the seed \
marks it "Phase 2, not yet available"; the gateway implements the Phase 2 behaviour \
(contract D2, D3). (2) The `Last-Event-ID` header is declared as a parameter (the seed \
only names it in the `after` description). (3) The `access_token` query parameter, for \
EventSource clients that cannot set headers (D5). (4) The response headers \
`Cache-Control: no-cache` and `X-Accel-Buffering: no`. (5) Per-status error responses \
(400 invalid_cursor, 401 unauthenticated, 404 not_found, 429 rate_limited) beside the \
seed's 4XX, and 503 unavailable / 500 internal. (6) The seed's dump lost the \
angle-bracket text of its cursor descriptions ("its id :."); the route texts here restore \
it as {CURSOR_TEXT}. (7) A summary.

**Gateway-only routes.** `POST {TEAM_EVENTS}` publishes to a team feed (D4). \
`POST {RUN_UI}` publishes AG-UI events to a run feed and `GET` on it follows the run as \
AG-UI SSE (D4, D7; it departs from the seed's `uiRunFrames`, see there). `POST \
{RUN_EVENTS}` publishes to a run's threads stream (D7b). `POST {AGENT_UI}` attaches an \
AG-UI client to a run that is going; unlike the seed's `uiAgUiRun` on that path it never \
starts a run (D7). `GET /healthz`, `GET /readyz`, `GET /metrics` and `GET \
/openapi.json` (this document) are unauthenticated operational routes (D8). With \
`GATEWAY_INTERNAL_PORT` set, `/healthz`, `/readyz` and `/metrics` are served on that \
port only (404 here); `/openapi.json` stays on the client port.

**Errors.** Every error body is exactly `{{"error": {{"code", "message"}}}}` with nothing \
else. Codes are the seed's (events_ErrorCode, api_ApiErrorCode) plus GatewayErrorCode \
({", ".join(GATEWAY_ERROR_CODES)}). A method a `/v1` route does not declare is 405 \
method_not_allowed with `Allow`, as is anything but GET or HEAD on the operational \
routes; an unknown `/v1` route is 401 without a valid token and 404 with one. Another \
tenant's team or run and one that does not exist get byte-identical responses.

**Authentication** (D5). Every `/v1` route needs a bearer JWT; with no authenticator \
configured on the gateway every `/v1` route answers 401."""

SECURITY_DESCRIPTION = """\
`Authorization: Bearer <JWT>` (contract D5). The gateway checks HS256 tokens signed \
with `GATEWAY_JWT_SECRET`; with no authenticator configured every /v1 route answers 401 \
unauthenticated. Claims: `sub`, `iss`, `tenant` and `exp` are required; the principal is \
`{issuer: iss, tenant, subject: sub}`, and every feed is scoped to its tenant. `scope` is \
space-separated and grants `subscribe` (follow feeds; without it a subscribe is 401) and/or \
`publish` (POST; without it 403 forbidden); an absent scope grants nothing. Optional \
`teams` (a list of team ids the token may read and publish to; absent: every team of the \
tenant) and `threads` (the same for run feeds). A team outside the `teams` claim is 404 \
not_found, like a team that does not exist. `gateway token` mints development tokens."""

GET_DESCRIPTION = """\
Follow a lead team's feed as server-sent events.

The seed marks this operation "**Phase 2, not yet available** (lane \
29-teams-phase2-29b): Until then a cursor of any other epoch restarts the feed, follow is \
not supported, and GET /v1/teams/{team}/events is not served." The gateway serves it and \
implements the Phase 2 behaviour (contract D2, D3):

- The cursor is the `Last-Event-ID` header, else the `after` query parameter; the header \
wins when both are sent. Leading zeros are accepted.
- No cursor: every retained item of the current feed epoch, then follow.
- A cursor in the current epoch, at or below the head: exactly the items after it, each \
once, in order; then follow. The route always follows.
- A malformed cursor, a number above 9007199254740991, a cursor from a later epoch, or \
one past the head: 400 invalid_cursor.
- A cursor from an older epoch, or one whose following items retention has trimmed: one \
`epoch_restarted` item whose cursor is where the feed is complete again, with that cursor \
as its SSE id; then the route closes. The client reconnects with that cursor. A follower \
whose feed moves to a new epoch while connected gets `epoch_restarted` too. An item is \
never skipped silently.
- Framing uses LF only, never CRLF. The `: keepalive` interval is \
`GATEWAY_KEEPALIVE_SECONDS` (default 15).
- Needs the `subscribe` scope (401 unauthenticated without it). 404 not_found for a team \
that does not exist in the caller's tenant, a team of another tenant (byte-identical \
answer), a team outside the token's `teams` claim, a team id that is not a lowercase UUID, \
and a host team (one whose feed began with a `team_opened` event of `kind: "host"`).
- Errors found before the stream starts are JSON. Once the 200 stream has started the \
gateway reports nothing in band besides `epoch_restarted`: when it ends a stream for its \
own reasons (drain, a client too slow to keep up) it just closes it, and the client \
resumes from its last cursor."""

POST_DESCRIPTION = f"""\
Append to a team feed (contract D4; the seed has no such route).

The body is one TeamPublishItem `{{"source": TeamSource, "event": events_Event}}` or a \
non-empty JSON array of at most {MAX_BATCH_ITEMS} of them. The event is validated against \
the seed's events_Event and the source against TeamSource (closed schemas: unknown fields \
are errors), and the source must fit the caller and the path: a member's or principal's \
tenant is the caller's tenant, a member's team is the path's team. A bad body is 400 \
invalid_request whose message names the failing item and field.

**All or nothing.** An array is appended atomically: if any item is rejected, nothing of \
the body is appended.

**Idempotent retries.** An item whose `event.event_id` the feed still retains is not \
appended again: with the same body, its answer repeats the cursor it got the first time; \
with a different body the request is 409 idempotency_key_reused. Retrying a request after \
a timeout is therefore safe.

The answer holds one cursor per item, in order. Needs the `publish` scope (403 \
forbidden without it). The body limit is `GATEWAY_MAX_BODY_BYTES` (default 1048576; 413 \
too_large beyond it). Each tenant may publish GATEWAY_PUBLISH_RATE items per second \
through this route, GATEWAY_PUBLISH_BURST at once (default 1000 and 2000); a request \
over it is refused whole with 429 rate_limited and `Retry-After`. The first item that \
opens a feed with a `team_opened` event of `kind: "host"` makes it a host team, which \
cannot be followed over HTTP."""


def team_get(seed: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """The seed's subscribeTeam, with the gateway's additions (see INFO_DESCRIPTION)."""
    op = copy.deepcopy(seed["paths"][TEAM_EVENTS]["get"])
    params = {p["name"]: p for p in op["parameters"]}
    team, after = params["team"], params["after"]
    after["description"] = restore_cursor_text(after["description"])
    if "Last-Event-ID" not in params:
        last_event_id = {
            "name": "Last-Event-ID",
            "in": "header",
            "required": False,
            "description": (
                f"Resume after this cursor, {CURSOR_TEXT}: the id of the last message "
                "received, which EventSource sends when it reconnects. The Last-Event-ID "
                "header wins when both it and `after` are sent."
            ),
            "schema": copy.deepcopy(after["schema"]),
        }
    else:
        last_event_id = params["Last-Event-ID"]
    access_token = access_token_param()
    ok = op["responses"]["200"]
    ok["description"] = restore_cursor_text(ok["description"])
    ok["headers"] = sse_headers()
    seed_4xx = op["responses"]["4XX"]
    responses = {
        "200": ok,
        "400": error_response(
            "invalid_cursor: a malformed cursor, a number above 9007199254740991, one from "
            "a later epoch, or one past the head.",
            ["invalid_cursor"],
            known,
        ),
        "401": error_response(
            "unauthenticated: no token, a token that does not verify or has expired, or a "
            "token without the subscribe scope; also every /v1 route when the gateway has "
            "no authenticator configured.",
            ["unauthenticated"],
            known,
        ),
        "404": error_response(
            "not_found: no such team in the caller's tenant, another tenant's team "
            "(byte-identical answer), a team outside the token's teams claim, a team id "
            "that is not a lowercase UUID, or a host team.",
            ["not_found"],
            known,
        ),
        "429": error_response(
            "rate_limited: the node already serves GATEWAY_MAX_CONNECTIONS streams, or the "
            "caller's tenant GATEWAY_MAX_TENANT_CONNECTIONS on this node (SSE streams and "
            "WebSocket sockets count together); refused before the stream starts.",
            ["rate_limited"],
            known,
        ),
        "4XX": seed_4xx,
        "500": error_response("internal: an unexpected error.", ["internal"], known),
        "503": error_response(
            "unavailable: the feed store could not be reached before the stream started.",
            ["unavailable"],
            known,
        ),
    }
    return {
        "tags": ["team feed"],
        "summary": "Follow a team feed (SSE)",
        "description": GET_DESCRIPTION,
        "operationId": op["operationId"],
        "x-api": op["x-api"],
        "x-error-codes": op["x-error-codes"],
        "security": [{"bearer": []}, {"accessToken": []}],
        "parameters": [team, after, last_event_id, access_token],
        "responses": responses,
    }


def team_post(seed: dict[str, Any], known: set[str]) -> dict[str, Any]:
    team = copy.deepcopy(
        next(p for p in seed["paths"][TEAM_EVENTS]["get"]["parameters"] if p["name"] == "team")
    )
    team["description"] = (
        "The lead team to publish to, a lowercase UUID in the caller's tenant (and in the "
        "token's teams claim, if it has one)."
    )
    return {
        "tags": ["team feed"],
        "summary": "Publish to a team feed",
        "description": POST_DESCRIPTION,
        "operationId": "publishTeam",
        "x-error-codes": list(PUBLISH_CODES),
        "parameters": [team],
        "requestBody": {
            "required": True,
            "description": (
                "One TeamPublishItem, or a non-empty array of at most "
                f"{MAX_BATCH_ITEMS} of them. Content-Type must be application/json."
            ),
            "content": json_content(ref("TeamPublishBody")),
        },
        "responses": {
            "200": {
                "description": (
                    "Appended (or, for a retried event_id with the same body, already "
                    "there): one cursor per item, in the order of the body."
                ),
                "content": json_content(ref("PublishResponse")),
            },
            **publish_errors(
                known,
                "invalid_request: the body is not JSON, not an item or array of items, an "
                "empty or too long array, or an item fails validation (the message names "
                "the item and field). Nothing of the body was appended.",
                "idempotency_key_reused: an event_id the feed still retains arrived with a "
                "different body. Nothing of the body was appended.",
                "retrying is safe (see idempotent retries).",
                not_found="not_found: the team id is not a lowercase UUID, or is outside the "
                "token's teams claim.",
            ),
        },
    }


def rate_limited_publish(known: set[str], description: str | None = None) -> dict[str, Any]:
    response = error_response(
        description
        or "rate_limited: the request's items exceed the caller's tenant's token bucket "
        "(GATEWAY_PUBLISH_RATE items per second, GATEWAY_PUBLISH_BURST at once). The "
        "request is refused whole: nothing of the body was appended.",
        ["rate_limited"],
        known,
    )
    response["headers"] = {
        "Retry-After": {
            "description": "Whole seconds until the request could be admitted.",
            "schema": {"type": "integer", "minimum": 1},
        }
    }
    return response


# -- run feeds (contract D4, D7, D7b) -----------------------------------------------------

RUN_GET_DESCRIPTION = f"""\
Follow a run feed as AG-UI server-sent events (contract D7).

Each message is `id: <epoch>:<offset>` (the item's cursor on the run feed) and one `data:` \
line holding the AG-UI event as it was published, re-serialised as compact one-line JSON: \
unknown fields and event types pass through, integers keep their exact value, empty \
deltas and `outcome` are kept. The data is an `ag-ui-1` event, or, unless the gateway \
runs with GATEWAY_AGUI_STRICT, anything that passed the publish checks (see \
publishRunAgUi). Framing uses LF only; `: keepalive` after GATEWAY_KEEPALIVE_SECONDS \
(default 15) of silence.

- The cursor is the `Last-Event-ID` header, else the `after` query parameter; the header \
wins when both are sent. The resume rules are the team feed's (D2): no cursor, every \
retained event of the current epoch, then follow; a cursor in the current epoch, exactly \
the events after it; a malformed cursor, one from a later epoch or one past the head, 400 \
invalid_cursor.
- **Prelude.** A client that joins or resumes anywhere but the run's first event first \
gets `RUN_STARTED`, `STATE_SNAPSHOT` (the state folded from STATE_SNAPSHOT and \
STATE_DELTA, RFC 6902), `MESSAGES_SNAPSHOT` (the messages folded from the text, \
tool-call, tool-result, reasoning and activity events, with the partial text and \
arguments of what is still open), then the start events of everything still open at the \
cursor, outermost first (subagents, steps, reasoning, text messages, tool calls, open \
chunk streams); then the events after the cursor. Prelude events carry no `id:`; the \
first event after them carries its own. A strict AG-UI client accepts the stream at every \
cut point and ends with the same messages and state as one that saw the run from the \
start.
- **The end.** The stream ends after the run's `RUN_FINISHED` or `RUN_ERROR`; a client \
resuming after it gets the prelude and the terminal event, then the end. The run feed is \
deleted GATEWAY_RUN_FINISHED_TTL_SECONDS (default 3600) after its terminal event; then \
it is 404.
- **epoch_restarted** is the event `{{"type": "CUSTOM", "name": \
"gateway.epoch_restarted", "value": {{"cursor": "<epoch>:<offset>"}}}}` with that cursor \
as its SSE id; then the stream closes and the client reconnects with that cursor. When \
the gateway ends a stream for its own reasons (drain, token expiry, a client too slow to \
keep up) it just closes it, without a RUN_* event, and the client resumes from its last \
cursor. Errors found before the stream starts are JSON.
- Needs the `subscribe` scope (401 unauthenticated without it). No such run, another \
tenant's run, a thread outside the token's `threads` claim and a malformed thread or run \
id all answer the same 404 not_found (byte-identical).

**Where this departs from the seed** (D7): the seed's `uiRunFrames` (`GET \
/v1/threads/{{thread_id}}/runs/{{run_id}}/ui/{{protocol}}`, protocol `ag-ui`) derives \
several frames from one log event and numbers them `<seq>:<k>`, serves committed frames \
only and opens a replay with MESSAGES_SNAPSHOT. A run feed carries AG-UI events as \
published, one frame per item, so the frame id is the feed cursor {CURSOR_TEXT}; the \
stream is live; and the prelude starts with RUN_STARTED, which the AG-UI client's own \
verification requires first."""

RUN_POST_DESCRIPTION = f"""\
Append AG-UI events to a run feed (contract D4, D7; the seed has no such route).

The body is one AG-UI event or a non-empty JSON array of at most {MAX_BATCH_ITEMS} of \
them, appended all or nothing; the run feed exists from its first event on. The schema \
is the seed's `ag-ui-1` (AG-UI 1.0), but publishing checks only `type` (a non-empty \
string) and the fields that type requires (AG-UI 1.0 and the draft of seed 000); \
everything else passes through untouched: unknown fields and unknown event types, empty \
deltas, `outcome`, exact integers. A `RUN_STARTED` or `RUN_FINISHED` whose `threadId` or \
`runId` differs from the path, and `subagentRunId: null` (which AG-UI clients reject), \
are 400. With `GATEWAY_AGUI_STRICT=true` every event must validate against the whole \
`ag-ui-1` schema instead. A bad body is 400 invalid_request whose message names the \
failing item and field; nothing of it is appended.

**Idempotent retries.** AG-UI events have no id: send an `Idempotency-Key` header. A \
request whose key the feed still retains, with the same events, answers the cursors it \
got the first time; with different events it is 409 idempotency_key_reused.

A run's `RUN_FINISHED` or `RUN_ERROR` ends its SSE streams and starts its grace period: \
the feed is deleted GATEWAY_RUN_FINISHED_TTL_SECONDS later. The answer holds one cursor \
per event, in order. Needs the `publish` scope (403 forbidden without it); a thread \
outside the token's `threads` claim and a malformed thread or run id are 404 not_found, \
like a run the caller may not read. The body limit is `GATEWAY_MAX_BODY_BYTES` (413 \
too_large beyond it); the events count against the tenant's publish rate \
(GATEWAY_PUBLISH_RATE, GATEWAY_PUBLISH_BURST; 429 rate_limited with `Retry-After`). The \
Redis inbox `<prefix>:inbox:run` and the Python producer apply the same checks.

**Leases.** A run is live from its `RUN_STARTED` to its `RUN_FINISHED` or `RUN_ERROR` and \
holds a lease meanwhile: `lease_seconds` seconds (asked for by the publish that appends \
its `RUN_STARTED`, {MIN_LEASE_SECONDS} to {MAX_LEASE_SECONDS}), else \
GATEWAY_RUN_LEASE_SECONDS (default {DEFAULT_LEASE_SECONDS}). Every publish to a live run \
renews it, and so does `POST {RUN_HEARTBEAT}` without publishing. When it runs out the \
gateway appends one `RUN_ERROR` with `"code": "producer_lost"`, which ends the run like \
any other end.

""" + RUN_END_TEXT.format(end="`RUN_FINISHED` or `RUN_ERROR`")

ATTACH_DESCRIPTION = f"""\
Attach an AG-UI `HttpAgent` to a run that is already going (contract D7).

The body is a RunAgentInput; the gateway reads only its `threadId` and `runId` and \
ignores everything else. It streams that run exactly like `GET {RUN_UI}` (same cursor \
parameters, prelude, `id:` fields, end after RUN_FINISHED or RUN_ERROR, epoch_restarted \
and errors): an unmodified AG-UI client that POSTs its input here follows the run. \
`{{agent}}` is not checked (the gateway has no agents). A run that does not exist (or \
that the caller may not read, or whose ids are malformed) is 404 not_found.

**Where this departs from the seed** (D7): the seed's `uiAgUiRun` on this path starts, \
retries or resumes a run from the input (AgUiRunInput) and refuses a busy branch. The \
gateway has no agents and **never starts a run**: the run must have been published to \
(`POST {RUN_UI}`); this route only follows it."""

SUBSCRIBE_RUN_DESCRIPTION = f"""\
Follow a run's threads stream (contract D7b): the seed's `subscribeRun`.

- Each message's data is one SseMessage. A committed `{{"kind": "event", "event": \
events_Event}}` carries the event's own `seq` as its SSE id. `{{"kind": "delta"}}` and \
`{{"kind": "status"}}` messages are transient: delivered live to whoever is connected, \
never stored or replayed, without an id. The last message is `{{"kind": "result", \
"run_id", "result"}}` (no id); the stream ends after it.
- Resume with `after_seq` or the `Last-Event-ID` header (the header wins when both are \
sent): the committed events with a larger seq, then the result if there is one. No \
cursor (or 0): every retained committed event. A seq older than what is retained gives \
every retained event; a seq past the last committed one gives what comes next. A \
malformed value (not decimal digits, or above 9007199254740991) is 400 invalid_request.
- When the run's feed moves to a new epoch while connected, the stream just ends (a `: \
stream restarted` comment); the client resumes with its last seq. A stream the gateway \
ends for its own reasons (drain, token expiry, a slow client) just closes.
- Needs the `subscribe` scope (401 unauthenticated without it). If the run's history is \
gone (never published, or deleted GATEWAY_RUN_FINISHED_TTL_SECONDS after its result), \
the answer is 404 not_found, as for another tenant's run, a thread outside the token's \
`threads` claim or a malformed id (byte-identical).

**Where the gateway adds to the seed's subscribeRun.** (1) The path parameters: the seed \
types `thread_id` and `run_id` as lowercase UUIDs; the gateway serves any run-feed id \
matching `{RUN_PART_PATTERN}` (committed events must name the path's thread, so in \
practice `thread_id` is the events' thread UUID). (2) The `Last-Event-ID` header is \
declared as a parameter. (3) The `access_token` query parameter (D5). (4) The response \
headers `Cache-Control: no-cache` and `X-Accel-Buffering: no`. (5) Per-status error \
responses beside the seed's 4XX: 400 invalid_request for a malformed `after_seq` or \
`Last-Event-ID`, 401, 404, 429 rate_limited, 500 internal, 503 unavailable. The gateway \
never answers 403 here: a token without the subscribe scope is 401. (6) The messages are \
published over `POST` on the same path (publishRunEvents), not written by a threads \
host."""

RUN_EVENTS_POST_DESCRIPTION = f"""\
Publish SseMessages to a run's threads stream (contract D7b; the seed has no such \
route).

The body is one SseMessage or a non-empty JSON array of at most {MAX_BATCH_ITEMS} of \
them, validated against the seed's SseMessage (closed schemas), and every message is \
checked before anything is appended or sent; then they go out in order:

- a committed `{{"kind": "event"}}` is stored with its `seq`; its `event.thread_id` must \
be the path's thread. Committed seqs must continue the last committed one by one, \
within the body and across requests (the first event of a new run may have any seq). A \
seq the feed still retains, sent again with the same event, is a safe retry and answers \
its cursor again; with another event it is 409 idempotency_key_reused. A gap or a \
regression (a seq that does not follow and is not retained) is 400 invalid_request.
- `{{"kind": "delta"}}` and `{{"kind": "status"}}` are transient: sent to the followers \
connected now, never stored; their cursor in the answer is `null`.
- the `{{"kind": "result"}}` must name the path's run (`run_id`); it is stored, ends \
every follower's stream, and starts the run's grace period: the feed is deleted \
GATEWAY_RUN_FINISHED_TTL_SECONDS later.

A bad message is 400 invalid_request whose message names the item and field. The answer \
holds one entry per message, in order: the stored message's cursor, or null for a \
transient one. Needs the `publish` scope (403 forbidden without it); a thread outside \
the token's `threads` claim and a malformed thread or run id are 404 not_found. The \
body limit is `GATEWAY_MAX_BODY_BYTES` (413 too_large beyond it); publishing counts \
against the tenant's publish rate (429 rate_limited with `Retry-After`).

""" + RUN_END_TEXT.format(end="its `result`; transient messages are not stored and not refused")


def run_params(thread: str, run: str) -> list[dict[str, Any]]:
    """The path parameters thread_id and run_id of the run routes (D1)."""
    return [
        {
            "name": "thread_id",
            "in": "path",
            "required": True,
            "description": thread,
            "schema": {"type": "string", "pattern": RUN_PART_PATTERN},
        },
        {
            "name": "run_id",
            "in": "path",
            "required": True,
            "description": run,
            "schema": {"type": "string", "pattern": RUN_PART_PATTERN},
        },
    ]


def cursor_params() -> list[dict[str, Any]]:
    """``after``, ``Last-Event-ID`` and ``access_token`` of the AG-UI streams (D2, D5)."""
    schema = {"type": "string", "pattern": CURSOR_PATTERN}
    return [
        {
            "name": "after",
            "in": "query",
            "required": False,
            "description": (
                f"Resume after this cursor, {CURSOR_TEXT}. The Last-Event-ID header wins "
                "when both are sent. Leading zeros are accepted."
            ),
            "schema": dict(schema),
        },
        {
            "name": "Last-Event-ID",
            "in": "header",
            "required": False,
            "description": (
                f"Resume after this cursor, {CURSOR_TEXT}: the id of the last message "
                "received, which EventSource and the AG-UI client send when they "
                "reconnect. It wins when `after` is sent too."
            ),
            "schema": dict(schema),
        },
        access_token_param(),
    ]


def stream_errors(known: set[str], bad_request: dict[str, Any], not_found: str) -> dict[str, Any]:
    """The error responses of a run stream, before the stream starts."""
    return {
        "400": bad_request,
        "401": error_response(
            "unauthenticated: no token, a token that does not verify or has expired, or a "
            "token without the subscribe scope; also every /v1 route when the gateway has "
            "no authenticator configured.",
            ["unauthenticated"],
            known,
        ),
        "404": error_response(not_found, ["not_found"], known),
        "429": error_response(
            "rate_limited: the node already serves GATEWAY_MAX_CONNECTIONS streams, or the "
            "caller's tenant GATEWAY_MAX_TENANT_CONNECTIONS on this node (SSE streams and "
            "WebSocket sockets count together); refused before the stream starts.",
            ["rate_limited"],
            known,
        ),
        "500": error_response("internal: an unexpected error.", ["internal"], known),
        "503": error_response(
            "unavailable: the feed store could not be reached before the stream started, "
            "or the node is draining.",
            ["unavailable"],
            known,
        ),
    }


def invalid_cursor(known: set[str]) -> dict[str, Any]:
    return error_response(
        "invalid_cursor: a malformed cursor, a number above 9007199254740991, one from a "
        "later epoch, or one past the head.",
        ["invalid_cursor"],
        known,
    )


def no_such_run(tail: str) -> str:
    """The 404 of the run streams: every run the caller may not read looks missing."""
    return (
        "not_found: no such run in the caller's tenant, another tenant's run "
        "(byte-identical answer), a thread outside the token's threads claim, or a thread "
        f"or run id that does not match {RUN_PART_PATTERN}. {tail}"
    )


def agui_stream_ok(what: str) -> dict[str, Any]:
    return {
        "description": what,
        "headers": sse_headers(),
        "content": {
            "text/event-stream": {
                "schema": {"type": "string"},
                "x-sse-data": ref("ag-ui-1"),
            }
        },
    }


def run_get(known: set[str]) -> dict[str, Any]:
    codes = ["invalid_cursor", "unauthenticated", "not_found", "rate_limited", "unavailable"]
    return {
        "tags": ["run feeds"],
        "summary": "Follow a run feed (AG-UI SSE)",
        "description": RUN_GET_DESCRIPTION,
        "operationId": "subscribeRunAgUi",
        "x-error-codes": codes,
        "security": [{"bearer": []}, {"accessToken": []}],
        "parameters": [
            *run_params(
                "The run's thread (any id matching the pattern).",
                "The run (any id matching the pattern).",
            ),
            *cursor_params(),
        ],
        "responses": {
            "200": agui_stream_ok(
                "AG-UI events of the run: `id: <epoch>:<offset>` and one `data:` line per "
                "published event, the prelude (without ids) first when the stream does not "
                "start at the run's first event; the stream ends after RUN_FINISHED or "
                "RUN_ERROR."
            ),
            **stream_errors(
                known,
                invalid_cursor(known),
                no_such_run(
                    "A run feed is gone GATEWAY_RUN_FINISHED_TTL_SECONDS after its terminal event."
                ),
            ),
        },
    }


def attach(seed: dict[str, Any], known: set[str]) -> dict[str, Any]:
    agent = copy.deepcopy(seed["paths"][AGENT_UI]["post"]["parameters"][0])
    agent["description"] = "Any non-empty name: not checked (the gateway has no agents)."
    codes = [
        "invalid_request",
        "invalid_cursor",
        "unauthenticated",
        "not_found",
        "too_large",
        "unsupported_media_type",
        "rate_limited",
        "unavailable",
    ]
    errors = stream_errors(
        known,
        error_response(
            "invalid_request: the body is not JSON, or has no string threadId and runId; "
            "invalid_cursor: a malformed cursor, a number above 9007199254740991, one "
            "from a later epoch, or one past the head.",
            ["invalid_request", "invalid_cursor"],
            known,
        ),
        no_such_run("No run is started here: a run exists once something was published to it."),
    )
    errors["413"] = error_response(
        "too_large: the body is larger than GATEWAY_MAX_BODY_BYTES.", ["too_large"], known
    )
    errors["415"] = error_response(
        "unsupported_media_type: the Content-Type is not application/json.",
        ["unsupported_media_type"],
        known,
    )
    return {
        "tags": ["run feeds"],
        "summary": "Attach to a run (AG-UI HttpAgent)",
        "description": ATTACH_DESCRIPTION,
        "operationId": "attachAgUiRun",
        "x-error-codes": codes,
        "parameters": [agent, *cursor_params()[:2]],
        "requestBody": {
            "required": True,
            "description": (
                "An AG-UI RunAgentInput naming the run: only `threadId` and `runId` are "
                "read, the rest is ignored. Content-Type must be application/json."
            ),
            "content": json_content(ref("ag-ui-1_RunAgentInput")),
        },
        "responses": dict(
            sorted(
                {
                    "200": agui_stream_ok(
                        f"The run named by threadId and runId, exactly as `GET {RUN_UI}` "
                        "streams it."
                    ),
                    **errors,
                }.items()
            )
        ),
    }


#: The 404 of the run publish routes.
RUN_PUBLISH_NOT_FOUND = (
    "not_found: a thread outside the token's threads claim, or a thread or run id "
    f"that does not match {RUN_PART_PATTERN}. Nothing was appended."
)


def publish_errors(
    known: set[str],
    bad_request: str,
    reused: str,
    retry: str,
    *,
    not_found: str = RUN_PUBLISH_NOT_FOUND,
    rate: str | None = None,
    ended: str | None = None,
) -> dict[str, Any]:
    """The error responses of a publish route (team or run); ``ended``: a run route's
    409 run_ended."""
    conflict = (
        error_response(reused, ["idempotency_key_reused"], known)
        if ended is None
        else error_response(f"{reused} {ended}", ["idempotency_key_reused", "run_ended"], known)
    )
    return {
        "400": error_response(bad_request, ["invalid_request"], known),
        "401": error_response(
            "unauthenticated: no token, or one that does not verify or has expired.",
            ["unauthenticated"],
            known,
        ),
        "403": error_response(
            "forbidden: the token lacks the publish scope.", ["forbidden"], known
        ),
        "404": error_response(not_found, ["not_found"], known),
        "409": conflict,
        "413": error_response(
            "too_large: the body is larger than GATEWAY_MAX_BODY_BYTES.", ["too_large"], known
        ),
        "415": error_response(
            "unsupported_media_type: the Content-Type is not application/json.",
            ["unsupported_media_type"],
            known,
        ),
        "429": rate_limited_publish(known, rate),
        "500": error_response("internal: an unexpected error.", ["internal"], known),
        "503": error_response(
            f"unavailable: the feed store could not be reached or rejected the append; {retry}",
            ["unavailable"],
            known,
        ),
    }


PUBLISH_CODES = [
    "invalid_request",
    "unauthenticated",
    "forbidden",
    "not_found",
    "idempotency_key_reused",
    "too_large",
    "unsupported_media_type",
    "rate_limited",
    "unavailable",
]
#: The run publish routes' codes: a run's end is final.
RUN_PUBLISH_CODES = [*PUBLISH_CODES[:5], "run_ended", *PUBLISH_CODES[5:]]
#: Their 409 run_ended.
RUN_ENDED = (
    "run_ended: the run has ended (its feed holds its end), or the body has something "
    "after its end. Nothing of the body was appended; start a new run (another run id)."
)


def run_post(known: set[str]) -> dict[str, Any]:
    return {
        "tags": ["run feeds"],
        "summary": "Publish AG-UI events to a run feed",
        "description": RUN_POST_DESCRIPTION,
        "operationId": "publishRunAgUi",
        "x-error-codes": RUN_PUBLISH_CODES,
        "parameters": [
            *run_params(
                "The run's thread: any id matching the pattern. RUN_STARTED and "
                "RUN_FINISHED events must name it as threadId.",
                "The run: any id matching the pattern. RUN_STARTED and RUN_FINISHED "
                "events must name it as runId.",
            ),
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": (
                    "Makes a retry safe: while the feed retains the events a request "
                    "with this key appended, the same key with the same events answers "
                    "their cursors again (nothing is appended) and with other events is "
                    f"409 idempotency_key_reused. 1 to {MAX_IDEMPOTENCY_KEY} characters "
                    "(400 otherwise)."
                ),
                "schema": {"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY},
            },
            {
                "name": "lease_seconds",
                "in": "query",
                "required": False,
                "description": (
                    "The lease, in seconds, of the run this publish starts (its "
                    f"RUN_STARTED): {MIN_LEASE_SECONDS} to {MAX_LEASE_SECONDS}; without it "
                    f"GATEWAY_RUN_LEASE_SECONDS (default {DEFAULT_LEASE_SECONDS}). Checked on "
                    "every publish (400 invalid_request when out of bounds or not a number); "
                    "a publish that does not start the run renews its lease as it is."
                ),
                "schema": {
                    "type": "number",
                    "minimum": MIN_LEASE_SECONDS,
                    "maximum": MAX_LEASE_SECONDS,
                },
            },
        ],
        "requestBody": {
            "required": True,
            "description": (
                "One AG-UI event, or a non-empty array of at most "
                f"{MAX_BATCH_ITEMS} of them. Content-Type must be application/json."
            ),
            "content": json_content(ref("RunPublishBody")),
        },
        "responses": {
            "200": {
                "description": (
                    "Appended (or, for a retried Idempotency-Key with the same events, "
                    "already there): one cursor per event, in the order of the body."
                ),
                "content": json_content(ref("PublishResponse")),
            },
            **publish_errors(
                known,
                "invalid_request: the body is not JSON, not an event or array of events, "
                "an empty array, an event without a string `type` or without a field its "
                "type requires (or, with GATEWAY_AGUI_STRICT, not valid `ag-ui-1`), a "
                "RUN_STARTED or RUN_FINISHED naming another thread or run than the path, "
                "`subagentRunId: null`, an Idempotency-Key that is empty or longer than "
                f"{MAX_IDEMPOTENCY_KEY} characters, or a `lease_seconds` that is not a "
                f"number from {MIN_LEASE_SECONDS} to {MAX_LEASE_SECONDS}. The message names "
                "the item and field. "
                "Nothing of the body was appended.",
                "idempotency_key_reused: the Idempotency-Key is one the feed still retains, "
                "sent with different events. Nothing of the body was appended.",
                "retrying with the same Idempotency-Key is safe.",
                ended=RUN_ENDED,
            ),
        },
    }


def subscribe_run(seed: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """The seed's subscribeRun as the gateway serves it (D7b)."""
    op = copy.deepcopy(seed["paths"][RUN_EVENTS]["get"])
    params = {p.get("name", p.get("$ref")): p for p in op["parameters"]}
    after_seq = params["after_seq"]
    after_seq["description"] = (
        "Resume after this seq: the committed events with a larger seq follow. Default 0 "
        "(every retained committed event). The Last-Event-ID header wins when both are "
        "sent."
    )
    ok = op["responses"]["200"]
    ok["headers"] = sse_headers()
    codes = [*op["x-error-codes"]]
    codes += [c for c in ("invalid_request", "rate_limited", "unavailable") if c not in codes]
    responses = {
        "200": ok,
        **stream_errors(
            known,
            error_response(
                "invalid_request: `after_seq` or `Last-Event-ID` is not a decimal seq "
                "(digits only, at most 9007199254740991).",
                ["invalid_request"],
                known,
            ),
            no_such_run(
                "The run's history is gone: it was never published to, or was deleted "
                "GATEWAY_RUN_FINISHED_TTL_SECONDS after its result."
            ),
        ),
    }
    responses["4XX"] = op["responses"]["4XX"]
    return {
        "tags": ["run feeds"],
        "summary": op["summary"],
        "description": SUBSCRIBE_RUN_DESCRIPTION,
        "operationId": op["operationId"],
        "x-api": op["x-api"],
        "x-error-codes": codes,
        "security": [{"bearer": []}, {"accessToken": []}],
        "parameters": [
            *run_params(
                "The run's thread. Committed events of the run carry it as thread_id.",
                "From RunAccepted: the run's user_input event_id (any id matching the pattern).",
            ),
            after_seq,
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "description": (
                    "Resume after this seq: the id of the last committed event received, "
                    "which EventSource sends when it reconnects. Wins over after_seq."
                ),
                "schema": {"type": "string", "pattern": "^[0-9]{1,16}$"},
            },
            access_token_param(),
        ],
        "responses": dict(sorted(responses.items())),
    }


def publish_run_events(known: set[str]) -> dict[str, Any]:
    return {
        "tags": ["run feeds"],
        "summary": "Publish to a run's threads stream",
        "description": RUN_EVENTS_POST_DESCRIPTION,
        "operationId": "publishRunEvents",
        "x-error-codes": RUN_PUBLISH_CODES,
        "parameters": run_params(
            "The run's thread: committed events must carry it as `event.thread_id`.",
            "The run: the result message must name it as `run_id`.",
        ),
        "requestBody": {
            "required": True,
            "description": (
                "One SseMessage, or a non-empty array of at most "
                f"{MAX_BATCH_ITEMS} of them, in order. Content-Type must be "
                "application/json."
            ),
            "content": json_content(ref("RunStreamPublishBody")),
        },
        "responses": {
            "200": {
                "description": (
                    "Published: one entry per message, in the order of the body: the "
                    "cursor of a stored message (a committed event or the result; a "
                    "retried seq answers its first cursor), null for a transient one."
                ),
                "content": json_content(ref("RunStreamPublishResponse")),
            },
            **publish_errors(
                known,
                "invalid_request: the body is not JSON, not an SseMessage or array of "
                "them, an empty array, a message that fails the seed's SseMessage (the "
                "message names the item and field), a committed event naming another "
                "thread than the path, a result naming another run, or committed seqs "
                "that do not continue the last committed seq by one (a gap or a "
                "regression). Nothing of the body was appended or sent.",
                "idempotency_key_reused: a committed seq the feed still retains arrived "
                "with a different event (or a second, different result).",
                "retrying is safe (a retained seq with the same event is not appended again).",
                rate=(
                    "rate_limited: the caller's tenant's publish token bucket "
                    "(GATEWAY_PUBLISH_RATE per second, GATEWAY_PUBLISH_BURST at once) is "
                    "empty. The request is refused whole: nothing was appended or sent."
                ),
                ended=RUN_ENDED,
            ),
        },
    }


FEEDS_DESCRIPTION = """\
The caller's recently active feeds of one kind, most recently active first (contract \
D11): what the console lists. Scope `subscribe`. Only the caller's tenant's feeds that \
its token may read (the `teams` and `threads` claims) and that exist are listed; host \
teams never are. `head` is the feed's head cursor when the request was answered, \
`updated_ms` when a node last recorded the feed as active (each node records a feed at \
most once a second, so it may lag the last append by that much). The index keeps at most \
10,000 feeds per tenant and kind, none idle for more than a day; feeds it dropped can \
still be followed by name.

Paginated: pass the answer's `next` as `after` to get the next page; `next` is null on \
the last page. A page may hold fewer than `limit` feeds while `next` is not null (a \
request looks at a bounded number of index entries). Feeds that become active while a \
client pages move to the front, so a listing is a view, not a snapshot."""


def list_feeds(known: set[str]) -> dict[str, Any]:
    return {
        "tags": ["feeds"],
        "summary": "List the tenant's active feeds",
        "description": FEEDS_DESCRIPTION,
        "operationId": "listFeeds",
        "x-error-codes": ["invalid_request", "unauthenticated", "not_found", "unavailable"],
        "parameters": [
            {
                "name": "kind",
                "in": "query",
                "required": True,
                "description": (
                    "Team feeds (`team/<id>`) or AG-UI run feeds (`run/<thread>/<run>`)."
                ),
                "schema": {"type": "string", "enum": ["team", "run"]},
            },
            *page_parameters("Feeds"),
        ],
        "responses": {
            "200": page_answer("FeedList"),
            "400": error_response(
                "invalid_request: `kind` missing or not team or run, `limit` not an "
                f"integer from 1 to {FEEDS_MAX_LIMIT}, or an `after` this route did not "
                "hand out (for this kind).",
                ["invalid_request"],
                known,
            ),
            "401": error_response(
                "unauthenticated: no token, a token that does not verify or has expired, or a "
                "token without the subscribe scope; also every /v1 route when the gateway has "
                "no authenticator configured.",
                ["unauthenticated"],
                known,
            ),
            "404": error_response(
                "not_found: this gateway's store keeps no feed index.", ["not_found"], known
            ),
            "500": error_response("internal: an unexpected error.", ["internal"], known),
            "503": error_response(
                "unavailable: the feed store could not be reached.", ["unavailable"], known
            ),
        },
    }


# -- run leases (contract, "Runs end") -------------------------------------------------

HEARTBEAT_DESCRIPTION = f"""\
Renew a live run's lease without publishing (contract, "Runs end").

A run is live from its start (AG-UI `RUN_STARTED`) to its end and holds a lease \
meanwhile; every publish to it renews the lease, and so does this route, for a producer \
that has nothing to publish for a while. The lease then runs its full length (the \
`lease_seconds` the run was started with, else GATEWAY_RUN_LEASE_SECONDS, default \
{DEFAULT_LEASE_SECONDS}) from now. When a lease runs out the gateway appends one \
`RUN_ERROR` with `"code": "producer_lost"` to the run, which ends it.

Needs the `publish` scope (403 forbidden without it). No body is needed; one that is \
sent is ignored. A run that is not live (never started, already ended, no such run, \
another tenant's) and a thread outside the token's `threads` claim are the same 404."""


def run_heartbeat(known: set[str]) -> dict[str, Any]:
    return {
        "tags": ["run feeds"],
        "summary": "Renew a live run's lease",
        "description": HEARTBEAT_DESCRIPTION,
        "operationId": "heartbeatRun",
        "x-error-codes": ["unauthenticated", "forbidden", "not_found", "too_large", "unavailable"],
        "parameters": run_params(
            "The run's thread (any id matching the pattern).",
            "The run (any id matching the pattern).",
        ),
        "responses": {
            "204": {"description": "Renewed: the run is live and its lease starts again now."},
            "401": error_response(
                "unauthenticated: no token, or one that does not verify or has expired.",
                ["unauthenticated"],
                known,
            ),
            "403": error_response(
                "forbidden: the token lacks the publish scope.", ["forbidden"], known
            ),
            "404": error_response(
                "not_found: no such live run: the run never started, has ended (its lease "
                "too), does not exist in the caller's tenant, its thread is outside the "
                "token's threads claim, or a thread or run id does not match "
                f"{RUN_PART_PATTERN}. Nothing was renewed.",
                ["not_found"],
                known,
            ),
            "413": error_response(
                "too_large: a body larger than GATEWAY_MAX_BODY_BYTES (a body is otherwise "
                "ignored).",
                ["too_large"],
                known,
            ),
            "500": error_response("internal: an unexpected error.", ["internal"], known),
            "503": error_response(
                "unavailable: the feed store could not be reached; whether the lease was "
                "renewed is unknown, and retrying is safe.",
                ["unavailable"],
                known,
            ),
        },
    }


RUNS_DESCRIPTION = f"""\
The caller's live runs, the latest started first (contract, "Runs end"). Scope \
`subscribe`. A run is live from its start (AG-UI `RUN_STARTED`) to its end, and holds a \
lease meanwhile; `started_ms` is when it started, `updated_ms` when its lease was last \
renewed (its last publish or heartbeat), `lease_deadline_ms` when the lease runs out \
unless renewed (all milliseconds since the Unix epoch, of the store's clock). Only the \
caller's tenant's runs that its token may read (the `threads` claim) and that are live \
when the request is answered are listed. `feed` is the run feed's public name, as the \
WebSocket protocol and the console use it.

Paginated like `GET {FEEDS}`: pass the answer's `next` as `after` to get the next page; \
`next` is null on the last page. A page may hold fewer than `limit` runs while `next` is \
not null (a request looks at a bounded number of index entries).

The seed's `POST /v1/runs` (startRun) starts runs in the host; the gateway starts none \
and serves only this GET (POST is 405)."""


def list_runs(known: set[str]) -> dict[str, Any]:
    return {
        "tags": ["feeds"],
        "summary": "List the tenant's live runs",
        "description": RUNS_DESCRIPTION,
        "operationId": "listRuns",
        "x-error-codes": ["invalid_request", "unauthenticated", "not_found", "unavailable"],
        "parameters": [
            {
                "name": "state",
                "in": "query",
                "required": True,
                "description": "Which runs: `live`, the one state listed.",
                "schema": {"type": "string", "enum": ["live"]},
            },
            *page_parameters("Runs"),
        ],
        "responses": {
            "200": page_answer("RunList"),
            "400": error_response(
                "invalid_request: `state` missing or not live, `limit` not an integer from "
                f"1 to {FEEDS_MAX_LIMIT}, or an `after` this route did not hand out.",
                ["invalid_request"],
                known,
            ),
            "401": error_response(
                "unauthenticated: no token, a token that does not verify or has expired, or a "
                "token without the subscribe scope; also every /v1 route when the gateway has "
                "no authenticator configured.",
                ["unauthenticated"],
                known,
            ),
            "404": error_response(
                "not_found: this gateway keeps no live-run index.", ["not_found"], known
            ),
            "500": error_response("internal: an unexpected error.", ["internal"], known),
            "503": error_response(
                "unavailable: the feed store could not be reached.", ["unavailable"], known
            ),
        },
    }


# -- the AI SDK UI message stream (contract D10) ------------------------------------------

AI_SDK_INFO = f"""

**The AI SDK UI message stream** (D10). `GET {RUN_AI_SDK}` follows a run feed as Vercel \
AI SDK UI message stream v1 chunks (the seed's `uiRunFrames` with protocol `ai-sdk`) and \
`GET {AI_SDK_RECONNECT}` is the seed's `uiAiSdkReconnect` (`useChat({{resume: true}})`): \
the same run feeds, translated (docs/dialects/ai-sdk.md). Chunk ids are `E:O:K` (feed \
epoch, offset of the event, index of the chunk), a departure from the seed's \
`<seq>:<k>`."""

AI_SDK_GET_DESCRIPTION = f"""\
Follow a run feed as the Vercel AI SDK UI message stream v1 (contract D10): the seed's \
`uiRunFrames` with protocol `ai-sdk`, for custom clients and for `readUIMessageStream`.

Each published AG-UI event becomes the AI SDK chunks of the translation table of \
docs/dialects/ai-sdk.md (one run is one assistant UIMessage, id `run:<thread_id>:<run_id>`); \
every `data:` is one `ai-sdk-ui` chunk as compact one-line JSON. Chunk K (from 0) of the \
event at feed cursor `<epoch>:<offset>` has the SSE id `<epoch>:<offset>:<K>`. The stream \
is live and ends with `data: [DONE]` after the run's RUN_FINISHED or RUN_ERROR chunks. \
Framing uses LF only; `: keepalive` after GATEWAY_KEEPALIVE_SECONDS of silence.

- The cursor is the `Last-Event-ID` header, else the `after` query parameter; the header \
wins when both are sent. None: the run from its start (if retention trimmed the start, a \
compact replay of the run where retention begins comes first). A chunk id \
`<epoch>:<offset>:<K>`: chunk K+1 of that event, then the events after it. A feed cursor \
`<epoch>:<offset>`: a resync, the compact replay of the run at that event (`start`, \
`reset-step`, every part with at most one delta, the state), then the events after it. \
Compact replay chunks carry no `id:`.
- 400 invalid_cursor: a malformed cursor (anything but `{CHUNK_ID_PATTERN}`, or a number \
above 9007199254740991), a later epoch than the feed's, an offset past the head, a chunk \
index the event does not have, or a chunk of offset 0.
- A cursor that cannot continue (an older epoch, or a position retention trimmed) gets \
one chunk `{{"type": "data-gateway-epoch-restarted", "data": {{"cursor": \
"<epoch>:<offset>"}}, "transient": true}}` with that cursor as its SSE id, then \
`data: [DONE]`, and the stream closes; reconnecting with that cursor resyncs there.
- Errors found before the stream starts are JSON. A store failure after it started is an \
`{{"type": "error", "errorText": "<code>: <message>"}}` chunk (no id) and `data: [DONE]`; \
the client resumes from its last chunk id. When the gateway ends a stream for its own \
reasons (drain, token expiry, a slow client) it just closes it.
- Needs the `subscribe` scope (401 without it). No such run, another tenant's run, a \
thread outside the token's `threads` claim and a malformed id answer the same 404. Any \
other `{{protocol}}` than `ai-sdk` and `ag-ui` is no route: 404 not_found (seed rule 31).

**Where this departs from the seed's uiRunFrames** (D10): the frame id is `E:O:K` rather \
than `<seq>:<k>`, since an id without the feed epoch cannot tell that the feed lost its \
history; the stream is live and ends with `[DONE]`."""

AI_SDK_RECONNECT_DESCRIPTION = """\
Resume a chat's stream: `useChat({resume: true})`, through `DefaultChatTransport.\
reconnectToStream` (`GET {api}/{chatId}/stream`), contract D10; the seed's \
`uiAiSdkReconnect`.

- A chat id is a thread id (the seed's ChatKey is the AG-UI threadId). The gateway keeps \
each thread's latest run: the run whose RUN_STARTED was published last on the thread.
- While that run is going: 200, the run from its start as a compact replay (`start`, \
`reset-step`, at most one delta per part so far, the state; no ids), then its chunks live \
(ids `<epoch>:<offset>:<K>`), ended by `data: [DONE]` after the run's end. The client's \
message equals that of a client that saw every chunk; it replaces the chat's message of \
the same id (`run:<thread_id>:<run_id>`) instead of adding one.
- 204 once the run ended (and when the chat has no run): the chat stays as it is. \
Another tenant's chat, and a thread outside the token's `threads` claim, answer exactly \
like a chat without a run.
- 400 invalid_request for a chat id that does not match `^[A-Za-z0-9_.-]{1,128}$`; 401 \
without a token or without the `subscribe` scope. `{agent}` is not checked (the gateway \
has no agents and never starts a run: sending messages goes to the application's own \
backend). A store failure after the stream started is an `error` chunk, then `[DONE]`.

**Where this departs from the seed**: none in behaviour; the gateway never answers 404 \
here (a chat the caller may not read is 204) and adds 429 and 503."""


def ai_sdk_headers() -> dict[str, Any]:
    return {
        **sse_headers(),
        "x-vercel-ai-ui-message-stream": {
            "description": "Always `v1`: the AI SDK UI message stream protocol version.",
            "schema": {"type": "string", "const": "v1"},
        },
    }


def ai_sdk_stream_ok(what: str) -> dict[str, Any]:
    return {
        "description": what,
        "headers": ai_sdk_headers(),
        "content": {
            "text/event-stream": {"schema": {"type": "string"}, "x-sse-data": ref("ai-sdk-ui")}
        },
    }


def chunk_cursor_params() -> list[dict[str, Any]]:
    """``after``, ``Last-Event-ID`` and ``access_token`` of the AI SDK stream."""
    return [
        {
            "name": "after",
            "in": "query",
            "required": False,
            "description": (
                "Resume after this chunk id `<epoch>:<offset>:<K>` (the next chunk follows), "
                "or resync at this cursor `<epoch>:<offset>`. The Last-Event-ID header wins "
                "when both are sent."
            ),
            "schema": ref("AiSdkCursor"),
        },
        {
            "name": "Last-Event-ID",
            "in": "header",
            "required": False,
            "description": (
                "The id of the last chunk received, which EventSource-style clients send "
                "when they reconnect; the same forms as `after`. It wins when `after` is "
                "sent too."
            ),
            "schema": ref("AiSdkCursor"),
        },
        access_token_param(),
    ]


def run_ai_sdk_get(known: set[str]) -> dict[str, Any]:
    codes = ["invalid_cursor", "unauthenticated", "not_found", "rate_limited", "unavailable"]
    responses = {
        "200": ai_sdk_stream_ok(
            "AI SDK UI message stream v1 chunks of the run: `id: <epoch>:<offset>:<K>` and "
            "one `data:` line per chunk (compact replay chunks without ids), ended by "
            "`data: [DONE]` after the run's end."
        ),
        **stream_errors(
            known,
            error_response(
                "invalid_cursor: a malformed cursor or chunk id, a number above "
                "9007199254740991, a later epoch than the feed's, an offset past the head, "
                "a chunk index the event does not have, or a chunk of offset 0.",
                ["invalid_cursor"],
                known,
            ),
            no_such_run(
                "A run feed is gone GATEWAY_RUN_FINISHED_TTL_SECONDS after its terminal event."
            ),
        ),
        "4XX": {"$ref": "#/components/responses/UiCursorError"},
    }
    return {
        "tags": ["run feeds"],
        "summary": "Follow a run feed (AI SDK UI message stream)",
        "description": AI_SDK_GET_DESCRIPTION,
        "operationId": "subscribeRunAiSdk",
        "x-error-codes": codes,
        "security": [{"bearer": []}, {"accessToken": []}],
        "parameters": [
            *run_params(
                "The run's thread (any id matching the pattern).",
                "The run (any id matching the pattern).",
            ),
            *chunk_cursor_params(),
        ],
        "responses": dict(sorted(responses.items())),
    }


def ai_sdk_reconnect(seed: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """The seed's uiAiSdkReconnect as the gateway serves it."""
    op = copy.deepcopy(seed["paths"][AI_SDK_RECONNECT]["get"])
    params = {p["name"]: p for p in op["parameters"]}
    agent, chat = params["agent"], params["chat_id"]
    agent["description"] = "Any non-empty name: not checked (the gateway has no agents)."
    chat["description"] = "The chat key: the thread id whose latest run is resumed (useChat's id)."
    seed_ok = op["responses"]["200"]
    ok = ai_sdk_stream_ok(seed_ok["description"])
    ok["headers"]["x-vercel-ai-ui-message-stream"]["schema"] = copy.deepcopy(
        seed_ok["headers"]["x-vercel-ai-ui-message-stream"]["schema"]
    )
    ok["content"] = copy.deepcopy(seed_ok["content"])
    errors = stream_errors(
        known,
        error_response(
            "invalid_request: the chat id does not match ^[A-Za-z0-9_.-]{1,128}$.",
            ["invalid_request"],
            known,
        ),
        "",
    )
    del errors["404"]  # a chat the caller may not read is answered like one without a run
    responses = {
        "200": ok,
        "204": {
            "description": (
                op["responses"]["204"]["description"]
                + " Also for another tenant's chat and a thread outside the token's "
                "threads claim (byte-identical)."
            )
        },
        **errors,
        "4XX": op["responses"]["4XX"],
    }
    return {
        "tags": ["run feeds"],
        "summary": "Resume a chat's stream (useChat resume)",
        "description": AI_SDK_RECONNECT_DESCRIPTION,
        "operationId": op["operationId"],
        "x-error-codes": ["unauthenticated", "invalid_request", "rate_limited", "unavailable"],
        "parameters": [agent, chat],
        "responses": dict(sorted(responses.items())),
    }


def operational_paths() -> dict[str, Any]:
    def get(op_id: str, summary: str, description: str, responses: dict[str, Any]) -> Any:
        return {
            "get": {
                "tags": ["operations"],
                "summary": summary,
                "description": description,
                "operationId": op_id,
                "security": [],
                "responses": responses,
            }
        }

    return {
        "/healthz": get(
            "healthz",
            "Liveness",
            "The process is alive. Does not depend on Redis (contract D8).",
            {"200": {"description": "Alive.", "content": json_content(ref("HealthBody"))}},
        ),
        "/readyz": get(
            "readyz",
            "Readiness",
            "Ready to serve: Redis answered recently, the node's read loops are making "
            "progress, and the node is not draining (contract D8). During a drain "
            "(SIGTERM) it answers 503. Both answers say how many connections the node "
            "holds (`connections`). On the internal port when GATEWAY_INTERNAL_PORT is "
            "set.",
            {
                "200": {
                    "description": 'Ready: `{"status": "ready", "reason": "ok", '
                    '"connections": {...}}`.',
                    "content": json_content(ref("ReadyBody")),
                },
                "503": {
                    "description": "Not ready; `reason` says why.",
                    "content": json_content(ref("NotReadyBody")),
                },
            },
        ),
        "/metrics": get(
            "metrics",
            "Prometheus metrics",
            "Metrics in the Prometheus text exposition format.",
            {
                "200": {
                    "description": "Prometheus text exposition format.",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }
            },
        ),
        "/openapi.json": get(
            "openapi",
            "This OpenAPI document",
            "The OpenAPI 3.1 document of the gateway's HTTP routes (this document).",
            {
                "200": {
                    "description": "The document.",
                    "content": json_content({"type": "object"}),
                }
            },
        ),
    }


def gateway_schemas() -> dict[str, Any]:
    return {
        "TeamPublishItem": {
            "description": (
                "One item to append to a team feed (contract D4): the log it came from and "
                "the committed event. Closed: unknown fields are errors."
            ),
            "type": "object",
            "additionalProperties": False,
            "required": ["source", "event"],
            "properties": {"source": ref("TeamSource"), "event": ref("events_Event")},
        },
        "TeamPublishBody": {
            "description": (
                "The body of POST /v1/teams/{team}/events: one TeamPublishItem or a "
                f"non-empty array of at most {MAX_BATCH_ITEMS}, appended all or nothing."
            ),
            "oneOf": [
                ref("TeamPublishItem"),
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_BATCH_ITEMS,
                    "items": ref("TeamPublishItem"),
                },
            ],
        },
        "RunPublishBody": {
            "description": (
                "The body of POST /v1/threads/{thread_id}/runs/{run_id}/ui/ag-ui: one AG-UI "
                f"event or a non-empty array of at most {MAX_BATCH_ITEMS}, appended all or "
                "nothing. The schema is the seed's ag-ui-1; unless GATEWAY_AGUI_STRICT the "
                "gateway checks only `type` and the fields that type requires, and unknown "
                "fields and event types pass through."
            ),
            "oneOf": [
                ref("ag-ui-1"),
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_BATCH_ITEMS,
                    "items": ref("ag-ui-1"),
                },
            ],
        },
        "RunStreamPublishBody": {
            "description": (
                "The body of POST /v1/threads/{thread_id}/runs/{run_id}/events: one "
                f"SseMessage or a non-empty array of at most {MAX_BATCH_ITEMS}, in order."
            ),
            "oneOf": [
                ref("SseMessage"),
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_BATCH_ITEMS,
                    "items": ref("SseMessage"),
                },
            ],
        },
        "RunStreamPublishResponse": {
            "description": (
                "One entry per published SseMessage, in the order of the body: the cursor "
                "`<epoch>:<offset>` of a stored message (a committed event or the result), "
                "null for a transient one (delta, status)."
            ),
            "type": "object",
            "additionalProperties": False,
            "required": ["cursors"],
            "properties": {
                "cursors": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "anyOf": [
                            {"type": "string", "pattern": CURSOR_PATTERN},
                            {"type": "null"},
                        ]
                    },
                }
            },
        },
        "PublishResponse": {
            "description": (
                "The cursor of each published item, in the order of the body, as "
                "`<epoch>:<offset>` (the SSE id the item gets on its feed)."
            ),
            "type": "object",
            "additionalProperties": False,
            "required": ["cursors"],
            "properties": {
                "cursors": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "pattern": CURSOR_PATTERN},
                }
            },
        },
        "FeedList": {
            "description": (
                "One page of GET /v1/feeds: feeds most recently active first, and the "
                "`after` of the next page (null on the last one)."
            ),
            "type": "object",
            "additionalProperties": False,
            "required": ["feeds", "next"],
            "properties": {
                "feeds": {
                    "type": "array",
                    "maxItems": FEEDS_MAX_LIMIT,
                    "items": ref("FeedListEntry"),
                },
                "next": {"type": ["string", "null"], "minLength": 1},
            },
        },
        "FeedListEntry": {
            "description": (
                "A listed feed: its name as the WebSocket protocol and the console use it, "
                "its kind, its head cursor, and when it was last recorded as active "
                "(milliseconds since the Unix epoch)."
            ),
            "type": "object",
            "additionalProperties": False,
            "required": ["feed", "kind", "head", "updated_ms"],
            "properties": {
                "feed": {
                    "type": "string",
                    "pattern": (
                        "^(team/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                        "|run/[A-Za-z0-9_.-]{1,128}/[A-Za-z0-9_.-]{1,128})$"
                    ),
                },
                "kind": {"enum": ["team", "run"]},
                "head": {"type": "string", "pattern": CURSOR_PATTERN},
                "updated_ms": {"type": "integer", "minimum": 0},
            },
        },
        "RunList": {
            "description": (
                "One page of GET /v1/runs: live runs, the latest started first, and the "
                "`after` of the next page (null on the last one)."
            ),
            "type": "object",
            "additionalProperties": False,
            "required": ["runs", "next"],
            "properties": {
                "runs": {
                    "type": "array",
                    "maxItems": FEEDS_MAX_LIMIT,
                    "items": ref("RunListEntry"),
                },
                "next": {"type": ["string", "null"], "minLength": 1},
            },
        },
        "RunListEntry": {
            "description": (
                "A live run: its feed's public name (the AG-UI run feed "
                "`run/<thread_id>/<run_id>`, or the threads run stream's "
                "`run/<thread_id>/<run_id>/events`), its thread and run ids, when it "
                "started, when its lease was last renewed and when the lease runs out "
                "(milliseconds since the Unix epoch)."
            ),
            "type": "object",
            "additionalProperties": False,
            "required": [
                "feed",
                "thread_id",
                "run_id",
                "started_ms",
                "updated_ms",
                "lease_deadline_ms",
            ],
            "properties": {
                "feed": {
                    "type": "string",
                    "pattern": "^run/[A-Za-z0-9_.-]{1,128}/[A-Za-z0-9_.-]{1,128}(/events)?$",
                },
                "thread_id": {"type": "string", "pattern": RUN_PART_PATTERN},
                "run_id": {"type": "string", "pattern": RUN_PART_PATTERN},
                "started_ms": {"type": "integer", "minimum": 0},
                "updated_ms": {"type": "integer", "minimum": 0},
                "lease_deadline_ms": {"type": "integer", "minimum": 0},
            },
        },
        "AiSdkCursor": {
            "description": (
                "Where an AI SDK stream resumes (contract D10): a chunk id "
                "`<epoch>:<offset>:<K>` (after chunk K of the event at that feed cursor) or a "
                "feed cursor `<epoch>:<offset>` (a resync there). Every part at most "
                "9007199254740991; leading zeros are accepted."
            ),
            "type": "string",
            "pattern": CHUNK_ID_PATTERN,
        },
        "HealthBody": {
            "description": "The answer of GET /healthz.",
            "type": "object",
            "additionalProperties": False,
            "required": ["status"],
            "properties": {"status": {"const": "ok"}},
        },
        "ReadyBody": {
            "description": "The answer of GET /readyz when the node is ready.",
            "type": "object",
            "additionalProperties": False,
            "required": ["status", "reason"],
            "properties": {
                "status": {"const": "ready"},
                "reason": {"const": "ok"},
                "connections": ref("NodeConnections"),
            },
        },
        "NotReadyBody": {
            "description": "The answer of GET /readyz when the node is not ready.",
            "type": "object",
            "additionalProperties": False,
            "required": ["status", "reason"],
            "properties": {
                "status": {"const": "not_ready"},
                "reason": {"type": "string", "minLength": 1},
                "connections": ref("NodeConnections"),
            },
        },
        "NodeConnections": {
            "description": (
                'How many connections the node holds (docs/reliability.md, "Connection '
                'limits"): `open` streams (SSE streams and WebSockets) of at most `limit` '
                "(GATEWAY_MAX_CONNECTIONS); `sockets` client TCP connections (streams, idle "
                "keep-alive and publishing connections) of at most `socket_limit` (what the "
                "open-files limit leaves room for: past it a connection gets 503 and is "
                "closed); `files`: the process's open-files limit (`soft`, `hard`: null "
                "when unlimited) and the files it has `open` (null where it cannot tell)."
            ),
            "type": "object",
            "additionalProperties": False,
            "required": ["open", "limit", "sockets", "socket_limit", "files"],
            "properties": {
                "open": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1},
                "sockets": {"type": "integer", "minimum": 0},
                "socket_limit": {"type": "integer", "minimum": 1},
                "files": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["soft", "hard", "open"],
                    "properties": {
                        "soft": {"type": "integer", "minimum": 0},
                        "hard": {"type": ["integer", "null"], "minimum": 0},
                        "open": {"type": ["integer", "null"], "minimum": 0},
                    },
                },
            },
        },
        "GatewayErrorCode": {
            "description": (
                "Error codes the gateway answers in addition to the seed's public failure "
                "codes (events_ErrorCode and api_ApiErrorCode). Add only; never rename."
            ),
            "enum": GATEWAY_ERROR_CODES,
        },
        "GatewayFailure": {
            "description": "Failure, with the gateway's additional codes allowed.",
            "type": "object",
            "additionalProperties": False,
            "required": ["code", "message"],
            "properties": {
                "code": {
                    "anyOf": [
                        ref("events_ErrorCode"),
                        ref("api_ApiErrorCode"),
                        ref("GatewayErrorCode"),
                    ]
                },
                "message": {"type": "string"},
            },
        },
        "GatewayErrorBody": {
            "description": (
                "ErrorBody, with the gateway's additional codes allowed: every error body "
                "is exactly {error: {code, message}}."
            ),
            "type": "object",
            "additionalProperties": False,
            "required": ["error"],
            "properties": {"error": ref("GatewayFailure")},
        },
        **dialect_schemas(),
    }


# -- other dialects in (contract D4.8, D4.9; docs/dialects/) --------------------------------

SPARKTIDE_EVENTS = "/v1/sparktide/events"
RUN_A2UI = "/v1/threads/{thread_id}/runs/{run_id}/a2ui"
#: The dialects' seed schemas, read from the package (gateway.dialects.seeds reads them too).
SPARKTIDE_SEED = ROOT / "gateway" / "schemas" / "sparktide-agent-event.schema.json"
A2UI_SEED = ROOT / "gateway" / "schemas" / "a2ui-server-to-client.schema.json"
#: The A2UI seed's one external reference (the component catalogue it does not include).
A2UI_CATALOG_REF = "standard_catalog_definition.json#/$defs/anyComponent"

SPARKTIDE_POST_DESCRIPTION = f"""\
Translate SparkTide AgentEvent 1.0 events to AG-UI and append them to a run feed \
(contract D4.8, `docs/dialects/sparktide.md`; the seed has no such route).

The body is one SparkTide event or a non-empty JSON array of at most {MAX_BATCH_ITEMS}, \
all of one run, appended all or nothing. Each event is validated against the SparkTide \
seed (`sparktide_AgentEvent`: a closed envelope of eight fields, one of the 19 event \
names, that event's `data`). `conversationId` names the run feed's thread and `runId` \
the run (`run/<conversationId>/<runId>`), so both must match `{RUN_PART_PATTERN}`. Each \
event becomes one or more AG-UI events on the run feed, which then reads like any run \
(`GET {RUN_UI}`, the attach route, WebSocket); every derived event carries the original \
in `rawEvent`. A run carries one message: its first event opens the AG-UI run, \
`message.completed` (or an `error` that is not retryable) ends it.

**The sequence rule.** A message's events are numbered 1, 2, 3, ... (`sequence`): the \
next one is appended; one the run holds, with the same body (RFC 8785), is a safe retry \
answered with its first cursor; one the run holds with another body is 409 \
idempotency_key_reused; a gap, or a sequence the run no longer holds, is 400 \
invalid_request. An event repeated within the body is a retry of its first occurrence.

The answer holds **one cursor per SparkTide event**, in order: the cursor of the last \
AG-UI event derived from it, so resuming after it resumes after that whole event. A \
derived RUN_FINISHED or RUN_ERROR starts the run's grace period (the feed is deleted \
GATEWAY_RUN_FINISHED_TTL_SECONDS later). Needs the `publish` scope (403 forbidden \
without it); a `conversationId` outside the token's `threads` claim is 404 not_found. \
The body limit is `GATEWAY_MAX_BODY_BYTES` (413 too_large beyond it); the events count \
against the tenant's publish rate (429 rate_limited with `Retry-After`). The Redis inbox \
`<prefix>:inbox:sparktide` and the Python producer apply the same rules.

""" + RUN_END_TEXT.format(
    end="the RUN_FINISHED or RUN_ERROR derived from `message.completed` or a \
non-retryable `error`"
)

A2UI_POST_DESCRIPTION = f"""\
Append A2UI v0.9 server-to-client messages to a run feed as AG-UI activities (contract \
D4.9, `docs/dialects/a2ui.md`; the seed has no such route).

The body is one A2UI message or a non-empty JSON array of at most {MAX_BATCH_ITEMS}, \
appended all or nothing. Each message is validated against the A2UI seed \
(`a2ui_Message`: exactly one of createSurface, updateComponents, updateDataModel, \
deleteSurface; components need a string `id` and `component`, the rest of a component \
belongs to its catalogue), plus the seed's prose rule: `updateDataModel` has a `value` \
for `add` and `replace` (the default) and none for `remove`. Then the surface registry, \
in order, against the surfaces live in the run: `createSurface` before any update or \
delete of a surface, and no `createSurface` of a live surface. The run must have \
started (its feed holds RUN_STARTED) and not ended.

Each surface is one AG-UI activity (`activityType: "a2ui-surface"`, `messageId: \
"a2ui-surface-<surfaceId>"`, the messages in `content.a2ui_operations`): createSurface \
is an ACTIVITY_SNAPSHOT, every other message an ACTIVITY_DELTA appending to the list; a \
message that would make a list longer than 64 is carried by a snapshot of the surface \
compacted. AG-UI clients read them with the run (`GET {RUN_UI}`); a late joiner's \
MESSAGES_SNAPSHOT carries each live surface compacted. WebSocket clients that render \
A2UI subscribe with `"format": "a2ui"` and get the messages as published.

**Idempotent retries.** A2UI messages have no id: send an `Idempotency-Key` header. A \
request whose key the feed still retains, with the same messages, answers the cursors it \
got the first time; with other messages (or another number of them) it is 409 \
idempotency_key_reused.

The answer holds one cursor per message, in order. Needs the `publish` scope (403 \
forbidden without it); a thread outside the token's `threads` claim and a malformed \
thread or run id are 404 not_found. The body limit is `GATEWAY_MAX_BODY_BYTES` (413 \
too_large beyond it); the messages count against the tenant's publish rate (429 \
rate_limited with `Retry-After`). The Redis inbox `<prefix>:inbox:a2ui` and the Python \
producer apply the same rules.

""" + RUN_END_TEXT.format(end="`RUN_FINISHED` or `RUN_ERROR`")


def _seed_component_refs(node: Any, prefix: str) -> Any:
    """A dialect seed's schema with ``#/$defs/X`` pointing at the component ``<prefix>X``
    and the A2UI catalogue reference at ``a2ui_AnyComponent``."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                if value == A2UI_CATALOG_REF:
                    out[key] = SCHEMA_PREFIX + "a2ui_AnyComponent"
                elif value.startswith("#/$defs/"):
                    out[key] = SCHEMA_PREFIX + prefix + value[len("#/$defs/") :]
                else:
                    raise ValueError(f"cannot copy the reference {value!r}")
            else:
                out[key] = _seed_component_refs(value, prefix)
        return out
    if isinstance(node, list):
        return [_seed_component_refs(value, prefix) for value in node]
    return node


def _if_then_as_one_of(document: dict[str, Any]) -> dict[str, Any]:
    """The SparkTide seed with its ``allOf`` of ``if event == N then data ...`` written as
    the equivalent ``oneOf`` of one branch per event name (``event`` is one of the names,
    so exactly one branch applies): common OpenAPI tools do not read ``if``/``then``."""
    branches = []
    for branch in document["allOf"]:
        if set(branch) != {"if", "then"} or set(branch["then"]) != {"properties"}:
            raise ValueError("the SparkTide seed's allOf is no longer if/then per event")
        name = branch["if"]["properties"]["event"]["const"]
        data = branch["then"]["properties"]["data"]
        branches.append({"properties": {"event": {"const": name}, "data": data}})
    out = {key: value for key, value in document.items() if key != "allOf"}
    out["oneOf"] = branches
    out["description"] = (
        "The SparkTide AgentEvent 1.0 seed, with its allOf of if/then per event name "
        "written as the equivalent oneOf of one branch per event name."
    )
    return out


def _seed_components(path: Path, prefix: str, root: str) -> dict[str, Any]:
    """A dialect seed as components: its root schema as ``<prefix><root>`` and each of
    its ``$defs`` as ``<prefix><name>`` (``$schema`` and ``$id`` dropped: the document's
    dialect is the seed's, and an ``$id`` would move the references' base)."""
    with open(path, encoding="utf-8") as f:
        document: dict[str, Any] = json.load(f)
    defs = document.pop("$defs", {})
    document.pop("$schema", None)
    seed_id = document.pop("$id", None)
    if seed_id is not None:
        document["x-seed-id"] = seed_id
    if "allOf" in document:
        document = _if_then_as_one_of(document)
    out = {prefix + root: _seed_component_refs(document, prefix)}
    for name, schema in defs.items():
        out[prefix + name] = _seed_component_refs(schema, prefix)
    return out


def _one_or_array(item: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        item,
        {"type": "array", "minItems": 1, "maxItems": MAX_BATCH_ITEMS, "items": item},
    ]


def dialect_schemas() -> dict[str, Any]:
    """The SparkTide and A2UI seed schemas and the publish bodies built on them."""
    schemas: dict[str, Any] = {}
    schemas.update(_seed_components(SPARKTIDE_SEED, "sparktide_", "AgentEvent"))
    schemas.update(_seed_components(A2UI_SEED, "a2ui_", "Message"))
    schemas["a2ui_AnyComponent"] = {
        "description": (
            "Stands for the A2UI seed's external `standard_catalog_definition.json#/$defs/"
            "anyComponent` (the catalogue, which the seed does not include): what every "
            "component has. The rest of a component belongs to its catalogue and passes "
            "through."
        ),
        "type": "object",
        "properties": {"id": {"type": "string"}, "component": {"type": "string"}},
        "required": ["id", "component"],
    }
    ids = {"type": "string", "pattern": RUN_PART_PATTERN}
    schemas["SparkTidePublishEvent"] = {
        "description": (
            "A SparkTide event as POST /v1/sparktide/events takes it: the seed's "
            "AgentEvent, whose conversationId and runId name a run feed."
        ),
        "allOf": [
            ref("sparktide_AgentEvent"),
            {"properties": {"conversationId": ids, "runId": ids}},
        ],
    }
    schemas["SparkTidePublishBody"] = {
        "description": (
            "The body of POST /v1/sparktide/events: one SparkTide event or a non-empty "
            f"array of at most {MAX_BATCH_ITEMS} of one run, appended all or nothing."
        ),
        "oneOf": _one_or_array(ref("SparkTidePublishEvent")),
    }
    schemas["A2uiPublishBody"] = {
        "description": (
            "The body of POST /v1/threads/{thread_id}/runs/{run_id}/a2ui: one A2UI message "
            f"or a non-empty array of at most {MAX_BATCH_ITEMS}, appended all or nothing."
        ),
        "oneOf": _one_or_array(ref("a2ui_Message")),
    }
    return schemas


def _dialect_post(
    known: set[str],
    op_id: str,
    summary: str,
    description: str,
    parameters: list[dict[str, Any]],
    body: str,
    body_text: str,
    ok: str,
    bad_request: str,
    reused: str,
    retry: str,
    not_found: str,
) -> dict[str, Any]:
    return {
        "tags": ["run feeds"],
        "summary": summary,
        "description": description,
        "operationId": op_id,
        "x-error-codes": RUN_PUBLISH_CODES,
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "description": body_text + " Content-Type must be application/json.",
            "content": json_content(ref(body)),
        },
        "responses": {
            "200": {"description": ok, "content": json_content(ref("PublishResponse"))},
            **publish_errors(
                known, bad_request, reused, retry, not_found=not_found, ended=RUN_ENDED
            ),
        },
    }


def sparktide_post(known: set[str]) -> dict[str, Any]:
    return _dialect_post(
        known,
        "publishSparkTide",
        "Publish SparkTide events to a run feed",
        SPARKTIDE_POST_DESCRIPTION,
        [],
        "SparkTidePublishBody",
        f"One SparkTide AgentEvent 1.0, or a non-empty array of at most {MAX_BATCH_ITEMS} "
        "of one run.",
        "Appended (or, for retried events, already there): one cursor per SparkTide event, "
        "in the order of the body, that of the last AG-UI event derived from it.",
        "invalid_request: the body is not JSON, not an event or array of events, an empty "
        "array, an event that fails the seed's schema, a conversationId or runId that does "
        f"not match {RUN_PART_PATTERN}, events of two runs, a gap in the sequence or a "
        "sequence the run no longer holds, another message than the run's, an event after "
        "the run ended, or a run whose feed SparkTide did not start. The message names the "
        "item and field. Nothing of the body was appended.",
        "idempotency_key_reused: the run holds another event at one of the body's "
        "sequences. Nothing of the body was appended.",
        "retrying is safe (an event the run holds with the same body is not appended again).",
        "not_found: the conversationId names a thread outside the token's threads claim. "
        "Nothing was appended.",
    )


def a2ui_post(known: set[str]) -> dict[str, Any]:
    key = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": (
            "Makes a retry safe: while the feed retains the events a request with this key "
            "appended, the same key with the same messages answers their cursors again "
            "(nothing is appended) and with other messages is 409 idempotency_key_reused. "
            f"1 to {MAX_IDEMPOTENCY_KEY} characters (400 otherwise)."
        ),
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY},
    }
    return _dialect_post(
        known,
        "publishA2ui",
        "Publish A2UI messages to a run",
        A2UI_POST_DESCRIPTION,
        [
            *run_params(
                "The run's thread: any id matching the pattern.",
                "The run, which must have started (RUN_STARTED) and not ended.",
            ),
            key,
        ],
        "A2uiPublishBody",
        f"One A2UI v0.9 message, or a non-empty array of at most {MAX_BATCH_ITEMS}.",
        "Appended (or, for a retried Idempotency-Key with the same messages, already "
        "there): one cursor per message, in the order of the body.",
        "invalid_request: the body is not JSON, not a message or array of messages, an "
        "empty array, a message that fails the seed's schema or its rule on `value`, an "
        "update or delete of a surface that is not live, a createSurface of one that is, "
        "a run that has not started or has ended, or an Idempotency-Key that is empty or "
        f"longer than {MAX_IDEMPOTENCY_KEY} characters. The message names the item and "
        "field. Nothing of the body was appended.",
        "idempotency_key_reused: the Idempotency-Key is one the feed still retains, sent "
        "with different messages. Nothing of the body was appended.",
        "retrying with the same Idempotency-Key is safe.",
        RUN_PUBLISH_NOT_FOUND,
    )


# -- the document -------------------------------------------------------------------------


def build(seed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The gateway's OpenAPI document, built from the seed (loaded if not given)."""
    if seed is None:
        seed = load_seed()
    known = seed_codes(seed)
    seed_schemas = seed["components"]["schemas"]
    ours = gateway_schemas()
    names = closure(seed_schemas, SEED_ROOTS)
    clash = set(names) & set(ours)
    if clash:
        raise ValueError(f"gateway schemas shadow seed schemas: {sorted(clash)}")
    schemas = {name: copy.deepcopy(seed_schemas[name]) for name in names}
    schemas.update(ours)
    # The gateway-only schemas may reach seed schemas the roots did not.
    extra = [n for n in closure(seed_schemas | ours, ours) if n not in schemas]
    for name in extra:
        schemas[name] = copy.deepcopy(seed_schemas[name])
    responses = {
        name: copy.deepcopy(seed["components"]["responses"][name]) for name in SEED_RESPONSES
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agent gateway",
            "version": "1",
            "description": INFO_DESCRIPTION + AI_SDK_INFO,
        },
        "jsonSchemaDialect": seed["jsonSchemaDialect"],
        "servers": [
            {"url": "http://localhost:8080", "description": "gateway serve (default port)"}
        ],
        "security": [{"bearer": []}],
        "tags": [
            {"name": "team feed", "description": "Follow and publish to team feeds."},
            {
                "name": "run feeds",
                "description": ("Follow and publish to a run's AG-UI feed and its threads stream."),
            },
            {
                "name": "feeds",
                "description": (
                    "List the tenant's active feeds (the console's list) and live runs."
                ),
            },
            {"name": "operations", "description": "Health, readiness, metrics, this document."},
        ],
        "paths": {
            TEAM_EVENTS: {"get": team_get(seed, known), "post": team_post(seed, known)},
            RUN_UI: {"get": run_get(known), "post": run_post(known)},
            RUN_EVENTS: {"get": subscribe_run(seed, known), "post": publish_run_events(known)},
            RUN_HEARTBEAT: {"post": run_heartbeat(known)},
            AGENT_UI: {"post": attach(seed, known)},
            FEEDS: {"get": list_feeds(known)},
            RUNS: {"get": list_runs(known)},
            SPARKTIDE_EVENTS: {"post": sparktide_post(known)},
            RUN_A2UI: {"post": a2ui_post(known)},
            RUN_AI_SDK: {"get": run_ai_sdk_get(known)},
            AI_SDK_RECONNECT: {"get": ai_sdk_reconnect(seed, known)},
            **operational_paths(),
        },
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": SECURITY_DESCRIPTION,
                },
                "accessToken": {
                    "type": "apiKey",
                    "in": "query",
                    "name": "access_token",
                    "description": (
                        "The same JWT as the bearer scheme, as the access_token query "
                        "parameter of an SSE route, for EventSource (contract D5)."
                    ),
                },
            },
            "responses": responses,
            "schemas": schemas,
        },
    }


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    parser.add_argument("--seed", type=Path, help="the seed document (default: see above)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render(build(load_seed(args.seed)))
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run scripts/gen_openapi.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
