"""The run fold and its prelude (pure; parity with the real client is in test_client_parity)."""

from __future__ import annotations

from typing import Any

from gateway.agui.fold import RunFold
from tests.agui.runs import CHUNKS, NESTED, RUN, THREAD

Event = dict[str, Any]


def fold_of(events: list[Event]) -> RunFold:
    fold = RunFold()
    for event in events:
        fold.apply(event)
    return fold


def types(events: list[Event]) -> list[str]:
    return [e["type"] for e in events]


def test_state_folds_snapshots_and_patches_and_survives_a_bad_patch() -> None:
    fold = fold_of(
        [
            {"type": "STATE_SNAPSHOT", "snapshot": {"a": 1, "list": [1]}},
            {
                "type": "STATE_DELTA",
                "delta": [
                    {"op": "add", "path": "/list/-", "value": 2},
                    {"op": "replace", "path": "/a", "value": 5},
                ],
            },
            {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/missing"}]},
            {"type": "STATE_DELTA", "delta": []},
        ]
    )
    assert fold.state == {"a": 5, "list": [1, 2]}
    fold.apply({"type": "STATE_SNAPSHOT", "snapshot": None})
    assert fold.state is None


def test_messages_hold_partial_text_and_arguments_of_what_is_open() -> None:
    fold = fold_of(NESTED[:16])  # inside the text message and its tool call
    m1 = next(m for m in fold.messages if m["id"] == "m1")
    assert m1 == {
        "id": "m1",
        "role": "assistant",
        "content": "Hello",
        "subagentRunId": "sa1",
        "metadata": {"model": "m-1"},
        "toolCalls": [
            {
                "id": "tc1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q":"flights"}'},
            }
        ],
    }
    assert fold.messages[0] == {"id": "u1", "role": "user", "content": "plan my trip"}
    assert list(fold.texts) == ["m1"] and list(fold.tools) == ["tc1"]


def test_the_prelude_reopens_everything_outermost_first() -> None:
    fold = fold_of(NESTED[:16])
    prelude = fold.prelude(THREAD, RUN)
    assert types(prelude) == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "MESSAGES_SNAPSHOT",
        "SUBAGENT_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TOOL_CALL_START",
    ]
    assert prelude[0] is NESTED[0]  # the run's own RUN_STARTED, input included
    assert prelude[4] == {"type": "STEP_STARTED", "stepName": "plan", "subagentRunId": "sa1"}
    assert prelude[6] == {
        "type": "TOOL_CALL_START",
        "toolCallId": "tc1",
        "toolCallName": "search",
        "parentMessageId": "m1",
        "subagentRunId": "sa1",
    }
    inside_reasoning = fold_of(NESTED[:7]).prelude(THREAD, RUN)
    assert types(inside_reasoning)[3:] == [
        "SUBAGENT_STARTED",
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
    ]


def test_open_chunk_streams_are_reopened_last_with_their_ids() -> None:
    fold = fold_of(CHUNKS[:9])  # text chunk open in the parent lane is closed by the tool chunk
    prelude = fold.prelude(THREAD, RUN)
    assert prelude[-2:] == [
        {
            "type": "TEXT_MESSAGE_CHUNK",
            "messageId": "c2",
            "role": "assistant",
            "subagentRunId": "sa2",
        },
        {
            "type": "TOOL_CALL_CHUNK",
            "toolCallId": "tcc",
            "toolCallName": "calc",
            "parentMessageId": "c1",
        },
    ]
    c1 = next(m for m in fold.messages if m["id"] == "c1")
    assert c1["content"] == "Hi there"
    assert c1["toolCalls"][0]["function"]["arguments"] == '{"a":1}'


def test_a_finished_run_has_no_open_parts_and_ends_its_prelude() -> None:
    fold = fold_of(NESTED)
    assert fold.terminal is NESTED[-1]
    assert types(fold.prelude(THREAD, RUN)) == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "MESSAGES_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert fold.state == {"stage": "done", "items": [1]}


def test_without_run_started_one_is_made_from_the_path() -> None:
    prelude = fold_of([{"type": "TEXT_MESSAGE_START", "messageId": "x"}]).prelude("t", "r")
    assert prelude[0] == {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}


def test_a_chunk_the_client_would_reject_is_skipped_not_fatal() -> None:
    fold = fold_of(
        [
            {"type": "TEXT_MESSAGE_CHUNK", "delta": "no id"},  # the client rejects this
            {"type": "TEXT_MESSAGE_START", "messageId": "ok"},
        ]
    )
    assert [m["id"] for m in fold.messages] == ["ok"]
    assert fold.applied == 2


def test_copies_are_independent() -> None:
    fold = fold_of(NESTED[:12])
    snapshot = fold.copy()
    fold.apply(NESTED[12])
    fold.apply({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "!"})
    assert next(m for m in snapshot.messages if m["id"] == "m1")["content"] == "Hello"
    assert next(m for m in fold.messages if m["id"] == "m1")["content"] == "Hello!"


def test_activity_messages_snapshot_delta_and_replace_false() -> None:
    fold = fold_of(
        [
            {
                "type": "ACTIVITY_SNAPSHOT",
                "messageId": "a",
                "activityType": "p",
                "content": {"n": 1},
                "subagentRunId": "s",
            },
            {
                "type": "ACTIVITY_DELTA",
                "messageId": "a",
                "activityType": "p2",
                "patch": [{"op": "replace", "path": "/n", "value": 2}],
            },
            {
                "type": "ACTIVITY_SNAPSHOT",
                "messageId": "a",
                "activityType": "p3",
                "content": {"n": 9},
                "replace": False,
            },
            {
                "type": "ACTIVITY_DELTA",
                "messageId": "zzz",
                "activityType": "p",
                "patch": [{"op": "add", "path": "/x", "value": 1}],
            },
        ]
    )
    assert fold.messages == [
        {
            "id": "a",
            "role": "activity",
            "activityType": "p2",
            "content": {"n": 2},
            "subagentRunId": "s",
        },
    ]


def test_a_dumped_fold_loads_into_the_same_fold_and_prelude() -> None:
    import pytest

    for cut in (7, 16, 30, len(NESTED)):
        fold = fold_of(NESTED[:cut])
        loaded = RunFold.load(fold.dump())
        assert loaded.messages == fold.messages and loaded.state == fold.state
        assert loaded.prelude(THREAD, RUN) == fold.prelude(THREAD, RUN)
        # It folds on exactly like the original.
        for event in NESTED[cut:]:
            loaded.apply(event)
            fold.apply(event)
        assert loaded.messages == fold.messages
    chunks = fold_of(CHUNKS[:9])
    assert RunFold.load(chunks.dump()).prelude(THREAD, RUN) == chunks.prelude(THREAD, RUN)
    with pytest.raises(ValueError, match="not a dumped run fold"):
        RunFold.load(b"\x01garbage")


def test_dump_keeps_integers_beyond_64_bits() -> None:
    fold = fold_of([{"type": "STATE_SNAPSHOT", "snapshot": {"big": 2**70, "f": 0.1}}])
    assert RunFold.load(fold.dump()).state == {"big": 2**70, "f": 0.1}
    assert fold.copy().state == {"big": 2**70, "f": 0.1}


def test_the_prelude_compacts_activities_by_type_and_the_fold_keeps_them() -> None:
    def activity(mid: str, kind: str, content: dict[str, Any]) -> Event:
        return {
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": mid,
            "activityType": kind,
            "content": content,
        }

    fold = fold_of(
        [
            {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN},
            activity("a", "log", {"lines": [1, 2, 3]}),
            activity("b", "log", {"lines": []}),
            activity("c", "other", {"lines": [4]}),
            {"type": "TEXT_MESSAGE_START", "messageId": "log", "role": "assistant"},
        ]
    )

    def last_line(message: dict[str, Any]) -> dict[str, Any] | None:
        lines = message["content"]["lines"]
        return {**message, "content": {"lines": lines[-1:]}} if lines else None

    snapshot = fold.prelude(THREAD, RUN, compactors={"log": last_line})[2]["messages"]
    assert [(m["id"], m.get("content")) for m in snapshot] == [
        ("a", {"lines": [3]}),
        ("c", {"lines": [4]}),
        ("log", ""),
    ]
    assert fold.prelude(THREAD, RUN, compactors={})[2]["messages"] == fold.messages
    assert fold.messages[0]["content"] == {"lines": [1, 2, 3]}


def test_an_activity_delta_that_does_not_apply_changes_nothing() -> None:
    snapshot = {"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "p", "content": {}}
    fold = fold_of([snapshot])
    before = [dict(m) for m in fold.messages]
    fold.apply(
        {
            "type": "ACTIVITY_DELTA",
            "messageId": "a",
            "activityType": "q",
            "patch": [{"op": "remove", "path": "/missing"}],
        }
    )
    # As the client: a patch that fails leaves the activity, its type included, as it was.
    assert fold.messages == before
    fold.apply(
        {**snapshot, "type": "ACTIVITY_DELTA", "patch": [{"op": "add", "path": "/n", "value": 1}]}
    )
    assert fold.messages[0]["content"] == {"n": 1}
