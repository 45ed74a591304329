"""The AG-UI -> AI SDK UI message stream translation (pure; the real client is in
test_ai_sdk_client)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.agui.events import REQUIRED
from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.dialects.ai_sdk import projection
from gateway.dialects.ai_sdk.framing import encode_chunk, restart_chunk
from gateway.dialects.ai_sdk.parts import TextPart, ToolPart, build
from gateway.dialects.ai_sdk.projection import Projection, project
from gateway.dialects.ai_sdk.translator import MAPPING, AiSdkTranslator, compact, message_id
from gateway.validate import fast_component_validator
from tests.dialects.runs import RUN, RUNS, THREAD, long_run

Event = dict[str, Any]
MID = message_id(THREAD, RUN)
STARTED: Event = {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN}
TEXT_OPEN: list[Event] = [
    STARTED,
    {"type": "TEXT_MESSAGE_START", "messageId": "m"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "Hi"},
]
TOOL_OPEN: list[Event] = [
    STARTED,
    {"type": "TOOL_CALL_START", "toolCallId": "t", "toolCallName": "search"},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "t", "delta": '{"q":1}'},
]
TOOL_DONE: list[Event] = [*TOOL_OPEN, {"type": "TOOL_CALL_END", "toolCallId": "t"}]
REASONING_OPEN: list[Event] = [
    STARTED,
    {"type": "REASONING_START", "messageId": "s"},
    {"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"},
]
ACTIVITY: list[Event] = [
    STARTED,
    {"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "plan", "content": {"n": 1}},
]


def fold_of(events: list[Event]) -> RunFold:
    fold = RunFold()
    for event in events:
        fold.apply(event)
    return fold


def translate_all(events: list[Event], t: AiSdkTranslator | None = None) -> list[list[Event]]:
    t = t or AiSdkTranslator(THREAD, RUN)
    return [t.translate(e) for e in events]


def passthrough(event: Event) -> list[Event]:
    return [{"type": "data-ag-ui-event", "data": event, "transient": True}]


# (case, events before, the event, its chunks): every AG-UI event type at least once.
CASES: list[tuple[str, list[Event], Event, list[Event]]] = [
    ("run started", [], STARTED, [{"type": "start", "messageId": MID}]),
    (
        "run started with a reply history",
        [],
        {
            **STARTED,
            "input": {
                "threadId": THREAD,
                "runId": RUN,
                "messages": [
                    {"id": "u", "role": "user", "content": "q"},
                    {"id": "h", "role": "assistant", "content": "earlier"},
                ],
            },
        },
        [
            {"type": "start", "messageId": MID},
            {"type": "text-start", "id": "h"},
            {"type": "text-delta", "id": "h", "delta": "earlier"},
            {"type": "text-end", "id": "h"},
        ],
    ),
    (
        "run finished closes what is open",
        TEXT_OPEN,
        {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN},
        [{"type": "text-end", "id": "m"}, {"type": "finish", "finishReason": "stop"}],
    ),
    (
        "run finished with an approval",
        TOOL_DONE,
        {
            "type": "RUN_FINISHED",
            "threadId": THREAD,
            "runId": RUN,
            "outcome": {
                "type": "interrupt",
                "interrupts": [{"id": "ch", "reason": "approve", "toolCallId": "t"}],
            },
        },
        [
            {"type": "tool-approval-request", "approvalId": "ch", "toolCallId": "t"},
            {"type": "finish", "finishReason": "tool-calls"},
        ],
    ),
    (
        "run finished cancelled",
        [STARTED],
        {
            "type": "RUN_FINISHED",
            "threadId": THREAD,
            "runId": RUN,
            "outcome": {"type": "cancelled"},
        },
        [{"type": "abort", "reason": "cancelled"}],
    ),
    (
        "run error",
        [STARTED],
        {"type": "RUN_ERROR", "message": "model unavailable", "code": "x"},
        [{"type": "error", "errorText": "model unavailable"}],
    ),
    (
        "text start",
        [STARTED],
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
        [{"type": "text-start", "id": "m"}],
    ),
    (
        "text content",
        TEXT_OPEN,
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": " there"},
        [{"type": "text-delta", "id": "m", "delta": " there"}],
    ),
    (
        "empty text content",
        TEXT_OPEN,
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": ""},
        [],
    ),
    (
        "text end",
        TEXT_OPEN,
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
        [{"type": "text-end", "id": "m"}],
    ),
    (
        "text chunk opening a message",
        [STARTED],
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c", "delta": "x"},
        [{"type": "text-start", "id": "c"}, {"type": "text-delta", "id": "c", "delta": "x"}],
    ),
    (
        "a system message has no part",
        [STARTED],
        {"type": "TEXT_MESSAGE_START", "messageId": "s", "role": "system"},
        [],
    ),
    (
        "tool call start",
        [STARTED],
        {"type": "TOOL_CALL_START", "toolCallId": "t", "toolCallName": "search"},
        [{"type": "tool-input-start", "toolCallId": "t", "toolName": "search"}],
    ),
    (
        "tool call args",
        TOOL_OPEN,
        {"type": "TOOL_CALL_ARGS", "toolCallId": "t", "delta": " "},
        [{"type": "tool-input-delta", "toolCallId": "t", "inputTextDelta": " "}],
    ),
    (
        "tool call end",
        TOOL_OPEN,
        {"type": "TOOL_CALL_END", "toolCallId": "t"},
        [
            {
                "type": "tool-input-available",
                "toolCallId": "t",
                "toolName": "search",
                "input": {"q": 1},
            }
        ],
    ),
    (
        "tool call end, arguments not JSON",
        [*TOOL_OPEN, {"type": "TOOL_CALL_ARGS", "toolCallId": "t", "delta": "}"}],
        {"type": "TOOL_CALL_END", "toolCallId": "t"},
        [
            {
                "type": "tool-input-error",
                "toolCallId": "t",
                "toolName": "search",
                "input": '{"q":1}}',
                "errorText": "the tool call's arguments are not valid JSON",
            }
        ],
    ),
    (
        "tool call end, no arguments",
        [STARTED, {"type": "TOOL_CALL_START", "toolCallId": "t", "toolCallName": "now"}],
        {"type": "TOOL_CALL_END", "toolCallId": "t"},
        [{"type": "tool-input-available", "toolCallId": "t", "toolName": "now", "input": {}}],
    ),
    (
        "tool call chunk",
        [STARTED],
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "t", "toolCallName": "f", "delta": "[1"},
        [
            {"type": "tool-input-start", "toolCallId": "t", "toolName": "f"},
            {"type": "tool-input-delta", "toolCallId": "t", "inputTextDelta": "[1"},
        ],
    ),
    (
        "tool call result",
        TOOL_DONE,
        {"type": "TOOL_CALL_RESULT", "messageId": "r", "toolCallId": "t", "content": "found"},
        [{"type": "tool-output-available", "toolCallId": "t", "output": "found"}],
    ),
    (
        "tool call result of an unknown call",
        [STARTED],
        {"type": "TOOL_CALL_RESULT", "messageId": "r", "toolCallId": "nope", "content": "x"},
        [],
    ),
    (
        "state snapshot",
        [STARTED],
        {"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}},
        [{"type": "data-ag-ui-state", "data": {"a": 1}, "transient": True}],
    ),
    (
        "state delta",
        [STARTED, {"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}}],
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b", "value": 2}]},
        [{"type": "data-ag-ui-state", "data": {"a": 1, "b": 2}, "transient": True}],
    ),
    (
        "messages snapshot rewriting the text",
        TEXT_OPEN,
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [{"id": "m", "role": "assistant", "content": "Yo"}],
        },
        [
            {"type": "reset-step"},
            {"type": "text-start", "id": "m"},
            {"type": "text-delta", "id": "m", "delta": "Yo"},
        ],
    ),
    (
        "messages snapshot extending the text",
        TEXT_OPEN,
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [{"id": "m", "role": "assistant", "content": "Hi!"}],
        },
        [{"type": "text-delta", "id": "m", "delta": "!"}],
    ),
    (
        "activity snapshot",
        [STARTED],
        {
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": "a",
            "activityType": "plan",
            "content": {"n": 1},
        },
        [{"type": "data-plan", "id": "a", "data": {"n": 1}}],
    ),
    (
        "activity delta",
        ACTIVITY,
        {
            "type": "ACTIVITY_DELTA",
            "messageId": "a",
            "activityType": "plan",
            "patch": [{"op": "replace", "path": "/n", "value": 2}],
        },
        [{"type": "data-plan", "id": "a", "data": {"n": 2}}],
    ),
    ("raw", [STARTED], {"type": "RAW", "event": {"x": 1}}, []),
    (
        "custom",
        [STARTED],
        {"type": "CUSTOM", "name": "app", "value": [1]},
        passthrough({"type": "CUSTOM", "name": "app", "value": [1]}),
    ),
    (
        "step started",
        [STARTED],
        {"type": "STEP_STARTED", "stepName": "s"},
        passthrough({"type": "STEP_STARTED", "stepName": "s"}),
    ),
    (
        "step finished",
        [STARTED, {"type": "STEP_STARTED", "stepName": "s"}],
        {"type": "STEP_FINISHED", "stepName": "s"},
        passthrough({"type": "STEP_FINISHED", "stepName": "s"}),
    ),
    ("reasoning start", [STARTED], {"type": "REASONING_START", "messageId": "s"}, []),
    (
        "reasoning message start",
        [STARTED],
        {"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"},
        [{"type": "reasoning-start", "id": "r"}],
    ),
    (
        "reasoning message content",
        REASONING_OPEN,
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "hm"},
        [{"type": "reasoning-delta", "id": "r", "delta": "hm"}],
    ),
    (
        "reasoning message end",
        REASONING_OPEN,
        {"type": "REASONING_MESSAGE_END", "messageId": "r"},
        [{"type": "reasoning-end", "id": "r"}],
    ),
    (
        "reasoning message chunk",
        [STARTED],
        {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": "so"},
        [
            {"type": "reasoning-start", "id": "r"},
            {"type": "reasoning-delta", "id": "r", "delta": "so"},
        ],
    ),
    ("reasoning end", REASONING_OPEN, {"type": "REASONING_END", "messageId": "s"}, []),
    (
        "reasoning encrypted value",
        REASONING_OPEN,
        {
            "type": "REASONING_ENCRYPTED_VALUE",
            "subtype": "message",
            "entityId": "r",
            "encryptedValue": "x",
        },
        [],
    ),
    (
        "subagent started",
        [STARTED],
        {"type": "SUBAGENT_STARTED", "subagentRunId": "sa", "name": "w"},
        passthrough({"type": "SUBAGENT_STARTED", "subagentRunId": "sa", "name": "w"}),
    ),
    (
        "subagent finished closes its chunk stream",
        [
            STARTED,
            {"type": "SUBAGENT_STARTED", "subagentRunId": "sa", "name": "w"},
            {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c", "delta": "x", "subagentRunId": "sa"},
        ],
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "sa"},
        [
            {"type": "text-end", "id": "c"},
            *passthrough({"type": "SUBAGENT_FINISHED", "subagentRunId": "sa"}),
        ],
    ),
    (
        "subagent error",
        [STARTED, {"type": "SUBAGENT_STARTED", "subagentRunId": "sa", "name": "w"}],
        {"type": "SUBAGENT_ERROR", "subagentRunId": "sa", "message": "m"},
        passthrough({"type": "SUBAGENT_ERROR", "subagentRunId": "sa", "message": "m"}),
    ),
    ("an unknown type", [STARTED], {"type": "FUTURE_EVENT", "x": 1}, []),
]


def test_the_mapping_has_a_row_for_every_ag_ui_event_type() -> None:
    assert set(MAPPING) == set(REQUIRED)
    assert len(MAPPING) == 31


def test_the_cases_cover_every_ag_ui_event_type() -> None:
    assert {event["type"] for _, _, event, _ in CASES} >= set(REQUIRED)


@pytest.mark.parametrize(
    ("prefix", "event", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_event_type_translates_as_the_table_says(
    prefix: list[Event], event: Event, expected: list[Event]
) -> None:
    t = AiSdkTranslator(THREAD, RUN)
    for before in prefix:
        t.translate(before)
    assert t.translate(event) == expected


def test_the_message_id_is_derived_from_the_run() -> None:
    assert message_id("t-1", "r-1") == "run:t-1:r-1"
    assert message_id("t-1", "r-1") != message_id("t-1", "r-2")
    assert AiSdkTranslator("t-1", "r-1").translate(STARTED) == [
        {"type": "start", "messageId": "run:t-1:r-1"}
    ]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_translation_is_the_same_bytes_on_every_read(name: str) -> None:
    events = RUNS[name]
    first = [[encode_chunk(c) for c in cs] for cs in translate_all(events)]
    again = [[encode_chunk(c) for c in cs] for cs in translate_all(events)]
    assert first == again
    # The stored bytes, decoded afresh, translate the same (no state shared with events).
    from gateway.agui.events import decode, encode

    copies = [decode(encode(e)) for e in events]
    assert [[encode_chunk(c) for c in cs] for cs in translate_all(copies)] == first


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_translator_from_the_fold_at_any_cut_continues_exactly(name: str) -> None:
    events = RUNS[name]
    full = translate_all(events)
    live = AiSdkTranslator(THREAD, RUN)
    for k in range(len(events) + 1):
        fold = fold_of(events[:k])
        for t in (
            AiSdkTranslator.from_fold(fold, THREAD, RUN),
            AiSdkTranslator.from_fold(RunFold.load(fold.dump()), THREAD, RUN),  # a checkpoint
            live.copy(),
        ):
            assert translate_all(events[k:], t) == full[k:], k
        assert fold.dump() == fold_of(events[:k]).dump(), "from_fold changed the fold"
        if k < len(events):
            live.translate(events[k])


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_parts_are_always_the_projection_of_the_fold(name: str) -> None:
    t = AiSdkTranslator(THREAD, RUN)
    for event in RUNS[name]:
        t.translate(event)
        assert [build(p) for p in t.parts] == [build(p) for p in project(t.fold)]


@pytest.mark.parametrize("shortcut", ["_deltas", "_local"])
@pytest.mark.parametrize("name", [*sorted(RUNS), "long"])
def test_the_shortcuts_emit_what_the_whole_projection_does(
    name: str, shortcut: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = long_run(4, 5) if name == "long" else RUNS[name]
    fast = translate_all(events)
    monkeypatch.setattr(Projection, shortcut, lambda self, fold, applied: None)
    assert translate_all(events) == fast


def test_content_and_local_events_do_not_project_the_whole_fold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = AiSdkTranslator(THREAD, RUN)
    translate_all(
        [
            *TOOL_DONE,
            *TEXT_OPEN[1:],
            {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c", "delta": "a"},
        ],
        t,
    )
    scans: list[int] = []
    original = projection._Scan

    def counting(fold: RunFold, start: int, *rest: Any) -> Any:
        scans.append(start)
        return original(fold, start, *rest)

    monkeypatch.setattr(projection, "_Scan", counting)
    assert t.translate({"type": "TEXT_MESSAGE_CHUNK", "delta": "b"}) == [
        {"type": "text-delta", "id": "c", "delta": "b"}
    ]
    assert t.translate({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "!"}) == [
        {"type": "text-delta", "id": "m", "delta": "!"},
        {"type": "text-end", "id": "c"},  # the event closed the chunk stream
    ]
    assert scans == [1]  # from message m on (the messages are t, m, c)
    assert t.translate(
        {"type": "TOOL_CALL_RESULT", "messageId": "r", "toolCallId": "t", "content": "x"}
    ) == [{"type": "tool-output-available", "toolCallId": "t", "output": "x"}]
    assert scans == [1, 0]  # from the call's message, the first
    assert [build(p) for p in t.parts] == [build(p) for p in project(t.fold)]


def delta_count(chunks: list[Event]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in chunks:
        if c["type"] in ("text-delta", "reasoning-delta"):
            counts[c["id"]] = counts.get(c["id"], 0) + 1
        elif c["type"] == "tool-input-delta":
            counts[c["toolCallId"]] = counts.get(c["toolCallId"], 0) + 1
    return counts


@pytest.mark.parametrize("name", sorted(RUNS))
def test_compact_is_one_start_a_reset_and_at_most_one_delta_per_part(name: str) -> None:
    events = RUNS[name]
    for k in range(len(events) + 1):
        fold = fold_of(events[:k])
        chunks = compact(fold, THREAD, RUN)
        types = [c["type"] for c in chunks]
        head = [{"type": "start", "messageId": MID}] if fold.run_started is not None else []
        assert chunks[: len(head) + 1] == [*head, {"type": "reset-step"}]
        assert types.count("start") == len(head) and types.count("reset-step") == 1
        assert all(n == 1 for n in delta_count(chunks).values())
        seen = {(c["type"], c.get("id", c.get("toolCallId"))) for c in chunks}
        for part in project(fold):
            # Open parts stay open, so the events after the cut continue them.
            if isinstance(part, TextPart):
                assert ((part.kind + "-end", part.id) in seen) == (not part.open)
            elif isinstance(part, ToolPart):
                done = {("tool-input-available", part.id), ("tool-input-error", part.id)}
                assert bool(done & seen) == (not part.open)
        assert (types[-1] in ("finish", "error", "abort")) == (fold.terminal is not None)


def test_compact_of_nothing_is_only_the_reset() -> None:
    assert compact(RunFold(), THREAD, RUN) == [{"type": "reset-step"}]
    assert AiSdkTranslator(THREAD, RUN).compact() == [{"type": "reset-step"}]


def test_compact_carries_the_state_and_the_terminal_chunks() -> None:
    events = [
        STARTED,
        {"type": "STATE_SNAPSHOT", "snapshot": {"s": 1}},
        *TOOL_DONE[1:],
        {"type": "RUN_ERROR", "message": "boom"},
    ]
    assert compact(fold_of(events), THREAD, RUN) == [
        {"type": "start", "messageId": MID},
        {"type": "reset-step"},
        {"type": "tool-input-start", "toolCallId": "t", "toolName": "search"},
        {
            "type": "tool-input-available",
            "toolCallId": "t",
            "toolName": "search",
            "input": {"q": 1},
        },
        {"type": "data-ag-ui-state", "data": {"s": 1}, "transient": True},
        {"type": "error", "errorText": "boom"},
    ]


def test_a_change_no_chunk_can_express_rebuilds_the_message() -> None:
    # The tool call made message "x"; its text arriving later belongs before the call.
    events = [
        STARTED,
        {"type": "TOOL_CALL_START", "toolCallId": "t", "toolCallName": "f", "parentMessageId": "x"},
    ]
    t = AiSdkTranslator(THREAD, RUN)
    translate_all(events, t)
    assert t.translate({"type": "TEXT_MESSAGE_START", "messageId": "x"}) == [
        {"type": "reset-step"},
        {"type": "text-start", "id": "x"},
        {"type": "tool-input-start", "toolCallId": "t", "toolName": "f"},
    ]


SCHEMA = fast_component_validator("ai-sdk-ui")


def test_the_schema_check_is_real() -> None:
    assert not SCHEMA.is_valid({"type": "text-delta", "id": "x"})
    assert not SCHEMA.is_valid({"type": "finish", "finishReason": "done"})
    assert SCHEMA.is_valid({"type": "text-delta", "id": "x", "delta": ""})


@pytest.mark.parametrize("name", [*sorted(RUNS), "cases"])
def test_every_chunk_validates_against_the_seed_schema(name: str) -> None:
    chunks: list[Event] = [restart_chunk(Cursor(5, 9))]
    if name == "cases":
        for _, prefix, event, _ in CASES:
            t = AiSdkTranslator(THREAD, RUN)
            chunks += [c for e in [*prefix, event] for c in t.translate(e)]
    else:
        events = RUNS[name]
        chunks += [c for cs in translate_all(events) for c in cs]
        for k in range(len(events) + 1):
            chunks += compact(fold_of(events[:k]), THREAD, RUN)
    assert chunks
    for chunk in chunks:
        errors = [e.message for e in SCHEMA.iter_errors(chunk)]
        assert not errors, (chunk, errors)


def test_the_documented_table_has_a_row_for_every_type() -> None:
    doc = (Path(__file__).parent.parent.parent / "docs" / "dialects" / "ai-sdk.md").read_text()
    for kind in REQUIRED:
        assert f"| `{kind}` |" in doc, kind
