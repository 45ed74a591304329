"""The gateway on a Redis Cluster (GATEWAY_REDIS_CLUSTER): integration tests.

One cluster of the module's own (3 masters, no replicas, ``redis-cli --cluster
create``; :mod:`tests.support.redis_cluster`), each test with its own key prefix.
Real nodes (``start_node``), real clients (``websockets``, ``httpx`` + ``httpx_sse``,
redis-py).  Failover and slot migration under load are in ``tests/fault/test_cluster.py``;
here: feeds on every shard appended, followed live across nodes (sharded pub/sub) and
resumed; all of a feed's keys on one shard and always present together; retries; a
finished run deleted for good; sharded inboxes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import httpx
import pytest
import redis.asyncio as aioredis
from httpx_sse import aconnect_sse
from redis.asyncio.connection import Connection

from gateway.errors import IdempotencyKeyReused, Unavailable
from gateway.feed import Cursor, NewItem, run_feed, team_feed
from gateway.producer import Producer
from gateway.store.redis import redis_backend
from gateway.store.redis.client.error_map import map_exceptions
from gateway.store.redis.inbox import inbox_key
from gateway.store.redis.settings import parse
from tests.support import events as ev
from tests.support.node import auth, lease_ends, open_ws, start_node
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.redis_admin]

TENANT = "acme"
DEADLINE = 10.0
T = TypeVar("T")


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
    return f"gwc{uuid.uuid4().hex[:6]}"


async def eventually(check: Callable[[], Awaitable[T]], what: str) -> T:
    with anyio.fail_after(DEADLINE):
        while True:
            if result := await check():
                return result
            await anyio.sleep(0.02)
    raise AssertionError(what)  # pragma: no cover - fail_after raises first


def holders(cluster: RedisCluster, pattern: str) -> dict[int, list[str]]:
    """``{master port: its keys matching pattern}``, masters without any left out."""
    return {p: ks for p, ks in cluster.keys_by_master(pattern).items() if ks}


async def test_feeds_on_every_shard_followed_live_across_nodes_and_resumed(
    cluster: RedisCluster, prefix: str
) -> None:
    teams = cluster.teams_on_every_shard(3, TENANT)
    async with (
        start_node(cluster.seed_url, prefix, redis_cluster=True) as a,
        start_node(cluster.seed_url, prefix, redis_cluster=True) as b,
        httpx.AsyncClient(base_url=b.url, timeout=10) as http_b,
        open_ws(a) as ws,
    ):
        for team in teams:
            r = await http_b.post(f"/v1/teams/{team}/events", json=[ev.item()], headers=auth())
            assert r.status_code == 200, r.text
        for team in teams:
            await ws.send(json.dumps({"type": "subscribe", "feed": f"team/{team}"}))
        frames: list[dict[str, Any]] = []
        with anyio.fail_after(DEADLINE):
            while len(frames) < 2 * len(teams):  # subscribed + the first item, per feed
                frames.append(json.loads(await ws.recv()))
        # Published through node B, followed on node A: the items cross the cluster
        # by sharded pub/sub on each feed's own shard.
        bodies = {team: ev.item(ev.message(f"live on {team}")) for team in teams}
        cursors = {}
        for team in teams:
            r = await http_b.post(f"/v1/teams/{team}/events", json=[bodies[team]], headers=auth())
            assert r.status_code == 200, r.text
            [cursors[team]] = r.json()["cursors"]
        live: dict[str, dict[str, Any]] = {}
        with anyio.fail_after(DEADLINE):
            while len(live) < len(teams):
                frame = json.loads(await ws.recv())
                assert frame["type"] == "event", frame
                live[frame["feed"].removeprefix("team/")] = frame
        for team in teams:
            assert live[team]["cursor"] == cursors[team]
            assert live[team]["data"]["event"] == bodies[team]["event"]
        # Each feed on its own shard, all of its keys on that one.
        where = {team: holders(cluster, f"{prefix}:*{team}*") for team in teams}
        assert all(len(w) == 1 for w in where.values()), where
        assert len({port for w in where.values() for port in w}) == 3, where

        # Resumed on the other node, by SSE, after the first item.
        team = teams[2]
        epoch, _ = cursors[team].split(":")
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=10) as http_a,
            aconnect_sse(
                http_a,
                "GET",
                f"/v1/teams/{team}/events",
                headers={**auth(), "Last-Event-ID": f"{epoch}:1"},
            ) as source,
        ):
            assert source.response.status_code == 200
            with anyio.fail_after(DEADLINE):
                sse = await anext(source.aiter_sse())
            assert sse.id == cursors[team]
            assert json.loads(sse.data)["event"] == bodies[team]["event"]


async def test_a_feeds_keys_exist_together_and_retries_return_the_first_cursor(
    cluster: RedisCluster, prefix: str
) -> None:
    backend = redis_backend(cluster.seed_url, prefix=prefix, cluster=True)
    try:
        [a, b, c] = [team_feed(TENANT, t) for t in cluster.teams_on_every_shard(3, TENANT)]
        # Without idempotency keys, too: the key hash exists (a placeholder), so a slot
        # migration never meets a feed with a key missing for good (docs/storage.md).
        await backend.feeds.append(a, [NewItem(None, b"x")], retention=100)
        [keys] = holders(cluster, f"{prefix}:*{a.id}*").values()
        assert [k.rsplit(":", 1)[1] for k in keys] == ["i", "m", "s"], keys

        first = await backend.feeds.append(b, [NewItem("k1", b"one")], retention=100)
        again = await backend.feeds.append(b, [NewItem("k1", b"one")], retention=100)
        assert again.cursors == first.cursors
        with pytest.raises(IdempotencyKeyReused):
            await backend.feeds.append(b, [NewItem("k1", b"other")], retention=100)

        # Several feeds on several shards at once (no script pipeline on a cluster).
        results = await backend.feeds.append_many(
            [(f, [NewItem(None, f.id.encode())]) for f in (a, b, c)], retention=100
        )
        heads = [r.state.head for r in results if not isinstance(r, Exception)]
        assert heads == [2, 2, 1], results
        items = await backend.feeds.read(c, Cursor(results[2].state.epoch, 0), 10)  # type: ignore[union-attr]
        assert [i.data for i in items] == [c.id.encode()]
    finally:
        await backend.aclose()


async def test_a_finished_run_is_gone_after_its_grace_not_recreated(
    cluster: RedisCluster, prefix: str
) -> None:
    backend = redis_backend(cluster.seed_url, prefix=prefix, cluster=True)
    try:
        feed = run_feed(TENANT, ev.new_id(), ev.new_id())
        result = await backend.feeds.append(feed, [NewItem(None, b"{}")], retention=100)
        position = result.cursors[0]
        await backend.feeds.expire(feed, 0.05)

        async def deleted() -> bool:
            return await backend.feeds.state(feed) is None

        await eventually(deleted, "the run feed to be deleted")
        # This node remembers the feed: a loss would be recreated, a deletion is not.
        assert await backend.feeds.recreate(feed) is None
        verdict = await backend.feeds.verify({feed: position})
        assert verdict[feed].gone
        # Only the marker is left, on the feed's shard.
        [keys] = holders(cluster, f"{prefix}:*{feed.id}*").values()
        assert [k.rsplit(":", 1)[1] for k in keys] == ["m"], keys
    finally:
        await backend.aclose()


async def test_a_runs_end_is_final_on_every_shard(cluster: RedisCluster, prefix: str) -> None:
    """The end is recorded per feed, in the feed's slot: after RUN_FINISHED a new event is
    409 run_ended on runs on every shard (HTTP publishes are charged: a take of its own
    then the append), and the retry of the end answers its first cursor."""
    async with start_node(cluster.seed_url, prefix, redis_cluster=True) as node:
        async with httpx.AsyncClient(base_url=node.url, timeout=DEADLINE) as client:
            for _ in range(9):
                thread, run = ev.new_id(), ev.new_id()
                path = f"/v1/threads/{thread}/runs/{run}/ui/ag-ui"
                done = [
                    {"type": "RUN_STARTED", "threadId": thread, "runId": run},
                    {"type": "RUN_FINISHED", "threadId": thread, "runId": run},
                ]
                headers = {**auth(), "Idempotency-Key": "k"}
                first = await client.post(path, json=done, headers=headers)
                assert first.status_code == 200, first.text
                late = {"type": "CUSTOM", "name": "late", "value": 1}
                r = await client.post(path, json=late, headers=auth())
                assert r.status_code == 409 and r.json()["error"]["code"] == "run_ended", r.text
                again = await client.post(path, json=done, headers=headers)
                assert again.status_code == 200 and again.json() == first.json()
                state = await node.backend.feeds.state(run_feed(TENANT, thread, run))
                assert state is not None and state.head == 2
        where = holders(cluster, f"{prefix}:*run*")
        assert len(where) >= 2, f"the runs sit on one master: {where}"


async def test_abandoned_runs_on_every_shard_end_once_by_lease(
    cluster: RedisCluster, prefix: str
) -> None:
    """Runs on every shard, abandoned after their start, are ended by the two nodes'
    sweeps with one RUN_ERROR producer_lost each: the lease and its end are the run
    feed's, in its slot; the live-run index's due sets are spread over the masters."""
    async with (
        start_node(cluster.seed_url, prefix, redis_cluster=True) as a,
        start_node(cluster.seed_url, prefix, redis_cluster=True) as b,
        httpx.AsyncClient(base_url=a.url, timeout=DEADLINE) as client,
    ):
        runs = [(ev.new_id(), ev.new_id()) for _ in range(9)]
        for thread, run in runs:
            r = await client.post(
                f"/v1/threads/{thread}/runs/{run}/ui/ag-ui",
                json={"type": "RUN_STARTED", "threadId": thread, "runId": run},
                headers=auth(),
                params={"lease_seconds": 5},
            )
            assert r.status_code == 200, r.text
        listed = await client.get(
            "/v1/runs", params={"state": "live", "limit": 100}, headers=auth()
        )
        assert {(x["thread_id"], x["run_id"]) for x in listed.json()["runs"]} >= set(runs)
        due_sets = holders(cluster, f"{prefix}:runs:due:*")
        assert len(due_sets) >= 2, f"the due sets sit on one master: {due_sets}"

        async def all_ended() -> bool:
            for thread, run in runs:
                state = await a.backend.feeds.state(run_feed(TENANT, thread, run))
                if state is None or state.head < 2:
                    return False
            return True

        with anyio.fail_after(5 + 2 + 5):
            while not await all_ended():  # noqa: ASYNC110 - the lease's clock
                await anyio.sleep(0.1)
        for thread, run in runs:
            feed = run_feed(TENANT, thread, run)
            state = await a.backend.feeds.state(feed)
            assert state is not None and state.head == 2
            [end] = await a.backend.feeds.read(feed, Cursor(state.epoch, 1), 10)
            event = json.loads(end.data)
            assert event["type"] == "RUN_ERROR" and event["code"] == "producer_lost"
        assert sum(await lease_ends([a, b], len(runs))) == len(runs)
        assert await a.backend.runs.live_count() == 0  # type: ignore[union-attr]


async def test_sharded_inbox_every_shard_is_consumed(cluster: RedisCluster, prefix: str) -> None:
    shards = 6
    teams = [ev.team_id() for _ in range(shards)]
    async with start_node(
        cluster.seed_url, prefix, redis_cluster=True, redis_inbox_shards=shards
    ) as node:
        raw: Any = aioredis.RedisCluster.from_url(cluster.seed_url)
        try:
            for shard, team in enumerate(teams):
                body = ev.item(ev.message(f"via shard {shard}"))
                fields = {"tenant": TENANT, "team": team, "body": json.dumps(body)}
                await raw.xadd(inbox_key(prefix, "team", shard), fields)

            async def all_appended() -> bool:
                states = [await node.backend.feeds.state(team_feed(TENANT, t)) for t in teams]
                return all(s is not None and s.head == 1 for s in states)

            await eventually(all_appended, "every inbox shard's message appended")
        finally:
            await raw.aclose()
        where = holders(cluster, f"{prefix}:inbox:*")
        assert len(where) >= 2, f"the inbox shards sit on one master: {where}"


async def test_the_python_producer_publishes_into_a_cluster(
    cluster: RedisCluster, prefix: str
) -> None:
    teams = cluster.teams_on_every_shard(3, TENANT)
    producer = Producer.connect(cluster.seed_url, prefix=prefix, cluster=True)
    try:
        results = await producer.publish_team_many(TENANT, {t: [ev.item()] for t in teams})
        assert all(isinstance(r, list) and len(r) == 1 for r in results.values()), results
        async with start_node(cluster.seed_url, prefix, redis_cluster=True) as node:
            for team in teams:
                state = await node.backend.feeds.state(team_feed(TENANT, team))
                assert state is not None and state.head == 1
    finally:
        await producer.aclose()


async def test_a_new_producers_first_concurrent_appends_all_land(
    cluster: RedisCluster, prefix: str
) -> None:
    # redis-py's cluster client, set up by many first commands at once, lost some of
    # their connections (7 of 50 appends failed); the topology is learnt once first.
    teams = [str(uuid.uuid4()) for _ in range(50)]
    for attempt in range(2):  # and again with a second new producer
        producer = Producer.connect(cluster.seed_url, prefix=f"{prefix}{attempt}", cluster=True)
        try:
            results = await producer.publish_team_many(TENANT, {t: [ev.item()] for t in teams})
            failed = {t: r for t, r in results.items() if not isinstance(r, list)}
            assert failed == {}
        finally:
            await producer.aclose()


async def test_appends_land_while_the_feeds_slot_is_half_migrated(
    cluster: RedisCluster, prefix: str
) -> None:
    # Keys moved, slot still MIGRATING / IMPORTING: every append is ASK-redirected.  The
    # redirected call must go out on the connection that sent ASKING; redis-py sent it
    # on another whenever the target shard had two idle connections ("TTL exhausted").
    backend = redis_backend(cluster.seed_url, prefix=prefix, cluster=True)
    try:
        teams = cluster.teams_on_every_shard(6, TENANT)
        feed = team_feed(TENANT, teams[0])
        first = await backend.feeds.append(feed, [NewItem(None, b"0")], retention=100)
        [(source, [key, *_])] = holders(cluster, f"{prefix}:*{feed.id}*").items()
        slot = cluster.keyslot(key)
        target = next(m.port for m in cluster.masters() if m.port != source)
        # Several idle connections to the target shard: concurrent appends there.
        others = [team_feed(TENANT, t) for t in teams[1:]]
        there = [f for f in others if cluster.owner(cluster.keyslot(f.tag())).port == target]
        assert there, "a team on the target shard"
        async with anyio.create_task_group() as tg:
            for other in there * 4:
                tg.start_soon(
                    lambda f: backend.feeds.append(f, [NewItem(None, b"x")], retention=100),
                    other,
                )
        await anyio.to_thread.run_sync(cluster.begin_migration, slot, target)
        moved = await anyio.to_thread.run_sync(cluster.move_keys, slot, source, target)
        assert moved == 3
        try:
            with anyio.fail_after(DEADLINE):
                for n in range(1, 6):
                    r = await backend.feeds.append(feed, [NewItem(None, b"%d" % n)], retention=100)
                    assert r.cursors == [Cursor(first.state.epoch, n + 1)]
        finally:
            await anyio.to_thread.run_sync(cluster.finish_migration, slot, source, target)
            await cluster.wait_ok()
    finally:
        await backend.aclose()


@pytest.mark.parametrize(
    ("url", "hosts", "user", "password"),
    [
        ("redis://h:1", [("h", 1)], None, None),
        (
            "rediss://u:p%40w@a:1,b:2,[::1]:3/0?client_name=x",
            [("a", 1), ("b", 2), ("::1", 3)],
            "u",
            "p@w",
        ),
    ],
)
def test_seed_urls_name_one_node_or_several(
    url: str, hosts: list[tuple[str, int]], user: str | None, password: str | None
) -> None:
    settings = parse(url, cluster=True)
    assert list(settings.hosts) == hosts
    assert (settings.credentials.username, settings.credentials.password) == (user, password)


@pytest.mark.parametrize("url", ["unix:///tmp/r.sock", "redis://a:1,b", "redis://a:x"])
def test_seed_urls_that_name_no_node_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        parse(url, cluster=True)


async def test_any_seed_that_answers_will_do(cluster: RedisCluster, prefix: str) -> None:
    dead = free_port()  # nothing listens there
    port = cluster.seed_url.rsplit(":", 1)[1].split("/")[0]
    url = f"redis://127.0.0.1:{dead},127.0.0.1:{port}"
    backend = redis_backend(url, prefix=prefix, cluster=True)
    try:
        assert backend.ping is not None
        await backend.ping()
        feed = team_feed(TENANT, ev.team_id())
        result = await backend.feeds.append(feed, [NewItem(None, b"x")], retention=10)
        assert result.cursors[0].offset == 1
    finally:
        await backend.aclose()


async def test_settings_refuse_what_a_cluster_cannot_do(cluster: RedisCluster) -> None:
    with pytest.raises(ValueError, match="redis_min_replicas"):
        redis_backend(cluster.seed_url, cluster=True, min_replicas=1)


async def test_a_connection_closed_under_redis_py_is_unavailable_not_a_crash() -> None:
    """redis-py's cluster client can close a connection another task just took (the
    race behind an AttributeError deep in redis-py): the boundary makes it Unavailable,
    which every loop survives.  Our own AttributeErrors still propagate."""
    closed = Connection(host="127.0.0.1", port=1)  # never connected: no writer
    with pytest.raises(Unavailable, match="connection lost"), map_exceptions("a read"):
        await closed._send_packed_command([b"PING\r\n"])
    with pytest.raises(AttributeError), map_exceptions("a read"):
        None.missing  # type: ignore[attr-defined]  # noqa: B018
