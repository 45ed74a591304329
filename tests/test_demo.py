"""gateway.demo against real nodes: what it publishes is in the feeds, exactly once.

The items are read back over one WebSocket (every feed the demo touched) and compared
with what :func:`run_demo` reported through ``on_published``; one test restarts the
node (same Redis, same port) under the running demo, which retries without publishing
anything twice; the last runs ``python -m gateway.demo`` and stops it with Ctrl-C.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.demo import DemoError, Published, run_demo, tenant_of
from tests.support.node import open_ws, start_node, token
from tests.support.redis_server import free_port

pytestmark = pytest.mark.anyio

Json = dict[str, Any]
STEP = 20.0


class Collected:
    def __init__(self) -> None:
        self.items: list[Published] = []

    def __call__(self, published: Published) -> None:
        self.items.append(published)

    def by_feed(self) -> dict[str, list[tuple[str, Json]]]:
        """(cursor, published item) per feed, in publish order."""
        out: dict[str, list[tuple[str, Json]]] = defaultdict(list)
        for p in self.items:
            out[p.publish.feed].extend(zip(p.cursors, p.publish.body, strict=True))
        return out


async def read_back(node: Gateway, feeds: dict[str, list[tuple[str, Json]]]) -> dict[str, list]:
    """Every item of ``feeds`` from the gateway, over one WebSocket: (cursor, item) with
    team items as ``{"source", "event"}``."""
    want = sum(len(v) for v in feeds.values())
    got: dict[str, list[tuple[str, Json]]] = defaultdict(list)
    async with open_ws(node) as ws:
        for feed in feeds:
            await ws.send(json.dumps({"type": "subscribe", "feed": feed}))
        count = 0
        while count < want:
            frame = json.loads(await ws.recv())
            if frame["type"] != "event":
                assert frame["type"] == "subscribed", frame
                continue
            data = frame["data"]
            if frame["feed"].startswith("team/"):
                data = {"source": data["source"], "event": data["event"]}
            got[frame["feed"]].append((frame["cursor"], data))
            count += 1
    return got


async def test_what_the_demo_publishes_is_in_the_feeds(node: Gateway) -> None:
    collected = Collected()
    out = io.StringIO()
    with anyio.fail_after(STEP):
        stats = await run_demo(
            node.url, token(), rate=500, seed=3, max_events=150, progress=out,
            on_published=collected,
        )  # fmt: skip
        feeds = collected.by_feed()
        assert await read_back(node, feeds) == feeds
    assert stats.published == len(collected.items) == 150
    assert stats.team + stats.run == 150 and stats.team > 0 and stats.run > 0
    assert stats.feeds == set(feeds) and stats.retries == 0
    # At least one team and two runs at once, each with its own cursors 1, 2, ...
    assert sum(f.startswith("team/") for f in feeds) >= 1
    assert sum(f.startswith("run/") for f in feeds) >= 2
    for rows in feeds.values():
        assert [int(c.split(":")[1]) for c, _ in rows] == list(range(1, len(rows) + 1))
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("demo: 150 events (") and lines[-1].endswith("(stopped)")


async def test_the_rate_bounds_the_pace(node: Gateway) -> None:
    with anyio.fail_after(STEP):
        start = anyio.current_time()
        stats = await run_demo(node.url, token(), rate=20, max_events=11)
        elapsed = anyio.current_time() - start
    assert stats.published == 11
    assert elapsed >= 0.5  # 10 intervals of 50 ms after the first publish


async def test_stop_finishes_the_publish_under_way(node: Gateway) -> None:
    collected = Collected()
    stop = anyio.Event()

    def on_published(p: Published) -> None:
        collected(p)
        if len(collected.items) == 7:
            stop.set()

    with anyio.fail_after(STEP):
        stats = await run_demo(node.url, token(), rate=1000, on_published=on_published, stop=stop)
        feeds = collected.by_feed()
        assert await read_back(node, feeds) == feeds
    assert stats.published == 7


async def test_the_demo_survives_a_node_restart_without_publishing_twice(
    redis_url: str, redis_prefix: str
) -> None:
    collected = Collected()
    stop = anyio.Event()
    enough = anyio.Event()
    resumed = anyio.Event()

    def on_published(p: Published) -> None:
        collected(p)
        if len(collected.items) == 40:
            enough.set()
        if resumed.is_set() and len(collected.items) >= restart_at + 30:
            stop.set()

    restart_at = 0
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with anyio.fail_after(3 * STEP):
        async with anyio.create_task_group() as tg:

            async def demo() -> None:
                result = await run_demo(
                    url, token(), rate=200, seed=11, on_published=on_published, stop=stop
                )
                assert result.retries > 0

            async with start_node(redis_url, redis_prefix, port=port):
                tg.start_soon(demo)
                await enough.wait()
                restart_at = len(collected.items)
            # The node is gone (its connections closed): the demo retries until it is back.
            async with start_node(redis_url, redis_prefix, port=port) as again:
                resumed.set()
                await stop.wait()
                feeds = collected.by_feed()
                assert await read_back(again, feeds) == feeds
    assert len(collected.items) >= restart_at + 30


async def test_a_refused_token_stops_the_demo(node: Gateway) -> None:
    with anyio.fail_after(STEP), pytest.raises(DemoError, match="answered 403"):
        await run_demo(node.url, token(scopes=("subscribe",)), rate=100)
    with pytest.raises(DemoError, match="tenant"):
        tenant_of("not-a-jwt")
    with pytest.raises(DemoError, match="rate"):
        await run_demo(node.url, token(), rate=0)


@pytest.mark.slow
async def test_gateway_demo_stops_cleanly_on_ctrl_c() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    seen = b""
    phase = "starting"
    code: int | None = None
    # Each phase has its own bound, and a phase that runs out fails with what the
    # demo had written by then (not a bare TimeoutError).
    async with start_node(None) as node:
        command = [sys.executable, "-m", "gateway.demo", "--url", node.url, "--rate", "50"]
        # A child of a non-interactive shell's background job inherits SIGINT ignored
        # (see tests/test_cli.py), and Python then installs no KeyboardInterrupt
        # handler: the demo would never see the Ctrl-C.  A signal with a handler is
        # reset to the default at exec, so the child starts as a terminal would start
        # it.  (anyio's open_process takes no preexec_fn.)
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            process = await anyio.open_process(
                [*command, "--token", token()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        finally:
            signal.signal(signal.SIGINT, previous)
        async with process:
            assert process.stderr is not None
            with anyio.move_on_after(STEP):
                phase = "waiting for the first progress line"
                while b"demo: " not in seen:  # the first progress line: it is publishing
                    seen += await process.stderr.receive()
                process.send_signal(signal.SIGINT)
                phase = "waiting for the exit after SIGINT"
                async for chunk in process.stderr:
                    seen += chunk
                code = await process.wait()
                phase = "exited"
            if phase != "exited":
                process.kill()
    text = seen.decode()
    assert phase == "exited", f"{phase} after {STEP}s; the demo wrote: {text!r}"
    assert code == 130, text
    assert "Traceback" not in text
    assert text.rstrip().endswith("(stopped)")
