"""Schemathesis against the gateway's own OpenAPI document.

The operations that answer once (publishing to team feeds, run feeds and run streams,
listing feeds and live runs, renewing a run's lease, ``/healthz``, ``/readyz``,
``/metrics``, ``/openapi.json``) are generated from
``gateway/schemas/gateway.openapi.json``, the document the node serves (a test checks
the bytes), and sent over real HTTP to a real node on the test Redis with a token that
has both scopes.  The streaming routes (``GET /v1/teams/{team}/events``, the run feed
and run stream GETs, ``POST /v1/ui/ag-ui/{agent}``, ``/v1/ws``) are left out: their
responses do not end while the run goes on; so is the AI SDK stream.  The AI SDK
reconnect route is generated with a token of a tenant that never publishes, so every
case is answered at once (204, or an error); a test checks that every documented
operation is served.  The node runs with ``GATEWAY_AGUI_STRICT`` so that an AG-UI body
the schema rejects is rejected (by default the gateway checks only ``type`` and the
fields it requires, and lets unknown fields through, as the document says).

Every response must be: not a 5xx; a documented status code; of the documented content
type; with a body and headers the document allows; a 4xx for data the schema rejects
(negative cases) and for missing or ignored credentials; a 405 with ``Allow`` for a
method the document does not declare.  The generated positive publish bodies get a
fresh ``event_id`` per item and sources naming the caller's tenant and the path's team
(the checks the schema cannot express), so most of them are appended (200) instead of
all ending as 409 or 400.  Likewise for runs: each positive case publishes to a run of
its own; a ``RUN_STARTED``/``RUN_FINISHED`` names the path's thread and run; on a run
stream the thread is a lowercase UUID that every committed event names, the committed
seqs follow one another, and a result names the path's run.

Examples are derandomised (the same cases on every run, for CI) and bounded: the
fuzzing phase sends at most ``MAX_EXAMPLES`` cases per operation; the coverage phase
sends its schema-derived boundary cases, positive ones only for publishing (its
negative ones are some fifteen thousand bodies, minutes of requests), and none for
publishing to a run stream (see ``stream_publishing``).  Offline: the document is read
from the package and nothing is fetched.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from importlib import resources
from typing import Any

import anyio.from_thread
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    missing_required_header,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)
from schemathesis.generation import GenerationMode

from tests.conftest import new_redis_prefix
from tests.support.node import auth, start_node
from tests.support.redis_server import delete_keys_with_prefix

DOCUMENT = resources.files("gateway.schemas").joinpath("gateway.openapi.json")
TEAM_EVENTS = "/v1/teams/{team}/events"
TENANT = "acme"  # the tenant of tests.support.node.auth()'s token
MAX_EXAMPLES = 60
MAX_SEQ = 9_007_199_254_740_991

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
    ignored_auth,
    missing_required_header,
    unsupported_method,
]

#: POST /v1/teams/{team}/events.
publishing = schemathesis.openapi.from_path(str(DOCUMENT)).include(method="POST", path=TEAM_EVENTS)
publishing.config.phases.coverage.generation.modes = [GenerationMode.POSITIVE]
#: POST /v1/threads/{thread_id}/runs/{run_id}/ui/ag-ui: the coverage phase sends a
#: boundary case of every AG-UI event type.
agui_publishing = schemathesis.openapi.from_path(str(DOCUMENT)).include(
    operation_id="publishRunAgUi"
)
agui_publishing.config.phases.coverage.generation.modes = [GenerationMode.POSITIVE]
#: POST /v1/threads/{thread_id}/runs/{run_id}/events: fuzzing only.  Its coverage cases
#: (some three hundred, arrays of a thousand messages among them) would mostly repeat
#: the events_Event boundary cases that the team publishing test already sends.
stream_publishing = schemathesis.openapi.from_path(str(DOCUMENT)).include(
    operation_id="publishRunEvents"
)
stream_publishing.config.phases.coverage.enabled = False
#: GET /v1/feeds (three query parameters: every phase is cheap).
listing = schemathesis.openapi.from_path(str(DOCUMENT)).include(operation_id="listFeeds")
#: GET /v1/runs (three query parameters: every phase is cheap).
run_listing = schemathesis.openapi.from_path(str(DOCUMENT)).include(operation_id="listRuns")
#: POST /v1/threads/{thread_id}/runs/{run_id}/heartbeat (two path parameters, no body).
heartbeats = schemathesis.openapi.from_path(str(DOCUMENT)).include(operation_id="heartbeatRun")
#: POST /v1/sparktide/events and POST .../a2ui: fuzzing only (their coverage cases would
#: mostly repeat the seed schemas' boundary cases at a few seconds each).
sparktide_publishing = schemathesis.openapi.from_path(str(DOCUMENT)).include(
    operation_id="publishSparkTide"
)
sparktide_publishing.config.phases.coverage.enabled = False
a2ui_publishing = schemathesis.openapi.from_path(str(DOCUMENT)).include(operation_id="publishA2ui")
a2ui_publishing.config.phases.coverage.enabled = False
#: GET /v1/ui/ai-sdk/{agent}/{chat_id}/stream, as a tenant without runs.
reconnecting = schemathesis.openapi.from_path(str(DOCUMENT)).include(
    operation_id="uiAiSdkReconnect"
)
#: The tenant of the reconnect cases: it never publishes, so no case opens a stream.
NO_RUNS_TENANT = "tenant-without-runs"
#: /healthz, /readyz, /metrics, /openapi.json (no parameters: every phase is cheap).
plain = schemathesis.openapi.from_path(str(DOCUMENT)).exclude(path_regex="^/v1/")

SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def node_url(redis_url: str) -> Iterator[str]:
    """A real node on the test Redis, running in a thread of its own.

    Schemathesis calls synchronously (``requests``), so the node cannot share the
    test's thread; a blocking portal gives it an event loop in another one.
    """
    prefix = new_redis_prefix()
    try:
        with (
            anyio.from_thread.start_blocking_portal("asyncio") as portal,
            portal.wrap_async_context_manager(
                start_node(redis_url, prefix, agui_strict=True)
            ) as node,
        ):
            yield node.url
    finally:
        delete_keys_with_prefix(redis_url, prefix)


def consistent(case: schemathesis.Case) -> None:
    """Make a positive publish case pass what the schema cannot say (D4).

    A fresh ``event_id`` per item (a retained one with another body is 409), and a
    source of the caller's tenant and the path's team (else 400).
    """
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return
    items: list[Any] = case.body if isinstance(case.body, list) else [case.body]
    for item in items:
        item["event"]["event_id"] = str(uuid.uuid4())
        source = item["source"]
        if source["kind"] == "member":
            source["member"]["tenant"] = TENANT
            source["member"]["team"] = case.path_parameters["team"]
        elif source["kind"] == "operator":
            source["principal"]["tenant"] = TENANT


@publishing.parametrize()
@SETTINGS
def test_publishing_conforms(case: schemathesis.Case, node_url: str) -> None:
    consistent(case)
    case.call_and_validate(base_url=node_url, headers=auth(TENANT), checks=CHECKS, timeout=10)


def consistent_run(case: schemathesis.Case) -> None:
    """Make a positive run publish case pass what the schema cannot say (D4, D7, D7b).

    Each case publishes to a fresh run (no seq, Idempotency-Key or terminal event of an
    earlier case gets in the way).  AG-UI: RUN_STARTED and RUN_FINISHED name the path's
    thread and run.  Run stream: the thread is a lowercase UUID that every committed
    event names, committed seqs follow one another, a result names the path's run.
    """
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return
    params = case.path_parameters
    assert params is not None
    run_id = str(uuid.uuid4())
    params["run_id"] = run_id
    items: list[Any] = case.body if isinstance(case.body, list) else [case.body]
    if case.operation.path.endswith("/ui/ag-ui"):
        if set(params["thread_id"]) == {"."}:
            params["thread_id"] = "t" + params["thread_id"]  # no dot segments in a URL
        for event in items:
            if event.get("type") in ("RUN_STARTED", "RUN_FINISHED"):
                event["threadId"], event["runId"] = params["thread_id"], run_id
        return
    thread_id = params["thread_id"] = str(uuid.uuid4())
    seqs = [m["event"]["seq"] for m in items if m["kind"] == "event"]
    seq = min(seqs[0], MAX_SEQ - len(seqs) + 1) if seqs else 0
    for message in items:
        if message["kind"] == "event":
            message["event"]["thread_id"] = thread_id
            message["event"]["seq"] = seq
            seq += 1
        elif message["kind"] == "result":
            message["run_id"] = run_id


@agui_publishing.parametrize()
@SETTINGS
def test_agui_publishing_conforms(case: schemathesis.Case, node_url: str) -> None:
    consistent_run(case)
    # The token goes into the case itself, not only onto the wire: a negative case
    # whose header negation is a missing Authorization (which every request here
    # carries) and whose query only adds undeclared parameters (which the gateway
    # ignores, like most servers) is then judged as what it is on the wire, a valid
    # request, instead of negative data the node accepted.
    case.headers = {**(case.headers or {}), **auth(TENANT)}
    case.call_and_validate(base_url=node_url, headers=auth(TENANT), checks=CHECKS, timeout=10)


@stream_publishing.parametrize()
@SETTINGS
def test_run_stream_publishing_conforms(case: schemathesis.Case, node_url: str) -> None:
    consistent_run(case)
    case.call_and_validate(base_url=node_url, headers=auth(TENANT), checks=CHECKS, timeout=10)


@listing.parametrize()
@SETTINGS
def test_listing_conforms(case: schemathesis.Case, node_url: str) -> None:
    case.call_and_validate(base_url=node_url, headers=auth(TENANT), checks=CHECKS, timeout=10)


@run_listing.parametrize()
@SETTINGS
def test_run_listing_conforms(case: schemathesis.Case, node_url: str) -> None:
    case.call_and_validate(base_url=node_url, headers=auth(TENANT), checks=CHECKS, timeout=10)


def live_run(case: schemathesis.Case, node_url: str) -> bool:
    """Point a positive heartbeat case at a run that has just started (so that it is
    renewed, 204), and say whether it did; the other cases name runs that never started
    (404)."""
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return False
    params = case.path_parameters
    assert params is not None
    run_id = params["run_id"] = str(uuid.uuid4())
    if set(params["thread_id"]) == {"."}:
        params["thread_id"] = "t" + params["thread_id"]  # no dot segments in a URL
    started = {"type": "RUN_STARTED", "threadId": params["thread_id"], "runId": run_id}
    r = httpx.post(
        f"{node_url}/v1/threads/{params['thread_id']}/runs/{run_id}/ui/ag-ui",
        json=started,
        headers=auth(TENANT),
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return True


@heartbeats.parametrize()
@SETTINGS
def test_heartbeat_conforms(case: schemathesis.Case, node_url: str) -> None:
    live = live_run(case, node_url)
    response = case.call_and_validate(
        base_url=node_url, headers=auth(TENANT), checks=CHECKS, timeout=10
    )
    if live:
        assert response.status_code == 204, response.text


def consistent_dialect(case: schemathesis.Case, node_url: str) -> None:
    """Make a positive dialect publish case pass what the schema cannot say.

    SparkTide: the events of a body name one fresh run and one message, numbered from 1.
    A2UI: a fresh run that has started, and one surface, created first (later messages
    may still break the registry rule: a 400 the document lists).
    """
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return
    items: list[Any] = case.body if isinstance(case.body, list) else [case.body]
    run_id = str(uuid.uuid4())
    if case.operation.path == "/v1/sparktide/events":
        for sequence, event in enumerate(items, start=1):
            event.update(conversationId="c", runId=run_id, messageId="m", sequence=sequence)
        return
    params = case.path_parameters
    assert params is not None
    params["thread_id"], params["run_id"] = "t", run_id
    started = {"type": "RUN_STARTED", "threadId": "t", "runId": run_id}
    r = httpx.post(
        f"{node_url}/v1/threads/t/runs/{run_id}/ui/ag-ui",
        json=started,
        headers=auth(TENANT),
        timeout=10,
    )
    assert r.status_code == 200, r.text
    for message in items:
        next(iter(message.values()))["surfaceId"] = "s"
    if "createSurface" not in items[0]:
        create = {"createSurface": {"surfaceId": "s", "catalogId": "c"}}
        if isinstance(case.body, list):
            case.body.insert(0, create)
        else:
            case.body = [create, case.body]


@sparktide_publishing.parametrize()
@SETTINGS
def test_sparktide_publishing_conforms(case: schemathesis.Case, node_url: str) -> None:
    consistent_dialect(case, node_url)
    case.call_and_validate(base_url=node_url, headers=auth(TENANT), checks=CHECKS, timeout=10)


@a2ui_publishing.parametrize()
@SETTINGS
def test_a2ui_publishing_conforms(case: schemathesis.Case, node_url: str) -> None:
    consistent_dialect(case, node_url)
    case.call_and_validate(base_url=node_url, headers=auth(TENANT), checks=CHECKS, timeout=10)


@reconnecting.parametrize()
@SETTINGS
def test_ai_sdk_reconnect_conforms(case: schemathesis.Case, node_url: str) -> None:
    headers = auth(NO_RUNS_TENANT)
    case.call_and_validate(base_url=node_url, headers=headers, checks=CHECKS, timeout=10)


@plain.parametrize()
@SETTINGS
def test_plain_routes_conform(case: schemathesis.Case, node_url: str) -> None:
    case.call_and_validate(base_url=node_url, headers=auth(TENANT), checks=CHECKS, timeout=10)


def test_the_node_serves_this_document(node_url: str) -> None:
    r = httpx.get(f"{node_url}/openapi.json", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.content == DOCUMENT.read_bytes()


#: Values for the path parameters of every documented route: a team and a run that do
#: not exist, so that no request below starts a stream.
SAMPLE = {
    "team": "0190f5a2-7c1e-7b3d-8a4f-0000000000ff",
    "thread_id": "no-such-thread",
    "run_id": "no-such-run",
    "agent": "any",
    "chat_id": "no-such-chat",
}


def test_every_documented_operation_is_served(node_url: str) -> None:
    """Each documented method of each path reaches its route; others are 405 with Allow."""
    document = json.loads(DOCUMENT.read_bytes())
    for template, item in document["paths"].items():
        url = node_url + template.format(**{k: SAMPLE[k] for k in SAMPLE if k in template})
        for method in item:
            body = {"threadId": SAMPLE["thread_id"], "runId": SAMPLE["run_id"]}
            r = httpx.request(
                method.upper(),
                url,
                headers=auth(TENANT),
                json=body if method == "post" else None,
                timeout=10,
            )
            assert r.status_code != 405, (method, template)
            if r.status_code == 404:
                assert r.json()["error"]["message"] != "no such route", (method, template)
            assert str(r.status_code) in item[method]["responses"], (method, template, r.text)
        if template.startswith("/v1/"):
            r = httpx.request("PUT", url, headers=auth(TENANT), timeout=10)
            assert r.status_code == 405, (template, r.text)
            assert r.headers["allow"] == ", ".join(m.upper() for m in sorted(item)), template


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/v1/teams/0190f5a2-7c1e-7b3d-8a4f-000000000001/events", "GET, POST"),
        ("/healthz", "GET, HEAD"),
        ("/v1/ws", "GET"),
        ("/v1/threads/t1/runs/r1/ui/ag-ui", "GET, POST"),
        ("/v1/threads/t1/runs/r1/events", "GET, POST"),
        ("/v1/ui/ag-ui/agent", "POST"),
        ("/v1/sparktide/events", "POST"),
        ("/v1/threads/t1/runs/r1/a2ui", "POST"),
        ("/v1/threads/t1/runs/r1/ui/ai-sdk", "GET"),
        ("/v1/ui/ai-sdk/agent/chat/stream", "GET"),
        ("/v1/threads/t1/runs/r1/heartbeat", "POST"),
        ("/v1/runs", "GET"),
    ],
)
def test_an_undeclared_method_is_405_with_allow(node_url: str, path: str, allow: str) -> None:
    # The coverage phase checks this on the plain routes; not on publishing, whose
    # negative coverage cases are left out (see the module docstring).
    r = httpx.request("PUT", f"{node_url}{path}", headers=auth(TENANT), timeout=10)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == allow
    assert r.json()["error"]["code"] == "method_not_allowed"
