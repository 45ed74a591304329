"""One subscription to one feed on this node, and the encoded chunks the hub offers it.

The hub hands :meth:`Subscription.offer` the bytes it encoded once per wire format; the
subscription writes what follows its position into its connection's :class:`~gateway.
fanout.outbox.Outbox` at once, or refuses (the caller then takes it off the live path).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import anyio

from gateway.cursor import Cursor
from gateway.fanout.outbox import Outbox
from gateway.feed import FeedKey, StoredItem
from gateway.wire.format import Encoder, Format


def end_index(items: Sequence[StoredItem], ends: Callable[[StoredItem], bool] | None) -> int | None:
    """The index of the first item after which a format's stream ends, if any."""
    if ends is not None:
        for index, item in enumerate(items):
            if ends(item):
                return index
    return None


class Chunk:
    """Consecutive items of one feed encoded in one format, shared by every subscriber.

    A frame, and so :attr:`data`, may be empty: an item with nothing to say in the format
    (an AI SDK stream has no chunk for AG-UI's ``REASONING_START``).  Such bytes are
    never written (:meth:`Subscription.offer`).
    """

    __slots__ = ("data", "end", "epoch", "first", "frames", "items", "last")

    def __init__(
        self,
        items: Sequence[StoredItem],
        frames: Sequence[bytes],
        ends: Callable[[StoredItem], bool] | None = None,
        last: Cursor | None = None,
    ) -> None:
        """``last``: ``items[-1].cursor``, if the caller has built it already."""
        self.items = items
        self.frames = frames
        #: Every frame of the chunk as one write.
        self.data = frames[0] if len(frames) == 1 else b"".join(frames)
        self.epoch = items[0].epoch
        self.first = items[0].offset
        self.last = items[-1].cursor if last is None else last
        #: Index of the first item that ends the stream (the format's ``ends``), if any.
        self.end = end_index(items, ends)


class SubState(enum.Enum):
    CATCHING_UP = "catching_up"
    LIVE = "live"
    OVERFLOW = "overflow"
    RESTARTED = "restarted"
    #: The format's stream ended with an item (an AG-UI run's RUN_FINISHED on SSE).
    ENDED = "ended"
    #: The feed was deleted on purpose (a finished run's grace period ended).
    GONE = "gone"
    CLOSED = "closed"


class Subscription:
    """One feed followed by one connection on this node.

    ``position`` is the cursor of the last item written to the client (or the start
    cursor).  The connection must set :attr:`outbox` before the subscription goes
    live.  Owned by the connection's task, which waits on :meth:`wait` for state
    changes (the hub never waits on it).
    """

    __slots__ = (
        "_ready",
        "encoder",
        "feed",
        "fmt",
        "head",
        "notify",
        "outbox",
        "position",
        "prefetched",
        "replayed",
        "restart_at",
        "state",
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
        self.replayed = False
        #: A stateful format's encoder at :attr:`position` while this subscription
        #: catches up; the hub takes it over when the subscription goes live.
        self.encoder: Encoder | None = None
        #: History read with the join's state: the position it continues and its
        #: items, for the first catch-up round only (None: read it then).
        self.prefetched: tuple[Cursor, list[StoredItem]] | None = None

    def page_at_position(self) -> list[StoredItem] | None:
        """The items read with the join if they continue :attr:`position` (possibly
        none: nothing came after it then), else None (read from the store)."""
        page = self.prefetched
        return page[1] if page is not None and page[0] == self.position else None

    def offer(self, chunk: Chunk) -> bool:
        """Write the frames of the chunk's items after :attr:`position` at once.

        Returns False, writing nothing, when the outbox refuses; the caller must then
        take the subscription off the live path (:meth:`overflow`).  A chunk holding an
        item that ends the stream (``Chunk.end``) is written up to that item, and the
        subscription is then ``ENDED``.  Items that encode to nothing in this format
        move the position on and write nothing: no empty write reaches the outbox.
        """
        pos = self.position
        if chunk.end is None and chunk.epoch == pos.epoch and chunk.first == pos.offset + 1:
            # The common case: exactly the next items, the shared bytes as they are.
            data = chunk.data
            if data:
                outbox = self.outbox
                if outbox is None or not outbox.try_write(data):
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
        data = chunk.data if start == 0 and stop == n else b"".join(chunk.frames[start:stop])
        if data:
            outbox = self.outbox
            if outbox is None or not outbox.try_write(data):
                return False
        # The chunk's own last cursor when the whole chunk went: one Cursor per chunk,
        # not one per subscriber (building one costs ~0.5 us).
        self.position = chunk.last if stop == n else items[stop - 1].cursor
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

    def gone(self) -> None:
        """The feed was deleted on purpose: end it as a new request would be (404)."""
        self.state = SubState.GONE
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
