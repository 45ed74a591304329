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
import os
import socket
from collections.abc import AsyncIterator

import anyio
import pytest
import redis.asyncio as aioredis

from gateway.store.redis.client.subscriber import HOLD_LOWAT, LOWAT_HOLDS, PubSubConnection, connect
from gateway.store.redis.client.topology import ListenerAddress
from tests.support.wait import until

pytestmark = pytest.mark.anyio

lowat_only = pytest.mark.skipif(
    not LOWAT_HOLDS, reason="the low-water mark holds on Linux 4.20 and later only"
)


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param(("asyncio", {}), id="asyncio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> object:
    # uvloop's sockets and libuv's epoll, as the gateway runs, and asyncio's own.
    return request.param


@contextlib.asynccontextmanager
async def subscribed(
    redis_url: str, redis_prefix: str, *, lowat: bool
) -> AsyncIterator[tuple[PubSubConnection, aioredis.Redis, bytes, int]]:
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    listener = await connect(ListenerAddress("127.0.0.1", port))
    if not lowat:
        listener._lowat = None  # as where the mark cannot hold: the transport pauses
    client = aioredis.Redis.from_url(redis_url)
    channel = f"{redis_prefix}:hold".encode()
    try:
        with anyio.fail_after(10):
            listener.send("CLIENT", "ID")  # before SUBSCRIBE, which allows no other command
            client_id = await listener._reply()
            listener.subscribe([channel])
            await listener.confirmed()
        yield listener, client, channel, client_id
    finally:
        listener.close()
        await client.aclose()


async def publish(client: aioredis.Redis, channel: bytes, payloads: list[bytes]) -> None:
    for payload in payloads:
        assert await client.publish(channel, payload) == 1
    await client.ping()  # see the module's docstring
    await client.ping()


@pytest.mark.parametrize("lowat", [True, False], ids=["low-water-mark", "paused"])
async def test_what_is_published_during_a_hold_is_read_when_it_ends(
    redis_url: str, redis_prefix: str, lowat: bool
) -> None:
    async with subscribed(redis_url, redis_prefix, lowat=lowat) as (listener, client, channel, _):
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


@lowat_only
async def test_a_backlog_past_the_low_water_mark_is_read_while_the_hold_lasts(
    redis_url: str, redis_prefix: str
) -> None:
    async with subscribed(redis_url, redis_prefix, lowat=True) as (listener, client, channel, _):
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


@lowat_only
async def test_a_connection_that_ends_during_a_hold_is_noticed_before_it_ends(
    redis_url: str, redis_prefix: str
) -> None:
    async with subscribed(redis_url, redis_prefix, lowat=True) as (listener, client, _, client_id):
        assert listener._lowat is not None
        fd = listener._lowat.fileno()
        listener.hold()
        assert await client.client_kill_filter(_type=None, _id=client_id) == 1
        await until(lambda: listener.failed is not None, 10, "the lost connection")
        await until(lambda: listener._asyncio_transport is None, 10, "the connection's end")
        with pytest.raises(OSError):
            os.fstat(fd)  # closed with the connection
        # The hold's end comes later, when the descriptor's number may name another
        # socket: the release must not touch it.
        other = socket.socket()
        duplicated = other.fileno() != fd  # else the number was taken again at once
        try:
            if duplicated:
                os.dup2(other.fileno(), fd)
            other.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 4096)
            listener.release()
            assert other.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 4096
            assert not listener.reading
        finally:
            if duplicated:
                os.close(fd)
            other.close()
