"""A2UI in: validation, the surface registry, the AG-UI mapping and the surface fold."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.agui.events import strict_check
from gateway.agui.fold import RunFold
from gateway.dialects import a2ui
from gateway.dialects.a2ui_surface import Surfaces, compact
from gateway.errors import InvalidRequest
from tests.dialects.a2ui_runs import (
    ALL_STREAMS,
    CATALOG,
    REFUSED,
    REFUSED_AT,
    SURFACES,
    components,
    create,
    data,
    delete,
    text,
)

Message = dict[str, Any]

# --------------------------------------------------------------------------- validation

VALID: list[tuple[str, Message]] = [
    ("createSurface", create("s")),
    ("updateComponents", components("s", text("root", "hi"), {"id": "x", "component": "Any"})),
    (
        "updateComponents, catalogue fields pass",
        components("s", {"id": "root", "component": "Chart", "series": [{"y": 1}], "style": None}),
    ),
    ("updateDataModel, whole model", data("s", value={"a": 1})),
    ("updateDataModel, replace at a path", data("s", "/a", 2, op="replace")),
    ("updateDataModel, add", data("s", "/list/0", "x", op="add")),
    ("updateDataModel, remove", data("s", "/a", op="remove")),
    ("updateDataModel, a null value", data("s", "/a", None)),
    ("deleteSurface", delete("s")),
]


@pytest.mark.parametrize(("case", "message"), VALID, ids=[c[0] for c in VALID])
def test_a_valid_message_of_each_operation_passes(case: str, message: Message) -> None:
    assert a2ui.check_message(message) is message


def _updated(message: Message, **inner: Any) -> Message:
    out = copy.deepcopy(message)
    (body,) = out.values()
    for key, value in inner.items():
        if value is ...:
            del body[key]
        else:
            body[key] = value
    return out


# (case, message, the start of the error message)
INVALID: list[tuple[str, Any, str]] = [
    ("not an object", ["createSurface"], "message: an A2UI message is an object, not array"),
    ("no operation", {}, "message: exactly one of createSurface, updateComponents"),
    ("two operations", {**create("s"), **delete("s")}, "message: exactly one of"),
    ("an unknown key beside the operation", {**create("s"), "version": "v0.9"}, "message.version"),
    (
        "createSurface without catalogId",
        _updated(create("s"), catalogId=...),
        "message.createSurface:",
    ),
    (
        "createSurface with an unknown key",
        _updated(create("s"), theme={}),
        "message.createSurface:",
    ),
    (
        "surfaceId not a string",
        _updated(delete("s"), surfaceId=1),
        "message.deleteSurface.surfaceId:",
    ),
    (
        "deleteSurface without surfaceId",
        _updated(delete("s"), surfaceId=...),
        "message.deleteSurface:",
    ),
    (
        "no components",
        _updated(components("s", text("r", "x")), components=[]),
        "message.updateComponents.components:",
    ),
    (
        "components not an array",
        _updated(components("s"), components={}),
        "message.updateComponents.components:",
    ),
    (
        "a component without an id",
        components("s", {"component": "Text"}),
        "message.updateComponents.components[0]:",
    ),
    (
        "a component without a type",
        components("s", {"id": "root"}),
        "message.updateComponents.components[0]:",
    ),
    (
        "a component id not a string",
        components("s", {"id": 3, "component": "Text"}),
        "message.updateComponents.components[0].id:",
    ),
    (
        "a component not an object",
        components("s", "root"),
        "message.updateComponents.components[0]:",
    ),
    ("an unknown op", data("s", "/a", 1, op="merge"), "message.updateDataModel.op:"),
    ("path not a string", data("s", 3, 1), "message.updateDataModel.path:"),
    (
        "replace (the default) without a value",
        _updated(data("s", "/a", 1), value=...),
        'message.updateDataModel.value: required by op "replace"',
    ),
    (
        "add without a value",
        _updated(data("s", "/a", 1, op="add"), value=...),
        'message.updateDataModel.value: required by op "add"',
    ),
    (
        "remove with a value",
        _updated(data("s", "/a", op="remove"), value=1),
        'message.updateDataModel.value: not allowed with op "remove"',
    ),
]


@pytest.mark.parametrize(("case", "message", "error"), INVALID, ids=[c[0] for c in INVALID])
def test_an_invalid_message_is_refused_naming_the_field(
    case: str, message: Any, error: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        a2ui.check_message(message)
    assert caught.value.message.startswith(error), caught.value.message


# (case, the live surfaces, the messages, the error or None)
REGISTRY: list[tuple[str, set[str], list[Message], str | None]] = [
    (
        "create, then update and delete",
        set(),
        [create("s"), components("s", text("root", "x")), delete("s")],
        None,
    ),
    ("an update of a live surface", {"s"}, [data("s", value=1)], None),
    ("create again after a delete", {"s"}, [delete("s"), create("s")], None),
    (
        "an update before its create",
        set(),
        [components("s", text("root", "x"))],
        "[0].updateComponents.surfaceId: no surface 's': createSurface must come",
    ),
    (
        "a data update before its create",
        {"t"},
        [data("s", value=1)],
        "[0].updateDataModel.surfaceId: no surface 's'",
    ),
    (
        "a delete before its create",
        set(),
        [create("t"), delete("s")],
        "[1].deleteSurface.surfaceId: no surface 's'",
    ),
    (
        "an update after its delete",
        set(),
        [create("s"), delete("s"), data("s", value=1)],
        "[2].updateDataModel.surfaceId: no surface",
    ),
    (
        "a create of a live surface",
        {"s"},
        [create("s")],
        "[0].createSurface.surfaceId: the surface 's' already exists",
    ),
]


@pytest.mark.parametrize(
    ("case", "live", "messages", "error"), REGISTRY, ids=[c[0] for c in REGISTRY]
)
def test_the_surface_registry(
    case: str, live: set[str], messages: list[Message], error: str | None
) -> None:
    if error is None:
        assert a2ui.check_body(messages, live=frozenset(live)) == messages
        return
    with pytest.raises(InvalidRequest) as caught:
        a2ui.check_body(messages, live=frozenset(live))
    assert caught.value.message.startswith(error), caught.value.message


def test_a_body_is_one_message_or_an_array() -> None:
    one = create("s")
    assert a2ui.check_body(one, live=frozenset()) == [one]
    with pytest.raises(InvalidRequest, match=r"^body: the array is empty"):
        a2ui.check_body([], live=frozenset())
    with pytest.raises(InvalidRequest, match=r"^body: at most 1000 messages"):
        a2ui.check_body([one] * 1001, live=frozenset())
    with pytest.raises(InvalidRequest, match=r"^\[1\]: exactly one of"):
        a2ui.check_body([one, {}], live=frozenset())
    with pytest.raises(InvalidRequest, match=r"^message\.createSurface\.surfaceId: the surface"):
        a2ui.check_body(one, live=frozenset({"s"}))


def test_the_registry_returns_the_surfaces_live_after_the_messages() -> None:
    messages = [create("a"), create("b"), delete("a")]
    assert a2ui.check_surfaces(messages, {"c"}, ["[0]", "[1]", "[2]"]) == {"b", "c"}


# --------------------------------------------------------------------------- the mapping

MAPPING: list[tuple[Message, Message]] = [
    (
        create("s"),
        {
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": "a2ui-surface-s",
            "activityType": "a2ui-surface",
            "content": {"a2ui_operations": [create("s")]},
        },
    ),
    *[
        (
            message,
            {
                "type": "ACTIVITY_DELTA",
                "messageId": "a2ui-surface-s",
                "activityType": "a2ui-surface",
                "patch": [{"op": "add", "path": "/a2ui_operations/-", "value": message}],
            },
        )
        for message in (components("s", text("root", "x")), data("s", "/a", 1), delete("s"))
    ],
]


@pytest.mark.parametrize(("message", "expected"), MAPPING, ids=a2ui.OPERATIONS)
def test_each_operation_maps_to_its_surfaces_activity(message: Message, expected: Message) -> None:
    event = a2ui.to_agui(message)
    assert event == expected
    strict_check(event, "mapping")
    assert a2ui.messages_of(event) == [message]


def test_only_a2ui_activities_carry_messages() -> None:
    assert a2ui.messages_of({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"}) == []
    other = {**a2ui.to_agui(create("s")), "activityType": "sparktide.status"}
    assert a2ui.messages_of(other) == []
    foreign = {
        "type": "ACTIVITY_DELTA",
        "messageId": "a2ui-surface-s",
        "activityType": "a2ui-surface",
        "patch": [
            {"op": "replace", "path": "/a2ui_operations/0", "value": create("s")},
            {"op": "add", "path": "/a2ui_operations/-", "value": delete("s")},
        ],
    }
    assert a2ui.messages_of(foreign) == [delete("s")]


def test_publishing_bounds_each_surfaces_list_by_rebuilding_it() -> None:
    messages = [create("s"), *(data("s", "/n", i) for i in range(6)), create("t"), delete("s")]
    events = a2ui.derive(messages, RunFold(), limit=4)
    shown = [e["type"] + ("+rebuilt" if "metadata" in e else "") for e in events]
    assert shown == [
        "ACTIVITY_SNAPSHOT",
        *["ACTIVITY_DELTA"] * 3,
        "ACTIVITY_SNAPSHOT+rebuilt",
        "ACTIVITY_DELTA",
        "ACTIVITY_DELTA",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_SNAPSHOT+rebuilt",
    ]
    assert events[-1]["content"] == {"a2ui_operations": []}
    rebuilt = events[4]
    assert rebuilt["content"] == {"a2ui_operations": [create("s"), data("s", "/", {"n": 3})]}
    assert rebuilt["metadata"] == {"a2ui": {"rebuilt": "s"}}
    assert a2ui.messages_of(rebuilt) == [delete("s"), create("s"), data("s", "/", {"n": 3})]
    fold = RunFold()
    for event in [{"type": "RUN_STARTED", "threadId": "t", "runId": "r"}, *events]:
        strict_check(event, "derive")
        fold.apply(event)
        for activity in fold.messages:
            assert len(activity.get("content", {}).get("a2ui_operations", [])) <= 4
    # The fold is where a later body continues: its lists are the ones derive holds.
    more = a2ui.derive([data("t", "/x", 1)], fold, limit=4)
    assert more == [a2ui.to_agui(data("t", "/x", 1))]
    assert a2ui.derive(SURFACES, RunFold()) == [a2ui.to_agui(m) for m in SURFACES]
    # A deleted surface rebuilt is an empty list, and the prelude leaves it out.
    gone = a2ui.derive([create("g"), data("g", "/a", 1), delete("g")], RunFold(), limit=2)
    assert gone[-1]["content"] == {"a2ui_operations": []}
    assert a2ui.messages_of(gone[-1]) == [delete("g")]


def _fold(messages: list[Message]) -> RunFold:
    fold = RunFold()
    fold.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    for message in messages:
        fold.apply(a2ui.to_agui(message))
    return fold


def test_the_live_surfaces_of_a_run_come_from_its_fold() -> None:
    assert a2ui.live_surfaces(_fold([])) == frozenset()
    for k in range(len(SURFACES) + 1):
        expected = set(a2ui.view(SURFACES[:k]))
        assert a2ui.live_surfaces(_fold(SURFACES[:k])) == expected, k
    assert a2ui.live_surfaces(_fold(SURFACES)) == {"profile", "banner", "scratch"}


def test_the_prelude_carries_live_surfaces_compacted_and_no_deleted_one() -> None:
    messages = [create("kept"), data("kept", "/a", 1), data("kept", "/a", 2), create("gone")]
    messages += [delete("gone")]
    fold = _fold(messages)
    prelude = fold.prelude("t", "r", compactors=a2ui.PRELUDE_COMPACTORS)
    snapshot = prelude[2]["messages"]
    assert snapshot == [
        {
            "id": "a2ui-surface-kept",
            "role": "activity",
            "activityType": "a2ui-surface",
            "content": {
                "a2ui_operations": [create("kept"), data("kept", "/", {"a": 2})],
            },
        }
    ]
    # Without the hook, and in the fold itself, the whole history stays.
    assert len(fold.prelude("t", "r")[2]["messages"]) == 2
    assert len(fold.messages[0]["content"]["a2ui_operations"]) == 3
    assert a2ui.late_joiner_messages(fold) == [create("kept"), data("kept", "/", {"a": 2})]


def test_the_websocket_prelude_deletes_each_live_surface_before_rebuilding_it() -> None:
    fold = _fold([create("a"), data("a", "/x", 1), create("b"), create("c"), delete("c")])
    assert a2ui.rejoin_messages(fold) == [
        delete("a"),
        create("a"),
        data("a", "/", {"x": 1}),
        delete("b"),
        create("b"),
    ]
    assert a2ui.rejoin_messages(_fold([])) == []
    # Applied on top of the surfaces live at that point, or to nothing, it leaves them.
    for held in ([], [create("a"), data("a", "/x", 1), create("b")]):
        assert a2ui.view(held + a2ui.rejoin_messages(fold)) == a2ui.view(
            [create("a"), data("a", "/x", 1), create("b")]
        )


def test_compacting_an_activity_keeps_its_other_content() -> None:
    activity = {
        "id": "a2ui-surface-s",
        "role": "activity",
        "activityType": "a2ui-surface",
        "content": {"a2ui_operations": [create("s")], "actionHandlers": {"go": []}},
    }
    assert a2ui.compact_activity(activity) == activity
    assert (
        a2ui.compact_activity({**activity, "content": {"a2ui_operations": [delete("s")]}}) is None
    )


# --------------------------------------------------------------------------- the fold

# (case, writes after createSurface, the data model)
DATA: list[tuple[str, list[Message], Any]] = [
    ("starts empty", [], {}),
    ("the whole model", [data("s", value={"a": 1})], {"a": 1}),
    ("the whole model at '/'", [data("s", "/", [1])], [1]),
    ("the whole model at ''", [data("s", "", "x")], "x"),
    ("a path creates objects", [data("s", "/a/b", 1)], {"a": {"b": 1}}),
    ("an index creates arrays", [data("s", "/a/1/b", 1)], {"a": [None, {"b": 1}]}),
    (
        "add and replace both write",
        [data("s", "/a", 1, op="add"), data("s", "/a", 2, op="replace")],
        {"a": 2},
    ),
    (
        "remove a key",
        [data("s", "/a", {"b": 1, "c": 2}), data("s", "/a/b", op="remove")],
        {"a": {"c": 2}},
    ),
    (
        "remove in an array leaves null",
        [data("s", "/l", [1, 2, 3]), data("s", "/l/1", op="remove")],
        {"l": [1, None, 3]},
    ),
    ("escaped segments", [data("s", "/a~1b/c~0d", 1)], {"a/b": {"c~d": 1}}),
    ("empty segments are skipped", [data("s", "//a//b/", 1)], {"a": {"b": 1}}),
    ("through a primitive is refused", [data("s", "/a", 1), data("s", "/a/b", 2)], {"a": 1}),
    ("a name on an array is refused", [data("s", "/l", []), data("s", "/l/x", 2)], {"l": []}),
    ("a prototype segment is refused", [data("s", "/__proto__/x", 1)], {}),
    ("remove the whole model", [data("s", "/a", 1), data("s", "/", op="remove")], ...),
    ("write below a removed model", [data("s", "/", op="remove"), data("s", "/a", 1)], {"a": 1}),
    ("values are copied", [data("s", "/a", {"b": [1]}), data("s", "/a/b/0", 2)], {"a": {"b": [2]}}),
]


@pytest.mark.parametrize(("case", "writes", "expected"), DATA, ids=[c[0] for c in DATA])
def test_the_data_model(case: str, writes: list[Message], expected: Any) -> None:
    messages = [create("s"), *writes]
    original = copy.deepcopy(messages)
    surface = a2ui.view(messages)["s"]
    if expected is ...:
        assert "data" not in surface
    else:
        assert surface["data"] == expected
    assert messages == original
    assert a2ui.view(compact(messages)) == a2ui.view(messages)


def test_components_are_merged_by_id_in_the_references_order() -> None:
    messages = [
        create("s"),
        components("s", text("root", "a"), text("b", "b"), text("c", "c")),
        components("s", text("root", "A"), {"id": "b", "component": "Divider"}),
    ]
    surface = a2ui.view(messages)["s"]
    assert list(surface["components"]) == ["root", "c", "b"]
    assert surface["components"]["root"] == text("root", "A")
    assert surface["components"]["b"] == {"id": "b", "component": "Divider"}


def test_surfaces_are_created_deleted_and_created_again() -> None:
    surfaces = Surfaces().extend([create("a"), create("b"), delete("a"), create("a", "other")])
    assert list(surfaces.live) == ["b", "a"]
    assert surfaces.live["a"].catalog_id == "other"
    # Updates of a surface that is not live, and a second create, change nothing.
    surfaces.extend([data("zz", value=1), create("b", "ignored")])
    assert surfaces.view() == {
        "b": {"catalogId": CATALOG, "components": {}, "data": {}},
        "a": {"catalogId": "other", "components": {}, "data": {}},
    }


@pytest.mark.parametrize("name", sorted(ALL_STREAMS))
def test_compaction_rebuilds_the_same_surfaces_at_every_point(name: str) -> None:
    messages = ALL_STREAMS[name]
    for k in range(len(messages) + 1):
        compacted = compact(messages[:k])
        assert a2ui.view(compacted) == a2ui.view(messages[:k]), k
        assert compact(compacted) == compacted
        # What a late joiner gets, then the rest, ends where the full history ends.
        assert a2ui.view(compacted + messages[k:]) == a2ui.view(messages)
        for message in compacted:
            a2ui.check_message(message)
        live = set(a2ui.view(messages[:k]))
        assert len(compacted) <= 3 * len(live)


def test_refused_writes_change_nothing() -> None:
    for k in REFUSED_AT:
        assert a2ui.view(REFUSED[: k + 1]) == a2ui.view(REFUSED[:k])
