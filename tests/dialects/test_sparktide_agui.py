"""SparkTide to AG-UI: a row of the translation table per event name, and its state."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from gateway.agui.events import encode, strict_check
from gateway.agui.fold import RunFold
from gateway.dialects.sparktide import (
    EVENT_NAMES,
)
from gateway.dialects.sparktide_agui import (
    MAX_OPEN,
    ROWS,
    SUCCESS_STATUSES,
    RunState,
    advance,
    plan,
    state_from_fold,
    translate,
)
from gateway.errors import InvalidRequest, RunEnded
from tests.dialects.sparktide_runs import (
    ALL_RUNS,
    CHILD,
    CONVERSATION,
    MESSAGE,
    ROOT,
    RUN,
    VALID,
    event,
    model,
)

Event = dict[str, Any]
OPEN = RunState(message_id=MESSAGE, sequence=1)


def types(events: list[Event]) -> list[str]:
    return [e["type"] for e in events]


def derived_of(run: list[Event]) -> list[Event]:
    _, planned = plan(RunState(), run, {})
    return [e for p in planned for e in p.derived]


# --------------------------------------------------------------------------- the table

SUBAGENT = RunState(message_id=MESSAGE, sequence=1, subagents=("a1",))
STEP_IN_A1 = RunState(
    message_id=MESSAGE, sequence=1, subagents=("a1",), steps=(("model:m2", "a1"),)
)

# (case, state, event name, data or None for VALID, the derived events as "TYPE" or
#  "TYPE@subagentRunId")
TABLE: list[tuple[str, RunState, str, dict[str, Any] | None, list[str]]] = [
    ("message.started", OPEN, "message.started", None, ["ACTIVITY_SNAPSHOT"]),
    ("status.changed", OPEN, "status.changed", None, ["ACTIVITY_SNAPSHOT"]),
    ("text.delta", OPEN, "text.delta", None, ["TEXT_MESSAGE_CONTENT"]),
    ("agent.started, depth 0", OPEN, "agent.started", None, ["STEP_STARTED"]),
    ("agent.started, depth 1", OPEN, "agent.started", CHILD, ["SUBAGENT_STARTED@a1"]),
    (
        "agent.completed, depth 0",
        RunState(message_id=MESSAGE, sequence=1, steps=(("agent:a0", None),)),
        "agent.completed",
        None,
        ["STEP_FINISHED"],
    ),
    (
        "agent.completed, depth 0, never started",
        OPEN,
        "agent.completed",
        None,
        ["STEP_STARTED", "STEP_FINISHED"],
    ),
    (
        "agent.completed, depth 1",
        STEP_IN_A1,
        "agent.completed",
        {**CHILD, "status": "SUCCEEDED"},
        ["STEP_FINISHED@a1", "SUBAGENT_FINISHED@a1"],
    ),
    (
        "agent.completed, depth 1, failed",
        SUBAGENT,
        "agent.completed",
        {**CHILD, "status": "FAILED"},
        ["SUBAGENT_ERROR@a1"],
    ),
    (
        "agent.completed, depth 1, never started",
        OPEN,
        "agent.completed",
        {**CHILD, "status": "OK"},
        ["SUBAGENT_STARTED@a1", "SUBAGENT_FINISHED@a1"],
    ),
    ("tool.started, root", OPEN, "tool.started", None, ["TOOL_CALL_START", "TOOL_CALL_END"]),
    (
        "tool.started, subagent",
        SUBAGENT,
        "tool.started",
        {**VALID["tool.started"], **CHILD},
        ["TOOL_CALL_START@a1", "TOOL_CALL_END@a1"],
    ),
    (
        "tool.completed",
        SUBAGENT,
        "tool.completed",
        {**VALID["tool.completed"], **CHILD},
        ["TOOL_CALL_RESULT@a1"],
    ),
    ("knowledge.retrieved", OPEN, "knowledge.retrieved", None, ["ACTIVITY_SNAPSHOT"]),
    (
        "citation.created",
        SUBAGENT,
        "citation.created",
        {**VALID["citation.created"], **CHILD},
        ["ACTIVITY_SNAPSHOT@a1"],
    ),
    ("ui.created", OPEN, "ui.created", None, ["ACTIVITY_SNAPSHOT"]),
    ("confirmation.required", SUBAGENT, "confirmation.required", None, ["ACTIVITY_SNAPSHOT"]),
    ("usage.updated", OPEN, "usage.updated", None, ["ACTIVITY_SNAPSHOT"]),
    ("error, retryable", OPEN, "error", None, ["ACTIVITY_SNAPSHOT"]),
    (
        "error, not retryable",
        STEP_IN_A1,
        "error",
        {"code": "X", "message": "boom", "retryable": False},
        ["STEP_FINISHED@a1", "SUBAGENT_ERROR@a1", "TEXT_MESSAGE_END", "RUN_ERROR"],
    ),
    (
        "message.completed",
        STEP_IN_A1,
        "message.completed",
        None,
        [
            "ACTIVITY_SNAPSHOT",
            "STEP_FINISHED@a1",
            "SUBAGENT_FINISHED@a1",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED",
        ],
    ),
    (
        "message.completed, failed",
        OPEN,
        "message.completed",
        {"status": "CANCELLED"},
        ["ACTIVITY_SNAPSHOT", "TEXT_MESSAGE_END", "RUN_ERROR"],
    ),
    ("model.started", SUBAGENT, "model.started", model(CHILD, "m2"), ["STEP_STARTED@a1"]),
    (
        "model.completed",
        STEP_IN_A1,
        "model.completed",
        {**VALID["model.completed"], **CHILD, "invocationId": "m2"},
        ["STEP_FINISHED@a1"],
    ),
    (
        "model.completed, never started",
        OPEN,
        "model.completed",
        None,
        ["STEP_STARTED", "STEP_FINISHED"],
    ),
    ("knowledge.planned", OPEN, "knowledge.planned", None, ["ACTIVITY_SNAPSHOT"]),
    ("knowledge.fused", OPEN, "knowledge.fused", None, ["ACTIVITY_SNAPSHOT"]),
    ("citation.verified", OPEN, "citation.verified", None, ["ACTIVITY_SNAPSHOT"]),
    (
        "depth 1, its agent not open",
        OPEN,
        "tool.started",
        {**VALID["tool.started"], **CHILD},
        ["TOOL_CALL_START", "TOOL_CALL_END"],
    ),
]


def test_the_table_covers_every_event_name() -> None:
    assert tuple(ROWS) == EVENT_NAMES
    assert {row[2] for row in TABLE} == set(EVENT_NAMES)


@pytest.mark.parametrize(
    ("case", "state", "name", "data", "expected"), TABLE, ids=[c[0] for c in TABLE]
)
def test_each_row_derives_its_events(
    case: str, state: RunState, name: str, data: dict[str, Any] | None, expected: list[str]
) -> None:
    incoming = event(name, 2, data)
    original = copy.deepcopy(incoming)
    _, derived = translate(state, incoming)
    shown = [
        e["type"] + (f"@{e['subagentRunId']}" if "subagentRunId" in e else "") for e in derived
    ]
    assert shown == expected
    for e in derived:
        strict_check(e, case)
        # The original, unchanged; the envelope's identity under metadata.
        assert e["rawEvent"] is incoming and incoming == original
        assert e["metadata"] == {"sparktide": {"event": name, "sequence": 2, "traceId": "trace-1"}}


def test_the_first_event_opens_the_run_and_its_text() -> None:
    state, derived = translate(RunState(), event("text.delta", 1, {"text": "hi"}))
    assert types(derived) == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    assert derived[0]["threadId"] == CONVERSATION and derived[0]["runId"] == RUN
    assert derived[1] == {**derived[1], "messageId": MESSAGE, "role": "assistant"}
    assert derived[2]["delta"] == "hi"
    assert state == RunState(message_id=MESSAGE, sequence=1)


@pytest.mark.parametrize("status", sorted(SUCCESS_STATUSES | {s.lower() for s in SUCCESS_STATUSES}))
def test_a_success_status_finishes_the_run(status: str) -> None:
    state, derived = translate(OPEN, event("message.completed", 2, {"status": status}))
    assert derived[-1]["type"] == "RUN_FINISHED" and state.ended


@pytest.mark.parametrize("status", ["FAILED", "CANCELLED", "TIMED_OUT", "", "SUCCEEDED_PARTIALLY"])
def test_any_other_status_is_a_run_error(status: str) -> None:
    _, derived = translate(OPEN, event("message.completed", 2, {"status": status}))
    assert derived[-1]["type"] == "RUN_ERROR" and derived[-1]["code"] == status


def test_ids_are_deterministic_and_name_their_source() -> None:
    for run in ALL_RUNS.values():
        assert [encode(e) for e in derived_of(run)] == [
            encode(e) for e in derived_of(copy.deepcopy(run))
        ]
    derived = derived_of(ALL_RUNS["everything"])
    ids = {
        e.get("messageId")
        for e in derived
        if e["type"] in ("ACTIVITY_SNAPSHOT", "TOOL_CALL_RESULT")
    }
    assert ids == {
        "msg-1:status",
        "msg-1:knowledge:7",
        "msg-1:knowledge:8",
        "msg-1:knowledge:9",
        "msg-1:citation:cit-1",
        "msg-1:citation-check:11",
        "msg-1:tool-result:15",
        "msg-1:usage:a1",
        "msg-1:error:18",
        "msg-1:ui:19",
        "msg-1:confirmation:conf-1",
        "msg-1:tool-result:24",
    }
    steps = {e["stepName"] for e in derived if e["type"] == "STEP_STARTED"}
    assert steps == {"agent:a0", "model:m1", "model:m2"}


def test_a_subagent_tool_call_gets_its_own_message_and_a_root_one_the_runs() -> None:
    derived = derived_of(ALL_RUNS["everything"])
    starts = {e["toolCallId"]: e for e in derived if e["type"] == "TOOL_CALL_START"}
    assert starts["c1"]["subagentRunId"] == "a1" and "parentMessageId" not in starts["c1"]
    assert starts["c0"]["parentMessageId"] == MESSAGE and "subagentRunId" not in starts["c0"]
    nested = [e for e in derived if e["type"] == "SUBAGENT_STARTED"]
    assert [(e["subagentRunId"], e.get("parentSubagentRunId")) for e in nested] == [
        ("a1", None),
        ("a2", "a1"),
    ]


def test_every_event_derives_valid_ag_ui_events() -> None:
    for name, run in ALL_RUNS.items():
        _, planned = plan(RunState(), run, {})
        for p in planned:
            assert p.derived, (name, p.event["event"])
            for e in p.derived:
                strict_check(e, name)


REFUSED: list[tuple[str, RunState, Event, str]] = [
    (
        "another message",
        OPEN,
        event("text.delta", 1, messageId="msg-2"),
        "event.messageId: the run already carries",
    ),
    (
        "after the run ended",
        RunState(message_id=MESSAGE, sequence=3, ended=True),
        event("text.delta", 4),
        "event.event: the run has ended",
    ),
    (
        "an agent call already open",
        SUBAGENT,
        event("agent.started", 2, CHILD),
        "event.data.agentCallId: the agent call 'a1' is already open",
    ),
    (
        "a root agent already open",
        RunState(message_id=MESSAGE, sequence=1, steps=(("agent:a0", None),)),
        event("agent.started", 2, ROOT),
        "event.data: the step 'agent:a0' is already open",
    ),
    (
        "a model step already open",
        RunState(message_id=MESSAGE, sequence=1, steps=(("model:m0", None),)),
        event("model.started", 2),
        "event.data: the step 'model:m0' is already open",
    ),
    (
        "too much open",
        RunState(message_id=MESSAGE, sequence=1, subagents=tuple(f"s{i}" for i in range(MAX_OPEN))),
        event("model.started", 2),
        "event.data: more than 256",
    ),
]


@pytest.mark.parametrize(
    ("case", "state", "incoming", "message"), REFUSED, ids=[c[0] for c in REFUSED]
)
def test_what_a_run_cannot_take_is_refused(
    case: str, state: RunState, incoming: Event, message: str
) -> None:
    with pytest.raises((InvalidRequest, RunEnded)) as caught:
        translate(state, incoming)
    assert caught.value.message.startswith(message), caught.value.message
    # After the end: 409 run_ended, as on every publish path (contract D12).
    assert isinstance(caught.value, RunEnded) == (case == "after the run ended")


# --------------------------------------------------------------------------- the state


def test_the_state_is_small_plain_data() -> None:
    state = RunState(message_id=MESSAGE, sequence=3, subagents=("a1",), steps=(("model:m2", "a1"),))
    assert msgspec.json.decode(msgspec.json.encode(state), type=RunState) == state


@pytest.mark.parametrize("name", sorted(ALL_RUNS))
def test_the_state_is_rebuilt_from_the_fold_after_every_event(name: str) -> None:
    state = RunState()
    fold = RunFold()
    assert state_from_fold(fold, None) == state
    for incoming in ALL_RUNS[name]:
        state, derived = translate(state, incoming)
        for e in derived:
            fold.apply(e)
        assert state_from_fold(fold, derived[-1]) == state
        assert advance(RunState(), incoming) == translate(RunState(), incoming)[0]
    assert state.ended


def test_the_fold_of_a_run_not_from_sparktide_has_no_state() -> None:
    fold = RunFold()
    fold.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    assert state_from_fold(fold, None) == RunState()
