"""Redis breaks under the gateway: restarted empty, hung (SIGSTOP, CLIENT PAUSE), connections
dropped (CLIENT KILL).  Decisions D1, D2, D9.

:data:`NODES` ``gateway serve`` nodes share one ``redis-server`` of the test's own,
behind HAProxy; followers are connected to every node directly, and through HAProxy.
Every test ends with the delivery checker over what the producer had acknowledged,
what every client received and the final streams.

- Restarted empty, **nothing published afterwards**: every follower on every node gets
  ``epoch_restarted`` within :data:`sizes.NOTICE_BOUND`; a reconnect with a cursor from
  before the loss gets ``epoch_restarted`` on every node (SSE and WebSocket), not a bare
  404; after a publish, everyone follows the new epoch.
- Hung: a publish, an SSE subscribe and a WebSocket subscribe to each node answer 503 /
  ``unavailable`` within :data:`sizes.HANG_BOUND`, ``/readyz`` turns 503 within it; when
  the hang ends, readiness and delivery come back by themselves, nothing lost.
- Connections dropped repeatedly while publishing: nothing lost or duplicated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
import redis

from tests.fault import probes, sizes
from tests.fault.rig import Rig
from tests.support.redis_server import RedisServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.fault,
    pytest.mark.slow,
    pytest.mark.redis_admin,
    pytest.mark.usefixtures("needs_haproxy"),
]

#: Nodes in these tests: enough to check "on every node", few enough to be quick.
NODES = 2


def admin(server: RedisServer) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5)


async def _start(rig: Rig) -> None:
    await rig.create_feeds()
    for node in rig.nodes:
        rig.follow(ws=1, sse=1, url=node.url, prefix=f"{node.name}-")
    rig.follow(ws=2, sse=1)
    await rig.wait_received(1)
    for team in rig.teams:
        await rig.pub.publish(team, sizes.ITEMS_BETWEEN)
    await rig.wait_received(1 + sizes.ITEMS_BETWEEN)


async def _publish_and_report(rig: Rig, measure: Callable[[str, object], None]) -> None:
    await rig.haproxy.wait_states({n.name: "UP" for n in rig.nodes}, within=sizes.RESUME_BOUND)
    for team in rig.teams:
        await rig.pub.publish(team, sizes.ITEMS_BETWEEN)
    report = await rig.report()
    measure("delivery", report.summary())
    assert report.clean, report.message() + "\n" + rig.diagnostics()


async def test_redis_restarted_empty_with_nothing_published_afterwards(
    tmp_path: Path, redis_single: RedisServer, measure: Callable[[str, object], None]
) -> None:
    async with Rig(tmp_path, redis_single.url, nodes=NODES) as rig:
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            await _start(rig)
            old = {feed: rig.pub.head(feed) for feed in rig.feeds}
            await anyio.to_thread.run_sync(redis_single.stop)
            await anyio.to_thread.run_sync(redis_single.start)  # same port, empty
            back = time.monotonic()

            # Nothing is published: the nodes must notice the loss by themselves.
            notices = await rig.wait_notices(back)
            untold = [(name, feed[-4:]) for (name, feed), t in notices.items() if t is None]
            times = [t for t in notices.values() if t is not None]
            measure("followers told / all", f"{len(times)} / {len(notices)}")
            if times:
                measure("told within (s, worst follower)", max(times))

            # A reconnect with a cursor from before the loss, on every node, still with
            # nothing published.
            answers = await probes.old_cursor(rig.nodes, rig.teams[0], str(old[rig.feeds[0]]))
            measure("old cursor after the loss", answers)
            wrong = probes.not_restarted(answers)
            assert not untold and not wrong, (
                f"not told within {sizes.NOTICE_BOUND}s: {untold}; old cursor answered: {wrong}"
            )

            await _publish_and_report(rig, measure)
            for f in rig.followers:
                for feed in rig.feeds:
                    restarts = f.restarts(feed)
                    assert restarts, (f.name, feed)
                    assert restarts[0].cursor[0] > int(str(old[feed]).split(":")[0]), restarts


def _hang(server: RedisServer, how: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """(start, end) of a Redis hang of kind ``how``."""
    if how == "sigstop":
        return server.pause, server.resume
    client = admin(server)

    def pause() -> None:
        # Longer than the hang: it ends by CLIENT UNPAUSE, when the test says so.
        client.client_pause(int(sizes.HANG_SECONDS * 1000) + 5000, all=True)

    def unpause() -> None:
        client.client_unpause()
        client.close()

    return pause, unpause


@pytest.mark.parametrize("how", ["sigstop", "client_pause"])
async def test_redis_hang_answers_503_within_the_bound_and_resumes(
    tmp_path: Path, redis_single: RedisServer, how: str, measure: Callable[[str, object], None]
) -> None:
    async with Rig(tmp_path, redis_single.url, nodes=NODES) as rig:
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            await _start(rig)
            begin, end = _hang(redis_single, how)
            answers: dict[str, probes.Answer] = {}
            probed_ids: list[str] = []
            wait = sizes.HANG_SECONDS  # long enough to see an answer that comes late

            async def probe(node_index: int) -> None:
                node = rig.nodes[node_index]
                team, feed = rig.teams[node_index % len(rig.teams)], rig.feeds[0]
                answer, ids = await probes.publish(node, team, wait)
                answers[f"{node.name} publish"] = answer
                probed_ids.extend(ids)
                rig.pub.attempted[f"team/{team}"].update(ids)
                answers[f"{node.name} sse"] = await probes.sse(node, rig.teams[0], None, wait)
                answers[f"{node.name} ws"] = await probes.ws_subscribe(node, feed, None, wait)

            async def readiness(node_index: int) -> None:
                node = rig.nodes[node_index]
                answers[f"{node.name} readyz"] = await probes.readyz_turns(node, 503, wait)

            hung_at = time.monotonic()
            await anyio.to_thread.run_sync(begin)
            try:
                async with anyio.create_task_group() as tg:
                    for i in range(len(rig.nodes)):
                        tg.start_soon(probe, i)
                        tg.start_soon(readiness, i)
                # The hang lasts its full time whatever the probes saw (a fault's duration).
                await anyio.sleep(max(0.0, hung_at + sizes.HANG_SECONDS - time.monotonic()))
            finally:
                await anyio.to_thread.run_sync(end)
            measure(
                f"{how}: answers", {k: f"{a.what} @{a.elapsed:.2f}s" for k, a in answers.items()}
            )

            resumed = {
                n.name: await probes.readyz_turns(n, 200, sizes.RESUME_BOUND) for n in rig.nodes
            }
            measure(f"{how}: ready again after (s)", {k: a.elapsed for k, a in resumed.items()})
            # A publish needs Redis: 503 unavailable.  A subscribe may also be served from
            # what the node holds; either way it answers within the bound, never after
            # the hang.  /readyz must answer, and say 503.
            allowed = {
                "publish": ("503 unavailable",),
                "sse": ("503 unavailable", "200 event"),
                "ws": ("error unavailable", "event"),
                "readyz": ("503",),
            }
            late = {
                where: f"{a.what} @{a.elapsed:.2f}s"
                for where, a in answers.items()
                if not (a.what.startswith(allowed[where.split()[1]]) and a.within(sizes.HANG_BOUND))
            }
            assert not late, f"not answered as D9 says within {sizes.HANG_BOUND}s: {late}"
            for name, a in resumed.items():
                assert a.what.startswith("200"), (name, a)
            await _publish_and_report(rig, measure)


async def test_redis_connections_dropped_while_publishing(
    tmp_path: Path, redis_single: RedisServer, measure: Callable[[str, object], None]
) -> None:
    async with Rig(tmp_path, redis_single.url, nodes=NODES) as rig:
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            await _start(rig)
            rig.start_publishing()
            killed = 0
            with admin(redis_single) as r:
                for _ in range(sizes.STORM_ROUNDS):
                    await rig.publish_more(sizes.ITEMS_BETWEEN)
                    # Every client connection but this one: commands, blocking reads, pub/sub.
                    killed += int(r.client_kill_filter(_type="normal", skipme=True))
                    killed += int(r.client_kill_filter(_type="pubsub", skipme=True))
            await rig.publish_more(sizes.ITEMS_BETWEEN)
            measure("Redis connections killed", killed)
            await _publish_and_report(rig, measure)
            assert killed >= sizes.STORM_ROUNDS * NODES, killed
            measure("epoch_restarted received (allowed: rotating too often is)",
                    sum(len(f.restarts()) for f in rig.followers))  # fmt: skip
