"""``RedisConnection.io``: a call its caller stops waiting for keeps its connection
(a real ``redis-server`` of the test's own, whose connection count is the test's)."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
import redis

from gateway.feed import team_feed
from gateway.store.redis.connection import RedisConnection
from tests.support.redis_server import RedisServer
from tests.support.wait import until

pytestmark = [pytest.mark.anyio, pytest.mark.redis_admin]


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


def _connections_made(admin: redis.Redis) -> int:
    return int(admin.info("stats")["total_connections_received"])


async def test_a_call_cancelled_in_flight_finishes_on_its_connection(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    conn = RedisConnection(server.url, timeout=3.0)
    try:
        await conn.ping()
        made = _connections_made(admin)
        answers: list[object] = []

        async def leaving_caller() -> None:
            # BLPOP stands for any command whose reply is still on its way: the test
            # can see it is in flight (a blocked client) and decide when it ends.
            with conn.io("read", "test"):
                answers.append(await conn.client.execute_command("BLPOP", "k", 2))

        async with anyio.create_task_group() as tg:
            tg.start_soon(leaving_caller)
            await until(lambda: admin.info("clients")["blocked_clients"] == 1, 5, "in flight")
            tg.cancel_scope.cancel()  # the caller leaves (a client closed its socket)
            admin.rpush("k", b"v")  # and only now does the reply come
        # The call ran to its end before the cancellation took effect ...
        assert [list(a) for a in answers] == [[b"k", b"v"]]
        # ... so its connection went back to the pool: the next call needs no new one.
        await conn.ping()
        assert _connections_made(admin) == made
    finally:
        await conn.aclose()
        admin.close()


async def test_a_blocking_read_is_cancelled_at_once(server: RedisServer) -> None:
    """Reads that wait for producers (``within``) are not shielded: a node stops at once."""
    admin = redis.Redis.from_url(server.url)
    conn = RedisConnection(server.url, timeout=3.0)
    try:
        await conn.ping()
        answers: list[object] = []

        async def waiting_reader() -> None:
            with conn.io("read_new", within=30):
                answers.append(await conn.client.execute_command("BLPOP", "k", 20))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiting_reader)
                await until(lambda: admin.info("clients")["blocked_clients"] == 1, 5, "blocked")
                tg.cancel_scope.cancel()
        assert answers == []
    finally:
        await conn.aclose()
        admin.close()


async def test_feed_keys_are_remembered_and_bounded(server: RedisServer) -> None:
    conn = RedisConnection(server.url, prefix="gw")
    conn.keys.FEED_KEYS_KEPT = 3
    try:
        feeds = [team_feed("a:b{c}", f"0190f5a2-0000-7000-8000-00000000000{i}") for i in range(5)]
        first = conn.feed_keys(feeds[0])
        tag = "{a%3Ab%7Bc%7D:team:" + feeds[0].id + "}"
        assert first == (f"gw:{tag}:m", f"gw:{tag}:s", f"gw:{tag}:i")
        assert conn.feed_keys(feeds[0]) is first  # built once
        for feed in feeds[1:]:
            conn.feed_keys(feed)
        assert len(conn.keys._feed_keys) <= 3  # forgotten past the bound
        assert conn.feed_keys(feeds[0]) == first  # and built again alike
    finally:
        await conn.aclose()
