"""useChat's resume against a real node: the real ``ai`` client (ai@7.0.113) over HTTP.

``tests/js/ai_sdk_http.mjs`` drives ``DefaultChatTransport.reconnectToStream`` (what
``useChat({resume: true})`` calls: ``GET {api}/{chatId}/stream``, every chunk validated
against ``uiMessageChunkSchema``) and ``readUIMessageStream``, and an ``AbstractChat``
resuming with ``resumeStream()``, against a node on the embedded log and on Redis
(contract D10).  For each run:

- a run followed from its start (the committed route, opened when only RUN_STARTED was
  published), and a chat rejoined at every cut point (publish the first k events,
  reconnect, publish the rest while the stream is open), end with the UIMessage the
  pure translation of the whole run folds to;
- the reconnect route answers 204 once the run ended, for a chat without a run and for
  another tenant's chat (the client then keeps the chat as it is);
- an AbstractChat whose messages already hold the user message (and, in a second chat, a
  stale copy of the run's message) resumes without duplicating the assistant message;
- the raw response carries ``x-vercel-ai-ui-message-stream: v1``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from gateway.app import Gateway
from gateway.dialects.ai_sdk.translator import AiSdkTranslator, message_id
from tests.agui.runs import NESTED, RUN
from tests.dialects.runs import APPROVAL
from tests.support.jsprocess import Duplex, duplex, js_packages, node_executable
from tests.support.node import auth, token

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Json = dict[str, Any]
RUNS = {"nested": NESTED, "approval": APPROVAL}
#: Bound on each test.
TEST_TIMEOUT = 120


@pytest.fixture(scope="module")
def node_exe() -> str:
    exe = node_executable()
    js_packages()
    return exe


def on_thread(events: list[Json], thread: str) -> list[Json]:
    """The run's events as published on another thread (the ids they name follow)."""
    text = json.dumps(events).replace('"thread-1"', json.dumps(thread))
    moved: list[Json] = json.loads(text)
    return moved


def chunks_of(events: list[Json], thread: str) -> list[Json]:
    """Every chunk of the run, as a client that saw it all from the start got them."""
    t = AiSdkTranslator(thread, RUN)
    out: list[Json] = []
    for event in events:
        out += json.loads(json.dumps(t.translate(event)))
        if event["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            break
    return out


async def publish(client: httpx.AsyncClient, thread: str, events: list[Json]) -> None:
    r = await client.post(f"/v1/threads/{thread}/runs/{RUN}/ui/ag-ui", json=events, headers=auth())
    assert r.status_code == 200, r.text


async def reference(js: Duplex, events: list[Json], thread: str) -> Json:
    folded = await js.call("fold", chunks=chunks_of(events, thread))
    assert folded["errors"] == [] and folded["message"] is not None
    message: Json = folded["message"]
    assert message["id"] == message_id(thread, RUN)
    return message


def streamed(opened: Json) -> None:
    assert opened["status"] == 200, opened
    assert opened["header"] == "v1"
    assert opened["contentType"] == "text/event-stream; charset=utf-8"
    assert opened["stream"] is True


@pytest.mark.parametrize("name", sorted(RUNS))
async def test_followed_from_the_start_and_rejoined_at_every_cut(
    node: Gateway, node_exe: str, name: str
) -> None:
    events = RUNS[name]
    tok = token()
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        duplex(node_exe, "ai_sdk_http.mjs", {"base": node.url}) as js,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            # From the start, on the committed route: every chunk, live.
            thread = f"{name}-start"
            moved = on_thread(events, thread)
            await publish(client, thread, moved[:1])
            path = f"/v1/threads/{thread}/runs/{RUN}/ui/ai-sdk"
            streamed(await js.call("open", name="start", chatId=thread, token=tok, path=path))
            await publish(client, thread, moved[1:])
            got = await js.call("finish", name="start")
            assert got["errors"] == []
            assert got["message"] == await reference(js, moved, thread)
            # Rejoined through useChat's reconnect at every cut point: the compact
            # replay of the first k events, then the rest live.
            for k in range(1, len(events)):
                thread = f"{name}-cut-{k}"
                moved = on_thread(events, thread)
                await publish(client, thread, moved[:k])
                streamed(await js.call("open", name=thread, chatId=thread, token=tok))
                await publish(client, thread, moved[k:])
                got = await js.call("finish", name=thread)
                assert got["errors"] == [], k
                assert got["message"] == await reference(js, moved, thread), k
                # The run ended: nothing to resume (reconnectToStream returns null).
                after = await js.call("open", name=f"{thread}-after", chatId=thread, token=tok)
                assert (after["status"], after["stream"]) == (204, False), k


async def test_nothing_to_resume_is_204_for_the_client(node: Gateway, node_exe: str) -> None:
    thread = "going"
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        duplex(node_exe, "ai_sdk_http.mjs", {"base": node.url}) as js,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            none = await js.call("open", name="none", chatId="no-run", token=token())
            assert (none["status"], none["stream"], none["header"]) == (204, False, None)
            await publish(client, thread, on_thread(NESTED[:3], thread))
            theirs = await js.call("open", name="theirs", chatId=thread, token=token("other"))
            assert (theirs["status"], theirs["stream"]) == (204, False)
            ours = await js.call("open", name="ours", chatId=thread, token=token())
            streamed(ours)


async def test_a_chat_resumes_without_duplicating_the_assistant_message(
    node: Gateway, node_exe: str
) -> None:
    k = 12
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "plan my trip"}]}
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        duplex(node_exe, "ai_sdk_http.mjs", {"base": node.url}) as js,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            for case in ("user-only", "stale-copy"):
                thread = f"chat-{case}"
                moved = on_thread(NESTED, thread)
                expected = await reference(js, moved, thread)
                messages: list[Json] = [user]
                if case == "stale-copy":
                    # What the page held when it was reloaded: the run's message so far.
                    stale = {"id": message_id(thread, RUN), "role": "assistant", "parts": []}
                    messages.append(stale)
                await publish(client, thread, moved[:k])
                opened = await js.call(
                    "chat", name=case, chatId=thread, messages=messages, token=token()
                )
                assert (opened["status"], opened["header"]) == (200, "v1")
                await publish(client, thread, moved[k:])
                done = await js.call("chatDone", name=case)
                assert done["errors"] == [] and done["status"] == "ready", done
                assert done["messages"] == [user, expected], case
                assert [r["url"] for r in done["requests"]] == [
                    f"{node.url}/v1/ui/ai-sdk/any-agent/{thread}/stream"
                ]
                assert done["finishes"] == [
                    {
                        "id": expected["id"],
                        "isError": False,
                        "isAbort": False,
                        "isDisconnect": False,
                        "finishReason": "stop",
                    }
                ]
                # Resuming again once the run ended: 204, the chat stays as it is.
                again = await js.call(
                    "chat",
                    name=f"{case}-again",
                    chatId=thread,
                    messages=done["messages"],
                    token=token(),
                )
                assert again["status"] == 204
                done = await js.call("chatDone", name=f"{case}-again")
                assert done["messages"] == [user, expected] and done["status"] == "ready"
