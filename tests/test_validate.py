"""Unit tests of gateway.validate: team publish bodies against the seed schemas (D4)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from gateway import validate as v
from gateway.errors import InvalidRequest
from gateway.validate import (
    MAX_BATCH_ITEMS,
    TeamPublishItem,
    validate_event,
    validate_source,
    validate_team_publish,
)

# --------------------------------------------------------------------------- factory

TENANT = "acme"
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def uuid(n: int) -> str:
    """A lowercase UUIDv7-shaped id, distinct per n."""
    return f"0190f5a2-7c1e-7b3d-8a4f-{n:012x}"


TEAM = uuid(0x7EA)
OTHER_TEAM = uuid(0x7EB)


def member(name: str = "lead", *, team: str = TEAM, tenant: str = TENANT) -> dict[str, Any]:
    return {"tenant": tenant, "team": team, "name": name, "generation": 1}


def principal(tenant: str = TENANT) -> dict[str, Any]:
    return {"issuer": "api", "tenant": tenant, "subject": "alice"}


def provenance() -> dict[str, Any]:
    return {
        "principal": principal(),
        "root_request": {"thread_id": uuid(0xA1), "event_id": uuid(0xA2)},
        "via": [member()],
    }


def event(
    type_: str, data: dict[str, Any], *, actor: dict[str, Any] | None = None, n: int = 1
) -> dict[str, Any]:
    """A complete envelope around ``data``."""
    return {
        "seq": n,
        "event_id": uuid(0x1000 + n),
        "thread_id": uuid(0x2),
        "branch_id": uuid(0x3),
        "epoch": 1,
        "type": type_,
        "type_version": 1,
        "time": 1_760_000_000_000 + n,
        "actor": actor if actor is not None else {"kind": "host"},
        "prev_hash": SHA,
        "critical": True,
        "data": data,
    }


def team_opened_lead(*, kind: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {"team": TEAM, "lead": member(), "lead_thread_id": uuid(0x4)}
    if kind:
        data["kind"] = "lead"
    return event("team_opened", data)


def team_opened_host() -> dict[str, Any]:
    return event("team_opened", {"team": TEAM, "kind": "host", "tenant": TENANT})


def team_message(text: str = "please review PR 12") -> dict[str, Any]:
    return event("team_message", {"message_id": "msg-1", "from": "lead", "to": "*", "text": text})


def team_message_ref() -> dict[str, Any]:
    ref = {"sha256": SHA, "bytes": 123_456, "media_type": "text/markdown"}
    return event("team_message", {"message_id": "msg-2", "from": "lead", "to": "*", "ref": ref})


def team_task_created() -> dict[str, Any]:
    data = {
        "task_id": "task-2",
        "subject": "Write the release notes",
        "blocked_by": ["task-1"],
        "description": "After the changelog is merged.",
    }
    return event("team_task_created", data)


def team_task_claimed() -> dict[str, Any]:
    return event("team_task_claimed", {"task_id": "task-2", "member": "writer-1"})


def team_task_updated() -> dict[str, Any]:
    return event("team_task_updated", {"task_id": "task-2", "status": "completed"})


def member_started() -> dict[str, Any]:
    data = {
        "member": member("writer-1"),
        "agent": "writer",
        "config_hash": SHA,
        "thread_id": uuid(0x5),
        "parent": {
            "thread_id": uuid(0x4),
            "branch_id": uuid(0x6),
            "event_id": uuid(0x7),
            "relation": "team_member",
        },
        "provenance": provenance(),
        "label": "Release writer",
    }
    return event("member_started", data)


def member_started_host() -> dict[str, Any]:
    data = {
        "member": member("concierge"),
        "agent": "concierge",
        "config_hash": SHA,
        "thread_id": uuid(0x8),
        "host_member": True,
    }
    return event("member_started", data)


def member_idle() -> dict[str, Any]:
    result = {"member": member("writer-1"), "status": "completed", "output": {"text": "done"}}
    return event("member_idle", {"result": result})


def member_ended() -> dict[str, Any]:
    return event("member_ended", {"result": {"member": member("writer-1"), "status": "cancelled"}})


def operator_request() -> dict[str, Any]:
    data = {
        "request_id": uuid(0x9),
        "op": "send",
        "principal": principal(),
        "body_hash": SHA,
        "provenance": provenance(),
        "idempotency_key": "retry-1",
    }
    return event("operator_request", data, actor={"kind": "user", "principal": principal()})


def operator_refused() -> dict[str, Any]:
    return event("operator_refused", {"request_id": uuid(0x9), "code": "mailbox_full"})


def wait_started() -> dict[str, Any]:
    data = {
        "wait_id": f"{uuid(0xA)}:w1",
        "members": [member("writer-1")],
        "mode": "all",
        "deadline": 1_760_000_060_000,
    }
    return event("wait_started", data)


def mail_refused() -> dict[str, Any]:
    return event("mail_refused", {"mail_id": f"{uuid(0xB)}:m1", "code": "stale_member"})


def output_validated() -> dict[str, Any]:
    # Not a team event, but its value is events_JsonValue, the one recursive schema.
    data = {
        "source_event_id": uuid(0xC),
        "schema_sha256": SHA,
        "outcome": "accepted",
        "value": {"title": "notes", "items": [1, 2.5, None, {"deep": [True, "x"]}]},
    }
    return event("output_validated", data)


VALID_EVENTS: dict[str, Callable[[], dict[str, Any]]] = {
    "team_opened_lead": team_opened_lead,
    "team_opened_lead_no_kind": lambda: team_opened_lead(kind=False),
    "team_opened_host": team_opened_host,
    "team_message": team_message,
    "team_message_ref": team_message_ref,
    "team_task_created": team_task_created,
    "team_task_claimed": team_task_claimed,
    "team_task_updated": team_task_updated,
    "member_started": member_started,
    "member_started_host": member_started_host,
    "member_idle": member_idle,
    "member_ended": member_ended,
    "operator_request": operator_request,
    "operator_refused": operator_refused,
    "wait_started": wait_started,
    "mail_refused": mail_refused,
    "output_validated": output_validated,
}


def member_source(**kwargs: Any) -> dict[str, Any]:
    return {"kind": "member", "member": member(**kwargs)}


def operator_source(tenant: str = TENANT) -> dict[str, Any]:
    return {"kind": "operator", "principal": principal(tenant), "request": uuid(0x9)}


TEAM_SOURCE: dict[str, Any] = {"kind": "team"}


def item(ev: object = None, source: object = None) -> dict[str, Any]:
    return {
        "source": source if source is not None else member_source(),
        "event": ev if ev is not None else team_message(),
    }


def publish_error(body: object, *, tenant: str = TENANT, team: str = TEAM) -> str:
    with pytest.raises(InvalidRequest) as caught:
        validate_team_publish(body, tenant=tenant, team=team)
    assert caught.value.code == "invalid_request"
    return caught.value.message


def event_error(ev: object) -> str:
    with pytest.raises(InvalidRequest) as caught:
        validate_event(ev)
    return caught.value.message


# Reference validators: the whole schema, refs resolved through the registry, no dispatch
# and no bundling. Slow (the 73-way oneOf), which is why the module does not use them.
_URI = v._SCHEMA_URI


def full_validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(
        {"$ref": f"{_URI}#/components/schemas/{name}"}, registry=v._registry()
    )


FULL_EVENT = full_validator("events_Event")
FULL_SOURCE = full_validator("TeamSource")


def ours_accepts_event(ev: object) -> bool:
    try:
        validate_event(ev)
    except InvalidRequest:
        return False
    return True


# --------------------------------------------------------------------------- valid bodies


@pytest.mark.parametrize("name", sorted(VALID_EVENTS))
def test_factory_events_are_valid_for_both_validators(name: str) -> None:
    ev = VALID_EVENTS[name]()
    assert FULL_EVENT.is_valid(ev), list(FULL_EVENT.iter_errors(ev))
    validate_event(ev)


def test_single_object_body() -> None:
    ev, source = team_message(), member_source()
    items = validate_team_publish({"source": source, "event": ev}, tenant=TENANT, team=TEAM)
    assert items == [
        TeamPublishItem(event_id=ev["event_id"], source=source, event=ev, host_opening=False)
    ]
    assert items[0].event is ev and items[0].source is source


def test_array_body_keeps_order_and_flags_the_host_opening() -> None:
    events = [team_opened_host(), team_opened_lead(), team_opened_lead(kind=False), team_message()]
    for n, ev in enumerate(events):
        ev["event_id"] = uuid(0x500 + n)
    body = [item(ev, TEAM_SOURCE) for ev in events]
    items = validate_team_publish(body, tenant=TENANT, team=TEAM)
    assert [i.event_id for i in items] == [uuid(0x500 + n) for n in range(4)]
    assert [i.host_opening for i in items] == [True, False, False, False]
    assert all(i.source == TEAM_SOURCE for i in items)


@pytest.mark.parametrize(
    "source", [member_source(), operator_source(), TEAM_SOURCE], ids=["member", "operator", "team"]
)
def test_every_source_kind_is_accepted(source: dict[str, Any]) -> None:
    validate_source(source, tenant=TENANT, team=TEAM)
    assert len(validate_team_publish([item(source=source)], tenant=TENANT, team=TEAM)) == 1


def test_operator_source_may_name_another_team_member_source_may_not() -> None:
    # Only a member's team is tied to the path; an operator's principal has no team.
    validate_source(operator_source(), tenant=TENANT, team=OTHER_TEAM)
    validate_source(TEAM_SOURCE, tenant="someone-else", team=OTHER_TEAM)
    with pytest.raises(InvalidRequest):
        validate_source(member_source(), tenant=TENANT, team=OTHER_TEAM)


def test_batch_of_exactly_the_limit_is_accepted() -> None:
    body = [item()] * MAX_BATCH_ITEMS
    assert len(validate_team_publish(body, tenant=TENANT, team=TEAM)) == MAX_BATCH_ITEMS


# --------------------------------------------------------------------------- body shape


def test_batch_limit_is_1000() -> None:
    assert MAX_BATCH_ITEMS == 1000


@pytest.mark.parametrize(
    ("body", "kind"), [("text", "string"), (5, "integer"), (None, "null"), (True, "boolean")]
)
def test_body_must_be_object_or_array(body: object, kind: str) -> None:
    assert publish_error(body) == f"body: must be an object or an array of objects, not {kind}"


def test_empty_array_is_rejected() -> None:
    assert publish_error([]) == "body: the array is empty; send at least one item"


def test_too_many_items_are_rejected() -> None:
    message = publish_error([item()] * (MAX_BATCH_ITEMS + 1))
    assert message == "body: the array has 1001 items, more than the limit of 1000"


def test_array_item_must_be_an_object() -> None:
    message = publish_error([item(), "nope"])
    assert message == "item 1: must be an object with the keys 'source' and 'event', not string"


def test_unknown_item_key_is_named() -> None:
    assert publish_error({**item(), "extra": 1}) == "item 0: unknown field 'extra'"


@pytest.mark.parametrize("key", ["source", "event"])
def test_missing_item_key_is_named(key: str) -> None:
    body = item()
    del body[key]
    assert publish_error([item(), body]) == f"item 1: {key!r} is a required property"


def test_first_failing_item_wins() -> None:
    bad_text = team_message()
    bad_text["data"]["text"] = 5
    unknown = {**team_message(), "foo": 1}
    message = publish_error([item(), item(bad_text), item(unknown)])
    assert message == "item 1: event.data.text: 5 is not of type 'string'"
    message = publish_error([item(), item(), item(bad_text)])
    assert message == "item 2: event.data.text: 5 is not of type 'string'"


# --------------------------------------------------------------------------- event errors


def test_unknown_envelope_field() -> None:
    assert publish_error(item({**team_message(), "foo": 1})) == "item 0: event: unknown field 'foo'"


def test_unknown_data_field() -> None:
    ev = team_task_created()
    ev["data"]["colour"] = "red"
    assert publish_error(item(ev)) == "item 0: event.data: unknown field 'colour'"


def test_several_unknown_fields_are_listed() -> None:
    ev = {**team_message(), "foo": 1, "bar": 2}
    assert event_error(ev) == "event: unknown fields 'foo', 'bar'"


def test_wrong_type_version() -> None:
    ev = team_message()
    ev["type_version"] = 2
    assert publish_error(item(ev)) == "item 0: event.type_version: 1 was expected"


def test_wrong_critical_flag() -> None:
    ev = team_message()
    ev["critical"] = False
    assert event_error(ev) == "event.critical: True was expected"


def test_missing_envelope_field() -> None:
    ev = team_message()
    del ev["prev_hash"]
    assert event_error(ev) == "event: 'prev_hash' is a required property"


def test_envelope_pattern() -> None:
    ev = team_message()
    ev["event_id"] = ev["event_id"].upper()
    assert event_error(ev).startswith(f"event.event_id: {ev['event_id']!r} does not match ")


def test_indexed_path_into_an_array() -> None:
    ev = team_task_created()
    ev["data"]["blocked_by"] = ["task-1", ""]
    assert event_error(ev) == "event.data.blocked_by[1]: '' should be non-empty"


def test_nested_member_ref_path() -> None:
    ev = wait_started()
    ev["data"]["members"][0]["generation"] = 0
    assert event_error(ev) == "event.data.members[0].generation: 0 is less than the minimum of 1"


def test_actor_principal_required_for_operator_request() -> None:
    ev = operator_request()
    ev["actor"] = {"kind": "user"}
    assert event_error(ev) == "event.actor: 'principal' is a required property"


@pytest.mark.parametrize(
    ("ev", "expected"),
    [
        (0, "event.type: the event must be an object, not integer"),
        ([], "event.type: the event must be an object, not array"),
        ({}, "event.type: 'type' is a required property"),
        ({"type": 5}, "event.type: 5 is not of type 'string'"),
        ({"type": "team_party"}, "event.type: 'team_party' is not a known event type"),
    ],
)
def test_event_type_problems_name_event_type(ev: object, expected: str) -> None:
    assert event_error(ev) == expected
    assert publish_error(item(ev)) == f"item 0: {expected}"


def test_text_xor_ref() -> None:
    both = team_message()
    both["data"]["ref"] = team_message_ref()["data"]["ref"]
    assert event_error(both) == "event.data: exactly one of 'text', 'ref' must be present"
    neither = team_message()
    del neither["data"]["text"]
    assert event_error(neither) == "event.data: exactly one of 'text', 'ref' must be present"


def test_team_opened_conditionals() -> None:
    host_with_lead = team_opened_host()
    host_with_lead["data"]["lead"] = member()
    assert event_error(host_with_lead) == "event.data: field 'lead' is not allowed here"
    host_without_tenant = team_opened_host()
    del host_without_tenant["data"]["tenant"]
    assert event_error(host_without_tenant) == "event.data: 'tenant' is a required property"
    lead_with_tenant = team_opened_lead()
    lead_with_tenant["data"]["tenant"] = TENANT
    assert event_error(lead_with_tenant) == "event.data: field 'tenant' is not allowed here"
    lead_without_thread = team_opened_lead(kind=False)
    del lead_without_thread["data"]["lead_thread_id"]
    assert event_error(lead_without_thread) == "event.data: 'lead_thread_id' is a required property"


def test_member_started_needs_parent_unless_host_member() -> None:
    ev = member_started()
    del ev["data"]["parent"]
    assert event_error(ev) == "event.data: 'parent' is a required property"
    host = member_started_host()
    host["data"]["label"] = "not for host members"
    assert event_error(host) == "event.data: field 'label' is not allowed here"


def test_discriminated_union_reports_the_meant_branch() -> None:
    ev = member_ended()
    ev["data"]["result"]["reason"] = "bored"
    assert event_error(ev) == "event.data.result: unknown field 'reason'"


def test_long_values_are_truncated() -> None:
    ev = team_message()
    ev["prev_hash"] = "x" * 5000
    ev["data"][("k" * 5000)] = 1
    message = event_error(ev)
    assert message.startswith("event.prev_hash: 'xxxx")
    assert "..." in message and len(message) < 300
    ev["prev_hash"] = SHA
    message = event_error(ev)
    assert message.startswith("event.data: unknown field 'kkkk")
    assert len(message) < 300


# --------------------------------------------------------------------------- source errors


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            member_source(tenant="globex"),
            "source.member.tenant: does not match the caller's tenant",
        ),
        (member_source(team=OTHER_TEAM), "source.member.team: does not match the team in the path"),
        (operator_source("globex"), "source.principal.tenant: does not match the caller's tenant"),
    ],
    ids=["member-tenant", "member-team", "operator-tenant"],
)
def test_source_consistency(source: dict[str, Any], expected: str) -> None:
    assert publish_error([item(), item(source=source)]) == f"item 1: {expected}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ([], "source: must be an object, not array"),
        ({}, "source.kind: 'kind' is a required property"),
        ({"kind": "robot"}, "source.kind: 'robot' is not one of ['member', 'operator', 'team']"),
        ({"kind": "member"}, "source: 'member' is a required property"),
        (
            {"kind": "operator", "principal": principal()},
            "source: 'request' is a required property",
        ),
        ({"kind": "team", "member": member()}, "source: unknown field 'member'"),
        (
            {"kind": "member", "member": {**member(), "team": "TEAM"}},
            "source.member.team: 'TEAM' does not match "
            "'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'",
        ),
        (
            {"kind": "operator", "principal": {**principal(), "x": 1}, "request": uuid(1)},
            "source.principal: unknown field 'x'",
        ),
    ],
)
def test_source_schema(source: object, expected: str) -> None:
    assert publish_error(item(source=source)) == f"item 0: {expected}"


def test_source_is_checked_before_event() -> None:
    message = publish_error(item({"type": "nope"}, member_source(team=OTHER_TEAM)))
    assert message == "item 0: source.member.team: does not match the team in the path"


# --------------------------------------------------------------------------- equivalence


def _edge(
    fn: Callable[[dict[str, Any]], object], base: Callable[[], dict[str, Any]] = team_message
) -> dict[str, Any]:
    ev = base()
    fn(ev)
    return ev


EDGE_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("float seq 1.0 is an integer in JSON Schema", _edge(lambda e: e.update(seq=1.0)), True),
    ("bool is not an integer", _edge(lambda e: e.update(seq=True)), False),
    ("seq 0", _edge(lambda e: e.update(seq=0)), False),
    ("seq 2**53-1", _edge(lambda e: e.update(seq=2**53 - 1)), True),
    ("seq 2**53", _edge(lambda e: e.update(seq=2**53)), False),
    ("type with a valid name, wrong data", _edge(lambda e: e.update(type="heartbeat")), False),
    ("empty text is fine", _edge(lambda e: e["data"].update(text="")), True),
    ("empty from is not", _edge(lambda e: e["data"].update({"from": ""})), False),
    ("actor principal allowed", _edge(lambda e: e["actor"].update(principal=principal())), True),
    ("unknown actor kind", _edge(lambda e: e["actor"].update(kind="robot")), False),
    (
        "kind lead with tenant",
        _edge(lambda e: e["data"].update(tenant=TENANT), team_opened_lead),
        False,
    ),
    ("host kind missing tenant", _edge(lambda e: e["data"].pop("tenant"), team_opened_host), False),
    (
        "host member with restart_of",
        _edge(lambda e: e["data"].update(restart_of=1), member_started_host),
        True,
    ),
    (
        "restart_of without host_member",
        _edge(lambda e: e["data"].update(restart_of=1), member_started),
        False,
    ),
    (
        "host_member false is not allowed",
        _edge(lambda e: e["data"].update(host_member=False), member_started_host),
        False,
    ),
    ("wait mode 2", _edge(lambda e: e["data"].update(mode=2), wait_started), True),
    ("wait mode 0", _edge(lambda e: e["data"].update(mode=0), wait_started), False),
    ("no members", _edge(lambda e: e["data"].update(members=[]), wait_started), False),
    (
        "operator_refused detail only for invalid_definition",
        _edge(lambda e: e["data"].update(detail={}), operator_refused),
        False,
    ),
]


@pytest.mark.parametrize(
    ("ev", "valid"), [(ev, valid) for _, ev, valid in EDGE_CASES], ids=[n for n, _, _ in EDGE_CASES]
)
def test_edge_cases_agree_with_the_full_schema(ev: dict[str, Any], valid: bool) -> None:
    assert FULL_EVENT.is_valid(ev) is valid
    assert ours_accepts_event(ev) is valid


def test_recursive_schema_is_followed_all_the_way_down() -> None:
    # events_JsonValue refers to itself; the bundled schema leaves that ref to the registry.
    # A tuple is no JSON value at all (jsonschema's array is a list), three levels down.
    # (Decoded JSON never holds one, so the public path, whose fast validator reads a
    # tuple as an array, is not asked; the explaining validator is.)
    ev = output_validated()
    ev["data"]["value"]["items"][3]["deep"] = (1, 2)
    assert not FULL_EVENT.is_valid(ev)
    with pytest.raises(InvalidRequest) as caught:
        v._check(v._event_validator("output_validated"), ev, "event")
    assert caught.value.message.startswith(
        "event.data.value.items[3].deep: (1, 2) is not valid under"
    )


def test_dispatch_covers_every_branch_of_events_event() -> None:
    branches = v._document()["components"]["schemas"]["events_Event"]["allOf"][1]["oneOf"]
    assert len(branches) == 73
    types = v._split("events_Event", "type")
    assert len(types) == 73
    assert {"team_opened", "team_message", "operator_request", "thread_started"} <= set(types)
    for name in types:  # every per-type schema bundles and is a valid 2020-12 schema
        Draft202012Validator.check_schema(v._event_validator(name).schema)


_VALUES = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        1,
        2,
        -1,
        1.5,
        2**53,
        "",
        "x",
        "*",
        "host",
        "lead",
        "completed",
        SHA,
        uuid(0xFF),
        uuid(0xFF).upper(),
        [],
        ["x"],
        {},
        {"kind": "host"},
        {"text": "hi"},
        member(),
        principal(),
    ]
).map(copy.deepcopy)  # values are inserted, then maybe mutated: never share them
_KEYS = st.sampled_from(
    ["kind", "tenant", "lead", "text", "ref", "host_member", "label", "principal", "foo", "seq"]
)
_TYPE_NAMES = sorted(v._split("events_Event", "type"))


def _containers(node: Any) -> list[Any]:
    found = [node] if isinstance(node, dict | list) else []
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in children:
        found += _containers(child)
    return found


@st.composite
def mutated_events(draw: st.DrawFn) -> object:
    ev = copy.deepcopy(VALID_EVENTS[draw(st.sampled_from(sorted(VALID_EVENTS)))]())
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["set", "delete", "add", "retype", "replace"]))
        target = draw(st.sampled_from(_containers(ev)))
        if op == "retype":
            ev["type"] = draw(st.sampled_from([*_TYPE_NAMES, "nope"]))
        elif op == "replace":
            return draw(st.sampled_from([[], "event", 5, {"type": "team_message"}]))
        elif isinstance(target, list):
            if op == "delete" and target:
                target.pop(draw(st.integers(0, len(target) - 1)))
            else:
                target.append(draw(_VALUES))
        elif op == "add":
            target[draw(_KEYS)] = draw(_VALUES)
        elif target:
            key = draw(st.sampled_from(sorted(target)))
            if op == "delete":
                del target[key]
            else:
                target[key] = draw(_VALUES)
    return ev


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_events())
def test_dispatch_is_equivalent_to_the_full_event_schema(ev: object) -> None:
    assert ours_accepts_event(ev) == FULL_EVENT.is_valid(ev)


@settings(max_examples=150, deadline=None)
@given(mutated_events())
def test_bundled_validator_reports_the_same_errors_as_refs(ev: object) -> None:
    # The bundled per-type schema against the per-type schema resolved through the registry.
    if not isinstance(ev, dict) or ev.get("type") not in _TYPE_NAMES:
        return
    type_name = ev["type"]
    branch = f"{_URI}#/components/schemas/events_ev_{type_name}"
    envelope = f"{_URI}#/components/schemas/events_Envelope"
    by_ref = Draft202012Validator(
        {"allOf": [{"$ref": envelope}, {"$ref": branch}]}, registry=v._registry()
    )

    def errors(validator: Draft202012Validator) -> list[tuple[list[Any], str]]:
        return sorted((list(e.absolute_path), e.message) for e in validator.iter_errors(ev))

    assert errors(v._event_validator(type_name)) == errors(by_ref)


@st.composite
def mutated_sources(draw: st.DrawFn) -> dict[str, Any]:
    base = draw(st.sampled_from([member_source, operator_source, lambda: dict(TEAM_SOURCE)]))
    source: dict[str, Any] = base()
    for _ in range(draw(st.integers(0, 2))):
        target = draw(st.sampled_from([c for c in _containers(source) if isinstance(c, dict)]))
        op = draw(st.sampled_from(["set", "delete", "add"]))
        if op == "add" or not target:
            target[draw(_KEYS)] = draw(_VALUES)
        elif op == "delete":
            del target[draw(st.sampled_from(sorted(target)))]
        else:
            target[draw(st.sampled_from(sorted(target)))] = draw(_VALUES)
    return source


@settings(max_examples=150, deadline=None)
@given(mutated_sources())
def test_source_dispatch_is_equivalent_to_team_source(source: dict[str, Any]) -> None:
    try:
        validate_source(source, tenant=TENANT, team=TEAM)
        ours = True
    except InvalidRequest as exc:
        # A schema-valid source that only disagrees with the caller or path is valid here.
        ours = exc.message.endswith(("does not match the caller's tenant", "in the path"))
    assert ours == FULL_SOURCE.is_valid(source)


@settings(max_examples=150, deadline=None)
@given(mutated_sources())
def test_fast_source_validator_agrees_with_the_explaining_one(source: dict[str, Any]) -> None:
    kind = source.get("kind")
    if not isinstance(kind, str) or kind not in ("member", "operator", "team"):
        return
    fast = v._fast_source_validator(kind).is_valid(source)
    assert fast == v._source_validator(kind).is_valid(source)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_events())
def test_fast_validator_agrees_with_the_explaining_one(ev: object) -> None:
    # Valid events are accepted by jsonschema-rs alone; both must always agree.
    if not isinstance(ev, dict) or ev.get("type") not in _TYPE_NAMES:
        return
    name = ev["type"]
    assert v._fast_event_validator(name).is_valid(ev) == v._event_validator(name).is_valid(ev)


@pytest.mark.parametrize(
    ("ev", "valid"), [(ev, valid) for _, ev, valid in EDGE_CASES], ids=[n for n, _, _ in EDGE_CASES]
)
def test_fast_validator_agrees_on_edge_cases(ev: dict[str, Any], valid: bool) -> None:
    assert v._fast_event_validator(ev["type"]).is_valid(ev) is valid
