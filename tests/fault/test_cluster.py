"""Redis Cluster under the gateway: feeds on every shard, a master replaced by
its replica, a slot migrated while publishing.  Decisions D1, D2, D9.

A cluster of 3 masters with one replica each, made with ``redis-cli --cluster create``
(:mod:`tests.support.redis_cluster`); ``gateway serve`` nodes pointed at a seed node
with :data:`CLUSTER_ENV`, behind HAProxy; WebSocket and SSE followers of
:data:`sizes.CLUSTER_TEAMS` feeds, which land on every shard (checked from where their
keys are).  Every test ends with the delivery checker: nothing lost without an
``epoch_restarted``, no ``(epoch, offset)`` with two payloads, nothing duplicated or out
of order, across the producer's acknowledgements, every client and the final streams.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tests.fault import sizes
from tests.fault.rig import Rig, now
from tests.support.redis_cluster import RedisCluster
from tests.support.wait import until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.fault,
    pytest.mark.slow,
    pytest.mark.redis_admin,
    pytest.mark.usefixtures("needs_haproxy"),
]

NODES = 2
#: The gateway's key prefix (GATEWAY_REDIS_PREFIX's default); a feed's keys carry its id.
PREFIX = "gw"


def _shards(cluster: RedisCluster, teams: list[str]) -> dict[int, list[str]]:
    """``{master port: teams whose keys it holds}``."""
    keys = cluster.keys_by_master(f"{PREFIX}:*")
    return {port: [t for t in teams if any(t in k for k in ks)] for port, ks in keys.items()}


async def _start(rig: Rig, cluster: RedisCluster) -> dict[int, list[str]]:
    await rig.create_feeds()
    shards = await anyio.to_thread.run_sync(_shards, cluster, rig.teams)
    assert all(shards.values()), f"a shard holds no feed: {shards}"
    rig.follow(ws=3, sse=2)
    await rig.wait_received(1)
    rig.start_publishing()
    await rig.publish_more(sizes.ITEMS_BETWEEN)
    return shards


async def _report(rig: Rig, measure: Callable[[str, object], None]) -> None:
    await rig.publish_more(sizes.ITEMS_BETWEEN)
    report = await rig.report()
    measure("delivery", report.summary())
    assert report.clean, report.message() + "\n" + rig.diagnostics()


async def test_feeds_on_every_shard_followed_and_resumed(
    tmp_path: Path, measure: Callable[[str, object], None]
) -> None:
    async with (
        RedisCluster(3, 1) as cluster,
        Rig(tmp_path, cluster.seed_url, nodes=NODES,
            teams=cluster.teams_on_every_shard(sizes.CLUSTER_TEAMS),
            env=cluster.gateway_env()) as rig,
    ):  # fmt: skip
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            shards = await _start(rig, cluster)
            measure("feeds per shard", {p: len(t) for p, t in shards.items()})
            cut = now()
            for node in rig.nodes:  # every stream cut: everyone resumes by cursor
                rig.haproxy.shutdown_sessions(node.name)
            await until(
                lambda: all(
                    sum(c.opened > cut and c.closed is None for c in f.connections)
                    == (1 if f.transport == "ws" else len(f.feeds))
                    for f in rig.followers
                ),
                sizes.SETTLE,
                "every follower resumed",
            )
            await _report(rig, measure)
        assert not any(f.restarts() for f in rig.followers), "epoch_restarted with no loss"


async def test_master_killed_and_replaced_by_its_replica(
    tmp_path: Path, measure: Callable[[str, object], None]
) -> None:
    async with (
        RedisCluster(3, 1) as cluster,
        Rig(tmp_path, cluster.seed_url, nodes=NODES,
            teams=cluster.teams_on_every_shard(sizes.CLUSTER_TEAMS),
            env=cluster.gateway_env()) as rig,
    ):  # fmt: skip
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            shards = await _start(rig, cluster)
            victim = next(m for m in cluster.masters() if shards.get(m.port))
            killed = now()
            await anyio.to_thread.run_sync(cluster.kill, victim.port)
            promoted = await cluster.wait_failover(victim)
            measure("failover took (s)", now() - killed)
            measure("feeds on the killed master", len(shards[victim.port]))
            # Publishing goes on, on every shard, the promoted replica's included.
            await rig.publish_more(sizes.ITEMS_BETWEEN)
            moved = await anyio.to_thread.run_sync(_shards, cluster, rig.teams)
            assert set(shards[victim.port]) <= set(moved[promoted]), (shards, moved)
            await _report(rig, measure)
        measure("epoch_restarted received", sum(len(f.restarts()) for f in rig.followers))
        # The failover changed the writer of the killed master's feeds only.
        kept = set(rig.feeds) - {f"team/{t}" for t in shards[victim.port]}
        others = [(f.name, r) for f in rig.followers for feed in kept for r in f.restarts(feed)]
        assert not others, f"feeds on the other shards restarted: {others}"


async def test_slot_migrated_while_publishing(
    tmp_path: Path, measure: Callable[[str, object], None]
) -> None:
    async with (
        RedisCluster(3, 1) as cluster,
        Rig(tmp_path, cluster.seed_url, nodes=NODES,
            teams=cluster.teams_on_every_shard(sizes.CLUSTER_TEAMS),
            env=cluster.gateway_env()) as rig,
    ):  # fmt: skip
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            shards = await _start(rig, cluster)
            source = next(port for port, teams in shards.items() if teams)
            team = shards[source][0]
            [key, *_] = [k for k in cluster.keys_by_master(f"*{team}*")[source]]
            slot = cluster.keyslot(key)
            target = next(m.port for m in cluster.masters() if m.port != source)
            # Each step with traffic flowing: ASK redirects while the slot is MIGRATING,
            # TRYAGAIN for a multi-key command on a half-moved feed, MOVED after.
            await anyio.to_thread.run_sync(cluster.begin_migration, slot, target)
            await rig.publish_more(sizes.ITEMS_BETWEEN)
            moved = await anyio.to_thread.run_sync(cluster.move_keys, slot, source, target)
            await rig.publish_more(sizes.ITEMS_BETWEEN)
            await anyio.to_thread.run_sync(cluster.finish_migration, slot, source, target)
            await cluster.wait_ok()
            await rig.publish_more(sizes.ITEMS_BETWEEN)
            measure("keys migrated", moved)
            after = await anyio.to_thread.run_sync(_shards, cluster, rig.teams)
            assert team in after[target] and team not in after[source], after
            await _report(rig, measure)
        measure("epoch_restarted received", sum(len(f.restarts()) for f in rig.followers))


async def test_a_shard_restarted_empty_rotates_its_own_feeds_only(
    tmp_path: Path, measure: Callable[[str, object], None]
) -> None:
    """One master restarts without its data (same node id: its nodes.conf survives, no
    replica takes over).  The feeds it held move to new epochs, announced to their
    followers within the bound with nothing published; feeds on the other shards keep
    their epochs and their followers hear nothing."""
    async with (
        RedisCluster(3, 0) as cluster,
        Rig(tmp_path, cluster.seed_url, nodes=NODES,
            teams=cluster.teams_on_every_shard(sizes.CLUSTER_TEAMS),
            env=cluster.gateway_env()) as rig,
    ):  # fmt: skip
        with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
            shards = await _start(rig, cluster)
            await rig.stop_publishing()
            victim = next(port for port, teams in shards.items() if teams)
            lost = {f"team/{t}" for t in shards[victim]}
            kept = set(rig.feeds) - lost
            server = cluster.server(victim)
            await anyio.to_thread.run_sync(server.stop)
            await anyio.to_thread.run_sync(server.start)  # same port and node id, empty
            back = now()
            await cluster.wait_ok()

            def told() -> dict[tuple[str, str], float | None]:
                return {k: t for k, t in rig.notices_since(back).items() if k[1] in lost}

            with contextlib.suppress(TimeoutError):  # asserted below, with who was not
                await until(
                    lambda: all(t is not None for t in told().values()),
                    sizes.NOTICE_BOUND,
                    "epoch_restarted for every feed of the restarted shard",
                )
            notices = told()
            untold = [k for k, t in notices.items() if t is None]
            measure("feeds on the restarted shard / others", f"{len(lost)} / {len(kept)}")
            measure("told within (s, worst follower)", max(t or 0.0 for t in notices.values()))
            assert not untold, f"not told within {sizes.NOTICE_BOUND}s: {untold}"

            rig.start_publishing()
            await _report(rig, measure)
        others = [(f.name, r) for f in rig.followers for feed in kept for r in f.restarts(feed)]
        assert not others, f"feeds on the shards that kept their data restarted: {others}"
