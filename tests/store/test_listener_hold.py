"""A listener's hold, through a real Redis: what is published during it waits in the
kernel, is read once it ends, and on Linux (the socket's low-water mark) a backlog
past the mark or the connection's end is still noticed while it lasts.

After ``PUBLISH`` returns and a ``PING`` on the same connection has been answered,
Redis has written the message to the listener's socket (it writes every reply of one
loop turn before reading the next command), and the answer to the ``PING`` came
through the same poll of the event loop that would have read the listener's socket
had it been watched: so "nothing arrived" is checked without waiting for time.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.store.redis.connection import ListenerAddress
from gateway.store.redis.listener import HOLD_LOWAT, LOWAT_HOLDS, Listener, connect
from tests.support.wait import until

pytestmark = pytest.mark.anyio

on_linux = pytest.mark.skipif(sys.platform != "linux", reason="the low-water mark is Linux's")


@contextlib.asynccontextmanager
async def subscribed(
    redis_url: str, redis_prefix: str, *, lowat: bool
) -> AsyncIterator[tuple[Listener, aioredis.Redis, bytes]]:
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    listener = await connect(ListenerAddress("127.0.0.1", port, None, False, None, None))
    if not lowat:
        listener._lowat = None  # as where the mark cannot hold: the transport pauses
    client = aioredis.Redis.from_url(redis_url)
    channel = f"{redis_prefix}:hold".encode()
    try:
        listener.subscribe([channel])
        await listener.confirmed()
        yield listener, client, channel
    finally:
        listener.close()
        await client.aclose()


async def publish(client: aioredis.Redis, channel: bytes, payloads: list[bytes]) -> None:
    for payload in payloads:
        assert await client.publish(channel, payload) == 1
    await client.ping()  # see the module's docstring
    await client.ping()


@on_linux
def test_this_kernel_holds_with_the_low_water_mark() -> None:
    # CI runs on Linux >= 4.20: the tests below exercise the low-water mark there.
    assert LOWAT_HOLDS


@pytest.mark.parametrize("lowat", [True, False], ids=["low-water-mark", "paused"])
async def test_what_is_published_during_a_hold_is_read_when_it_ends(
    redis_url: str, redis_prefix: str, lowat: bool
) -> None:
    async with subscribed(redis_url, redis_prefix, lowat=lowat) as (listener, client, channel):
        assert (listener._lowat is not None) == (lowat and LOWAT_HOLDS)
        assert listener.reading
        listener.hold()
        assert not listener.reading
        await publish(client, channel, [b"a", b"b", b"c"])
        assert listener.messages == []  # waiting in the kernel
        listener.release()
        assert listener.reading
        # Nothing more is published: ending the hold alone brings what waited.
        await until(lambda: len(listener.messages) == 3, 10, "the held messages")
        assert listener.take() == [(channel, b"a"), (channel, b"b"), (channel, b"c")]
        # Released, the next message is read as it comes.
        await publish(client, channel, [b"d"])
        await until(lambda: listener.messages == [(channel, b"d")], 10, "a message after")
        # A second release, or one without a hold, changes nothing.
        listener.release()
        assert listener.reading


@on_linux
async def test_a_backlog_past_the_low_water_mark_is_read_while_the_hold_lasts(
    redis_url: str, redis_prefix: str
) -> None:
    async with subscribed(redis_url, redis_prefix, lowat=True) as (listener, client, channel):
        listener.hold()
        await publish(client, channel, [b"x" * 1000])
        assert listener.messages == []
        big = [bytes([65 + k]) * (HOLD_LOWAT // 2) for k in range(3)]
        await publish(client, channel, big)
        # Past the mark the kernel calls the socket readable: read during the hold
        # (at least up to the mark; what came after it may wait for the release).
        await until(lambda: len(listener.messages) >= 2, 10, "the backlog")
        sent = [b"x" * 1000, *big]
        got = [payload for _, payload in listener.messages]
        assert got == sent[: len(got)]
        assert not listener.reading  # the hold lasts until its release
        listener.release()
        await until(lambda: len(listener.messages) == 4, 10, "the rest")
        assert [payload for _, payload in listener.take()] == sent


@on_linux
async def test_a_connection_that_ends_during_a_hold_is_noticed_before_it_ends(
    redis_url: str, redis_prefix: str
) -> None:
    async with subscribed(redis_url, redis_prefix, lowat=True) as (listener, client, _):
        assert listener._lowat is not None
        host, port = listener._lowat.getsockname()[:2]
        listener.hold()
        assert await client.client_kill_filter(_type=None, addr=f"{host}:{port}") == 1
        await until(lambda: listener.failed is not None, 10, "the lost connection")
