"""A thin pub/sub listener for the live path: one raw connection, hiredis parsing.

redis-py's ``PubSub`` costs tens of microseconds of Python per message; the live path
takes one message per published batch per feed, so that cost is paid per event.  This
listener is an asyncio protocol that parses every message already received with
hiredis (C) in ``data_received`` and keeps them in a bounded list for the reader,
which takes them all at once.

It speaks just enough RESP2: optional ``AUTH``, then ``SUBSCRIBE`` / ``UNSUBSCRIBE``
(or their sharded forms on a cluster).
Connection failures surface as :class:`ListenerLost` from :meth:`Listener.wait`; the
owner replaces the listener and re-reads what it follows (messages are not stored by
Redis, so a lost connection may have lost messages).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, cast

import anyio
import hiredis

from gateway.store.redis.connection import ListenerAddress

#: Most messages held before the reader takes them; past it the listener gives up (the
#: owner re-reads the streams, which hold everything), so memory stays bounded.
MAX_PENDING = 100_000


class ListenerLost(ConnectionError):
    """The listening connection failed or fell too far behind; replace it."""


def _command(*args: bytes | str) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class Listener(asyncio.Protocol):
    """Create with :func:`connect`.  Not safe for more than one reader task."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader()
        self._transport: asyncio.Transport | None = None
        self.messages: list[tuple[bytes, bytes]] = []
        self._waiter: asyncio.Future[None] | None = None
        self._failed: Exception | None = None
        #: Replies to commands other than (un)subscribe (AUTH), in order.
        self._replies: list[Any] = []
        #: SUBSCRIBE confirmations still to come.
        self._unconfirmed = 0

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        messages = self.messages
        while True:
            reply = self._reader.gets()
            if reply is False:
                break
            if isinstance(reply, list) and reply and reply[0] == b"message":
                messages.append((reply[1], reply[2]))
            elif isinstance(reply, list) and reply and reply[0] == b"subscribe":
                self._unconfirmed -= 1
            elif isinstance(reply, list) and reply and reply[0] == b"unsubscribe":
                continue
            else:
                self._replies.append(reply)
        if len(messages) > MAX_PENDING:
            self._fail(ListenerLost("the reader fell too far behind the listener"))
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._fail(ListenerLost(f"listener connection lost: {exc or 'closed'}"))

    def _fail(self, exc: Exception) -> None:
        if self._failed is None:
            self._failed = exc
        if self._transport is not None:
            self._transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- use ---------------------------------------------------------------------------

    def send(self, *args: bytes | str) -> None:
        if self._failed is not None:
            raise self._failed
        if self._transport is None:
            raise ListenerLost("listener is not connected")
        self._transport.write(_command(*args))

    def subscribe(self, channels: list[bytes]) -> None:
        """Send SUBSCRIBE; :meth:`confirmed` tells when Redis has taken it."""
        for start in range(0, len(channels), 1000):  # bounded command size
            self.send("SUBSCRIBE", *channels[start : start + 1000])
            self._unconfirmed += len(channels[start : start + 1000])

    async def confirmed(self) -> None:
        """Return once every channel subscribed so far is confirmed (bound it by the
        caller): from then on every message published on them reaches this listener."""
        while self._unconfirmed > 0:
            if self._failed is not None:
                raise self._failed
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter

    def unsubscribe(self, channels: list[bytes]) -> None:
        for start in range(0, len(channels), 1000):
            self.send("UNSUBSCRIBE", *channels[start : start + 1000])

    async def wait(self, within: float) -> None:
        """Return when messages are waiting or after ``within`` seconds.

        Raises :class:`ListenerLost` once the connection has failed.
        """
        if self._failed is not None:
            raise self._failed
        if self.messages or within <= 0:
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        with anyio.move_on_after(within):
            await waiter
        if self._failed is not None:
            raise self._failed

    def poke(self) -> None:
        """Make a pending :meth:`wait` return now (the set of feeds changed)."""
        self._wake()

    def take(self) -> list[tuple[bytes, bytes]]:
        """Every (channel, payload) received so far, in order."""
        messages, self.messages = self.messages, []
        return messages

    async def _reply(self) -> Any:
        """The next reply to a command other than (un)subscribe; bound it by the caller."""
        while not self._replies:
            if self._failed is not None:
                raise self._failed
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter
        return self._replies.pop(0)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def connect(address: ListenerAddress, within: float = 5.0) -> Listener:
    """Open a listener to the Redis at ``address``, within ``within`` seconds."""
    loop = asyncio.get_running_loop()
    with anyio.fail_after(within):
        if address.path is not None:
            _, listener = await loop.create_unix_connection(Listener, address.path)
        else:
            context = ssl.create_default_context() if address.tls else None
            _, listener = await loop.create_connection(
                Listener, address.host, address.port, ssl=context
            )
    if address.password:
        args = (
            ("AUTH", address.username, address.password)
            if address.username
            else ("AUTH", address.password)
        )
        listener.send(*args)
        with anyio.fail_after(within):
            reply = await listener._reply()
        if isinstance(reply, hiredis.ReplyError):
            listener.close()
            raise ListenerLost(f"redis refused the listener's AUTH: {reply}")
    return listener
