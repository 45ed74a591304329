"""Epochs under data loss and rollback, against redis-server processes of the test's own.

Decisions D1 (a feed whose history can no longer be trusted moves to a new, larger
epoch; the same ``epoch:offset`` never names two items) and D2 (old cursors and
connected followers get ``epoch_restarted``).  Every test starts and breaks its own
servers (``RedisServer``), never the machine's Redis, and talks to a real gateway node
over HTTP/SSE, except the log-level tests at the end, which drive the Redis feed store directly.

Server stops and starts run in a worker thread, so the node keeps running (and keeps
failing to reach Redis) while its server is down, as it would in production.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
import redis.asyncio as aioredis
from httpx_sse import ServerSentEvent, aconnect_sse
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway.app import Gateway
from gateway.cursor import Cursor
from gateway.errors import Unavailable
from gateway.feed import FeedKey, NewItem, team_feed
from gateway.store.redis import RedisFeeds, redis_backend
from tests.support import events as ev
from tests.support.backends import redis_feeds
from tests.support.node import auth, metric, start_node
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.anyio, pytest.mark.redis_admin]

T = TypeVar("T")

PREFIX = "gwtest:rollback"
TENANT = "acme"
#: Bound on every single wait in these tests (each test takes a few seconds at most).
STEP = 10.0
#: How long a follower may take to notice a change on its own (the reader's reconnect
#: backoff is at most 2 s).
NOTICE = 6.0


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def split(cursor: str) -> tuple[int, int]:
    epoch, _, offset = cursor.partition(":")
    return int(epoch), int(offset)


def admin(server: RedisServer) -> Any:
    """A fail-fast client of the test's own server (no retries, short timeouts)."""
    return aioredis.Redis.from_url(
        server.url, socket_timeout=5, socket_connect_timeout=5, retry=Retry(NoBackoff(), 0)
    )


async def in_thread(fn: Callable[[], object]) -> None:
    """Run a blocking RedisServer call without stopping the node's event loop."""
    await anyio.to_thread.run_sync(fn)


#: Attempts for one request that Redis answers with 503 ``unavailable``.  A client
#: retries a 503, and so do these helpers (a bounded number of times, without
#: sleeping), so the epoch checks here do not hinge on whether a request right after a
#: restart meets a stale pooled connection.  That is checked on its own, strictly, by
#: test_concurrent_requests_right_after_a_redis_restart_succeed.
UNAVAILABLE_ATTEMPTS = 30


class _Unavailable(Exception):
    """The node answered 503 unavailable, or cut a stream (a Redis command failed)."""


async def _retrying(op: Callable[[], Awaitable[T]]) -> T:
    for attempt in range(UNAVAILABLE_ATTEMPTS):
        try:
            return await op()
        except _Unavailable:
            if attempt == UNAVAILABLE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _check_unavailable(r: httpx.Response) -> None:
    if r.status_code == 503:
        assert r.json()["error"]["code"] == "unavailable", r.text
        raise _Unavailable(r.text)


async def publish(client: httpx.AsyncClient, team: str, n: int) -> list[str]:
    body = [ev.item() for _ in range(n)]  # the same body on a retry (event ids dedupe)

    async def once() -> list[str]:
        r = await client.post(f"/v1/teams/{team}/events", json=body, headers=auth(TENANT))
        _check_unavailable(r)
        assert r.status_code == 200, r.text
        cursors: list[str] = r.json()["cursors"]
        return cursors

    return await _retrying(once)


async def get_json(client: httpx.AsyncClient, team: str) -> httpx.Response:
    """A plain GET of the feed that is expected to answer with a JSON error."""

    async def once() -> httpx.Response:
        r = await client.get(f"/v1/teams/{team}/events", headers=auth(TENANT))
        _check_unavailable(r)
        return r

    return await _retrying(once)


async def _sse(
    client: httpx.AsyncClient, team: str, cursor: str | None, n: int | None
) -> list[ServerSentEvent]:
    """Read n messages (None: until the server ends the stream), retrying a 503."""
    headers = auth(TENANT) if cursor is None else {**auth(TENANT), "Last-Event-ID": cursor}

    async def once() -> list[ServerSentEvent]:
        got: list[ServerSentEvent] = []
        try:
            async with aconnect_sse(
                client, "GET", f"/v1/teams/{team}/events", headers=headers
            ) as source:
                if source.response.status_code == 503:
                    await source.response.aread()
                    _check_unavailable(source.response)
                assert source.response.status_code == 200
                async for sse in source.aiter_sse():
                    got.append(sse)
                    if len(got) == n:
                        break
        except httpx.RemoteProtocolError as exc:
            # The response was cut: a history read failed after the headers went out.
            raise _Unavailable(f"stream cut after {[s.id for s in got]}") from exc
        if n is not None and len(got) < n and not any(_is_restart(s) for s in got):
            # The node ended the stream early without epoch_restarted: a history read
            # failed after the headers went out (it ends the stream; the client resumes).
            raise _Unavailable(f"stream ended after {[s.id for s in got]}")
        return got

    with anyio.fail_after(STEP):
        return await _retrying(once)


async def read_until_closed(
    client: httpx.AsyncClient, team: str, cursor: str | None = None
) -> list[ServerSentEvent]:
    """Connect and read every message until the server ends the stream."""
    return await _sse(client, team, cursor, None)


async def collect(
    client: httpx.AsyncClient, team: str, n: int, cursor: str | None = None
) -> list[ServerSentEvent]:
    """Connect and read exactly n messages."""
    got = await _sse(client, team, cursor, n)
    assert len(got) == n, [s.id for s in got]
    return got


def _is_restart(sse: ServerSentEvent) -> bool:
    return bool(json.loads(sse.data).get("kind") == "epoch_restarted")


def assert_restart(sse: ServerSentEvent, epoch: int, offset: int = 0) -> None:
    assert sse.id == f"{epoch}:{offset}"
    assert json.loads(sse.data) == {
        "cursor": {"epoch": epoch, "offset": offset},
        "kind": "epoch_restarted",
    }


class Follower:
    """One SSE client following a team feed in the background; keeps every message."""

    def __init__(self, client: httpx.AsyncClient, team: str) -> None:
        self.client = client
        self.team = team
        self.messages: list[ServerSentEvent] = []
        self.ended = anyio.Event()
        self._changed = anyio.Event()

    @property
    def ids(self) -> list[str]:
        return [m.id for m in self.messages]

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            async with aconnect_sse(
                self.client, "GET", f"/v1/teams/{self.team}/events", headers=auth(TENANT)
            ) as source:
                assert source.response.status_code == 200
                task_status.started()
                async for sse in source.aiter_sse():
                    self.messages.append(sse)
                    self._notify()
        finally:
            self.ended.set()
            self._notify()

    async def wait_for(self, n: int, within: float = STEP) -> None:
        """Wait until n messages have arrived (fails if the stream ends first)."""
        with anyio.fail_after(within):
            while len(self.messages) < n:
                assert not self.ended.is_set(), f"stream ended after {self.ids}"
                await self._changed.wait()

    async def wait_end(self, within: float = STEP) -> None:
        with anyio.fail_after(within):
            await self.ended.wait()


@pytest.fixture
async def http() -> AsyncIterator[Callable[[Gateway], httpx.AsyncClient]]:
    """Clients for nodes; closed after the test."""
    clients: list[httpx.AsyncClient] = []

    def make(node: Gateway) -> httpx.AsyncClient:
        c = httpx.AsyncClient(base_url=node.url, timeout=STEP)
        clients.append(c)
        return c

    yield make
    for c in clients:
        await c.aclose()


def node_settings() -> dict[str, Any]:
    # Short keepalives so an idle follower never hits the client's read timeout.
    return {"keepalive_seconds": 0.5, "read_block_ms": 200}


# ---------------------------------------------------------------------------
# 1 and 2: the data is lost while a follower is connected
# ---------------------------------------------------------------------------


async def _data_loss_while_following(
    client: httpx.AsyncClient,
    lose: Callable[[], Awaitable[None]],
) -> None:
    """Scenarios 1 and 2: everything of the feed is gone.

    The node that saw the feed recreates it empty in a new epoch at once (contract D9),
    so its connected follower is told without anything being published, and an old
    cursor gets ``epoch_restarted``, not a bare 404; the next publish continues that
    new epoch.
    """
    team = ev.team_id()
    old = await publish(client, team, 3)
    old_epoch = split(old[0])[0]
    assert [split(c) for c in old] == [(old_epoch, 1), (old_epoch, 2), (old_epoch, 3)]

    async with anyio.create_task_group() as tg:
        follower = Follower(client, team)
        await tg.start(follower.run)
        await follower.wait_for(3)
        assert follower.ids == old

        await lose()

        # The connected follower: exactly one epoch_restarted, then the stream ends,
        # with nothing published after the loss.
        await follower.wait_end(NOTICE)
        assert len(follower.messages) == 4, follower.ids
        new_epoch = split(follower.messages[3].id)[0]
        assert new_epoch > old_epoch
        assert_restart(follower.messages[3], new_epoch, 0)

    # Resuming with an old cursor before anything is published: epoch_restarted too.
    got = await read_until_closed(client, team, old[-1])
    assert len(got) == 1, [s.id for s in got]
    assert_restart(got[0], new_epoch, 0)

    [new] = await publish(client, team, 1)
    assert split(new) == (new_epoch, 1)
    # Reconnecting with the restart cursor gets the new item.
    [again] = await collect(client, team, 1, cursor=follower.messages[3].id)
    assert again.id == new


async def test_flushall_while_a_follower_is_connected(
    http: Callable[[Gateway], httpx.AsyncClient],
) -> None:
    with RedisServer() as server:
        async with start_node(server.url, PREFIX, **node_settings()) as node:
            r = admin(server)
            try:

                async def lose() -> None:
                    assert await r.flushall() is True
                    assert await r.dbsize() == 0

                with anyio.fail_after(3 * STEP):
                    await _data_loss_while_following(http(node), lose)
            finally:
                await r.aclose()


async def test_restart_without_persistence_while_a_follower_is_connected(
    http: Callable[[Gateway], httpx.AsyncClient],
) -> None:
    with RedisServer(persistence=False) as server:
        async with start_node(server.url, PREFIX, **node_settings()) as node:
            pid = server.pid

            async def lose() -> None:
                await in_thread(server.stop)
                await in_thread(server.start)  # same port, same dir, empty
                assert server.pid != pid

            with anyio.fail_after(3 * STEP):
                await _data_loss_while_following(http(node), lose)
            assert isinstance(node.backend.feeds, RedisFeeds)
            assert redis_feeds(node.backend).conn.server_changes >= 1  # it did see the restart


# ---------------------------------------------------------------------------
# 3: restart from an older snapshot; a clean restart keeps the epoch
# ---------------------------------------------------------------------------


async def test_restart_from_an_older_snapshot_moves_the_feed_to_a_new_epoch(
    http: Callable[[Gateway], httpx.AsyncClient],
) -> None:
    with RedisServer(persistence=True) as server:
        dump = server.dir / "dump.rdb"
        snapshot = server.dir / "snapshot-at-5.rdb"
        async with start_node(server.url, PREFIX, **node_settings()) as node:
            client = http(node)
            r = admin(server)
            try:
                team = ev.team_id()
                first = await publish(client, team, 5)
                epoch = split(first[0])[0]
                assert await r.save() is True
            finally:
                await r.aclose()
            shutil.copy2(dump, snapshot)

            with anyio.fail_after(3 * STEP):
                async with anyio.create_task_group() as tg:
                    follower = Follower(client, team)
                    await tg.start(follower.run)
                    await follower.wait_for(5)
                    later = await publish(client, team, 3)
                    assert [split(c) for c in later] == [(epoch, 6), (epoch, 7), (epoch, 8)]
                    await follower.wait_for(8)
                    assert follower.ids == first + later

                    # Roll Redis back to the snapshot taken at offset 5; the node runs on.
                    await in_thread(server.stop)
                    shutil.copy2(snapshot, dump)
                    await in_thread(server.start)

                    # Nothing is published: the node verifies what it follows on reconnect.
                    await follower.wait_end(NOTICE)
                    assert len(follower.messages) == 9, follower.ids
                    restart = follower.messages[8]
                    new_epoch, restart_offset = split(restart.id)
                    assert new_epoch > epoch
                    assert_restart(restart, new_epoch, 0)
                    assert restart_offset == 0

            # A client that saw 8 items: epoch_restarted (never 400, never items).
            got = await read_until_closed(client, team, later[-1])
            assert len(got) == 1, [s.id for s in got]
            assert_restart(got[0], new_epoch, 0)

            # Publishing continues in the new epoch; offsets 6..8 of the old epoch are
            # never handed out again.
            fresh = await publish(client, team, 3)
            assert [split(c) for c in fresh] == [(new_epoch, 1), (new_epoch, 2), (new_epoch, 3)]
            assert not set(fresh) & set(later)
            assert all(split(c)[0] > epoch for c in fresh)
            got = await collect(client, team, 3, cursor=restart.id)
            assert [s.id for s in got] == fresh
            assert metric(node, "gateway_epoch_restarts_total") >= 1


async def test_clean_restart_with_persistence_keeps_the_epoch(
    http: Callable[[Gateway], httpx.AsyncClient],
) -> None:
    with RedisServer(persistence=True) as server:
        async with start_node(server.url, PREFIX, **node_settings()) as node:
            client = http(node)
            team = ev.team_id()
            with anyio.fail_after(3 * STEP):
                async with anyio.create_task_group() as tg:
                    follower = Follower(client, team)
                    first = await publish(client, team, 5)
                    epoch = split(first[0])[0]
                    await tg.start(follower.run)
                    await follower.wait_for(5)

                    r = admin(server)
                    try:
                        assert await r.save() is True
                    finally:
                        await r.aclose()
                    await in_thread(server.stop)
                    await in_thread(server.start)  # same port and dir: nothing lost

                    # The same epoch goes on at the next offset; the follower just
                    # receives it (no epoch_restarted).
                    [after] = await publish(client, team, 1)
                    assert split(after) == (epoch, 6)
                    await follower.wait_for(6, NOTICE)
                    assert follower.ids == [*first, after]
                    # Published again once the reader has certainly reconnected.
                    [more] = await publish(client, team, 1)
                    assert split(more) == (epoch, 7)
                    await follower.wait_for(7, NOTICE)
                    assert follower.ids == [*first, after, more]
                    assert not follower.ended.is_set()
                    tg.cancel_scope.cancel()
            assert metric(node, "gateway_epoch_restarts_total") == 0
            assert isinstance(node.backend.feeds, RedisFeeds)
            assert redis_feeds(node.backend).conn.server_changes >= 1  # it did see the restart
            got = await collect(client, team, 1, cursor=first[-1])
            assert got[0].id == after


async def test_concurrent_requests_right_after_a_redis_restart_succeed(
    http: Callable[[Gateway], httpx.AsyncClient],
) -> None:
    # A clean restart (nothing lost).  Once Redis answers again, the node's requests
    # must succeed: nothing is wrong any more that a client should have to retry.  The
    # node's pool still holds connections the old server closed, and with redis-py
    # 8.1's default maintenance-notifications setting the pool does not check them
    # (https://github.com/redis/redis-py/pull/4260); concurrent requests are what reach them.
    statuses: list[int] = []
    with RedisServer(persistence=True) as server:
        async with start_node(server.url, PREFIX, **node_settings()) as node:
            client = http(node)
            team = ev.team_id()
            with anyio.fail_after(3 * STEP):
                await publish(client, team, 1)
                # Concurrent publishes leave several connections idle in the node's pool.
                async with anyio.create_task_group() as tg:
                    for _ in range(20):
                        tg.start_soon(publish, client, team, 1)
                r = admin(server)
                try:
                    assert await r.save() is True
                finally:
                    await r.aclose()
                await in_thread(server.stop)
                await in_thread(server.start)

                async def one() -> None:
                    response = await client.post(
                        f"/v1/teams/{team}/events", json=[ev.item()], headers=auth(TENANT)
                    )
                    statuses.append(response.status_code)

                async with anyio.create_task_group() as tg:
                    for _ in range(10):
                        tg.start_soon(one)
    # Outside the node's task group, so a failure is a plain AssertionError.
    assert statuses == [200] * 10


# ---------------------------------------------------------------------------
# 4: a replica that fell behind is promoted
# ---------------------------------------------------------------------------


async def _wait_stream_length(r: Any, key: str, n: int, within: float = STEP) -> None:
    """Bounded poll of a server until the stream ``key`` holds ``n`` entries."""
    deadline = time.monotonic() + within
    while True:
        length = int(await r.xlen(key))
        if length >= n:
            return
        assert time.monotonic() < deadline, f"{key}: {length} entries after {within}s, want {n}"
        await anyio.sleep(0.02)


async def test_promoted_replica_that_fell_behind(
    http: Callable[[Gateway], httpx.AsyncClient],
) -> None:
    with RedisServer() as primary, RedisServer(replica_of=primary) as replica:
        p, rr = admin(primary), admin(replica)
        try:
            async with (
                TcpProxy(primary.port) as proxy,
                start_node(proxy.url, PREFIX, **node_settings()) as node,
            ):
                assert isinstance(node.backend.feeds, RedisFeeds)
                client = http(node)
                team = ev.team_id()
                meta_key, stream_key, _ = redis_feeds(node.backend).keys(team_feed(TENANT, team))
                with anyio.fail_after(4 * STEP):
                    first = await publish(client, team, 5)
                    epoch = split(first[0])[0]
                    await _wait_stream_length(rr, stream_key, 5)

                    # The replica stops replicating.  SIGSTOP alone is not enough: the
                    # kernel still buffers what the primary sends, and the replica would
                    # apply it after SIGCONT; so the primary also drops the link.
                    replica.pause()
                    assert await p.client_kill_filter(_type="replica") == 1

                    async with anyio.create_task_group() as tg:
                        follower = Follower(client, team)
                        await tg.start(follower.run)
                        await follower.wait_for(5)
                        later = await publish(client, team, 3)  # only the primary has them
                        assert [split(c) for c in later] == [(epoch, 6), (epoch, 7), (epoch, 8)]
                        await follower.wait_for(8)
                        assert follower.ids == first + later

                        await in_thread(primary.kill)
                        replica.resume()
                        assert await rr.execute_command("REPLICAOF", "NO", "ONE")
                        # The promoted replica really is behind.
                        assert int(await rr.hget(meta_key, "head")) == 5
                        assert int(await rr.xlen(stream_key)) == 5
                        await proxy.retarget(replica.port)

                        await follower.wait_end(NOTICE)
                        assert len(follower.messages) == 9, follower.ids
                        restart = follower.messages[8]
                        new_epoch = split(restart.id)[0]
                        assert new_epoch > epoch
                        assert_restart(restart, new_epoch, 0)

                    got = await read_until_closed(client, team, later[-1])
                    assert len(got) == 1, [s.id for s in got]
                    assert_restart(got[0], new_epoch, 0)

                    fresh = await publish(client, team, 3)
                    assert [split(c) for c in fresh] == [
                        (new_epoch, 1),
                        (new_epoch, 2),
                        (new_epoch, 3),
                    ]
                    assert not set(fresh) & set(later)
                    got = await collect(client, team, 3, cursor=restart.id)
                    assert [s.id for s in got] == fresh
        finally:
            await p.aclose()
            await rr.aclose()


# ---------------------------------------------------------------------------
# A request notices the rollback before the reader does
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("first", ["resume", "join", "publish"])
async def test_followers_restart_whoever_notices_the_rollback_first(
    http: Callable[[Gateway], httpx.AsyncClient], first: str
) -> None:
    # The same rollback as a snapshot restore, but done with DUMP/RESTORE of the feed's
    # keys (an operator restoring a feed), so the node's connections stay up and the
    # reader's reconnect check never runs: the first to notice is a request on the same
    # node (a client resuming with an old cursor, a new follower joining, a publish),
    # which moves the feed to a new epoch.  After a real restart the same happens when a
    # request reaches the feed while the reader is still in its reconnect backoff.  The
    # followers already connected must be told too (D2), without waiting for a publish.
    with RedisServer() as server:
        async with start_node(server.url, PREFIX, **node_settings()) as node:
            assert isinstance(node.backend.feeds, RedisFeeds)
            client = http(node)
            r = admin(server)
            try:
                team = ev.team_id()
                keys = redis_feeds(node.backend).keys(team_feed(TENANT, team))
                first_items = await publish(client, team, 5)
                epoch = split(first_items[0])[0]
                saved = {k: await r.dump(k) for k in keys}
                with anyio.fail_after(3 * STEP):
                    async with anyio.create_task_group() as tg:
                        follower = Follower(client, team)
                        await tg.start(follower.run)
                        await follower.wait_for(5)
                        later = await publish(client, team, 3)
                        await follower.wait_for(8)
                        assert follower.ids == first_items + later

                        for k, value in saved.items():
                            assert value is not None, k
                            await r.restore(k, 0, value, replace=True)

                        joiner: Follower | None = None
                        published: list[str] = []
                        if first == "resume":
                            got = await read_until_closed(client, team, later[-1])
                            assert len(got) == 1, [s.id for s in got]
                            assert split(got[0].id)[0] > epoch
                            assert_restart(got[0], split(got[0].id)[0], 0)
                        elif first == "join":
                            joiner = Follower(client, team)
                            await tg.start(joiner.run)  # answered: the feed was checked
                        else:
                            published = await publish(client, team, 1)
                            assert split(published[0])[0] > epoch
                            assert split(published[0])[1] == 1

                        await follower.wait_end(NOTICE)
                        assert len(follower.messages) == 9, follower.ids
                        new_epoch = split(follower.messages[8].id)[0]
                        assert new_epoch > epoch
                        assert_restart(follower.messages[8], new_epoch, 0)

                        if joiner is not None:
                            # The joiner is in the new epoch and simply follows it.
                            published = await publish(client, team, 1)
                            await joiner.wait_for(1)
                            assert joiner.ids == published
                            assert not joiner.ended.is_set()
                        tg.cancel_scope.cancel()
                    if published:
                        assert split(published[0]) == (new_epoch, 1)
                    # Nothing of the old epoch after offset 5 is served again.
                    got = await read_until_closed(client, team, later[-1])
                    assert len(got) == 1 and split(got[0].id) == (new_epoch, 0)
            finally:
                await r.aclose()


# ---------------------------------------------------------------------------
# 5: the log level, two nodes on one server
# ---------------------------------------------------------------------------
#
# What a node can detect is bounded by what it saw.  Each node's feed store remembers, per feed,
# the last (epoch, offset, chain value) it appended or read (`known`), and the Lua step
# compares that with what Redis holds: a head below the known offset, or a different
# hash-chain value at the known offset, is a rollback, and the feed moves to a new epoch.
#
# A node that never saw the lost items (here `fresh`) has nothing to compare with: a
# feed restored to offset 5 is, to it, a perfectly consistent feed at offset 5, and if
# it appends first it hands out offsets 6.. of the old epoch again, for different items.
# No check on that node can prevent this: it cannot know of writes it never saw.  What
# bounds the damage is that every node that did see them checks on its next contact
# (append, resume, and the reader's verify after every reconnect), so the feed moves to
# a new epoch as soon as any such node touches it, and all clients, including those that
# were handed the reused offsets, are restarted from there.


def _items(tag: str, n: int) -> list[NewItem]:
    return [NewItem(f"{tag}-{i}", f'"{tag}":{i}'.encode()) for i in range(n)]


async def _restore_snapshot(server: RedisServer, snapshot: Path) -> None:
    await in_thread(server.stop)
    shutil.copy2(snapshot, server.dir / "dump.rdb")
    await in_thread(server.start)


async def _after_restart(step: Callable[[], Awaitable[T]]) -> T:
    """Run one log call right after a restart, retrying Unavailable (bounded).

    A feed store may still hold pooled connections the old server closed; the first
    command on each fails (see UNAVAILABLE_ATTEMPTS).  The step must be safe to repeat:
    appends are (their keys are idempotency keys), checks are.
    """
    for attempt in range(UNAVAILABLE_ATTEMPTS):
        try:
            return await step()
        except Unavailable:
            if attempt == UNAVAILABLE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


async def _two_logs_after_rollback(
    server: RedisServer, feed: FeedKey
) -> tuple[RedisFeeds, RedisFeeds, int, list[Cursor]]:
    """`seen` appends 1..5, snapshot, 6..8; then Redis is restored to the snapshot."""
    seen = redis_feeds(redis_backend(server.url, prefix=PREFIX, node_id="seen"))
    fresh = redis_feeds(redis_backend(server.url, prefix=PREFIX, node_id="fresh"))
    first = await seen.append(feed, _items("a", 5), retention=1000)
    epoch = first.state.epoch
    r = admin(server)
    try:
        assert await r.save() is True
    finally:
        await r.aclose()
    snapshot = server.dir / "snapshot-at-5.rdb"
    shutil.copy2(server.dir / "dump.rdb", snapshot)
    later = await seen.append(feed, _items("b", 3), retention=1000)
    assert later.cursors == [Cursor(epoch, 6), Cursor(epoch, 7), Cursor(epoch, 8)]
    await _restore_snapshot(server, snapshot)
    return seen, fresh, epoch, later.cursors


async def test_log_node_that_saw_the_lost_items_moves_the_feed_on() -> None:
    with RedisServer(persistence=True) as server:
        feed = team_feed(TENANT, ev.team_id())
        with anyio.fail_after(3 * STEP):
            seen, fresh, epoch, lost = await _two_logs_after_rollback(server, feed)
            try:
                # The fresh node sees a consistent feed at offset 5: it cannot tell.
                state = await _after_restart(lambda: fresh.state(feed))
                assert state is not None
                assert (state.epoch, state.head) == (epoch, 5)

                # The node that saw 6..8 moves the feed to a new epoch on its next append.
                result = await _after_restart(
                    lambda: seen.append(feed, _items("c", 3), retention=1000)
                )
                assert result.new_epoch is True
                new_epoch = result.state.epoch
                assert new_epoch > epoch
                assert result.cursors == [Cursor(new_epoch, i) for i in (1, 2, 3)]
                assert not set(result.cursors) & set(lost)

                # Everyone sees the new epoch; the old one is gone and not reused.
                state = await fresh.state(feed)
                assert state is not None
                assert (state.epoch, state.head, state.first) == (new_epoch, 3, 1)
                assert await fresh.read(feed, Cursor(epoch, 5), 10) == []
                items = await fresh.read(feed, Cursor(new_epoch, 0), 10)
                assert [i.cursor for i in items] == result.cursors
                # And the fresh node appends after them, in the new epoch.
                more = await fresh.append(feed, _items("d", 1), retention=1000)
                assert more.cursors == [Cursor(new_epoch, 4)]
                assert more.new_epoch is False
            finally:
                await seen.conn.aclose()
                await fresh.conn.aclose()


async def test_log_fresh_node_cannot_detect_but_the_node_that_saw_does() -> None:
    # The limitation documented above, made visible: the fresh node appends first and
    # re-issues offsets 6..8 of the old epoch (what it cannot detect); the node that saw
    # the originals detects the rollback even though the head is 8 again, because the
    # hash chain at offset 8 differs, and moves the feed to a new epoch.
    with RedisServer(persistence=True) as server:
        feed = team_feed(TENANT, ev.team_id())
        with anyio.fail_after(3 * STEP):
            seen, fresh, epoch, lost = await _two_logs_after_rollback(server, feed)
            try:
                reissued = await _after_restart(
                    lambda: fresh.append(feed, _items("other", 3), retention=1000)
                )
                assert reissued.new_epoch is False
                assert reissued.cursors == lost  # same cursors, different items

                result = await _after_restart(
                    lambda: seen.append(feed, _items("c", 1), retention=1000)
                )
                assert result.new_epoch is True
                new_epoch = result.state.epoch
                assert new_epoch > epoch
                assert result.cursors == [Cursor(new_epoch, 1)]

                # The fresh node sees the new epoch too (its `known` is of the old one).
                state = await fresh.state(feed)
                assert state is not None
                assert (state.epoch, state.head) == (new_epoch, 1)
            finally:
                await seen.conn.aclose()
                await fresh.conn.aclose()


# ---------------------------------------------------------------------------
# the proxy itself (tests/support/tcp_proxy.py)
# ---------------------------------------------------------------------------


async def _server_port(client: Any) -> int:
    info = await client.info("server")
    return int(info["tcp_port"])


async def test_tcp_proxy_retarget_closes_old_pairs_and_forwards_new_ones() -> None:
    with RedisServer() as a, RedisServer() as b:
        async with TcpProxy(a.port) as proxy:
            with anyio.fail_after(STEP):
                old: Any = aioredis.Redis.from_url(proxy.url, retry=Retry(NoBackoff(), 0))
                try:
                    assert await _server_port(old) == a.port
                    assert proxy.open_pairs == 1
                    # A reply larger than one chunk crosses the proxy intact.
                    big = b"x" * (3 * 64 * 1024 + 17)
                    await old.set("big", big)
                    assert await old.get("big") == big

                    await proxy.retarget(b.port)
                    assert proxy.open_pairs == 0
                    with pytest.raises(aioredis.ConnectionError):
                        await old.ping()  # its pair was closed
                    # The client reconnects; new connections reach the new target.
                    assert await _server_port(old) == b.port
                    assert await old.get("big") is None
                finally:
                    await old.aclose()
        # Closed: nothing listens on the proxy's port any more.
        with pytest.raises(OSError):
            await anyio.connect_tcp("127.0.0.1", proxy.port)


async def test_concurrent_first_appends_are_no_rotation_and_lose_nothing(
    redis_url: str, redis_prefix: str
) -> None:
    """Sixteen appends to a new feed at once: their replies may be taken in another
    order than they ran.  None of that is a loss: no rotation is counted, nothing is
    logged as lost, and what the node knows of the feed only moves forward."""
    from gateway.metrics import Metrics

    metrics = Metrics()
    backend = redis_backend(redis_url, prefix=redis_prefix, metrics=metrics)
    try:
        feed = team_feed("acme", ev.team_id())
        results = []

        async def one(i: int) -> None:
            results.append(
                await backend.feeds.append(feed, [NewItem(f"k{i}", b"x")], retention=100)
            )

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
        assert sorted(r.cursors[0].offset for r in results) == list(range(1, 17))
        rotations = metrics.registry.get_sample_value(
            "gateway_epoch_rotations_total", {"reason": "missing"}
        )
        assert not rotations
        assert not metrics.registry.get_sample_value("gateway_lost_items_total")
        known = backend.feeds.known.get(feed)
        assert known is not None and known.offset == 16
    finally:
        await backend.aclose()
