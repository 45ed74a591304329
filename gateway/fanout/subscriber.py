"""One client's subscription to one feed on this node: a bounded outbound queue.

The hub calls :meth:`Subscription.offer` synchronously with frames it encoded once for
every subscriber; the subscription never blocks the hub.  When a frame would take the
queue past its byte bound, the subscription is taken off the live path (state
``OVERFLOW``) and its connection catches up on its own from the log by its cursor.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import anyio

from gateway.cursor import Cursor
from gateway.feed import FeedKey, StoredItem


class SubState(enum.Enum):
    CATCHING_UP = "catching_up"
    LIVE = "live"
    OVERFLOW = "overflow"
    RESTARTED = "restarted"
    CLOSED = "closed"


class Format:
    """A wire format: how one item (and an epoch restart) is encoded, once per node.

    ``name`` keys the hub's per-batch encoding cache, so subscribers sharing a format
    share the same bytes.
    """

    def __init__(
        self,
        name: str,
        frame: Callable[[FeedKey, StoredItem], bytes],
        restart: Callable[[FeedKey, Cursor], bytes],
    ) -> None:
        self.name = name
        self.frame = frame
        self.restart = restart


class Subscription:
    """Bounded queue plus position.  Owned by one connection task.

    ``position`` is the cursor of the last item queued for the client (or the start
    cursor).  After :attr:`state` leaves ``LIVE`` the hub no longer offers anything.
    """

    __slots__ = (
        "_bytes", "_chunks", "_ready", "feed", "fmt", "max_bytes", "position", "restart_at",
        "state",
    )

    def __init__(self, feed: FeedKey, fmt: Format, start: Cursor, max_bytes: int) -> None:
        self.feed = feed
        self.fmt = fmt
        self.position = start
        self.max_bytes = max_bytes
        self.state = SubState.CATCHING_UP
        self.restart_at: Cursor | None = None
        self._chunks: list[bytes] = []
        self._bytes = 0
        self._ready = anyio.Event()

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def offer(self, items: Sequence[StoredItem], frames: Sequence[bytes]) -> bool:
        """Queue the frames of items after :attr:`position` (same epoch).  Never blocks.

        Returns False, queueing nothing of this batch, when the batch would take the
        queue past ``max_bytes``; the caller must then take the subscription off the
        live path (:meth:`overflow`).
        """
        pos = self.position
        start = 0
        n = len(items)
        while start < n and (items[start].epoch != pos.epoch or items[start].offset <= pos.offset):
            start += 1
        if start == n:
            return True
        if start == 0:
            chunk = b"".join(frames) if n > 1 else frames[0]
        else:
            chunk = b"".join(frames[start:])
        if self._bytes + len(chunk) > self.max_bytes:
            return False
        self._chunks.append(chunk)
        self._bytes += len(chunk)
        self.position = items[-1].cursor
        self._ready.set()
        return True

    def overflow(self) -> None:
        self.state = SubState.OVERFLOW
        self._ready.set()

    def restarted(self, cursor: Cursor) -> None:
        """The feed cannot continue from this subscription's position: end it."""
        self.state = SubState.RESTARTED
        self.restart_at = cursor
        self._ready.set()

    def take(self) -> bytes:
        """Everything queued, as one write; empties the queue."""
        if not self._chunks:
            return b""
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._bytes = 0
        return data

    async def wait(self, idle: float) -> bool:
        """Wait up to ``idle`` seconds for something queued or a state change; False if none."""
        if self._chunks or self.state is not SubState.LIVE:
            return True
        with anyio.move_on_after(idle):
            await self._ready.wait()
        if self._ready.is_set():
            self._ready = anyio.Event()
            return True
        return False
