"""The gateway's OpenAPI document (gateway/schemas/gateway.openapi.json).

Pure unit tests: the committed document is what scripts/gen_openapi.py generates, it is
a valid OpenAPI 3.1 document whose every $ref resolves, every route the gateway serves is
in it, the team-feed GET and the run stream GET say what the seed says (apart from the
documented additions), the run-feed routes say what contract D4, D7 and D7b say, and
its schemas accept and reject what the seed's do.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from gateway.errors import ErrorCode
from gateway.feed import is_run_part
from gateway.http.routes import ROUTES as SERVED
from gateway.validate import MAX_BATCH_ITEMS

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "gateway" / "schemas" / "gateway.openapi.json"
SEED = ROOT / "gateway" / "schemas" / "threads-host-api.openapi.json"
TEAM_EVENTS = "/v1/teams/{team}/events"
RUN_UI = "/v1/threads/{thread_id}/runs/{run_id}/ui/ag-ui"
RUN_EVENTS = "/v1/threads/{thread_id}/runs/{run_id}/events"
AGENT_UI = "/v1/ui/ag-ui/{agent}"
FEEDS = "/v1/feeds"
RUNS = "/v1/runs"
RUN_HEARTBEAT = "/v1/threads/{thread_id}/runs/{run_id}/heartbeat"
RUN_AI_SDK = "/v1/threads/{thread_id}/runs/{run_id}/ui/ai-sdk"
AI_SDK_RECONNECT = "/v1/ui/ai-sdk/{agent}/{chat_id}/stream"
#: What the seed's dump lost from its cursor texts; the route texts restore it.
RESTORED = "`<epoch>:<offset>`"
BASE = "urn:gateway-openapi"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_openapi", ROOT / "scripts" / "gen_openapi.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_openapi", module)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def seed() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SEED.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def registry(doc: dict[str, Any]) -> Registry[Any]:
    return Registry().with_resource(BASE, DRAFT202012.create_resource(doc))


def validator(registry: Registry[Any], schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator(schema, registry=registry)


def component(registry: Registry[Any], name: str) -> Draft202012Validator:
    return validator(registry, {"$ref": f"{BASE}#/components/schemas/{name}"})


def unrestore(text: str) -> str:
    """A restored route text as the seed's dump has it (the dump kept only the colon)."""
    return text.replace(RESTORED, ":")


# -- the document is generated --------------------------------------------------------


def test_committed_document_is_generated() -> None:
    expected = gen.render(gen.build())
    assert DOCUMENT.read_text(encoding="utf-8") == expected, (
        "gateway/schemas/gateway.openapi.json is stale: run uv run python scripts/gen_openapi.py"
    )


def test_generation_is_deterministic(seed: dict[str, Any]) -> None:
    first = gen.render(gen.build(copy.deepcopy(seed)))
    assert first == gen.render(gen.build(copy.deepcopy(seed)))
    assert gen.main(["--check"]) == 0


def test_the_package_serves_this_document() -> None:
    served = resources.files("gateway.schemas").joinpath("gateway.openapi.json").read_bytes()
    assert served == DOCUMENT.read_bytes()


# -- a valid, self-contained OpenAPI 3.1 document ----------------------------------------


def test_valid_openapi_3_1(doc: dict[str, Any]) -> None:
    assert doc["openapi"] == "3.1.0"
    OpenAPIV31SpecValidator(doc).validate()


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _resolve(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), f"not a local reference: {ref}"
    node: Any = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"unresolved: {ref}"
        node = node[part]
    return node


def test_every_ref_resolves(doc: dict[str, Any]) -> None:
    found = sorted(set(_refs(doc)))
    assert len(found) > 100
    for ref in found:
        _resolve(doc, ref)


def test_copied_seed_schemas_are_verbatim(doc: dict[str, Any], seed: dict[str, Any]) -> None:
    ours = set(gen.gateway_schemas())
    seed_schemas = seed["components"]["schemas"]
    for name, schema in doc["components"]["schemas"].items():
        if name in ours:
            assert name not in seed_schemas
        else:
            assert schema == seed_schemas[name], name
    for name in ("TeamItem", "TeamCursor", "TeamSource", "ErrorBody", "Failure", "events_Event"):
        assert doc["components"]["schemas"][name] == seed_schemas[name]
    # Nothing more than the closure was copied.
    needed = set(gen.closure(seed_schemas | gen.gateway_schemas(), [*gen.SEED_ROOTS, *ours]))
    assert set(doc["components"]["schemas"]) == needed


# -- the team feed GET says what the seed says -------------------------------------------


def test_team_get_matches_the_seed(doc: dict[str, Any], seed: dict[str, Any]) -> None:
    ours = doc["paths"][TEAM_EVENTS]["get"]
    theirs = seed["paths"][TEAM_EVENTS]["get"]
    assert ours["operationId"] == theirs["operationId"] == "subscribeTeam"
    assert ours["x-api"] == theirs["x-api"]
    assert ours["x-error-codes"] == theirs["x-error-codes"]
    assert (
        theirs["description"].removeprefix("**Phase 2, not yet available** ")
        in (ours["description"])
    )

    # Parameters: the seed's, then the documented additions.
    params = {p["name"]: p for p in ours["parameters"]}
    seed_params = {p["name"]: p for p in theirs["parameters"]}
    assert [p["name"] for p in ours["parameters"]] == [
        *seed_params,
        "Last-Event-ID",
        "access_token",
    ]
    assert params["team"] == seed_params["team"]
    after = dict(params["after"], description=unrestore(params["after"]["description"]))
    assert after == seed_params["after"]
    last = params["Last-Event-ID"]
    assert last["in"] == "header" and last["required"] is False
    assert last["schema"] == seed_params["after"]["schema"]
    assert "wins" in last["description"]
    token = params["access_token"]
    assert token["in"] == "query" and token["required"] is False

    # 200: the seed's description (placeholders restored), content and x-sse-data.
    ok, seed_ok = ours["responses"]["200"], theirs["responses"]["200"]
    assert unrestore(ok["description"]) == seed_ok["description"]
    assert ok["content"] == seed_ok["content"]
    assert ok["content"]["text/event-stream"]["x-sse-data"] == {
        "$ref": "#/components/schemas/TeamItem"
    }
    assert ok["headers"]["Cache-Control"]["schema"]["const"] == "no-cache"
    assert ok["headers"]["X-Accel-Buffering"]["schema"]["const"] == "no"

    # The seed's 4XX stays; the per-status responses are additions.
    assert ours["responses"]["4XX"] == theirs["responses"]["4XX"]
    name = "SubscribeTeamError"
    assert doc["components"]["responses"][name] == seed["components"]["responses"][name]
    assert set(ours["responses"]) == {"200", "400", "401", "404", "429", "4XX", "500", "503"}


def _codes(response: dict[str, Any]) -> list[str]:
    schema = response["content"]["application/json"]["schema"]
    codes: list[str] = schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"]
    return codes


#: Every publish route (team and run) answers exactly these statuses with these codes.
PUBLISH_CODES = {
    "400": "invalid_request",
    "401": "unauthenticated",
    "403": "forbidden",
    "404": "not_found",
    "409": "idempotency_key_reused",
    "413": "too_large",
    "415": "unsupported_media_type",
    "429": "rate_limited",
    "500": "internal",
    "503": "unavailable",
}


def test_team_error_responses(doc: dict[str, Any]) -> None:
    responses = doc["paths"][TEAM_EVENTS]["get"]["responses"]
    assert _codes(responses["400"]) == ["invalid_cursor"]
    assert _codes(responses["401"]) == ["unauthenticated"]
    assert _codes(responses["404"]) == ["not_found"]
    assert _codes(responses["429"]) == ["rate_limited"]
    publish = doc["paths"][TEAM_EVENTS]["post"]["responses"]
    assert {status: _codes(r) for status, r in publish.items() if status != "200"} == {
        status: [code] for status, code in PUBLISH_CODES.items()
    }
    codes = doc["paths"][TEAM_EVENTS]["post"]["x-error-codes"]
    assert set(codes) == set(PUBLISH_CODES.values()) - {"internal"}


def _pointer(*parts: str) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def _error_responses(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(where, JSON pointer of the schema, response) of every JSON error response."""
    for path, item in doc["paths"].items():
        if not path.startswith("/v1/"):
            continue  # /readyz's 503 is a readiness body, not an error body
        for method, op in item.items():
            for status, response in op["responses"].items():
                at = _pointer("paths", path, method, "responses", status)
                if "$ref" in response:
                    at = response["$ref"].removeprefix("#")
                    response = _resolve(doc, response["$ref"])
                if status[0] in "45" and "application/json" in response.get("content", {}):
                    schema_at = at + _pointer("content", "application/json", "schema")
                    yield f"{method.upper()} {path} {status}", schema_at, response


def test_every_error_response_accepts_exactly_its_codes(
    doc: dict[str, Any], registry: Registry[Any]
) -> None:
    seen = 0
    for where, at, response in _error_responses(doc):
        check = validator(registry, {"$ref": f"{BASE}#{quote(at)}"})
        for code in _codes(response):
            assert check.is_valid({"error": {"code": code, "message": "m"}}), (where, code)
            assert not check.is_valid({"error": {"code": code, "message": "m"}, "x": 1}), where
            assert not check.is_valid({"error": {"code": code, "message": "m", "x": 1}}), where
            assert not check.is_valid({"error": {"code": code}}), where
        assert not check.is_valid({"error": {"code": "no_such_code", "message": "m"}}), where
        seen += 1
    # Team GET: 400 401 404 429 4XX 500 503; team POST: ten; run feed GET: six;
    # run feed POST: ten; subscribeRun: seven; publishRunEvents: ten; attach: eight;
    # listFeeds: five; publishSparkTide, publishA2ui: ten each;
    # the AI SDK stream: six and the seed's 4XX; the AI SDK reconnect: five and the 4XX;
    # heartbeatRun: six; listRuns: five.
    assert seen == 7 + 10 + 6 + 10 + 7 + 10 + 8 + 5 + 10 + 10 + 7 + 6 + 6 + 5


def test_gateway_error_codes_are_the_additions(doc: dict[str, Any], seed: dict[str, Any]) -> None:
    schemas = seed["components"]["schemas"]
    seed_codes = set(schemas["events_ErrorCode"]["enum"]) | set(schemas["api_ApiErrorCode"]["enum"])
    ours = doc["components"]["schemas"]["GatewayErrorCode"]["enum"]
    assert set(ours) == {str(code) for code in ErrorCode} - seed_codes
    assert not set(ours) & seed_codes


# -- every route the gateway serves is documented ----------------------------------------

#: Methods per documented path (what each route's 405 names in Allow, minus HEAD).
ROUTES = {
    TEAM_EVENTS: {"get", "post"},
    RUN_UI: {"get", "post"},
    RUN_EVENTS: {"get", "post"},
    RUN_HEARTBEAT: {"post"},
    AGENT_UI: {"post"},
    FEEDS: {"get"},
    RUNS: {"get"},
    "/v1/sparktide/events": {"post"},
    "/v1/threads/{thread_id}/runs/{run_id}/a2ui": {"post"},
    RUN_AI_SDK: {"get"},
    AI_SDK_RECONNECT: {"get"},
    "/healthz": {"get"},
    "/readyz": {"get"},
    "/metrics": {"get"},
    "/openapi.json": {"get"},
}
#: Served but not described here: the WebSocket protocol has its own document, the
#: console's files are a page (docs/console.md).
UNDOCUMENTED = {"/v1/ws", "/console", "/console/", "/console/{name}"}


def _served_route_patterns() -> list[re.Pattern[str]]:
    """Every documented /v1 route pattern of the HTTP dispatch (the route table)."""
    found = [
        route.pattern
        for route in SERVED
        if route.template.startswith("/v1/") and route.template not in UNDOCUMENTED
    ]
    assert len(found) >= 4
    return found


def _instance(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


def test_every_route_is_documented(doc: dict[str, Any]) -> None:
    assert {path: set(item) for path, item in doc["paths"].items()} == ROUTES
    # The route table serves exactly the documented methods of each documented path.
    assert {
        route.template: {method.lower() for method in route.methods}
        for route in SERVED
        if route.template not in UNDOCUMENTED
    } == ROUTES
    documented = [p for p in doc["paths"] if p.startswith("/v1/")]
    for pattern in _served_route_patterns():
        matches = [p for p in documented if pattern.match(_instance(p))]
        assert len(matches) == 1, (pattern.pattern, matches)
    for path in documented:
        matches = [p for p in _served_route_patterns() if p.match(_instance(path))]
        assert len(matches) == 1, (path, matches)
    for path in UNDOCUMENTED:
        assert path not in doc["paths"]
        assert not any(p.match(path) for p in _served_route_patterns())


def test_operation_ids_are_unique(doc: dict[str, Any], seed: dict[str, Any]) -> None:
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids)) == 18
    ours = {
        (path, method): op["operationId"]
        for path, item in doc["paths"].items()
        for method, op in item.items()
    }
    assert ours[(RUN_UI, "post")] == "publishRunAgUi"
    assert ours[(RUN_UI, "get")] == "subscribeRunAgUi"
    assert ours[(AGENT_UI, "post")] == "attachAgUiRun"
    assert ours[(RUN_EVENTS, "get")] == "subscribeRun"
    assert ours[(RUN_EVENTS, "post")] == "publishRunEvents"
    assert ours[("/v1/sparktide/events", "post")] == "publishSparkTide"
    assert ours[("/v1/threads/{thread_id}/runs/{run_id}/a2ui", "post")] == "publishA2ui"
    assert ours[(RUN_AI_SDK, "get")] == "subscribeRunAiSdk"
    assert ours[(AI_SDK_RECONNECT, "get")] == "uiAiSdkReconnect"
    assert ours[(RUN_HEARTBEAT, "post")] == "heartbeatRun"
    assert ours[(RUNS, "get")] == "listRuns"
    # Only the operations that are the seed's carry a seed operation id.
    seed_ids = {
        op["operationId"]: (path, method)
        for path, item in seed["paths"].items()
        for method, op in item.items()
        if isinstance(op, dict) and "operationId" in op
    }
    for key, op_id in ours.items():
        if op_id in seed_ids:
            assert seed_ids[op_id] == key, op_id
    assert seed_ids["uiAgUiRun"] == (AGENT_UI, "post")  # ours departs: attachAgUiRun


def test_x_error_codes_name_every_error_answered(doc: dict[str, Any]) -> None:
    for path, item in doc["paths"].items():
        for op in item.values():
            if not path.startswith("/v1/"):
                assert "x-error-codes" not in op
                continue
            if op["operationId"] == "subscribeTeam":
                continue  # the seed's list, verbatim (test_team_get_matches_the_seed)
            codes = {code for codes in _statuses(op).values() for code in codes} - {"internal"}
            listed = op["x-error-codes"]
            assert len(listed) == len(set(listed)), op["operationId"]
            if op["operationId"] == "subscribeRun":
                assert codes <= set(listed)  # the seed's list (forbidden too), then ours
            else:
                assert set(listed) == codes, op["operationId"]


# -- the run-feed routes (contract D4, D7, D7b) ------------------------------------------

STREAM_CODES = {
    "401": "unauthenticated",
    "404": "not_found",
    "429": "rate_limited",
    "500": "internal",
    "503": "unavailable",
}


def _statuses(op: dict[str, Any]) -> dict[str, list[str]]:
    return {
        status: _codes(response)
        for status, response in op["responses"].items()
        if status[0] in "45" and "content" in response
    }


def test_run_error_responses(doc: dict[str, Any]) -> None:
    # A run's end is final: the run publish routes also answer 409 run_ended.
    expected = {status: [code] for status, code in PUBLISH_CODES.items()}
    expected["409"] = ["idempotency_key_reused", "run_ended"]
    for path in (RUN_UI, RUN_EVENTS):
        op = doc["paths"][path]["post"]
        assert _statuses(op) == expected, path
        assert "run_ended" in op["x-error-codes"], path
        assert op["responses"]["429"]["headers"]["Retry-After"]["schema"]["minimum"] == 1
        assert "security" not in op  # the document's bearer
    stream = {status: [code] for status, code in STREAM_CODES.items()}
    assert _statuses(doc["paths"][RUN_UI]["get"]) == {"400": ["invalid_cursor"], **stream}
    assert _statuses(doc["paths"][RUN_EVENTS]["get"]) == {
        "400": ["invalid_request"],
        **stream,
    }  # and the seed's 4XX (test_subscribe_run_matches_the_seed)
    assert _statuses(doc["paths"][AGENT_UI]["post"]) == {
        "400": ["invalid_request", "invalid_cursor"],
        **stream,
        "413": ["too_large"],
        "415": ["unsupported_media_type"],
    }
    for path, method in ((RUN_UI, "get"), (RUN_EVENTS, "get")):
        assert doc["paths"][path][method]["security"] == [{"bearer": []}, {"accessToken": []}]


def _params(op: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in op["parameters"]}


def test_run_path_parameters_are_the_gateways(doc: dict[str, Any]) -> None:
    pattern = gen.RUN_PART_PATTERN
    for good in ("t1", "run.1_a-b", "x" * 128, "0190f5a2-7c1e-7b3d-8a4f-000000000002"):
        assert re.search(pattern, good) and is_run_part(good), good
    for bad in ("", "x" * 129, "a b", "a/b", "a%2Fb", "ü"):
        assert not re.search(pattern, bad) and not is_run_part(bad), bad
    for path in (RUN_UI, RUN_EVENTS, RUN_HEARTBEAT):
        for method, op in doc["paths"][path].items():
            params = _params(op)
            for name in ("thread_id", "run_id"):
                assert params[name]["in"] == "path" and params[name]["required"] is True
                assert params[name]["schema"] == {"type": "string", "pattern": pattern}, (
                    method,
                    path,
                    name,
                )


def test_agui_stream_parameters(doc: dict[str, Any]) -> None:
    cursor = {"type": "string", "pattern": "^[0-9]+:[0-9]+$"}
    get = _params(doc["paths"][RUN_UI]["get"])
    assert list(get) == ["thread_id", "run_id", "after", "Last-Event-ID", "access_token"]
    attach = _params(doc["paths"][AGENT_UI]["post"])
    assert list(attach) == ["agent", "after", "Last-Event-ID"]
    for params in (get, attach):
        assert params["after"]["in"] == "query" and params["after"]["schema"] == cursor
        last = params["Last-Event-ID"]
        assert last["in"] == "header" and last["required"] is False
        assert last["schema"] == cursor and "wins" in last["description"]
    assert get["access_token"]["in"] == "query"
    key = _params(doc["paths"][RUN_UI]["post"])["Idempotency-Key"]
    assert key["in"] == "header" and key["required"] is False
    assert key["schema"] == {"type": "string", "minLength": 1, "maxLength": 200}
    assert gen.MAX_IDEMPOTENCY_KEY == 200


def test_agui_routes_say_what_d7_says(doc: dict[str, Any], seed: dict[str, Any]) -> None:
    agui = {"$ref": "#/components/schemas/ag-ui-1"}
    get = doc["paths"][RUN_UI]["get"]
    attach = doc["paths"][AGENT_UI]["post"]
    for op in (get, attach):
        ok = op["responses"]["200"]
        assert ok["content"] == {
            "text/event-stream": {"schema": {"type": "string"}, "x-sse-data": agui}
        }
        assert ok["headers"]["Cache-Control"]["schema"]["const"] == "no-cache"
        assert ok["headers"]["X-Accel-Buffering"]["schema"]["const"] == "no"
    text = get["description"]
    for phrase in (
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "MESSAGES_SNAPSHOT",
        "carry no `id:`",
        "ends after the run's `RUN_FINISHED` or `RUN_ERROR`",
        '"type": "CUSTOM", "name": "gateway.epoch_restarted"',
        "uiRunFrames",
        RESTORED,
    ):
        assert phrase in text, phrase
    body = attach["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ag-ui-1_RunAgentInput"}
    assert "only `threadId` and `runId`" in attach["requestBody"]["description"]
    assert "uiAgUiRun" in attach["description"] and "never starts a run" in attach["description"]
    # The seed's own operation on that path starts runs: ours is a departure (D7).
    assert seed["paths"][AGENT_UI]["post"]["operationId"] == "uiAgUiRun"
    publish = doc["paths"][RUN_UI]["post"]
    for phrase in ("only `type`", "unknown event types", "GATEWAY_AGUI_STRICT", "Idempotency-Key"):
        assert phrase in publish["description"], phrase
    assert publish["requestBody"]["required"] is True
    assert publish["requestBody"]["content"] == {
        "application/json": {"schema": {"$ref": "#/components/schemas/RunPublishBody"}}
    }
    ok = publish["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/PublishResponse"}


def test_subscribe_run_matches_the_seed(doc: dict[str, Any], seed: dict[str, Any]) -> None:
    ours = doc["paths"][RUN_EVENTS]["get"]
    theirs = seed["paths"][RUN_EVENTS]["get"]
    assert ours["operationId"] == theirs["operationId"] == "subscribeRun"
    assert ours["x-api"] == theirs["x-api"]
    assert ours["summary"] == theirs["summary"]
    assert ours["x-error-codes"][: len(theirs["x-error-codes"])] == theirs["x-error-codes"]
    params = _params(ours)
    seed_after = next(p for p in theirs["parameters"] if p.get("name") == "after_seq")
    assert params["after_seq"]["schema"] == seed_after["schema"]
    assert params["after_seq"]["in"] == "query" and params["after_seq"]["required"] is False
    assert params["Last-Event-ID"]["in"] == "header"
    assert re.search(params["Last-Event-ID"]["schema"]["pattern"], "9007199254740991")
    assert not re.search(params["Last-Event-ID"]["schema"]["pattern"], "1:2")
    ok, seed_ok = ours["responses"]["200"], theirs["responses"]["200"]
    assert ok["description"] == seed_ok["description"]
    assert ok["content"] == seed_ok["content"]
    assert ok["content"]["text/event-stream"]["x-sse-data"] == {
        "$ref": "#/components/schemas/SseMessage"
    }
    assert ours["responses"]["4XX"] == theirs["responses"]["4XX"]
    name = "SubscribeRunError"
    assert doc["components"]["responses"][name] == seed["components"]["responses"][name]
    for phrase in ("after_seq", "Last-Event-ID", "header wins", "transient", "404 not_found"):
        assert phrase in ours["description"], phrase
    post = doc["paths"][RUN_EVENTS]["post"]
    assert post["requestBody"]["content"] == {
        "application/json": {"schema": {"$ref": "#/components/schemas/RunStreamPublishBody"}}
    }
    ok = post["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/RunStreamPublishResponse"}


# -- schemas accept and reject what they should ------------------------------------------

THREAD = "0190f5a2-7c1e-7b3d-8a4f-000000000002"
BRANCH = "0190f5a2-7c1e-7b3d-8a4f-000000000003"
TEAM = "0190f5a2-7c1e-7b3d-8a4f-00000000000a"


def team_message() -> dict[str, Any]:
    return {
        "seq": 7,
        "event_id": "0190f5a2-7c1e-7b3d-8a4f-000000000107",
        "thread_id": THREAD,
        "branch_id": BRANCH,
        "epoch": 1,
        "type": "team_message",
        "type_version": 1,
        "time": 1_760_000_000_007,
        "actor": {"kind": "host"},
        "prev_hash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "critical": True,
        "data": {"message_id": "m-1", "from": "lead", "to": "*", "text": "hello"},
    }


def event_item() -> dict[str, Any]:
    return {
        "kind": "event",
        "cursor": {"epoch": 1_760_000_000_000, "offset": 3},
        "source": {
            "kind": "member",
            "member": {"tenant": "acme", "team": TEAM, "name": "lead", "generation": 1},
        },
        "event": team_message(),
    }


def test_team_item_accepts_events_and_epoch_restarted(registry: Registry[Any]) -> None:
    check = component(registry, "TeamItem")
    check.validate(event_item())
    check.validate(dict(event_item(), source={"kind": "team"}))
    check.validate({"kind": "epoch_restarted", "cursor": {"epoch": 1_760_000_000_001, "offset": 0}})


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda i: i.update(extra=1), id="extra key"),
        pytest.param(lambda i: i["cursor"].update(extra=1), id="extra cursor key"),
        pytest.param(lambda i: i["source"].update(extra=1), id="extra source key"),
        pytest.param(lambda i: i["event"].update(extra=1), id="extra envelope key"),
        pytest.param(lambda i: i["event"]["data"].update(extra=1), id="extra data key"),
        pytest.param(lambda i: i.pop("source"), id="no source"),
        pytest.param(lambda i: i["cursor"].update(offset=-1), id="negative offset"),
        pytest.param(lambda i: i["cursor"].update(epoch=2**53), id="epoch above 2^53-1"),
        pytest.param(lambda i: i["cursor"].update(epoch="1"), id="string epoch"),
        pytest.param(lambda i: i.update(kind="delta"), id="unknown kind"),
    ],
)
def test_team_item_rejects(registry: Registry[Any], mutate: Any) -> None:
    item = event_item()
    mutate(item)
    assert not component(registry, "TeamItem").is_valid(item)


def test_epoch_restarted_item_is_closed(registry: Registry[Any]) -> None:
    check = component(registry, "TeamItem")
    cursor = {"epoch": 5, "offset": 0}
    assert not check.is_valid({"kind": "epoch_restarted", "cursor": cursor, "extra": 1})
    assert not check.is_valid(
        {"kind": "epoch_restarted", "cursor": cursor, "source": {"kind": "team"}}
    )
    assert not check.is_valid({"kind": "epoch_restarted"})


def test_publish_body(doc: dict[str, Any], registry: Registry[Any]) -> None:
    check = component(registry, "TeamPublishBody")
    one = {"source": {"kind": "team"}, "event": team_message()}
    check.validate(one)
    check.validate([one, one])
    assert not check.is_valid([])
    assert not check.is_valid(dict(one, extra=1))
    assert not check.is_valid({"source": {"kind": "team"}})
    assert not check.is_valid({"event": team_message()})
    array = doc["components"]["schemas"]["TeamPublishBody"]["oneOf"][1]
    assert array["maxItems"] == MAX_BATCH_ITEMS == gen.MAX_BATCH_ITEMS
    body = doc["paths"][TEAM_EVENTS]["post"]["requestBody"]
    assert body["required"] is True
    assert list(body["content"]) == ["application/json"]


def run_started() -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}


def test_run_publish_body(doc: dict[str, Any], registry: Registry[Any]) -> None:
    check = component(registry, "RunPublishBody")
    text = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi"}
    check.validate(run_started())
    check.validate([run_started(), {"type": "TEXT_MESSAGE_START", "messageId": "m1"}, text])
    assert not check.is_valid([])
    assert not check.is_valid({"threadId": "t1"})  # no type
    assert not check.is_valid({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1"})
    # The schema is the whole of AG-UI 1.0; publishing is laxer unless strict (described).
    assert not check.is_valid(dict(run_started(), extra=1))
    assert not check.is_valid({"type": "SOME_FUTURE_EVENT"})
    assert not check.is_valid({"type": "SUBAGENT_FINISHED", "subagentRunId": None})
    array = doc["components"]["schemas"]["RunPublishBody"]["oneOf"][1]
    assert array["maxItems"] == MAX_BATCH_ITEMS


def test_run_stream_publish_body(doc: dict[str, Any], registry: Registry[Any]) -> None:
    check = component(registry, "RunStreamPublishBody")
    event = {"kind": "event", "event": team_message()}
    delta = {
        "kind": "delta",
        "request_event_id": "0190f5a2-7c1e-7b3d-8a4f-000000000107",
        "text": "",
    }
    status = {"kind": "status", "status": "retry_wait", "until": 1_760_000_000_000}
    result = {
        "kind": "result",
        "run_id": "0190f5a2-7c1e-7b3d-8a4f-000000000107",
        "result": {"status": "cancelled", "thread_id": THREAD, "branch_id": BRANCH},
    }
    for message in (event, delta, status, result):
        check.validate(message)
    check.validate([event, delta, status, result])
    assert not check.is_valid([])
    assert not check.is_valid(dict(event, extra=1))
    assert not check.is_valid({"kind": "delta", "text": "x"})
    assert not check.is_valid(dict(result, run_id="r1"))
    array = doc["components"]["schemas"]["RunStreamPublishBody"]["oneOf"][1]
    assert array["maxItems"] == MAX_BATCH_ITEMS


def test_run_stream_publish_response(registry: Registry[Any]) -> None:
    check = component(registry, "RunStreamPublishResponse")
    check.validate({"cursors": ["1760000000000:1", None, "1760000000000:2"]})
    check.validate({"cursors": [None]})
    assert not check.is_valid({"cursors": []})
    assert not check.is_valid({"cursors": ["7"]})
    assert not check.is_valid({"cursors": [None], "extra": 1})


def test_publish_response(registry: Registry[Any]) -> None:
    check = component(registry, "PublishResponse")
    check.validate({"cursors": ["1760000000000:1", "1760000000000:2"]})
    assert not check.is_valid({"cursors": ["1760000000000-1"]})
    assert not check.is_valid({"cursors": []})
    assert not check.is_valid({"cursors": ["1:1"], "extra": 1})


def test_operational_routes(doc: dict[str, Any], registry: Registry[Any]) -> None:
    assert doc["security"] == [{"bearer": []}]
    scheme = doc["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == ("http", "bearer", "JWT")
    for claim in ("sub", "iss", "tenant", "exp", "scope", "subscribe", "publish", "teams"):
        assert f"`{claim}`" in scheme["description"], claim
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert doc["paths"][path]["get"]["security"] == [], path
    assert "security" not in doc["paths"][TEAM_EVENTS]["post"]
    component(registry, "HealthBody").validate({"status": "ok"})
    component(registry, "ReadyBody").validate({"status": "ready", "reason": "ok"})
    component(registry, "NotReadyBody").validate(
        {"status": "not_ready", "reason": "redis does not answer"}
    )
    assert not component(registry, "ReadyBody").is_valid({"status": "not_ready", "reason": "x"})
    metrics = doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]


def test_the_feed_listing_says_what_the_route_does(doc: dict[str, Any]) -> None:
    from gateway.feed import FeedKind
    from gateway.http import feed_listing

    op = doc["paths"][FEEDS]["get"]
    assert op["operationId"] == "listFeeds"
    params = {p["name"]: p for p in op["parameters"]}
    assert params["kind"]["required"] is True
    assert params["kind"]["schema"]["enum"] == [kind.value for kind in FeedKind]
    assert params["limit"]["schema"]["maximum"] == feed_listing.MAX_LIMIT
    assert params["limit"]["schema"]["default"] == feed_listing.DEFAULT_LIMIT
    assert params["after"]["schema"]["maxLength"] == feed_listing.MAX_AFTER
    entry = doc["components"]["schemas"]["FeedListEntry"]
    pattern = re.compile(entry["properties"]["feed"]["pattern"])
    assert pattern.match("team/0190f5a2-7c1e-7b3d-8a4f-000000000001")
    assert pattern.match("run/t.1/r-1")
    assert not pattern.match("run/t1/r1/events")  # run streams are not listed
    assert not pattern.match("team/0190F5A2-7C1E-7B3D-8A4F-000000000001")


# -- run leases (contract, "Runs end") ---------------------------------------------------


def test_the_lease_bounds_are_the_gateways(doc: dict[str, Any]) -> None:
    from gateway import run_lease

    assert gen.DEFAULT_LEASE_SECONDS == run_lease.DEFAULT_LEASE_SECONDS
    assert gen.MIN_LEASE_SECONDS == run_lease.MIN_LEASE_SECONDS
    assert gen.MAX_LEASE_SECONDS == run_lease.MAX_LEASE_SECONDS
    publish = doc["paths"][RUN_UI]["post"]
    lease = _params(publish)["lease_seconds"]
    assert lease["in"] == "query" and lease["required"] is False
    assert lease["schema"] == {
        "type": "number",
        "minimum": run_lease.MIN_LEASE_SECONDS,
        "maximum": run_lease.MAX_LEASE_SECONDS,
    }
    assert "lease_seconds" in publish["responses"]["400"]["description"]
    for phrase in ("lease_seconds", "GATEWAY_RUN_LEASE_SECONDS", "producer_lost", RUN_HEARTBEAT):
        assert phrase in publish["description"], phrase


def test_the_heartbeat_says_what_the_route_does(doc: dict[str, Any]) -> None:
    op = doc["paths"][RUN_HEARTBEAT]["post"]
    assert "security" not in op  # the document's bearer
    assert "requestBody" not in op  # any body is ignored
    assert list(_params(op)) == ["thread_id", "run_id"]
    ok = op["responses"]["204"]
    assert "content" not in ok
    assert _statuses(op) == {
        "401": ["unauthenticated"],
        "403": ["forbidden"],
        "404": ["not_found"],
        "413": ["too_large"],
        "500": ["internal"],
        "503": ["unavailable"],
    }
    assert "no such live run" in op["responses"]["404"]["description"]
    for phrase in ("`publish` scope", "producer_lost", "ignored"):
        assert phrase in op["description"], phrase


def test_the_run_listing_says_what_the_route_does(
    doc: dict[str, Any], registry: Registry[Any]
) -> None:
    from gateway.http import feed_listing, run_listing

    op = doc["paths"][RUNS]["get"]
    assert set(doc["paths"][RUNS]) == {"get"}  # the seed's POST (startRun) is the host's
    params = _params(op)
    assert list(params) == ["state", "limit", "after"]
    assert params["state"]["required"] is True
    assert params["state"]["schema"]["enum"] == ["live"]
    assert params["limit"]["schema"] == _params(doc["paths"][FEEDS]["get"])["limit"]["schema"]
    assert params["limit"]["schema"]["maximum"] == feed_listing.MAX_LIMIT
    assert params["limit"]["schema"]["default"] == feed_listing.DEFAULT_LIMIT
    assert params["after"]["schema"]["maxLength"] == feed_listing.MAX_AFTER == gen.MAX_AFTER
    ok = op["responses"]["200"]
    assert ok["headers"]["Cache-Control"]["schema"]["const"] == "no-store"
    assert _statuses(op) == {
        "400": ["invalid_request"],
        "401": ["unauthenticated"],
        "404": ["not_found"],
        "500": ["internal"],
        "503": ["unavailable"],
    }
    # The schema holds what the route sends: every field of ListedRun, nothing more.
    entry = doc["components"]["schemas"]["RunListEntry"]
    assert entry["required"] == list(run_listing.ListedRun.__struct_fields__)
    assert list(run_listing.RunListing.__struct_fields__) == ["runs", "next"]
    check = component(registry, "RunList")
    run = {
        "feed": "run/t.1/r-1",
        "thread_id": "t.1",
        "run_id": "r-1",
        "started_ms": 1_760_000_000_000,
        "updated_ms": 1_760_000_000_500,
        "lease_deadline_ms": 1_760_000_060_500,
    }
    check.validate({"runs": [run], "next": "MTc2MDAwMDAwMDAwMDp0LjEvci0x"})
    check.validate({"runs": [], "next": None})
    assert not check.is_valid({"runs": [dict(run, extra=1)], "next": None})
    assert not check.is_valid({"runs": [dict(run, feed="team/x")], "next": None})
    check.validate({"runs": [dict(run, feed="run/t1/r1/events")], "next": None})  # a stream
    assert not check.is_valid({"runs": [dict(run, feed="run/t1/r1/other")], "next": None})
    assert not check.is_valid({"runs": [run] * (feed_listing.MAX_LIMIT + 1), "next": None})
    assert not check.is_valid({"runs": []})


# -- other dialects in (D4.8, D4.9) -----------------------------------------------------


def _unref(node: Any, prefix: str) -> Any:
    """A dialect component with its references pointing back into the seed."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$ref" and value == f"{gen.SCHEMA_PREFIX}a2ui_AnyComponent":
                out[key] = gen.A2UI_CATALOG_REF
            elif key == "$ref":
                out[key] = "#/$defs/" + value.removeprefix(gen.SCHEMA_PREFIX + prefix)
            else:
                out[key] = _unref(value, prefix)
        return out
    if isinstance(node, list):
        return [_unref(value, prefix) for value in node]
    return node


@pytest.mark.parametrize(
    ("path", "prefix", "root"),
    [(gen.SPARKTIDE_SEED, "sparktide_", "AgentEvent"), (gen.A2UI_SEED, "a2ui_", "Message")],
)
def test_dialect_seed_schemas_are_copied_verbatim(
    doc: dict[str, Any], path: Path, prefix: str, root: str
) -> None:
    seed = json.loads(path.read_text(encoding="utf-8"))
    schemas = doc["components"]["schemas"]
    copied = _unref(dict(schemas[prefix + root]), prefix)
    assert copied.pop("x-seed-id", None) == seed.get("$id")
    if "oneOf" in copied and "allOf" in seed:
        # SparkTide's if/then per event name, written as a oneOf: the same branches.
        del copied["description"]
        copied["allOf"] = [
            {
                "if": {"properties": {"event": {"const": b["properties"]["event"]["const"]}}},
                "then": {"properties": {"data": b["properties"]["data"]}},
            }
            for b in copied.pop("oneOf")
        ]
    defs = seed.pop("$defs")
    seed.pop("$schema")
    seed.pop("$id", None)
    assert copied == seed
    for name, schema in defs.items():
        assert _unref(schemas[prefix + name], prefix) == schema, name


def test_sparktide_publish_body(registry: Registry[Any]) -> None:
    from tests.dialects.sparktide_runs import EVERYTHING, VALID, event

    body = component(registry, "SparkTidePublishBody")
    for name in VALID:
        assert body.is_valid(event(name, 1)), name
    assert body.is_valid(EVERYTHING)
    assert not body.is_valid([])
    assert not body.is_valid([EVERYTHING[0]] * (MAX_BATCH_ITEMS + 1))
    assert not body.is_valid({**EVERYTHING[0], "timestamp": 1})
    assert not body.is_valid({**EVERYTHING[0], "conversationId": "a b"})
    assert not body.is_valid({**EVERYTHING[0], "event": "message.deleted"})
    assert not body.is_valid(event("text.delta", 1, {"delta": "not text"}))
    assert not body.is_valid({**EVERYTHING[0], "sequence": 0})


def test_a2ui_publish_body(registry: Registry[Any]) -> None:
    from tests.dialects.a2ui_runs import ALL_STREAMS, create, delete

    body = component(registry, "A2uiPublishBody")
    for name, messages in ALL_STREAMS.items():
        assert body.is_valid(messages), name
        assert all(body.is_valid(m) for m in messages), name
    assert not body.is_valid([])
    assert not body.is_valid({**create("s"), **delete("s")})
    assert not body.is_valid({**create("s"), "version": "v0.9"})
    assert not body.is_valid({"createSurface": {"surfaceId": "s"}})
    assert not body.is_valid({"updateComponents": {"surfaceId": "s", "components": [{}]}})


# -- the AI SDK routes (contract D10) ----------------------------------------------------


def test_ai_sdk_routes_say_what_d10_says(doc: dict[str, Any], seed: dict[str, Any]) -> None:
    chunks = {"$ref": "#/components/schemas/ai-sdk-ui"}
    stream = {status: [code] for status, code in STREAM_CODES.items()}
    get = doc["paths"][RUN_AI_SDK]["get"]
    reconnect = doc["paths"][AI_SDK_RECONNECT]["get"]
    for op in (get, reconnect):
        ok = op["responses"]["200"]
        assert ok["content"] == {
            "text/event-stream": {"schema": {"type": "string"}, "x-sse-data": chunks}
        }
        assert ok["headers"]["x-vercel-ai-ui-message-stream"]["schema"]["const"] == "v1"
        assert ok["headers"]["Cache-Control"]["schema"]["const"] == "no-cache"
    assert get["security"] == [{"bearer": []}, {"accessToken": []}]
    assert "security" not in reconnect  # the document's bearer: the transport sets headers
    # The committed route: the chunk-id cursor, and the errors of a run stream.
    assert _statuses(get) == {"400": ["invalid_cursor"], **stream}
    assert get["responses"]["4XX"] == {"$ref": "#/components/responses/UiCursorError"}
    params = _params(get)
    assert list(params) == ["thread_id", "run_id", "after", "Last-Event-ID", "access_token"]
    cursor = {"$ref": "#/components/schemas/AiSdkCursor"}
    assert params["after"]["schema"] == params["Last-Event-ID"]["schema"] == cursor
    assert "wins" in params["Last-Event-ID"]["description"]
    pattern = doc["components"]["schemas"]["AiSdkCursor"]["pattern"]
    for good in ("1:2:3", "1:2", "0:0", "007:1:00"):
        assert re.search(pattern, good), good
    for bad in ("1", "1:2:3:4", "a:1", "1:2:", "1-2", " 1:2"):
        assert not re.search(pattern, bad), bad
    text = get["description"]
    for phrase in (
        "`<epoch>:<offset>:<K>`",
        "data: [DONE]",
        "data-gateway-epoch-restarted",
        '"type": "error"',
        "uiRunFrames",
        "`<seq>:<k>`",
        "seed rule 31",
    ):
        assert phrase in text, phrase
    # The reconnect route is the seed's uiAiSdkReconnect: same path, operation, 200 and
    # 204 texts, 4XX; it never answers 404 (a chat the caller may not read is 204).
    theirs = seed["paths"][AI_SDK_RECONNECT]["get"]
    assert reconnect["operationId"] == theirs["operationId"] == "uiAiSdkReconnect"
    assert reconnect["responses"]["200"]["description"] == theirs["responses"]["200"]["description"]
    assert reconnect["responses"]["204"]["description"].startswith(
        theirs["responses"]["204"]["description"]
    )
    assert "content" not in reconnect["responses"]["204"]
    assert reconnect["responses"]["4XX"] == theirs["responses"]["4XX"]
    assert _statuses(reconnect) == {
        "400": ["invalid_request"],
        **{s: c for s, c in stream.items() if s != "404"},
    }
    params = _params(reconnect)
    assert list(params) == ["agent", "chat_id"]
    assert params["chat_id"]["schema"] == {"$ref": "#/components/schemas/ChatKey"}
    chat_key = doc["components"]["schemas"]["ChatKey"]["pattern"]
    assert chat_key == gen.RUN_PART_PATTERN  # a chat id is a thread id
    for name in ("UiCursorError", "UiReconnectError"):
        assert doc["components"]["responses"][name] == seed["components"]["responses"][name]
    for phrase in ("thread id", "latest run", "204", "compact replay", "`{agent}` is not"):
        assert phrase in reconnect["description"], phrase


def test_the_ai_sdk_chunk_schema_is_the_seeds(registry: Registry[Any]) -> None:
    check = component(registry, "ai-sdk-ui")
    check.validate({"type": "text-delta", "id": "m1", "delta": "hi"})
    check.validate({"type": "data-gateway-epoch-restarted", "data": {"cursor": "1:0"}})
    check.validate({"type": "error", "errorText": "unavailable: redis unavailable"})
    assert not check.is_valid({"type": "text-delta", "id": "m1"})
    assert not check.is_valid({"type": "error"})
