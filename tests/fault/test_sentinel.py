"""Redis behind Sentinel: the gateway follows the master, and a failover to a replica that
lagged (lost acknowledged writes) reuses no cursor and announces the loss.  Decisions D1, D9.

A master with one replica (replicating through a proxy, so it can be cut off while it
stays reachable) and three Sentinels (quorum 2, ``down-after-milliseconds`` 1000;
:mod:`tests.support.redis_sentinel`); :data:`NODES` ``gateway serve`` nodes configured
with ``GATEWAY_REDIS_URL=redis+sentinel://<sentinels>/<master>``, behind HAProxy;
followers on every node and through HAProxy.  The failover test runs a second time
with the nodes behind a failover endpoint instead (a TCP proxy that the test points at
the new master when the Sentinels switch, as a Sentinel-aware proxy or a cloud
endpoint does): the same guarantees, with the gateway unaware of Sentinel.

The lagging-replica recipe (:func:`promote_lagging_replica`): the replica is cut off,
the producer gets more items acknowledged (only the master has them), the master is
killed and the Sentinels promote the replica.  Then, with nothing published: every
follower gets ``epoch_restarted`` within :data:`sizes.NOTICE_BOUND`, and a reconnect
with a cursor of the lost items gets ``epoch_restarted`` on every node.  The nodes keep
running (no restart) and publish to the new master; at the end the delivery checker
finds no cursor naming two payloads across the acknowledgements, every client and
the final streams, and every loss announced.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tests.fault import probes, sizes
from tests.fault.rig import Rig
from tests.support.redis_sentinel import (
    ReplicatedSet,
    SentinelGroup,
    client,
    promote_lagging_replica,
)
from tests.support.tcp_proxy import TcpProxy

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.fault,
    pytest.mark.slow,
    pytest.mark.redis_admin,
    pytest.mark.usefixtures("needs_haproxy"),
]

NODES = 2
#: Items per feed acknowledged by the master only, before it dies (kept short: the
#: Sentinels only promote a replica whose link has been down for a bounded time).
LOST_ITEMS = 5


async def _start(rig: Rig) -> None:
    await rig.create_feeds()
    for node in rig.nodes:
        rig.follow(ws=1, sse=1, url=node.url, prefix=f"{node.name}-")
    rig.follow(ws=1, sse=1)
    await rig.wait_received(1)
    for team in rig.teams:
        await rig.pub.publish(team, sizes.ITEMS_BETWEEN)
    await rig.wait_received(1 + sizes.ITEMS_BETWEEN)


async def test_gateway_serves_through_sentinel(
    tmp_path: Path, measure: Callable[[str, object], None]
) -> None:
    async with (
        ReplicatedSet(1) as rset,
        SentinelGroup(rset) as sentinels,
        Rig(tmp_path, sentinels.url, nodes=NODES) as rig,
    ):
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            await _start(rig)
            report = await rig.report()
        measure("delivery", report.summary())
        assert report.clean, report.message() + "\n" + rig.diagnostics()
        with client(rset.master.port) as master:
            assert master.dbsize() > 0  # the feeds are on the Sentinels' master


@pytest.mark.parametrize(
    "via",
    [
        pytest.param("sentinel"),
        pytest.param("endpoint"),
    ],
)
async def test_lagging_replica_promoted_by_sentinel(
    tmp_path: Path, via: str, measure: Callable[[str, object], None]
) -> None:
    async with (
        ReplicatedSet(1) as rset,
        SentinelGroup(rset) as sentinels,
        TcpProxy(rset.master.port) as endpoint,
        Rig(tmp_path, sentinels.url if via == "sentinel" else endpoint.url, nodes=NODES) as rig,
    ):
        try:
            with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
                await _start(rig)
                pids = [n.pid for n in rig.nodes]
                before = {feed: len(rig.pub.acked[feed]) for feed in rig.feeds}

                async def write_more() -> None:
                    for team in rig.teams:
                        await rig.pub.publish(team, LOST_ITEMS)

                t0 = time.monotonic()
                replica = await promote_lagging_replica(rset, sentinels, write_more)
                if via == "endpoint":
                    # What a Sentinel-aware endpoint does on +switch-master.
                    await endpoint.retarget(replica.port)
                promoted = time.monotonic()
                measure("failover took (s)", promoted - t0)
                lost = {feed: rig.pub.acked[feed][before[feed] :] for feed in rig.feeds}
                assert all(len(v) == LOST_ITEMS for v in lost.values()), lost

                notices = await rig.wait_notices(promoted)
                untold = [(n, f[-4:]) for (n, f), t in notices.items() if t is None]
                times = [t for t in notices.values() if t is not None]
                measure("followers told / all", f"{len(times)} / {len(notices)}")
                if times:
                    measure("told within (s, worst follower)", max(times))
                lost_cursor = lost[rig.feeds[0]][-1][0]
                answers = await probes.old_cursor(rig.nodes, rig.teams[0], lost_cursor)
                measure("lost cursor after the failover", answers)
                wrong = probes.not_restarted(answers)
                assert not untold and not wrong, (
                    f"not told within {sizes.NOTICE_BOUND}s: {untold}; "
                    f"lost cursor answered: {wrong}"
                )

                # The nodes follow the new master without a restart.
                await rig.haproxy.wait_states(
                    {n.name: "UP" for n in rig.nodes}, within=sizes.RESUME_BOUND
                )
                for team in rig.teams:
                    await rig.pub.publish(team, sizes.ITEMS_BETWEEN)
                report = await rig.report()
        except BaseException:
            print(rig.diagnostics(), sentinels.diagnostics())
            raise
        measure("delivery", report.summary())
        assert report.clean, report.message() + "\n" + rig.diagnostics()
        assert [n.pid for n in rig.nodes] == pids and all(n.running for n in rig.nodes)
        assert report.rotated_away >= LOST_ITEMS * len(rig.feeds), report.summary()
        with client(replica.port) as new_master:
            assert new_master.dbsize() > 0
