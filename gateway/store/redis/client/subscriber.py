"""A thin pub/sub connection for the live path: one raw connection, hiredis parsing.

redis-py's ``PubSub`` costs tens of microseconds of Python per message; the live path
takes one message per published batch per feed, so that cost is paid per event.  A
:class:`PubSubConnection` is an asyncio protocol that parses every message already
received with hiredis (C) in ``data_received`` and keeps them in a bounded list for the
reader, which takes them all at once.

It speaks just enough RESP2: the node's handshake (``AUTH``, ``CLIENT SETNAME``,
``SELECT``, over TLS as the node's settings say: ``RedisConnection.dial``), then
``SUBSCRIBE`` / ``UNSUBSCRIBE`` (or their sharded forms on a cluster).  Its failures (a
lost connection, :class:`~.faults.PubSubConnectionLost`; a connect or a handshake that
failed; a subscription left unconfirmed) surface as :class:`~.error_map.PubSubLost`, an
Unavailable, from every method that can meet one and as :attr:`PubSubConnection.failed`;
the owner replaces the connection and re-reads what it follows (messages are not stored
by Redis, so a lost connection may have lost messages).
"""

from __future__ import annotations

import asyncio
import platform
import re
import socket
import sys
from collections.abc import Callable
from typing import Any, cast

import anyio
import hiredis
import structlog

from gateway.store.redis.client.error_map import PubSubLost, pubsub_lost
from gateway.store.redis.client.faults import PubSubConnectionLost
from gateway.store.redis.client.resp import PLAIN, Dial, open_raw, pack, refused
from gateway.store.redis.client.topology import ListenerAddress

log = structlog.get_logger("gateway.store")

#: Most messages held before the reader takes them; past it the listener gives up (the
#: owner re-reads the streams, which hold everything), so memory stays bounded.
MAX_PENDING = 100_000


#: While a hold lasts, the bytes that must wait in the socket before the kernel calls
#: it readable (``SO_RCVLOWAT``): a backlog this large is read at once (and a read this
#: large takes no new hold, ``HoldPolicy.LARGE_READ``).
HOLD_LOWAT = 64 * 1024

#: Messages (channel, payload) in the order they were received.
Messages = list[tuple[bytes, bytes]]

#: Takes messages as they arrive while the reader waits (see :meth:`Waker.wait`);
#: returns the ones it leaves for the reader, in order.
HandOver = Callable[[Messages], Messages]


class Waker:
    """Wakes the one reader task that waits on several pub/sub connections at once."""

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None
        self._woken = False
        #: Set only while the reader waits with nothing else to do: the listeners
        #: hand new messages to it instead of queueing them and waking the reader.
        self.hand_over: HandOver | None = None

    def wake(self) -> None:
        self._woken = True
        self.hand_over = None
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, within: float, hand_over: HandOver | None = None) -> None:
        """Return once woken (since the last wait) or after ``within`` seconds.

        Until then, messages go to ``hand_over`` (if given) as they arrive, from the
        connection's own callback; what it leaves is queued and wakes the reader.

        The bound is a loop timer that resolves the waiter, not a cancel scope: the
        node's reader waits here once per wake-up, and an anyio scope costs it several
        microseconds each time (a share of every event at agent rates).  A caller's
        own cancellation still ends the wait at once."""
        if not self._woken and within > 0:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(within, _resolve, waiter)
            self.hand_over = hand_over
            try:
                await waiter
            finally:
                self.hand_over = None
                timer.cancel()
                if self._waiter is waiter:
                    self._waiter = None
        self._woken = False


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class PubSubConnection(asyncio.Protocol):
    """One pub/sub listening connection; create with :func:`connect`.  Not safe for more
    than one reader task.

    ``sharded`` connections use ``SSUBSCRIBE`` (Redis Cluster: each channel lives on the
    shard that owns its slot, and this connection must be to that shard's master).  A
    channel the server drops by itself (its slot moved to another shard) is listed in
    :attr:`dropped` for the owner to subscribe again where it lives now.
    """

    def __init__(self, waker: Waker | None = None, *, sharded: bool = False) -> None:
        self._reader = hiredis.Reader()
        self._asyncio_transport: asyncio.Transport | None = None
        self.messages: list[tuple[bytes, bytes]] = []
        self._waker = waker or Waker()
        self._sharded = sharded
        self._waiter: asyncio.Future[None] | None = None
        #: Why the connection failed (its own error as ``__cause__``), once it has.
        self._failed: PubSubLost | None = None
        #: Replies to commands other than (un)subscribe (the handshake's), in order.
        self._replies: list[Any] = []
        #: SUBSCRIBE confirmations still to come.
        self._unconfirmed = 0
        #: Channels we asked to leave (their unsubscribe replies are no news).
        self._leaving: set[bytes] = set()
        #: Channels the server unsubscribed us from by itself (a slot migration).
        self.dropped: list[bytes] = []
        self._authenticated = False
        #: A hand-over failed here once (a bug, logged then): everything goes through
        #: the reader for the rest of this connection's life.
        self._hand_over_failed = False
        #: The socket whose low-water mark holds it (see hold), or None where the
        #: transport is paused instead.
        self._lowat: socket.socket | None = None
        #: Whether a hold lasts, and whether it raised the low-water mark.
        self._held = False
        self._held_by_lowat = False

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._asyncio_transport = cast(asyncio.Transport, transport)
        self._lowat = lowat_socket(transport)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        arrived: Messages = []
        news = False
        while True:
            reply = self._reader.gets()
            if reply is False:
                break
            kind = reply[0] if isinstance(reply, list) and reply else None
            if kind == b"message" or kind == b"smessage":
                arrived.append((reply[1], reply[2]))
            elif kind in (b"subscribe", b"ssubscribe"):
                self._unconfirmed -= 1
            elif kind in (b"unsubscribe", b"sunsubscribe"):
                channel = reply[1]
                if channel in self._leaving:
                    self._leaving.discard(channel)
                elif kind == b"sunsubscribe" and channel is not None:
                    self.dropped.append(channel)
                    news = True
            elif refused(reply) and self._authenticated:
                # A refused (S)SUBSCRIBE: the slot is not this node's any more (MOVED).
                self._fail(PubSubConnectionLost(f"redis refused a subscription: {reply}"))
                return
            else:
                self._replies.append(reply)
        messages = self.messages
        if arrived:
            hand_over = self._waker.hand_over
            if hand_over is not None and not messages and not self._hand_over_failed:
                try:
                    arrived = hand_over(arrived)
                except Exception:
                    # Left to the reader, which meets the same trouble where it is
                    # reported (and the connection stays up); logged once, not at
                    # the rate of events.
                    self._hand_over_failed = True
                    log.exception("handing live messages over failed; the reader takes them")
            if arrived:
                messages.extend(arrived)
                news = True
        if len(messages) > MAX_PENDING:
            self._fail(PubSubConnectionLost("the reader fell too far behind the listener"))
        self._wake_own()
        if news:
            self._waker.wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._asyncio_transport = None
        self._fail(PubSubConnectionLost(f"listener connection lost: {exc or 'closed'}"))

    def _fail(self, exc: Exception) -> None:
        if self._failed is None:
            self._failed = pubsub_lost(exc)
        if self._asyncio_transport is not None:
            self._asyncio_transport.abort()
        self._wake_own()
        self._waker.wake()

    def _wake_own(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- use ---------------------------------------------------------------------------

    @property
    def failed(self) -> PubSubLost | None:
        """Why the connection failed, once it has."""
        return self._failed

    def send(self, *args: bytes | str) -> None:
        self.write(pack(args))

    def write(self, command: bytes) -> None:
        """Send a packed command (:func:`.resp.pack`)."""
        if self._failed is not None:
            raise self._failed
        if self._asyncio_transport is None:
            raise pubsub_lost(PubSubConnectionLost("listener is not connected"))
        try:
            self._asyncio_transport.write(command)
        except RuntimeError as exc:
            # uvloop's word for a transport closed under the write.
            raise pubsub_lost(PubSubConnectionLost(f"listener connection lost: {exc}")) from exc

    def subscribe(self, channels: list[bytes]) -> None:
        """Send (S)SUBSCRIBE; :meth:`confirmed` tells when Redis has taken it."""
        if self._sharded:
            # One command per channel: the channels of one SSUBSCRIBE must share a slot.
            for channel in channels:
                self.send("SSUBSCRIBE", channel)
                self._unconfirmed += 1
            return
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
        self._leaving.update(channels)
        if self._sharded:
            for channel in channels:
                self.send("SUNSUBSCRIBE", channel)
            return
        for start in range(0, len(channels), 1000):
            self.send("UNSUBSCRIBE", *channels[start : start + 1000])

    async def wait(self, within: float) -> None:
        """Return when messages are waiting or after ``within`` seconds (for a connection
        read on its own; several are waited on through their shared :class:`Waker`).

        Raises :class:`~.error_map.PubSubLost` once the connection has failed.
        """
        if self._failed is not None:
            raise self._failed
        if not self.messages and within > 0:
            await self._waker.wait(within)
        if self._failed is not None:
            raise self._failed

    def poke(self) -> None:
        """Make a pending :meth:`wait` return now (the set of feeds changed)."""
        self._waker.wake()

    def take(self) -> list[tuple[bytes, bytes]]:
        """Every (channel, payload) received so far, in order."""
        messages, self.messages = self.messages, []
        return messages

    def take_dropped(self) -> list[bytes]:
        dropped, self.dropped = self.dropped, []
        return dropped

    async def _reply(self) -> Any:
        """The next reply to a command other than (un)subscribe; bound it by the caller."""
        while not self._replies:
            if self._failed is not None:
                raise self._failed
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter
        return self._replies.pop(0)

    @property
    def reading(self) -> bool:
        """Whether the socket is read now (not during a :meth:`hold`)."""
        transport = self._asyncio_transport
        return transport is not None and transport.is_reading() and not self._held

    def hold(self) -> None:
        """Until :meth:`release`, messages wait in the kernel and wake nobody.

        On Linux over TCP the socket's low-water mark rises to :data:`HOLD_LOWAT`, so
        the kernel calls it readable only past that many bytes, or on its end or an
        error.  Pausing the transport instead (elsewhere) leaves the socket in libuv's
        epoll set until the first message wakes the loop, which only then drops it:
        a wake-up per hold that the low-water mark saves."""
        transport = self._asyncio_transport
        if self._held or transport is None or transport.is_closing():
            return
        self._held = True
        self._held_by_lowat = self._set_lowat(HOLD_LOWAT)
        if not self._held_by_lowat:
            transport.pause_reading()

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        transport = self._asyncio_transport
        if transport is None or transport.is_closing():
            # The connection is going (its loss is reported as it goes): its socket's
            # descriptor may be closed, or name another socket by now.
            return
        if self._held_by_lowat:
            # Lowering the mark makes the kernel signal what waits already (Linux >=
            # 4.20, see lowat_socket).  If it cannot be lowered, small messages would
            # wait for more: the connection is given up (the owner re-reads).
            if not self._set_lowat(1):
                self._fail(
                    PubSubConnectionLost("the listener's low-water mark could not be lowered")
                )
            return
        transport.resume_reading()

    def _set_lowat(self, size: int) -> bool:
        sock = self._lowat
        if sock is None:
            return False
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)
        except OSError:
            self._lowat = None  # the transport's pause from now on
            return False
        return True

    def close(self) -> None:
        if self._asyncio_transport is not None:
            self._asyncio_transport.close()


def lowat_socket(transport: asyncio.BaseTransport) -> socket.socket | None:
    """The transport's socket if its low-water mark can hold it: TCP on Linux 4.20 or
    later, whose ``SO_RCVLOWAT`` both keeps epoll quiet below the mark and, lowered,
    signals what already waits (earlier kernels do not; others may not)."""
    if not LOWAT_HOLDS:
        return None
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return cast(socket.socket, sock)


def _lowat_holds() -> bool:
    if sys.platform != "linux":
        return False
    numbers = re.findall(r"\d+", platform.release())[:2]
    return len(numbers) == 2 and (int(numbers[0]), int(numbers[1])) >= (4, 20)


#: Whether this kernel's TCP low-water mark can hold a pub/sub connection (see
#: lowat_socket).
LOWAT_HOLDS = _lowat_holds()


async def connect(
    address: ListenerAddress,
    dial: Dial = PLAIN,
    *,
    waker: Waker | None = None,
    sharded: bool = False,
) -> PubSubConnection:
    """Open a pub/sub connection to the Redis at ``address`` as ``dial`` says (TLS,
    handshake), within ``dial.within`` seconds; :class:`~.error_map.PubSubLost` if it could
    not (with Redis's reason if the handshake is refused)."""
    try:
        return await _connect(address, dial, waker, sharded)
    except OSError as exc:  # a timeout, a refused connect, PubSubConnectionLost
        raise pubsub_lost(exc) from exc


async def _connect(
    address: ListenerAddress, dial: Dial, waker: Waker | None, sharded: bool
) -> PubSubConnection:
    with anyio.fail_after(dial.within):
        _, connection = await open_raw(
            address, dial, lambda: PubSubConnection(waker, sharded=sharded)
        )
        try:
            for command in dial.handshake:
                connection.write(command)
            for _ in dial.handshake:
                reply = await connection._reply()
                if refused(reply):
                    raise PubSubConnectionLost(f"redis refused the listener's handshake: {reply}")
        except BaseException:
            connection.close()
            raise
    connection._authenticated = True
    return connection
