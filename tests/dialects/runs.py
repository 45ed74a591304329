"""Hand-written AG-UI runs for the AI SDK translation (test fixtures), beside tests/agui/runs.py.

``APPROVAL`` ends with interrupts (a tool approval and a question) while a tool call is
still open and another one has arguments that are not JSON; ``HISTORY`` starts with an
input history whose last turn is the assistant's and ends cancelled; ``REORDER`` makes
every change the parts cannot follow by appending (a tool call before its message's
text, a rewritten text, a reopened part, a changed activity type, content after the end
and after the run); ``TWO_RUNS`` has two runs on one feed, messages of other roles and a
user message mid-run; ``TANGLED``, ``DUPLICATE`` and ``BEFORE_REPLY`` break what the
incremental projection relies on.
:func:`long_run` is a run of many small deltas.
"""

from __future__ import annotations

from typing import Any

from tests.agui.runs import ALL_RUNS as AGUI_RUNS
from tests.agui.runs import RUN, THREAD

Event = dict[str, Any]

APPROVAL: list[Event] = [
    {
        "type": "RUN_STARTED",
        "threadId": THREAD,
        "runId": RUN,
        "input": {
            "threadId": THREAD,
            "runId": RUN,
            "messages": [{"id": "u0", "role": "user", "content": "book it"}],
        },
    },
    {"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "I'll book"},
    {"type": "TEXT_MESSAGE_END", "messageId": "a1"},
    {
        "type": "TOOL_CALL_START",
        "toolCallId": "tc-book",
        "toolCallName": "book",
        "parentMessageId": "a1",
    },
    {"type": "TOOL_CALL_ARGS", "toolCallId": "tc-book", "delta": '{"flight":'},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "tc-book", "delta": '"LH1","n":9007199254740991}'},
    {"type": "TOOL_CALL_END", "toolCallId": "tc-book"},
    {
        "type": "TOOL_CALL_START",
        "toolCallId": "tc-pay",
        "toolCallName": "pay",
        "parentMessageId": "a1",
    },
    {"type": "TOOL_CALL_ARGS", "toolCallId": "tc-pay", "delta": '{"amount": 1'},
    {"type": "TOOL_CALL_END", "toolCallId": "tc-pay"},
    {"type": "TOOL_CALL_START", "toolCallId": "tc-ask", "toolCallName": "ask"},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "tc-ask", "delta": '{"q":'},
    {
        "type": "RUN_FINISHED",
        "threadId": THREAD,
        "runId": RUN,
        "outcome": {
            "type": "interrupt",
            "interrupts": [
                {
                    "id": "ch-1",
                    "reason": "tool_approval",
                    "toolCallId": "tc-book",
                    "message": "Book LH1?",
                },
                {"id": "q-1", "reason": "question", "message": "Which seat?"},
            ],
        },
    },
]

HISTORY: list[Event] = [
    {
        "type": "RUN_STARTED",
        "threadId": THREAD,
        "runId": RUN,
        "input": {
            "threadId": THREAD,
            "runId": RUN,
            "messages": [
                {"id": "u1", "role": "user", "content": "hi"},
                {"id": "a0", "role": "assistant", "content": "old answer"},
                {"id": "u2", "role": "user", "content": "book 9"},
                {
                    "id": "a1",
                    "role": "assistant",
                    "content": "Booking",
                    "toolCalls": [
                        {
                            "id": "tc9",
                            "type": "function",
                            "function": {"name": "book", "arguments": '{"id":9}'},
                        }
                    ],
                },
                {"id": "t9", "role": "tool", "toolCallId": "tc9", "content": "booked"},
            ],
        },
    },
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r2", "delta": "check"},
    {"type": "TEXT_MESSAGE_START", "messageId": "a2"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a2", "delta": "Done"},
    {"type": "TEXT_MESSAGE_END", "messageId": "a2"},
    {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN, "outcome": {"type": "cancelled"}},
]

REORDER: list[Event] = [
    {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN},
    # The tool call creates message mx; its text arrives afterwards, so the text part
    # the projection puts first was not the first to arrive.
    {
        "type": "TOOL_CALL_START",
        "toolCallId": "tcx",
        "toolCallName": "lookup",
        "parentMessageId": "mx",
    },
    {"type": "TOOL_CALL_END", "toolCallId": "tcx"},
    {"type": "TEXT_MESSAGE_START", "messageId": "mx"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "mx", "delta": "after the call"},
    {"type": "TEXT_MESSAGE_END", "messageId": "mx"},
    {"type": "TOOL_CALL_RESULT", "messageId": "tr1", "toolCallId": "tcx", "content": "r1"},
    {"type": "TOOL_CALL_RESULT", "messageId": "tr2", "toolCallId": "tcx", "content": "r2"},
    {"type": "TOOL_CALL_RESULT", "messageId": "tr3", "toolCallId": "nope", "content": "lost"},
    {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": "act",
        "activityType": "plan",
        "content": {"s": [1]},
    },
    {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": "act",
        "activityType": "plan",
        "content": {"s": [1, 2]},
    },
    {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": "act",
        "activityType": "plan",
        "content": {"ignored": True},
        "replace": False,
    },
    {
        "type": "ACTIVITY_DELTA",
        "messageId": "act",
        "activityType": "plan",
        "patch": [{"op": "remove", "path": "/missing"}],
    },
    {
        "type": "ACTIVITY_DELTA",
        "messageId": "act",
        "activityType": "board",
        "patch": [{"op": "add", "path": "/s/-", "value": 3}],
    },
    {"type": "TEXT_MESSAGE_START", "messageId": "sys", "role": "system"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "sys", "delta": "not shown"},
    {"type": "TEXT_MESSAGE_END", "messageId": "sys"},
    {"type": "TEXT_MESSAGE_START", "messageId": "my"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "my", "delta": "open text"},
    {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [
            {
                "id": "mx",
                "role": "assistant",
                "content": "rewritten",
                "toolCalls": [
                    {
                        "id": "tcx",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": ""},
                    }
                ],
            },
            {"id": "tr2", "role": "tool", "toolCallId": "tcx", "content": "r2"},
            {"id": "my", "role": "assistant", "content": "open text, edited"},
        ],
    },
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "my", "delta": " more"},
    {"type": "TEXT_MESSAGE_END", "messageId": "my"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "my", "delta": " after its end"},
    {"type": "REASONING_MESSAGE_START", "messageId": "r1", "role": "reasoning"},
    {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "a"},
    {"type": "REASONING_MESSAGE_END", "messageId": "r1"},
    {"type": "REASONING_MESSAGE_START", "messageId": "r1", "role": "reasoning"},
    {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "b"},
    {"type": "REASONING_MESSAGE_END", "messageId": "r1"},
    {"type": "TOOL_CALL_CHUNK", "toolCallId": "tcy", "toolCallName": "sum", "delta": "[1,"},
    {"type": "TOOL_CALL_CHUNK", "delta": "2]"},
    {"type": "TOOL_CALL_RESULT", "messageId": "tr4", "toolCallId": "tcy", "content": "3"},
    {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN, "outcome": {"type": "future"}},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "my", "delta": " after the run"},
]

TWO_RUNS: list[Event] = [
    {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN},
    {"type": "TEXT_MESSAGE_START", "messageId": "dev", "role": "developer"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "dev", "delta": "note"},
    {"type": "TEXT_MESSAGE_END", "messageId": "dev"},
    {"type": "TEXT_MESSAGE_START", "messageId": "a1"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "first"},
    {"type": "TEXT_MESSAGE_END", "messageId": "a1"},
    {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN},
    {
        "type": "RUN_STARTED",
        "threadId": THREAD,
        "runId": RUN,
        "input": {
            "threadId": THREAD,
            "runId": RUN,
            "messages": [{"id": "u2", "role": "user", "content": "again"}],
        },
    },
    {"type": "TEXT_MESSAGE_START", "messageId": "a2"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a2", "delta": "second"},
    {"type": "TEXT_MESSAGE_START", "messageId": "u3", "role": "user"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "u3", "delta": "echo"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a2", "delta": " more"},
    {"type": "TEXT_MESSAGE_START", "messageId": "a3"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a3", "delta": "third"},
    {"type": "RUN_ERROR", "message": "boom", "code": "x"},
]


# Where locality does not hold: a result of a call before the reply (inserted before its
# first message), a result before its call, content of a message before the reply, an
# activity replacing a message, and duplicate ids from a snapshot.
TANGLED: list[Event] = [
    {
        "type": "RUN_STARTED",
        "threadId": THREAD,
        "runId": RUN,
        "input": {
            "threadId": THREAD,
            "runId": RUN,
            "messages": [
                {
                    "id": "h1",
                    "role": "assistant",
                    "content": "old",
                    "toolCalls": [
                        {
                            "id": "hc",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"id": "u1", "role": "user", "content": "go"},
            ],
        },
    },
    {"type": "TOOL_CALL_RESULT", "messageId": "hr", "toolCallId": "hc", "content": "late"},
    {"type": "TOOL_CALL_RESULT", "messageId": "orph", "toolCallId": "later", "content": "early"},
    {"type": "TEXT_MESSAGE_START", "messageId": "a1"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "x"},
    {
        "type": "TOOL_CALL_START",
        "toolCallId": "later",
        "toolCallName": "g",
        "parentMessageId": "a1",
    },
    {"type": "TOOL_CALL_END", "toolCallId": "later"},
    {"type": "TEXT_MESSAGE_END", "messageId": "a1"},
    {"type": "TEXT_MESSAGE_START", "messageId": "h1"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "h1", "delta": "zzz"},
    {"type": "TEXT_MESSAGE_END", "messageId": "h1"},
    {"type": "TEXT_MESSAGE_START", "messageId": "a2"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a2", "delta": "kept"},
    {"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "card", "content": {"c": 1}},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a2", "delta": "!"},
    {"type": "TEXT_MESSAGE_END", "messageId": "a2"},
    {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [
            {"id": "u1", "role": "user", "content": "go"},
            {"id": "dd", "role": "assistant", "content": "one"},
            {"id": "dd", "role": "assistant", "content": "two"},
        ],
    },
    {"type": "TEXT_MESSAGE_START", "messageId": "dd"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "dd", "delta": " more"},
    {"type": "TOOL_CALL_START", "toolCallId": "t3", "toolCallName": "h", "parentMessageId": "dd"},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "t3", "delta": "[]"},
    {"type": "TEXT_MESSAGE_END", "messageId": "dd"},
    {"type": "TOOL_CALL_END", "toolCallId": "t3"},
    {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN},
]


# An id both before the reply and in it: events naming it reach the first message, but
# open and close the reply's part (a run whose id reuse the projection must not miss).
DUPLICATE: list[Event] = [
    {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN},
    {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [
            {"id": "x", "role": "assistant", "content": "before"},
            {"id": "u1", "role": "user", "content": "go"},
            {"id": "x", "role": "assistant", "content": "reply"},
        ],
    },
    {"type": "TEXT_MESSAGE_START", "messageId": "x"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "x", "delta": "!"},
    {"type": "TEXT_MESSAGE_START", "messageId": "y"},
    {"type": "TEXT_MESSAGE_END", "messageId": "x"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "y", "delta": "why"},
    {"type": "TEXT_MESSAGE_END", "messageId": "y"},
    {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN},
]

# A result of a call made before the reply is inserted before the reply's first message.
BEFORE_REPLY: list[Event] = [
    {
        "type": "RUN_STARTED",
        "threadId": THREAD,
        "runId": RUN,
        "input": {
            "threadId": THREAD,
            "runId": RUN,
            "messages": [
                {
                    "id": "h",
                    "role": "assistant",
                    "toolCalls": [
                        {
                            "id": "hc",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"id": "u", "role": "user", "content": "go"},
            ],
        },
    },
    {"type": "TEXT_MESSAGE_START", "messageId": "a"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a", "delta": "one"},
    {"type": "TOOL_CALL_RESULT", "messageId": "hr", "toolCallId": "hc", "content": "late"},
    {"type": "TEXT_MESSAGE_END", "messageId": "a"},
    {"type": "TEXT_MESSAGE_START", "messageId": "b"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "b", "delta": "two"},
    {"type": "TEXT_MESSAGE_END", "messageId": "b"},
    {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN},
]


def long_run(messages: int, deltas: int) -> list[Event]:
    """A run of ``messages`` text messages of ``deltas`` deltas each, every one followed
    by a tool call with ``deltas`` argument fragments and its result."""
    events: list[Event] = [{"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN}]
    for m in range(messages):
        mid, cid = f"m{m}", f"c{m}"
        events.append({"type": "TEXT_MESSAGE_START", "messageId": mid})
        events += [
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": f"w{d} "}
            for d in range(deltas)
        ]
        events.append({"type": "TEXT_MESSAGE_END", "messageId": mid})
        events.append(
            {
                "type": "TOOL_CALL_START",
                "toolCallId": cid,
                "toolCallName": "t",
                "parentMessageId": mid,
            }
        )
        events.append({"type": "TOOL_CALL_ARGS", "toolCallId": cid, "delta": '{"xs":['})
        events += [
            {"type": "TOOL_CALL_ARGS", "toolCallId": cid, "delta": f"{d},"} for d in range(deltas)
        ]
        events.append({"type": "TOOL_CALL_ARGS", "toolCallId": cid, "delta": "0]}"})
        events.append({"type": "TOOL_CALL_END", "toolCallId": cid})
        events.append(
            {"type": "TOOL_CALL_RESULT", "messageId": f"r{m}", "toolCallId": cid, "content": "ok"}
        )
    events.append({"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN})
    return events


RUNS: dict[str, list[Event]] = {
    **AGUI_RUNS,
    "approval": APPROVAL,
    "history": HISTORY,
    "reorder": REORDER,
    "two_runs": TWO_RUNS,
    "tangled": TANGLED,
    "duplicate": DUPLICATE,
    "before_reply": BEFORE_REPLY,
}
