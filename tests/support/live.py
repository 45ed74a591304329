"""A live sink for tests of the stores' live path: keeps what a store pushes, moves the
positions on as the hub does, and tells pushes from the store's I/O callback (no task
runs them) from those of the reading task."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, MutableMapping

import anyio

from gateway.cursor import Cursor
from gateway.feed import FeedKey, FeedState
from gateway.store.interfaces import Batch, LiveFeed


class Collected:
    """A :class:`~gateway.store.interfaces.LiveSink` that keeps every push, in order, with
    whether it came from the store's I/O callback while the read waited (``handed``).

    Each push moves ``positions`` on when they are a mutable mapping (a live view, as
    the hub's are).  ``reached`` is what :meth:`on_items` answers (subscriptions per
    batch: 1 by default, few).
    """

    def __init__(self, positions: Mapping[FeedKey, Cursor], reached: int = 1) -> None:
        self.positions = positions
        self.reached = reached
        self.pushes: list[tuple[bool, FeedKey, Batch]] = []
        self.arrived = anyio.Event()

    def on_items(self, feed: FeedKey, batch: Batch) -> int:
        self._keep(feed, batch)
        if batch.items:
            self._move(feed, batch.items[-1].cursor)
        return self.reached

    def on_gap(self, feed: FeedKey, reset: FeedState | None) -> None:
        self._keep(feed, Batch([], gone=True) if reset is None else Batch([], reset=reset))
        if reset is not None:
            self._move(feed, reset.head_cursor)

    @property
    def calls(self) -> list[dict[FeedKey, list[int]]]:
        """The batches pushed from the I/O callback, one ``{feed: offsets}`` each."""
        return [{f: [i.offset for i in b.items]} for handed, f, b in self.pushes if handed]

    def offsets(self, feed: FeedKey) -> list[int]:
        """The offsets of ``feed`` pushed from the I/O callback, in order."""
        return [o for call in self.calls for o in call.get(feed, [])]

    def batches(self, *, handed: bool | None = False) -> dict[FeedKey, Batch]:
        """What was pushed, merged by feed in order (a gap replaces what came before):
        by the reading task only (``handed`` False), from the callback only (True), or
        all of it (None)."""
        out: dict[FeedKey, Batch] = {}
        for was_handed, feed, batch in self.pushes:
            if handed is not None and was_handed is not handed:
                continue
            kept = out.get(feed)
            if kept is None or kept.reset is not None or kept.gone or batch.reset or batch.gone:
                out[feed] = Batch(
                    list(batch.items),
                    reset=batch.reset,
                    appended=batch.appended,
                    transient=list(batch.transient),
                    gone=batch.gone,
                )
                continue
            before = len(kept.items)
            kept.transient += [(before + at, data) for at, data in batch.transient]
            kept.items += batch.items
            kept.appended = batch.appended or kept.appended
        return out

    async def until(self, feed: FeedKey, count: int) -> None:
        """Until ``count`` items of ``feed`` were pushed from the I/O callback (bounded)."""
        with anyio.fail_after(10):
            while len(self.offsets(feed)) < count:
                self.arrived = anyio.Event()
                await self.arrived.wait()

    def _keep(self, feed: FeedKey, batch: Batch) -> None:
        self.pushes.append((asyncio.current_task() is None, feed, batch))
        self.arrived.set()

    def _move(self, feed: FeedKey, cursor: Cursor) -> None:
        if isinstance(self.positions, MutableMapping) and feed in self.positions:
            self.positions[feed] = cursor


async def read_new(
    live: LiveFeed, positions: Mapping[FeedKey, Cursor], *, count: int, block_ms: int
) -> dict[FeedKey, Batch]:
    """One read: wait up to ``block_ms`` for anything beyond ``positions``, and return
    everything that was pushed (from the I/O callback or not), by feed.  Once
    something was pushed the read is woken, so it returns soon after, as a read that
    hands nothing over would."""
    sink = Collected(positions)

    async def wake_on_push() -> None:
        await sink.arrived.wait()
        await live.wake()

    async with anyio.create_task_group() as tg:
        tg.start_soon(wake_on_push)
        await live.read_new(positions, sink, count=count, block_ms=block_ms)
        tg.cancel_scope.cancel()
    return sink.batches(handed=None)
