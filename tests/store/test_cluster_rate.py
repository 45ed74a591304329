"""The tenant's publish rate on a Redis Cluster (docs/storage.md, "The publish rate").

A tenant's feeds spread over the shards and a script may touch one slot's keys only, so
the tenant's bucket (its own slot) is taken by a call of its own before the append, and
what an append that appended nothing took is given back.  One cluster of the module's
own (3 masters, no replicas), real nodes, real HTTP clients: feeds on every shard share
one bucket across two nodes (the count accepted is exactly the burst, with a rate too
slow to refill during the test), refused requests append nothing, another tenant is
unaffected, and retries and refused appends keep their tokens.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from gateway.feed import team_feed
from tests.support import events as ev
from tests.support.node import auth, metric, start_node
from tests.support.redis_cluster import RedisCluster, client

pytestmark = [pytest.mark.anyio, pytest.mark.redis_admin]

TENANT = "acme"
#: So slow that nothing refills during a test: counts are exact.
STILL = 0.001
BURST = 6


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    c = RedisCluster(3, 0)
    anyio.run(c.__aenter__)
    try:
        yield c
    finally:
        anyio.run(c.aclose)


@pytest.fixture
def prefix() -> str:
    return f"gwr{uuid.uuid4().hex[:6]}"


def on_cluster(cluster: RedisCluster, command: str, key: str, *args: Any) -> Any:
    """``command key args`` on the master that serves ``key``."""
    port = cluster.owner(cluster.keyslot(key)).port
    with client(port) as c:
        return c.execute_command(command, key, *args)


def tokens(cluster: RedisCluster, prefix: str, tenant: str = TENANT) -> float:
    """What the tenant's bucket holds now: the key is the moment (server clock, µs) the
    bucket is full again, and the rate too slow to matter here."""
    key = f"{prefix}:rate:{{{tenant}}}"
    value = on_cluster(cluster, "GET", key)
    if value is None:
        return float(BURST)
    with client(cluster.owner(cluster.keyslot(key)).port) as c:
        seconds, micros = c.time()
    return BURST - (float(value) - (seconds * 1e6 + micros)) * STILL / 1e6


def held(cluster: RedisCluster, prefix: str, team: str) -> set[str]:
    """The event ids the team feed holds (its idempotency-key hash), checked against the
    stream's length."""
    base = f"{prefix}:{team_feed(TENANT, team).tag()}"
    keys = {k for k in on_cluster(cluster, "HKEYS", base + ":i") if k}
    assert on_cluster(cluster, "XLEN", base + ":s") == len(keys)
    return keys


def body(event_id: str) -> list[dict[str, Any]]:
    event = ev.message()
    event["event_id"] = event_id
    return [ev.item(event)]


async def test_feeds_on_every_shard_share_the_tenants_one_bucket_across_nodes(
    cluster: RedisCluster, prefix: str
) -> None:
    teams = cluster.teams_on_every_shard(3, TENANT)
    limits: dict[str, Any] = {"publish_rate": STILL, "publish_burst": BURST}
    accepted: dict[str, set[str]] = {t: set() for t in teams}
    refusals: list[httpx.Response] = []
    async with (
        start_node(cluster.seed_url, prefix, redis_cluster=True, **limits) as a,
        start_node(cluster.seed_url, prefix, redis_cluster=True, **limits) as b,
        httpx.AsyncClient(base_url=a.url, timeout=10) as via_a,
        httpx.AsyncClient(base_url=b.url, timeout=10) as via_b,
    ):

        async def publish(client: httpx.AsyncClient, team: str) -> None:
            event_id = ev.new_id()
            r = await client.post(f"/v1/teams/{team}/events", json=body(event_id), headers=auth())
            if r.status_code == 200:
                accepted[team].add(event_id)
            else:
                refusals.append(r)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for i in range(4 * BURST):
                    tg.start_soon(publish, (via_a, via_b)[i % 2], teams[i % 3])
        assert sum(len(ids) for ids in accepted.values()) == BURST
        assert len(refusals) == 3 * BURST
        for r in refusals:
            assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
            assert int(r.headers["retry-after"]) >= 1
        for team in teams:
            assert held(cluster, prefix, team) == accepted[team]
        assert tokens(cluster, prefix) < 1
        assert metric(a, "gateway_limited_total", limit="publish_rate") + metric(
            b, "gateway_limited_total", limit="publish_rate"
        ) == len(refusals)
        # Another tenant has its own bucket.
        for team in teams:
            r = await via_b.post(
                f"/v1/teams/{team}/events", json=[ev.item(), ev.item()], headers=auth("globex")
            )
            assert r.status_code == 200, r.text


async def test_retries_and_refused_appends_give_their_tokens_back(
    cluster: RedisCluster, prefix: str
) -> None:
    [team] = cluster.teams_on_every_shard(1, TENANT)
    path = f"/v1/teams/{team}/events"
    async with (
        start_node(
            cluster.seed_url, prefix, redis_cluster=True, publish_rate=STILL, publish_burst=BURST
        ) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as http,
    ):
        first = body(ev.new_id())
        r = await http.post(path, json=first, headers=auth())
        assert r.status_code == 200, r.text
        cursors = r.json()["cursors"]
        left = tokens(cluster, prefix)
        assert left == pytest.approx(BURST - 1, abs=0.01)
        # An exact retry: answered with its cursor, its token given back.
        r = await http.post(path, json=first, headers=auth())
        assert r.status_code == 200 and r.json()["cursors"] == cursors, r.text
        assert tokens(cluster, prefix) == pytest.approx(left, abs=0.01)
        # The same event_id with another body: 409, nothing appended, nothing kept.
        reused = body(first[0]["event"]["event_id"])
        r = await http.post(path, json=reused, headers=auth())
        assert r.status_code == 409, r.text
        assert tokens(cluster, prefix) == pytest.approx(left, abs=0.01)
        # Refused whole: more than the bucket holds.
        r = await http.post(path, json=[ev.item() for _ in range(BURST)], headers=auth())
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert tokens(cluster, prefix) == pytest.approx(left, abs=0.01)
        assert len(held(cluster, prefix, team)) == 1
        r = await http.post(path, json=[ev.item() for _ in range(BURST - 1)], headers=auth())
        assert r.status_code == 200, r.text
        assert len(held(cluster, prefix, team)) == BURST
