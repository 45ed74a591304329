"""Clients in bulk under node faults: reconnect storms, kill -9 and drain under load.

Three ``gateway serve`` nodes on one Redis behind a real HAProxy; WebSocket and SSE
followers of three feeds through HAProxy while a producer publishes through it.  After
every fault each follower resumes by its cursor, wherever HAProxy sends it, and at the
end every client holds exactly what the producer had acknowledged (the delivery
checker: nothing lost, duplicated, reused or out of order; no ``epoch_restarted``, as
nothing was lost).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tests.fault import sizes
from tests.fault.rig import Rig, now
from tests.support.followers import Connection, Follower
from tests.support.redis_server import RedisServer
from tests.support.wait import until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.fault,
    pytest.mark.slow,
    pytest.mark.usefixtures("needs_haproxy"),
]


def _open_on(followers: list[Follower], node: str) -> list[Connection]:
    return [c for f in followers for c in f.connections if c.closed is None and c.node == node]


def _streams(f: Follower) -> int:
    """How many streams a follower holds when it is connected: 1 socket, or 1 per feed."""
    return 1 if f.transport == "ws" else len(f.feeds)


def _reconnected_since(f: Follower, t: float) -> bool:
    """Every stream of ``f`` was opened after ``t`` and is open."""
    fresh = [c for c in f.connections if c.opened > t and c.closed is None]
    return len(fresh) == _streams(f)


async def _start(rig: Rig) -> None:
    await rig.create_feeds()
    rig.follow(ws=sizes.WS_CLIENTS, sse=sizes.SSE_CLIENTS)
    await rig.wait_received(1)
    rig.start_publishing()
    await rig.publish_more(sizes.ITEMS_BETWEEN)


def _assert_exact(rig: Rig, report_text: str, clean: bool) -> None:
    assert clean, report_text + "\n" + rig.diagnostics()
    restarted = [f.name for f in rig.followers if f.restarts()]
    assert not restarted, f"epoch_restarted without any loss: {restarted}"
    unexpected = [(f.name, n.what) for f in rig.followers for n in f.notes_with("unexpected")]
    assert not unexpected, unexpected


async def test_reconnect_storm_over_websocket_and_sse(
    tmp_path: Path, redis_single: RedisServer, measure: Callable[[str, object], None]
) -> None:
    async with Rig(tmp_path, redis_single.url) as rig:
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            await _start(rig)
            took: list[float] = []
            for _ in range(sizes.STORM_ROUNDS):
                cut = now()
                for node in rig.nodes:  # every stream of every node, at once
                    rig.haproxy.shutdown_sessions(node.name)

                def everyone_back(cut: float = cut) -> bool:
                    return all(_reconnected_since(f, cut) for f in rig.followers)

                await until(
                    everyone_back,
                    sizes.SETTLE,
                    "every follower reconnected after the storm",
                )
                took.append(now() - cut)
                await rig.publish_more(sizes.ITEMS_BETWEEN)
            report = await rig.report()
        measure("streams per storm", sum(_streams(f) for f in rig.followers))
        measure("storm: all back within (s, worst round)", max(took))
        measure("delivery", report.summary())
        _assert_exact(rig, report.message(), report.clean)
        for f in rig.followers:
            cut_short = [c for c in f.connections if c.reason == "cut"]
            assert len(cut_short) >= sizes.STORM_ROUNDS * _streams(f), (f.name, f.connections)


async def test_node_killed_under_load(
    tmp_path: Path, redis_single: RedisServer, measure: Callable[[str, object], None]
) -> None:
    async with Rig(tmp_path, redis_single.url) as rig:
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            await _start(rig)
            victim = rig.nodes[0]
            on_victim = _open_on(rig.followers, victim.name)
            assert on_victim, rig.diagnostics()
            moved = [f for f in rig.followers if any(c in on_victim for c in f.connections)]
            killed = now()
            victim.kill()
            await until(
                lambda: (
                    all(
                        _reconnected_since(f, killed) or not _open_on([f], victim.name)
                        for f in moved
                    )
                    and not _open_on(rig.followers, victim.name)
                ),
                sizes.SETTLE,
                "the killed node's clients back on the others",
            )
            back = now() - killed
            await rig.haproxy.wait_states({victim.name: "DOWN"})
            await rig.publish_more(sizes.ITEMS_BETWEEN)
            await victim.restart()
            await rig.haproxy.wait_states({victim.name: "UP"})
            await rig.publish_more(sizes.ITEMS_BETWEEN)
            report = await rig.report()
        measure("streams on the killed node", len(on_victim))
        measure("killed node's clients back within (s)", back)
        measure("delivery", report.summary())
        _assert_exact(rig, report.message(), report.clean)
        assert all(c.reason == "cut" for c in on_victim), on_victim


async def test_drain_under_load_spreads_the_reconnects(
    tmp_path: Path, redis_single: RedisServer, measure: Callable[[str, object], None]
) -> None:
    window = sizes.DRAIN_SECONDS
    async with Rig(tmp_path, redis_single.url) as rig:
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            await _start(rig)
            victim = rig.nodes[0]
            on_victim = _open_on(rig.followers, victim.name)
            assert len(on_victim) >= 3, rig.diagnostics()
            owners = {id(c): f for f in rig.followers for c in f.connections}
            term = now()
            victim.terminate()
            assert await victim.wait_exit() == 0, victim.log_tail()
            await until(
                lambda: (
                    all(c.closed is not None for c in on_victim)
                    and not _open_on(rig.followers, victim.name)
                    and all(f.open_connection is not None for f in rig.followers)
                ),
                sizes.SETTLE,
                "the drained node's clients back on the others",
            )
            await rig.publish_more(sizes.ITEMS_BETWEEN)
            await victim.restart()
            await rig.haproxy.wait_states({victim.name: "UP"})
            await rig.publish_more(sizes.ITEMS_BETWEEN)
            report = await rig.report()

        # How the drain ended them: 1012 for sockets, a clean end for SSE streams.
        for c in on_victim:
            f = owners[id(c)]
            assert c.reason == ("1012" if f.transport == "ws" else "end"), (f.name, c)
        closes = sorted(c.closed - term for c in on_victim if c.closed is not None)
        # Each one's reconnect: its follower's next stream (of that feed, for SSE).
        delays = []
        for c in on_victim:
            f, closed = owners[id(c)], c.closed
            assert closed is not None, c
            after = [n for n in f.connections if n.opened >= closed and n.feed == c.feed]
            assert after, (f.name, c, f.connections)
            delays.append(after[0].opened - closed)
        span = closes[-1] - closes[0]
        slices = [0] * 10
        for t in closes:
            slices[min(9, max(0, int(t / window * 10)))] += 1
        measure("drained streams", len(closes))
        measure("drain: closes from SIGTERM (s)", [round(t, 2) for t in closes])
        measure("drain: span of closes (s)", span)
        measure("drain: closes per tenth of the window", slices)
        measure(
            "drain: reconnect delay median / max (s)",
            f"{statistics.median(delays):.3f} / {max(delays):.3f}",
        )
        measure("delivery", report.summary())
        _assert_exact(rig, report.message(), report.clean)
        # Spread over the window, not all at one instant (a shape, not a timing SLA).
        assert span >= sizes.DRAIN_MIN_SPAN * window, closes
        assert max(slices) <= sizes.DRAIN_MAX_SLICE_SHARE * len(closes), (slices, closes)
        assert closes[-1] <= window + 2.0, closes
