"""The gateway's OpenAPI document (gateway/schemas/gateway.openapi.json).

Pure unit tests: the committed document is what scripts/gen_openapi.py generates, it is
a valid OpenAPI 3.1 document whose every $ref resolves, the team-feed GET says what the
seed says (apart from the documented additions), and its schemas accept and reject
what the seed's do.
"""

from __future__ import annotations

import copy
import importlib.util
import json
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
from gateway.validate import MAX_BATCH_ITEMS

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "gateway" / "schemas" / "gateway.openapi.json"
SEED = ROOT / "gateway" / "schemas" / "threads-host-api.openapi.json"
TEAM_EVENTS = "/v1/teams/{team}/events"
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


def test_team_error_responses(doc: dict[str, Any]) -> None:
    responses = doc["paths"][TEAM_EVENTS]["get"]["responses"]
    assert _codes(responses["400"]) == ["invalid_cursor"]
    assert _codes(responses["401"]) == ["unauthenticated"]
    assert _codes(responses["404"]) == ["not_found"]
    assert _codes(responses["429"]) == ["rate_limited"]
    publish = doc["paths"][TEAM_EVENTS]["post"]["responses"]
    expected = {
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
    assert {status: _codes(r) for status, r in publish.items() if status != "200"} == {
        status: [code] for status, code in expected.items()
    }
    codes = doc["paths"][TEAM_EVENTS]["post"]["x-error-codes"]
    assert set(codes) == set(expected.values()) - {"internal"}


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
    assert seen == 17  # GET: 400 401 404 429 4XX 500 503; POST: ten


def test_gateway_error_codes_are_the_additions(doc: dict[str, Any], seed: dict[str, Any]) -> None:
    schemas = seed["components"]["schemas"]
    seed_codes = set(schemas["events_ErrorCode"]["enum"]) | set(schemas["api_ApiErrorCode"]["enum"])
    ours = doc["components"]["schemas"]["GatewayErrorCode"]["enum"]
    assert set(ours) == {str(code) for code in ErrorCode} - seed_codes
    assert not set(ours) & seed_codes


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
