"""Hand-written AG-UI runs that together use every event type (test fixtures).

Each run is a list of events as a producer publishes them.  ``NESTED`` nests a subagent,
a step, reasoning, a text message and a tool call; ``CHUNKS`` uses the chunk shorthands
in two lanes; ``FAILED`` ends with RUN_ERROR; ``DRAFT`` uses draft-only shapes and
fields a newer minor version might add.
"""

from __future__ import annotations

from typing import Any

Event = dict[str, Any]
THREAD, RUN = "thread-1", "run-1"

NESTED: list[Event] = [
    {
        "type": "RUN_STARTED",
        "threadId": THREAD,
        "runId": RUN,
        "input": {
            "threadId": THREAD,
            "runId": RUN,
            "messages": [{"id": "u1", "role": "user", "content": "plan my trip"}],
        },
    },
    {"type": "STATE_SNAPSHOT", "snapshot": {"stage": "start", "items": []}},
    {"type": "SUBAGENT_STARTED", "subagentRunId": "sa1", "name": "planner"},
    {"type": "STEP_STARTED", "stepName": "plan", "subagentRunId": "sa1"},
    {"type": "REASONING_START", "messageId": "rs1", "subagentRunId": "sa1"},
    {
        "type": "REASONING_MESSAGE_START",
        "messageId": "rm1",
        "role": "reasoning",
        "subagentRunId": "sa1",
    },
    {
        "type": "REASONING_MESSAGE_CONTENT",
        "messageId": "rm1",
        "delta": "think",
        "subagentRunId": "sa1",
    },
    {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm1", "delta": "", "subagentRunId": "sa1"},
    {"type": "REASONING_MESSAGE_END", "messageId": "rm1", "subagentRunId": "sa1"},
    {"type": "REASONING_END", "messageId": "rs1", "subagentRunId": "sa1"},
    {
        "type": "TEXT_MESSAGE_START",
        "messageId": "m1",
        "role": "assistant",
        "subagentRunId": "sa1",
        "metadata": {"model": "m-1"},
    },
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hello", "subagentRunId": "sa1"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "", "subagentRunId": "sa1"},
    {
        "type": "TOOL_CALL_START",
        "toolCallId": "tc1",
        "toolCallName": "search",
        "parentMessageId": "m1",
        "subagentRunId": "sa1",
    },
    {"type": "TOOL_CALL_ARGS", "toolCallId": "tc1", "delta": '{"q":', "subagentRunId": "sa1"},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "tc1", "delta": '"flights"}', "subagentRunId": "sa1"},
    {
        "type": "STATE_DELTA",
        "delta": [
            {"op": "replace", "path": "/stage", "value": "search"},
            {"op": "add", "path": "/items/-", "value": 1},
        ],
    },
    {"type": "TOOL_CALL_END", "toolCallId": "tc1", "subagentRunId": "sa1"},
    {
        "type": "TOOL_CALL_RESULT",
        "messageId": "tr1",
        "toolCallId": "tc1",
        "content": "3 flights",
        "role": "tool",
        "subagentRunId": "sa1",
    },
    {
        "type": "TEXT_MESSAGE_CONTENT",
        "messageId": "m1",
        "delta": " world",
        "subagentRunId": "sa1",
        "metadata": {"tokens": 2},
    },
    {"type": "TEXT_MESSAGE_END", "messageId": "m1", "subagentRunId": "sa1"},
    {"type": "STEP_FINISHED", "stepName": "plan", "subagentRunId": "sa1"},
    {"type": "SUBAGENT_FINISHED", "subagentRunId": "sa1", "outcome": {"type": "success"}},
    {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": "act1",
        "activityType": "progress",
        "content": {"done": 1, "of": 3},
    },
    {
        "type": "ACTIVITY_DELTA",
        "messageId": "act1",
        "activityType": "progress",
        "patch": [{"op": "replace", "path": "/done", "value": 2}],
    },
    {"type": "CUSTOM", "name": "app.note", "value": {"n": 1}},
    {"type": "RAW", "event": {"provider": "x", "n": 9007199254740991}, "source": "x"},
    {
        "type": "REASONING_ENCRYPTED_VALUE",
        "subtype": "message",
        "entityId": "rm1",
        "encryptedValue": "b64==",
    },
    {"type": "STEP_STARTED", "stepName": "answer"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m2"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "Done."},
    {"type": "TOOL_CALL_START", "toolCallId": "tc2", "toolCallName": "book"},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "tc2", "delta": "{}"},
    {"type": "TOOL_CALL_END", "toolCallId": "tc2"},
    {
        "type": "REASONING_ENCRYPTED_VALUE",
        "subtype": "tool-call",
        "entityId": "tc2",
        "encryptedValue": "zz==",
    },
    {"type": "TEXT_MESSAGE_END", "messageId": "m2"},
    {"type": "STEP_FINISHED", "stepName": "answer"},
    {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/stage", "value": "done"}]},
    {
        "type": "RUN_FINISHED",
        "threadId": THREAD,
        "runId": RUN,
        "outcome": {"type": "success"},
        "result": {"ok": True},
    },
]

CHUNKS: list[Event] = [
    {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c1", "role": "assistant", "delta": "Hi"},
    {"type": "TEXT_MESSAGE_CHUNK", "delta": " there"},
    {"type": "TEXT_MESSAGE_CHUNK", "delta": ""},
    {"type": "SUBAGENT_STARTED", "subagentRunId": "sa2", "name": "helper"},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c2", "delta": "sub", "subagentRunId": "sa2"},
    {"type": "TEXT_MESSAGE_CHUNK", "delta": "-text", "subagentRunId": "sa2"},
    {
        "type": "TOOL_CALL_CHUNK",
        "toolCallId": "tcc",
        "toolCallName": "calc",
        "parentMessageId": "c1",
        "delta": '{"a"',
    },
    {"type": "TOOL_CALL_CHUNK", "delta": ":1}"},
    {"type": "STATE_SNAPSHOT", "snapshot": {"x": 1}},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "rc1", "delta": "hmm"},
    {"type": "REASONING_MESSAGE_CHUNK", "delta": "..."},
    {"type": "TOOL_CALL_RESULT", "messageId": "tres", "toolCallId": "tcc", "content": "1"},
    {"type": "SUBAGENT_FINISHED", "subagentRunId": "sa2"},
    {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [
            {"id": "c1", "role": "assistant", "content": "Hi there (edited)"},
            {"id": "extra", "role": "user", "content": "more"},
        ],
    },
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c3", "delta": "after snapshot"},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c4", "delta": "next"},
    {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN},
]

FAILED: list[Event] = [
    {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN},
    {"type": "STEP_STARTED", "stepName": "s"},
    {"type": "TEXT_MESSAGE_START", "messageId": "f1", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "f1", "delta": "partial"},
    {"type": "SUBAGENT_STARTED", "subagentRunId": "sa3", "name": "w"},
    {"type": "SUBAGENT_ERROR", "subagentRunId": "sa3", "message": "boom", "code": "x"},
    {"type": "RUN_ERROR", "message": "model unavailable", "code": "model_unavailable"},
]

# Fields and types a newer minor version might add pass through untouched; the draft's
# string TOOL_CALL_RESULT content and 1.0's content parts are both accepted.
DRAFT: list[Event] = [
    {
        "type": "RUN_STARTED",
        "threadId": THREAD,
        "runId": RUN,
        "protocolVersion": "1.0.0",
        "futureField": {"kept": True},
    },
    {"type": "FUTURE_EVENT", "anything": [1, 2, 3]},
    {"type": "TOOL_CALL_START", "toolCallId": "d1", "toolCallName": "f"},
    {"type": "TOOL_CALL_END", "toolCallId": "d1"},
    {
        "type": "TOOL_CALL_RESULT",
        "messageId": "d2",
        "toolCallId": "d1",
        "content": [{"type": "text", "text": "part"}],
    },
    {
        "type": "RUN_FINISHED",
        "threadId": THREAD,
        "runId": RUN,
        "outcome": {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "approval"}]},
    },
]

ALL_RUNS = {"nested": NESTED, "chunks": CHUNKS, "failed": FAILED, "draft": DRAFT}
