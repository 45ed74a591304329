"""The AI SDK translation against the real ``ai`` client (ai@7.0.113), at every cut point.

``tests/js/ai_sdk_replay.mjs`` feeds the SSE bytes the gateway would write through the
real ``DefaultChatTransport`` (a fetch stand-in answers ``reconnectToStream``; every
chunk is parsed and validated against ``uiMessageChunkSchema``) into
``readUIMessageStream``, or resumes an ``AbstractChat`` with them, without a network.
For every hand-written run:

- ``compact(fold of [:k])`` alone gives the message of a client that saw the chunks of
  ``[:k]``;
- the full translation, ``compact(fold of [:k])`` followed by the translation of
  ``[k:]`` (for every k), and a stream cut after any chunk j and resumed in a second
  response from a translator rebuilt at the fold before that chunk's event, all end with
  the same UIMessage, and the client reports no error but the run's own RUN_ERROR;
- ``useChat``'s resume (``AbstractChat.resumeStream``) requests ``GET
  {api}/{chatId}/stream``, keeps the chat as it is on 204, and replaces rather than
  duplicates the run's message when it resumes twice.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.dialects.ai_sdk.framing import DONE, event_frames, restart_frame, unnumbered_frames
from gateway.dialects.ai_sdk.translator import AiSdkTranslator, compact, message_id
from tests.agui.runs import NESTED
from tests.dialects.runs import APPROVAL, RUN, RUNS, THREAD

JS = Path(__file__).parent.parent / "js"
EPOCH = 1_700_000_000_000
Event = dict[str, Any]


def fold_of(events: list[Event]) -> RunFold:
    fold = RunFold()
    for event in events:
        fold.apply(event)
    return fold


def translated(events: list[Event], translator: AiSdkTranslator | None = None) -> list[list[Any]]:
    t = translator or AiSdkTranslator(THREAD, RUN)
    return [t.translate(event) for event in events]


def sse(per_event: list[list[Any]], first_offset: int = 1) -> bytes:
    return b"".join(
        event_frames(Cursor(EPOCH, offset), chunks)
        for offset, chunks in enumerate(per_event, first_offset)
    )


def replay(payload: dict[str, Any]) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "ai").is_dir():
        pytest.fail("Node.js and tests/js/node_modules are needed (scripts/test installs them)")
    done = subprocess.run(
        [node, str(JS / "ai_sdk_replay.mjs")],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def run_errors(events: list[Event]) -> list[dict[str, str]]:
    return [{"name": "Error", "message": e["message"]} for e in events if e["type"] == "RUN_ERROR"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_cut_ends_with_the_message_of_the_full_stream(name: str) -> None:
    events = RUNS[name]
    full = translated(events)
    streams: dict[str, Any] = {"full": {"sse": [(sse(full) + DONE).decode()]}}
    for k in range(len(events) + 1):
        fold = fold_of(events[:k])
        rest = translated(events[k:], AiSdkTranslator.from_fold(fold, THREAD, RUN))
        body = unnumbered_frames(compact(fold, THREAD, RUN)) + sse(rest, k + 1) + DONE
        streams[f"compact:{k}"] = {"sse": [body.decode()]}
        # Alone, the compact replay is the message of a client that saw [:k] live.
        streams[f"seen:{k}"] = {"sse": [sse(full[:k]).decode()]}
        streams[f"alone:{k}"] = {"sse": [unnumbered_frames(compact(fold, THREAD, RUN)).decode()]}
    # A cut after chunk j of the whole stream: chunk K of the event at offset O.  The
    # client resumes after E:O:K; the second response starts with chunk K+1 of O.
    j = 0
    for position, chunks in enumerate(full):
        for index in range(len(chunks)):
            j += 1
            before = sse(full[:position]) + event_frames(
                Cursor(EPOCH, position + 1), chunks[: index + 1]
            )
            resumed = AiSdkTranslator.from_fold(fold_of(events[:position]), THREAD, RUN)
            again = resumed.translate(events[position])
            after = event_frames(Cursor(EPOCH, position + 1), again[index + 1 :], index + 1)
            after += sse(translated(events[position + 1 :], resumed), position + 2) + DONE
            streams[f"chunk:{j}"] = {"sse": [before.decode(), after.decode()]}
    out = replay({"streams": streams})["streams"]

    expected = out["full"]
    assert expected["message"] is not None
    assert expected["message"]["id"] == message_id(THREAD, RUN)
    assert expected["errors"] == run_errors(events)
    for key, got in out.items():
        if key.startswith(("seen:", "alone:")):
            continue
        assert got["errors"] == run_errors(events), key
        assert got["message"] == expected["message"], key
    for k in range(len(events) + 1):
        assert out[f"alone:{k}"]["message"] == out[f"seen:{k}"]["message"], k
        assert out[f"alone:{k}"]["errors"] == out[f"seen:{k}"]["errors"], k
        assert all(
            r == {"url": "/api/chat/chat-1/stream", "method": "GET"} for r in got["requests"]
        )


def test_the_client_builds_the_message_the_mapping_promises() -> None:
    # Hand-written expectations, so the parity above is not only self-consistent.
    out = replay(
        {
            "streams": {
                name: {"sse": [(sse(translated(events)) + DONE).decode()]}
                for name, events in (("nested", NESTED), ("approval", APPROVAL))
            }
        }
    )["streams"]
    assert out["nested"]["message"] == {
        "id": "run:thread-1:run-1",
        "role": "assistant",
        "parts": [
            {"type": "reasoning", "id": "rm1", "text": "think", "state": "done"},
            {"type": "text", "text": "Hello world", "state": "done"},
            {
                "type": "tool-search",
                "toolCallId": "tc1",
                "state": "output-available",
                "input": {"q": "flights"},
                "output": "3 flights",
            },
            {"type": "data-progress", "id": "act1", "data": {"done": 2, "of": 3}},
            {"type": "text", "text": "Done.", "state": "done"},
            {"type": "tool-book", "toolCallId": "tc2", "state": "input-available", "input": {}},
        ],
    }
    parts = out["approval"]["message"]["parts"]
    assert parts[0] == {"type": "text", "text": "I'll book", "state": "done"}
    assert parts[1] == {
        "type": "tool-book",
        "toolCallId": "tc-book",
        "state": "approval-requested",
        "input": {"flight": "LH1", "n": 9007199254740991},
        "approval": {"id": "ch-1", "requestReason": "Book LH1?"},
    }
    assert parts[2]["state"] == "output-error" and parts[2]["rawInput"] == '{"amount": 1'
    assert parts[3]["type"] == "tool-ask" and parts[3]["state"] == "output-error"
    assert parts[4] == {
        "type": "data-ag-ui-interrupt",
        "id": "q-1",
        "data": {"id": "q-1", "reason": "question", "message": "Which seat?"},
    }


def test_use_chat_resume_requests_the_stream_and_replaces_the_runs_message() -> None:
    user = {"id": "u0", "role": "user", "parts": [{"type": "text", "text": "book it"}]}
    events = APPROVAL
    full = (sse(translated(events)) + DONE).decode()
    cut = sse(translated(events[:6])).decode()  # the connection dropped mid-run
    k = 9
    fold = fold_of(events[:k])
    rest = translated(events[k:], AiSdkTranslator.from_fold(fold, THREAD, RUN))
    joined = (unnumbered_frames(compact(fold, THREAD, RUN)) + sse(rest, k + 1) + DONE).decode()
    restart = restart_frame(Cursor(EPOCH + 1, 0)).decode()
    chats = {
        "none": {"id": "chat-7", "messages": [user], "responses": [{"status": 204}]},
        "twice": {
            "id": "chat-7",
            "messages": [user],
            "responses": [{"status": 200, "sse": cut}, {"status": 200, "sse": joined}],
        },
        "full": {"id": "chat-7", "messages": [user], "responses": [{"status": 200, "sse": full}]},
        "restart": {
            "id": "chat-7",
            "messages": [user],
            "responses": [{"status": 200, "sse": restart}],
        },
    }
    out = replay({"chats": chats})["chats"]

    assert out["none"]["requests"] == [{"url": "/api/chat/chat-7/stream", "method": "GET"}]
    assert out["none"]["after"] == [{"status": "ready", "messages": [user]}]
    assert out["none"]["finishes"] == []

    final = out["full"]["after"][-1]["messages"]
    assert [m["id"] for m in final] == ["u0", message_id(THREAD, RUN)]
    assert out["full"]["finishes"][-1]["finishReason"] == "tool-calls"
    twice = out["twice"]["after"]
    assert [m["id"] for m in twice[0]["messages"]] == ["u0", message_id(THREAD, RUN)]
    assert twice[1]["messages"] == final  # replaced by id, not appended again
    assert out["twice"]["errors"] == []

    assert out["restart"]["after"] == [{"status": "ready", "messages": [user]}]
    assert out["restart"]["data"] == [
        {
            "type": "data-gateway-epoch-restarted",
            "data": {"cursor": f"{EPOCH + 1}:0"},
            "transient": True,
        }
    ]
