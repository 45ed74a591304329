#!/usr/bin/env python3
"""Generate ``gateway/schemas/gateway.openapi.json``, the OpenAPI document of the gateway.

Usage (from anywhere)::

    uv run python scripts/gen_openapi.py          # rewrite the document
    uv run python scripts/gen_openapi.py --check  # exit 1 if the committed file differs

The team-feed route (``GET /v1/teams/{team}/events``, seed operation ``subscribeTeam``)
and every component schema it needs are copied from the seed, the OpenAPI 3.2.0
document "threads host API".  The seed is read from the package copy
``gateway/schemas/threads-host-api.openapi.json`` (so this works offline and in CI),
else from ``../shared/seeds/threads-host-api.openapi.json`` beside the repository.
Everything the gateway adds (publishing, health, metrics, authentication, its extra
error codes) is Python data below.  The output is deterministic: same seed, same bytes.
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
CURSOR_PATTERN = "^[0-9]+:[0-9]+$"
#: Largest publish array (gateway.validate.MAX_BATCH_ITEMS; a test checks they agree).
MAX_BATCH_ITEMS = 1000
#: The seed's docs-page dump lost the angle-bracket text of its cursor descriptions:
#: "its id <epoch>:<offset>" reads "its id :".  The route texts below restore it.
CURSOR_TEXT = "`<epoch>:<offset>`"
#: Error codes the gateway answers that neither of the seed's code enums has.
GATEWAY_ERROR_CODES = ["unsupported_media_type", "method_not_allowed", "rate_limited", "internal"]
#: Seed schemas the gateway's routes refer to; their transitive closure is copied.
SEED_ROOTS = (
    "TeamItem",
    "TeamCursor",
    "TeamSource",
    "ErrorBody",
    "Failure",
    "events_Event",
    "events_TeamId",
)
#: Seed response components copied as they are (the team route's seed 4XX response).
SEED_RESPONSES = ("SubscribeTeamError",)


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


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


# -- hand-written parts -------------------------------------------------------------------

INFO_DESCRIPTION = f"""\
The HTTP routes of the fan-out gateway for AI-agent event streams. Its contract is \
`decisions.md` (D1-D8); this document describes the HTTP routes only (not the WebSocket \
protocol or the run feeds).

**Seed.** `GET {TEAM_EVENTS}` follows the seed's OpenAPI 3.2.0 document "threads host \
API" (version 1, operation `subscribeTeam`, x-api `Team.events`): its parameters, its \
200 `text/event-stream` response with `x-sse-data` TeamItem, its 4XX response and its \
`x-error-codes` are the seed's. The component schemas TeamItem, TeamCursor, TeamSource, \
ErrorBody, Failure, events_Event and everything they reference are copied from the seed \
unchanged. This document is OpenAPI 3.1.0 so that common tools read it; it uses nothing \
that needs 3.2.

**Where the gateway adds to the seed's subscribeTeam.** (1) The route is served: the seed \
marks it "Phase 2, not yet available"; the gateway implements the Phase 2 behaviour \
(decisions D2, D3). (2) The `Last-Event-ID` header is declared as a parameter (the seed \
only names it in the `after` description). (3) The `access_token` query parameter, for \
EventSource clients that cannot set headers (D5). (4) The response headers \
`Cache-Control: no-cache` and `X-Accel-Buffering: no`. (5) Per-status error responses \
(400 invalid_cursor, 401 unauthenticated, 404 not_found, 429 rate_limited) beside the \
seed's 4XX, and 503 unavailable / 500 internal. (6) The seed's dump lost the \
angle-bracket text of its cursor descriptions ("its id :."); the route texts here restore \
it as {CURSOR_TEXT}. (7) A summary.

**Gateway-only routes.** `POST {TEAM_EVENTS}` publishes to a team feed (D4). \
`GET /healthz`, `GET /readyz`, `GET /metrics` and `GET /openapi.json` (this document) \
are unauthenticated operational routes (D8).

**Errors.** Every error body is exactly `{{"error": {{"code", "message"}}}}` with nothing \
else. Codes are the seed's (events_ErrorCode, api_ApiErrorCode) plus GatewayErrorCode \
({", ".join(GATEWAY_ERROR_CODES)}). Another method on `{TEAM_EVENTS}` is 405 \
method_not_allowed, as is anything but GET or HEAD on the operational routes; an unknown \
`/v1` route is 401 without a valid token and 404 with one. Another tenant's team and a team \
that does not exist get byte-identical responses.

**Authentication** (D5). Every `/v1` route needs a bearer JWT; with no authenticator \
configured on the gateway every `/v1` route answers 401."""

SECURITY_DESCRIPTION = """\
`Authorization: Bearer <JWT>` (decisions D5). The gateway checks HS256 tokens signed \
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
implements the Phase 2 behaviour (decisions D2, D3):

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
Append to a team feed (decisions D4; the seed has no such route).

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
    access_token = {
        "name": "access_token",
        "in": "query",
        "required": False,
        "description": (
            "The bearer JWT, for EventSource clients that cannot set the Authorization "
            "header (decisions D5). Used only when no Authorization header is sent. Query "
            "strings are never logged; prefer short-lived tokens here."
        ),
        "schema": {"type": "string", "minLength": 1},
    }
    ok = op["responses"]["200"]
    ok["description"] = restore_cursor_text(ok["description"])
    ok["headers"] = {
        "Cache-Control": {
            "description": "Always `no-cache`: the stream is live.",
            "schema": {"type": "string", "const": "no-cache"},
        },
        "X-Accel-Buffering": {
            "description": "Always `no`: tells nginx-style proxies not to buffer the stream.",
            "schema": {"type": "string", "const": "no"},
        },
    }
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
    codes = [
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
    return {
        "tags": ["team feed"],
        "summary": "Publish to a team feed",
        "description": POST_DESCRIPTION,
        "operationId": "publishTeam",
        "x-error-codes": codes,
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
            "400": error_response(
                "invalid_request: the body is not JSON, not an item or array of items, an "
                "empty or too long array, or an item fails validation (the message names "
                "the item and field). Nothing of the body was appended.",
                ["invalid_request"],
                known,
            ),
            "401": error_response(
                "unauthenticated: no token, or one that does not verify or has expired.",
                ["unauthenticated"],
                known,
            ),
            "403": error_response(
                "forbidden: the token lacks the publish scope.", ["forbidden"], known
            ),
            "404": error_response(
                "not_found: the team id is not a lowercase UUID, or is outside the token's "
                "teams claim.",
                ["not_found"],
                known,
            ),
            "409": error_response(
                "idempotency_key_reused: an event_id the feed still retains arrived with a "
                "different body. Nothing of the body was appended.",
                ["idempotency_key_reused"],
                known,
            ),
            "413": error_response(
                "too_large: the body is larger than GATEWAY_MAX_BODY_BYTES.",
                ["too_large"],
                known,
            ),
            "415": error_response(
                "unsupported_media_type: the Content-Type is not application/json.",
                ["unsupported_media_type"],
                known,
            ),
            "429": rate_limited_publish(known),
            "500": error_response("internal: an unexpected error.", ["internal"], known),
            "503": error_response(
                "unavailable: the feed store could not be reached or rejected the append; "
                "retrying is safe (see idempotent retries).",
                ["unavailable"],
                known,
            ),
        },
    }


def rate_limited_publish(known: set[str]) -> dict[str, Any]:
    response = error_response(
        "rate_limited: the request's items exceed the caller's tenant's token bucket "
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
            "The process is alive. Does not depend on Redis (decisions D8).",
            {"200": {"description": "Alive.", "content": json_content(ref("HealthBody"))}},
        ),
        "/readyz": get(
            "readyz",
            "Readiness",
            "Ready to serve: Redis answered recently, the node's read loops are making "
            "progress, and the node is not draining (decisions D8). During a drain "
            "(SIGTERM) it answers 503.",
            {
                "200": {
                    "description": 'Ready: `{"status": "ready", "reason": "ok"}`.',
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
                "One item to append to a team feed (decisions D4): the log it came from and "
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
        "PublishResponse": {
            "description": (
                "The cursor of each published item, in the order of the body, as "
                "`<epoch>:<offset>` (the SSE id the item gets on the team feed)."
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
            "properties": {"status": {"const": "ready"}, "reason": {"const": "ok"}},
        },
        "NotReadyBody": {
            "description": "The answer of GET /readyz when the node is not ready.",
            "type": "object",
            "additionalProperties": False,
            "required": ["status", "reason"],
            "properties": {
                "status": {"const": "not_ready"},
                "reason": {"type": "string", "minLength": 1},
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
    }


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
            "description": INFO_DESCRIPTION,
        },
        "jsonSchemaDialect": seed["jsonSchemaDialect"],
        "servers": [
            {"url": "http://localhost:8080", "description": "gateway serve (default port)"}
        ],
        "security": [{"bearer": []}],
        "tags": [
            {"name": "team feed", "description": "Follow and publish to team feeds."},
            {"name": "operations", "description": "Health, readiness, metrics, this document."},
        ],
        "paths": {
            TEAM_EVENTS: {"get": team_get(seed, known), "post": team_post(seed, known)},
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
                        "parameter of an SSE route, for EventSource (decisions D5)."
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
