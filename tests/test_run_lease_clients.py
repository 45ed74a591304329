"""A producer process killed mid-run, seen by real clients on two nodes (docs/contract.md,
"Runs end", 4. to 5.): the lease runs out and the run ends once, with one AG-UI
``RUN_ERROR`` ``producer_lost``, for every viewer on every node, within the lease plus
two seconds of the producer's last publish.

The producer is a process of its own (``tests/support/abandoned_producer.py``): it starts
an AG-UI run on node A with the shortest lease (5 s), opens a text message, says so, and
hangs until the test kills it with SIGKILL.  The viewers follow the run live: AG-UI SSE
(httpx_sse) on node A, ``gateway.v1`` over WebSocket (``websockets``) on node B, npm
``ai``'s ``DefaultChatTransport``/``readUIMessageStream`` on node B's AI SDK route and
npm ``@ag-ui/client``'s ``HttpAgent`` on node A (``tests/js/live_follow.mjs``, one Node.js
process each).  Then the run is over like any ended run: the feed holds one end, one node
counted it, the AI SDK reconnect route has nothing to resume, a late publish is refused.

A second test races three nodes on one Redis for the same expired run.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from httpx_sse import aconnect_sse

from gateway.agui.events import TERMINAL
from gateway.app import Gateway
from gateway.cursor import Cursor
from gateway.fanout.subscription import SubState
from gateway.feed import FeedKey, run_feed
from gateway.store.interfaces import Lapse
from tests.support import abandoned_producer
from tests.support import events as ev
from tests.support.jsprocess import Duplex, duplex, js_packages, node_executable
from tests.support.node import auth, lease_ends, metric, open_ws, start_node, token
from tests.support.wait import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Json = dict[str, Any]
TENANT = "acme"
THREAD = "lease-clients-thread"
LEASE = 5
#: The contract's bound on an abandoned run's end: its lease plus two seconds after the
#: last publish.  SLACK is for a loaded CI machine (two cores, every process of the test
#: on them); it is kept small so that an end that came a sweep late would still fail.
CONTRACT_MARGIN = 2.0
SLACK = 1.5
END_WITHIN = LEASE + CONTRACT_MARGIN + SLACK
#: Bound on each test, and on each wait inside one that is not the lease's.
TEST_TIMEOUT = 60
WAIT = 10
PRODUCER = Path(abandoned_producer.__file__)


@pytest.fixture(scope="module")
def node_exe() -> str:
    exe = node_executable()
    js_packages()
    return exe


# --------------------------------------------------------------------------- helpers


def agui_path(run: str) -> str:
    return f"/v1/threads/{THREAD}/runs/{run}/ui/ag-ui"


async def feed_events(node: Gateway, feed: FeedKey) -> list[Json]:
    """Every event the store holds for the run, in order."""
    state = await node.backend.feeds.state(feed)
    assert state is not None
    items = await node.backend.feeds.read(feed, Cursor(state.epoch, 0), 1000)
    return [json.loads(item.data) for item in items]


def lost(seen: Sequence[Json]) -> Json:
    """The one end a lease gives, checked: last, once, RUN_ERROR producer_lost."""
    ends = [e for e in seen if e["type"] in TERMINAL]
    assert len(ends) == 1 and seen[-1] is ends[0], seen
    end = ends[0]
    assert end["type"] == "RUN_ERROR" and end["code"] == "producer_lost", end
    assert isinstance(end["message"], str) and end["message"]
    return end


async def live(node: Gateway, feed: FeedKey, subscribers: int) -> None:
    """Wait until ``subscribers`` subscriptions on ``node`` follow ``feed`` live."""

    def check() -> bool:
        audience = node.hub.audiences.get(feed)
        subs = audience.subs if audience is not None else set()
        return sum(s.state is SubState.LIVE for s in subs) >= subscribers

    await until(check, WAIT, f"{subscribers} live subscriptions on {node.url}")


async def sse_until_end(client: httpx.AsyncClient, run: str, seen: list[Json]) -> float:
    """Follow the run as AG-UI SSE until the server ends the stream; returns when
    (``time.monotonic()``) it ended."""
    async with aconnect_sse(client, "GET", agui_path(run), headers=auth()) as source:
        async for sse in source.aiter_sse():
            seen.append(json.loads(sse.data))
            assert len(seen) < 100
    return time.monotonic()


async def ws_until_end(node: Gateway, run: str, seen: list[Json]) -> float:
    """Follow the run over gateway.v1 until its end arrives; returns when it did."""
    async with open_ws(node) as ws:
        await ws.send(json.dumps({"type": "subscribe", "feed": f"run/{THREAD}/{run}"}))
        while True:
            frame = json.loads(await ws.recv())
            assert frame["type"] in ("subscribed", "event"), frame
            if frame["type"] == "event":
                seen.append(frame["data"])
                if frame["data"]["type"] in TERMINAL:
                    return time.monotonic()


async def js_ready(js: Duplex) -> None:
    """Wait until the Node.js program has loaded its packages and reads commands: the
    reply to ``finish`` of a client it never started (it answers at once, with nothing)."""
    assert await js.call("finish", name="ready") is None


@contextlib.asynccontextmanager
async def producer(base_url: str, run: str) -> AsyncIterator[tuple[anyio.abc.Process, Json]]:
    """Start the producer process on ``base_url``; yields it with its report once it has
    published (``last_sent``/``last_answered``: ``time.monotonic()`` around its last
    publish).  Killed on the way out if it still runs."""
    argv = [sys.executable, str(PRODUCER), base_url, token(), THREAD, run, str(LEASE)]
    with tempfile.TemporaryFile() as stderr:
        process = await anyio.open_process(argv, stdout=subprocess.PIPE, stderr=stderr)
        try:
            assert process.stdout is not None
            out = BufferedByteReceiveStream(process.stdout)
            try:
                line = await out.receive_until(b"\n", 1 << 16)
            except (anyio.IncompleteRead, anyio.EndOfStream):
                await process.wait()
                stderr.seek(0)
                raise AssertionError(
                    f"the producer exited ({process.returncode}): {stderr.read().decode()}"
                ) from None
            report: Json = json.loads(line)
            assert report.get("published") == 4, report
            yield process, report
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                with anyio.move_on_after(5):
                    await process.wait()
                await process.aclose()


# --------------------------------------------------------------------------- the tests


async def test_a_killed_producers_run_ends_once_for_every_client_on_two_nodes(
    redis_url: str, redis_prefix: str, node_exe: str
) -> None:
    run = ev.new_id()
    feed = run_feed(TENANT, THREAD, run)
    published = abandoned_producer.events(THREAD, run)
    js_config = {"timeout_ms": TEST_TIMEOUT * 1000}
    sse_seen: list[Json] = []
    ws_seen: list[Json] = []
    ended_at: dict[str, float] = {}
    results: dict[str, Any] = {}
    async with (
        start_node(redis_url, redis_prefix) as a,
        start_node(redis_url, redis_prefix) as b,
        httpx.AsyncClient(base_url=a.url, timeout=10) as ca,
        httpx.AsyncClient(base_url=b.url, timeout=10) as cb,
        duplex(node_exe, "live_follow.mjs", js_config) as js_ai,
        duplex(node_exe, "live_follow.mjs", js_config) as js_agui,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            # Ready before the run starts: the viewers must join within its lease.
            await js_ready(js_ai)
            await js_ready(js_agui)
            async with producer(a.url, run) as (process, report):

                async def sse_viewer() -> None:
                    ended_at["sse"] = await sse_until_end(ca, run, sse_seen)

                async def ws_viewer() -> None:
                    ended_at["ws"] = await ws_until_end(b, run, ws_seen)

                async def ai_sdk_viewer() -> None:
                    url = f"{b.url}/v1/threads/{THREAD}/runs/{run}/ui/ai-sdk"
                    opened = await js_ai.call("ai_sdk", name="run", url=url, token=token())
                    assert opened["status"] == 200 and opened["stream"], opened
                    results["ai_sdk"] = await js_ai.call("finish", name="run")
                    ended_at["ai_sdk"] = time.monotonic()

                async def agui_viewer() -> None:
                    agent = {"threadId": THREAD, "runId": run, "token": token()}
                    await js_agui.call("agui", name="run", url=f"{a.url}/v1/ui/ag-ui/x", **agent)
                    results["agui"] = await js_agui.call("finish", name="run")
                    ended_at["agui"] = time.monotonic()

                async with anyio.create_task_group() as tg:
                    for follow in (sse_viewer, ws_viewer, ai_sdk_viewer, agui_viewer):
                        tg.start_soon(follow)
                    await live(a, feed, 2)  # SSE, HttpAgent
                    await live(b, feed, 2)  # WebSocket, AI SDK
                    # Mid-run: the text message is open and nothing has ended it yet.
                    assert await feed_events(a, feed) == published
                    process.send_signal(signal.SIGKILL)
                    killed_at = time.monotonic()
                    assert await process.wait() == -signal.SIGKILL
            stored = await feed_events(b, feed)
            # One node ended it (counted once its lapse step answered); not the producer.
            assert sorted(await lease_ends([a, b], 1)) == [0, 1]
            # Each node ended its SSE streams itself (the format's end), none was left.
            sse_ends = [
                metric(n, "gateway_disconnects_total", transport="sse", reason=reason)
                for n in (a, b)
                for reason in ("finished", "client")
            ]
            assert sse_ends == [2, 0, 1, 0]  # A: SSE and HttpAgent; B: the AI SDK
            timings = {k: round(t - report["last_answered"], 3) for k, t in ended_at.items()}
            print(f"killed {killed_at - report['last_answered']:.3f}s after the last publish")
            print(f"each viewer's end, after the last publish: {timings}")

            # Afterwards: nothing to resume, and the run refuses more.
            reconnect = f"{b.url}/v1/ui/ai-sdk/any-agent/{THREAD}/stream"
            resumed = await js_ai.call("ai_sdk", name="again", url=reconnect, token=token())
            r = await ca.get(f"/v1/ui/ai-sdk/any-agent/{THREAD}/stream", headers=auth())
            assert r.status_code == 204 and r.content == b"", r.text
            late = {"type": "TEXT_MESSAGE_END", "messageId": published[1]["messageId"]}
            for client in (ca, cb):
                r = await client.post(agui_path(run), json=late, headers=auth())
                assert r.status_code == 409 and r.json()["error"]["code"] == "run_ended", r.text

    # The kill came while the run was live, the end within the lease plus two seconds of
    # the last publish (and not before the lease: the last publish renewed it).
    assert killed_at - report["last_sent"] < LEASE
    assert set(ended_at) == {"sse", "ws", "ai_sdk", "agui"}
    for viewer, at in ended_at.items():
        assert at - report["last_answered"] <= END_WITHIN, (viewer, timings)
        assert at - report["last_sent"] >= LEASE - 0.1, (viewer, timings)

    # The store holds the run once, with one end; the AG-UI viewers saw exactly that.
    assert stored[:-1] == published
    end = lost(stored)
    assert sse_seen == stored
    assert ws_seen == stored

    # @ag-ui/client: every event, the error last; the run settles with the text so far.
    agui = results["agui"]
    assert agui["ok"] and agui["events"] == [e["type"] for e in stored], agui
    assert [(m["role"], m["content"]) for m in agui["messages"]] == [("assistant", "Hello, wor")]

    # The AI SDK: the open text ends, then the error chunk with the end's message, then
    # [DONE] ends the stream; the client's message holds the text so far.
    ai_sdk = results["ai_sdk"]
    chunks = ai_sdk["chunks"]
    assert [c["type"] for c in chunks][-2:] == ["text-end", "error"], chunks
    assert [c for c in chunks if c["type"] == "error"] == [
        {"type": "error", "errorText": end["message"]}
    ]
    assert ai_sdk["raw"].endswith("data: [DONE]\n\n"), ai_sdk["raw"][-200:]
    assert ai_sdk["errors"] == [{"name": "Error", "message": end["message"]}]
    text = [p for p in ai_sdk["message"]["parts"] if p["type"] == "text"]
    assert [p["text"] for p in text] == ["Hello, wor"], ai_sdk["message"]

    assert sorted(metric(n, "gateway_runs_ended_total", by="lease") for n in (a, b)) == [0, 1]
    assert sum(metric(n, "gateway_runs_ended_total", by="producer") for n in (a, b)) == 0
    # The reconnect route, through the real client: nothing to resume (204, no stream).
    assert resumed == {"status": 204, "header": None, "contentType": None, "stream": False}


async def test_three_nodes_racing_for_one_expired_run_end_it_once(
    redis_url: str, redis_prefix: str
) -> None:
    run = ev.new_id()
    feed = run_feed(TENANT, THREAD, run)
    seen: list[list[Json]] = [[], [], []]
    async with (
        start_node(redis_url, redis_prefix) as a,
        start_node(redis_url, redis_prefix) as b,
        start_node(redis_url, redis_prefix) as c,
    ):
        nodes = (a, b, c)
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(httpx.AsyncClient(base_url=n.url, timeout=10))
                for n in nodes
            ]
            with anyio.fail_after(TEST_TIMEOUT):
                started = {"type": "RUN_STARTED", "threadId": THREAD, "runId": run}
                r = await clients[0].post(
                    agui_path(run), json=started, headers=auth(), params={"lease_seconds": LEASE}
                )
                assert r.status_code == 200, r.text
                r = await clients[0].get("/v1/runs", params={"state": "live"}, headers=auth())
                [listed] = [x for x in r.json()["runs"] if x["run_id"] == run]
                deadline_ms = listed["lease_deadline_ms"]
                lapses: list[Lapse] = []

                async def lapse(node: Gateway) -> None:
                    lapses.append(await node.publisher.lapse(feed))

                async with anyio.create_task_group() as tg:
                    for client, got in zip(clients, seen, strict=True):
                        tg.start_soon(sse_until_end, client, run, got)
                    for node in nodes:
                        await live(node, feed, 1)
                    # Waiting on the lease's clock (the store's, wall-clock ms); then, on
                    # top of the three nodes' own sweeps, each node tries the sweep's
                    # step three times at once, so that attempts do coincide.
                    await anyio.sleep(max(0.0, deadline_ms / 1000 - time.time()))
                    async with anyio.create_task_group() as racing:
                        for node in nodes * 3:
                            racing.start_soon(lapse, node)
                stored = await feed_events(c, feed)
                await lease_ends(nodes, 1)

    assert len(lapses) == 9
    assert sum(x.ended is not None for x in lapses) <= 1, lapses
    assert stored[0] == started
    end = lost(stored)
    assert len(stored) == 2 and stored[1] is end
    assert seen == [stored, stored, stored]
    ended = [metric(n, "gateway_runs_ended_total", by="lease") for n in nodes]
    assert sum(ended) == 1 and sorted(ended) == [0, 0, 1], ended
