"""AG-UI publish validation (pure): type and required fields, pass-through, strict mode."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.agui.events import REQUIRED, check_body, check_event, decode, encode, strict_check
from gateway.errors import InvalidRequest
from tests.agui.runs import ALL_RUNS, NESTED, RUN, THREAD


def example(kind: str) -> dict[str, Any]:
    """A valid event of ``kind`` taken from the hand-written runs."""
    return next(e for run in ALL_RUNS.values() for e in run if e["type"] == kind)


@pytest.mark.parametrize("kind", sorted(REQUIRED))
def test_every_required_field_is_required_and_named(kind: str) -> None:
    event = example(kind)
    assert check_event(event, "event") is event
    for name in REQUIRED[kind]:
        missing = {k: v for k, v in event.items() if k != name}
        with pytest.raises(InvalidRequest, match=rf"^event\.{name}: required by {kind}$"):
            check_event(missing, "event")


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"type": "TEXT_MESSAGE_CONTENT", "messageId": 1, "delta": "x"}, "event.messageId"),
        ({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": None}, "event.delta"),
        ({"type": "STATE_DELTA", "delta": {"op": "add"}}, "event.delta: must be an array"),
        (
            {"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": []},
            "event.content: must be an object",
        ),
        ({"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "assistant"}, "event.role"),
        (
            {
                "type": "REASONING_ENCRYPTED_VALUE",
                "subtype": "x",
                "entityId": "e",
                "encryptedValue": "v",
            },
            "event.subtype",
        ),
        (
            {"type": "TOOL_CALL_RESULT", "messageId": "m", "toolCallId": "t", "content": 3},
            "event.content: must be a string or an array",
        ),
        (
            {"type": "CUSTOM", "name": "n", "value": None, "subagentRunId": None},
            "event.subagentRunId: must be omitted",
        ),
        ({"type": ""}, "event.type"),
        ({"type": 5}, "event.type"),
        ("not an object", "event: expected an AG-UI event object"),
    ],
)
def test_wrong_shapes_are_refused_naming_the_field(event: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_event(event, "event")
    assert info.value.message.startswith(message)


def test_what_a_newer_version_might_send_passes_untouched() -> None:
    events = [
        {"type": "SOME_FUTURE_TYPE", "x": [1, None]},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "", "extra": {"a": 1}},
        {
            "type": "RUN_FINISHED",
            "threadId": THREAD,
            "runId": RUN,
            "outcome": {"type": "unknown_outcome"},
        },
        {"type": "CUSTOM", "name": "n", "value": None},  # required any-JSON admits null
    ]
    assert check_body(events, thread_id=THREAD, run_id=RUN) == events


def test_run_events_must_name_the_paths_thread_and_run() -> None:
    for field, value in (("threadId", "other"), ("runId", "other")):
        for kind in ("RUN_STARTED", "RUN_FINISHED"):
            event = {"type": kind, "threadId": THREAD, "runId": RUN, field: value}
            with pytest.raises(InvalidRequest, match=rf"^\[1\]\.{field}: differs"):
                check_body([NESTED[0], event], thread_id=THREAD, run_id=RUN)
    with pytest.raises(InvalidRequest, match="empty array"):
        check_body([], thread_id=THREAD, run_id=RUN)


def test_strict_mode_validates_the_whole_ag_ui_1_schema() -> None:
    for run in ALL_RUNS.values():
        for event in run:
            if "future" not in str(event).lower() and event["type"] != "FUTURE_EVENT":
                strict_check(event, "event")  # every well-formed 1.0 event passes
    with pytest.raises(InvalidRequest, match=r"^event: .*'futureField' was unexpected"):
        strict_check(ALL_RUNS["draft"][0], "event")
    with pytest.raises(InvalidRequest, match=r"^event\.delta: 5 is not of type"):
        strict_check({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": 5}, "event")
    lax = {"type": "TEXT_MESSAGE_START", "messageId": "m", "extra": 1}
    assert check_body(lax, thread_id=THREAD, run_id=RUN) == [lax]
    with pytest.raises(InvalidRequest, match=r"strict AG-UI 1\.0"):
        check_body(lax, thread_id=THREAD, run_id=RUN, strict=True)


def test_encoding_is_compact_one_line_and_exact() -> None:
    event = {"type": "RAW", "event": {"n": 9007199254740993, "s": "a\nb", "f": 1.5}}
    data = encode(event)
    assert b"\n" not in data and b" " not in data
    assert decode(data) == event
