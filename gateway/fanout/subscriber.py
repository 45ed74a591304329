"""A connection's bounded outbound path, and one subscription to one feed.

Fan-out never waits for a client: the hub hands the bytes it encoded once per wire
format to :meth:`Subscription.offer`, which writes them straight into the connection's
transport (the kernel takes them at once while the client keeps up).  What the kernel
does not take stays in the transport's buffer, and that buffer *is* the connection's
queue: :class:`Outbox` refuses a write that would take it past ``max_bytes`` (or
that would add to a connection already behind while the node's total is past its
bound).  A refused subscription is taken off the live path (state ``OVERFLOW``) and its
connection task catches up from the log by its own cursor; nobody else waits.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Sequence
from typing import Protocol

import anyio

from gateway.cursor import Cursor
from gateway.feed import FeedKey, StoredItem


class Transport(Protocol):
    """What an outbox needs of a connection (``http.server.Stream`` provides it)."""

    @property
    def transport(self) -> asyncio.Transport | None: ...

    def raw_writer(self) -> Callable[[bytes], None]: ...


class NodeBudget:
    """The bound on outbound bytes buffered by the whole node.

    Each outbox counts what its transport holds after its last write.  The sum can be
    stale high (a buffer may have drained since); it is recomputed exactly only when it
    looks exceeded, which costs one pass over the outboxes that hold anything.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._holding: set[Outbox] = set()

    def over(self) -> bool:
        if self.total <= self.limit:
            return False
        total = 0
        for outbox in list(self._holding):
            outbox.recount()
            total += outbox.counted
        self.total = total
        return total > self.limit


class Outbox:
    """One connection's outbound byte bound; shared by the connection's subscriptions.

    It writes straight to the asyncio transport (the hot path of fan-out: one write per
    connection per batch) with the stream's framing (HTTP/1.1 chunks for SSE).
    """

    __slots__ = ("_budget", "_transport", "_write", "counted", "max_bytes", "wrote")

    def __init__(self, stream: Transport, max_bytes: int, budget: NodeBudget) -> None:
        transport = stream.transport
        if transport is None:
            raise anyio.BrokenResourceError
        self._transport = transport
        self._write = stream.raw_writer()
        self._budget = budget
        self.max_bytes = max_bytes
        self.counted = 0
        #: Set by every write; the keepalive ticker clears it.
        self.wrote = False

    def buffered(self) -> int:
        """Bytes written to this connection that the kernel has not taken yet."""
        return self._transport.get_write_buffer_size()

    def try_write(self, data: bytes) -> bool:
        """Write now, or refuse (False) if that would pass a bound.  Never blocks.

        A connection holding nothing takes any write (the kernel took everything so
        far: it keeps up); writes are at most a quarter of the bound (the hub chunks
        them), so a connection never holds more than ``max_bytes`` plus one item
        larger than that.
        """
        transport = self._transport
        buffered = transport.get_write_buffer_size()
        if buffered and (buffered + len(data) > self.max_bytes or self._budget.over()):
            return False
        if transport.is_closing():
            return True  # the connection is going; its task ends with it
        self._write(data)
        self.wrote = True
        if self.counted or transport.get_write_buffer_size():
            self.recount()
        return True

    def recount(self) -> None:
        now = self._transport.get_write_buffer_size()
        budget = self._budget
        budget.total += now - self.counted
        self.counted = now
        if now:
            budget._holding.add(self)
        else:
            budget._holding.discard(self)

    def release(self) -> None:
        """The connection is gone: stop counting its bytes."""
        self._budget.total -= self.counted
        self.counted = 0
        self._budget._holding.discard(self)


def end_index(items: Sequence[StoredItem], ends: Callable[[StoredItem], bool] | None) -> int | None:
    """The index of the first item after which a format's stream ends, if any."""
    if ends is not None:
        for index, item in enumerate(items):
            if ends(item):
                return index
    return None


class Chunk:
    """Consecutive items of one feed encoded in one format, shared by every subscriber."""

    __slots__ = ("end", "epoch", "first", "frames", "items", "joined", "last")

    def __init__(
        self,
        items: Sequence[StoredItem],
        frames: Sequence[bytes],
        ends: Callable[[StoredItem], bool] | None = None,
    ) -> None:
        self.items = items
        self.frames = frames
        self.joined = frames[0] if len(frames) == 1 else b"".join(frames)
        self.epoch = items[0].epoch
        self.first = items[0].offset
        self.last = items[-1].cursor
        #: Index of the first item that ends the stream (the format's ``ends``), if any.
        self.end = end_index(items, ends)


#: The slow-consumer policy: a connection whose subscriptions overflow more than
#: ``MAX_CATCHUPS`` times within ``CATCHUP_WINDOW_SECONDS`` is disconnected as too slow
#: (the client resumes from its last cursors); before that each overflow is followed by
#: a catch-up from the log.
MAX_CATCHUPS = 3
CATCHUP_WINDOW_SECONDS = 60.0


class Overflows:
    """One connection's recent overflows, for the slow-consumer policy."""

    __slots__ = ("_times",)

    def __init__(self) -> None:
        self._times: list[float] = []

    def too_many(self, now: float) -> bool:
        """Record an overflow at ``now``; True when the connection must be cut off."""
        self._times = [t for t in self._times if now - t < CATCHUP_WINDOW_SECONDS]
        self._times.append(now)
        return len(self._times) > MAX_CATCHUPS


class SubState(enum.Enum):
    CATCHING_UP = "catching_up"
    LIVE = "live"
    OVERFLOW = "overflow"
    RESTARTED = "restarted"
    #: The format's stream ended with an item (an AG-UI run's RUN_FINISHED on SSE).
    ENDED = "ended"
    CLOSED = "closed"


class Format:
    """A wire format: how one item (and an epoch restart) is encoded, once per node.

    ``name`` keys the hub's per-batch encoding cache, so subscribers sharing a format
    share the same bytes.  ``transport`` (``sse`` or ``ws``) labels the metrics of the
    subscriptions that use it.  ``ends``, if given, marks an item after which the
    stream of this format ends (state ``ENDED``; nothing after it is written).
    ``transient``, if given, encodes the feed's transient messages for live followers.
    """

    def __init__(
        self,
        name: str,
        frame: Callable[[FeedKey, StoredItem], bytes],
        restart: Callable[[FeedKey, Cursor], bytes],
        *,
        transport: str,
        ends: Callable[[StoredItem], bool] | None = None,
        transient: Callable[[FeedKey, bytes], bytes] | None = None,
    ) -> None:
        self.name = name
        self.frame = frame
        self.restart = restart
        self.transport = transport
        self.ends = ends
        #: Encodes a transient message (never stored); None: the format carries none.
        self.transient = transient


class Subscription:
    """One feed followed by one connection on this node.

    ``position`` is the cursor of the last item written to the client (or the start
    cursor).  The connection must set :attr:`outbox` before the subscription goes
    live.  Owned by the connection's task, which waits on :meth:`wait` for state
    changes (the hub never waits on it).
    """

    __slots__ = (
        "_ready", "feed", "fmt", "head", "joined", "notify", "outbox", "position",
        "restart_at", "state",
    )

    def __init__(
        self, feed: FeedKey, fmt: Format, start: Cursor, outbox: Outbox | None = None
    ) -> None:
        self.feed = feed
        self.fmt = fmt
        self.position = start
        self.outbox = outbox
        self.state = SubState.CATCHING_UP
        self.restart_at: Cursor | None = None
        #: The feed's head when the subscription was opened (informational).
        self.head = start
        #: Called (synchronously) on a state change instead of waking a waiter, for
        #: owners that keep no task per subscription while it is live.
        self.notify: Callable[[Subscription], None] | None = None
        self._ready: anyio.Event | None = None
        #: Set when its first catch-up (the join's history replay) has ended.
        self.joined = False

    def offer(self, chunk: Chunk) -> bool:
        """Write the frames of the chunk's items after :attr:`position` at once.

        Returns False, writing nothing, when the outbox refuses; the caller must then
        take the subscription off the live path (:meth:`overflow`).  A chunk holding an
        item that ends the stream (``Chunk.end``) is written up to that item, and the
        subscription is then ``ENDED``.
        """
        pos = self.position
        if chunk.end is None and chunk.epoch == pos.epoch and chunk.first == pos.offset + 1:
            # The common case: exactly the next items, the shared bytes as they are.
            outbox = self.outbox
            if outbox is None or not outbox.try_write(chunk.joined):
                return False
            self.position = chunk.last
            return True
        return self._offer_part(chunk)

    def _offer_part(self, chunk: Chunk) -> bool:
        """:meth:`offer` for a chunk that starts before the position, skips past it,
        or ends the stream."""
        pos = self.position
        items = chunk.items
        n = len(items)
        start = 0
        while start < n and (items[start].epoch != pos.epoch or items[start].offset <= pos.offset):
            start += 1
        if start == n:
            return True
        if items[start].epoch != pos.epoch or items[start].offset != pos.offset + 1:
            # A gap, or the batch does not continue this subscription (the reader's
            # position was trimmed away): off the live path; its catch-up finds out.
            return False
        end = chunk.end
        stop = end + 1 if end is not None and end >= start else n
        data = chunk.joined if start == 0 and stop == n else b"".join(chunk.frames[start:stop])
        outbox = self.outbox
        if outbox is None or not outbox.try_write(data):
            return False
        self.position = items[stop - 1].cursor
        if end is not None and start <= end < stop:
            self.state = SubState.ENDED
            self._signal()
        return True

    def _signal(self) -> None:
        if self.notify is not None:
            self.notify(self)
        elif self._ready is not None:
            self._ready.set()

    def overflow(self) -> None:
        self.state = SubState.OVERFLOW
        self._signal()

    def restarted(self, cursor: Cursor) -> None:
        """The feed cannot continue from this subscription's position: end it."""
        self.state = SubState.RESTARTED
        self.restart_at = cursor
        self._signal()

    def close(self) -> None:
        self.state = SubState.CLOSED
        self._signal()

    async def wait(self, idle: float) -> bool:
        """Wait up to ``idle`` seconds for a state change; False if none came."""
        if self.state is not SubState.LIVE:
            return True
        ready = self._ready = anyio.Event()
        with anyio.move_on_after(idle):
            await ready.wait()
        self._ready = None
        return ready.is_set()
