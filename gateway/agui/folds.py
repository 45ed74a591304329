"""Folds of run feeds at any cursor, cheap for long runs (the node's fold cache).

A client joining a run anywhere but its start needs the run folded up to its cursor
(:mod:`gateway.agui.fold`).  Re-reading and re-folding a long run from Redis for every
such client would make late joins cost O(run length) each, so each node keeps, per
run feed it served, checkpoints of the fold every ``interval`` items: a join reads and
folds at most ``interval`` items past the nearest checkpoint, and joins of the same
feed at the same cursor share one computation.  Checkpoints also outlive retention:
once a node has folded a run's start, trimming it does not lose what the prelude
needs on that node.

Bounds: at most ``max_feeds`` feeds (least recently used dropped) and
``MAX_CHECKPOINTS`` checkpoints per feed (thinned to every other one when full).
"""

from __future__ import annotations

import bisect
import contextlib
from collections import OrderedDict

from gateway.agui.events import decode
from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.errors import GatewayError
from gateway.fanout.flight import SingleFlight
from gateway.feed import FeedKey, FeedState
from gateway.log.base import FeedLog

MAX_CHECKPOINTS = 64
#: Run feeds trim in whole blocks of this many items, and keep the fold at each block
#: boundary (persist).
BLOCK = 1000
#: persist starts this many items before retention would trim (a publish appends at
#: most MAX_BATCH_ITEMS = 1000 items at once).
PERSIST_MARGIN = 3 * BLOCK


class _Checkpoints:
    __slots__ = ("epoch", "folds", "offsets")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.offsets: list[int] = []
        self.folds: list[RunFold] = []

    def before(self, offset: int) -> tuple[int, RunFold] | None:
        """The checkpoint at or below ``offset`` closest to it (not copied)."""
        at = bisect.bisect_right(self.offsets, offset) - 1
        if at < 0:
            return None
        return self.offsets[at], self.folds[at]

    def add(self, offset: int, fold: RunFold) -> None:
        at = bisect.bisect_left(self.offsets, offset)
        if at < len(self.offsets) and self.offsets[at] == offset:
            return
        self.offsets.insert(at, offset)
        self.folds.insert(at, fold)
        if len(self.offsets) > MAX_CHECKPOINTS:
            # Keep every other one, and always the newest.
            keep = [*range(0, len(self.offsets) - 1, 2), len(self.offsets) - 1]
            self.offsets = [self.offsets[i] for i in keep]
            self.folds = [self.folds[i] for i in keep]


class Folds:
    """Run folds at cursors, with per-feed checkpoints (see the module docstring)."""

    def __init__(
        self, feed_log: FeedLog, *, page: int = 500, interval: int = 1000, max_feeds: int = 256
    ) -> None:
        self.log = feed_log
        self.page = page
        self.interval = interval
        self.max_feeds = max_feeds
        self._feeds: OrderedDict[FeedKey, _Checkpoints] = OrderedDict()
        self._flight: SingleFlight[RunFold] = SingleFlight()
        #: Items folded from the log (for tests and the benchmark).
        self.items_folded = 0
        #: The checkpoint :meth:`persist` last kept, per feed.
        self._persisted: dict[FeedKey, Cursor] = {}

    async def at(self, feed: FeedKey, cursor: Cursor) -> RunFold:
        """The run folded over items ``1..cursor.offset`` of ``cursor.epoch``.

        Returns a fold the caller owns (it may apply more events to it).  Items the log
        no longer retains and no checkpoint covers are missing from the fold.  Raises
        Unavailable when the log cannot be read.
        """
        fold = await self._flight.do((feed, cursor), lambda: self._compute(feed, cursor))
        return fold.copy()

    async def _compute(self, feed: FeedKey, cursor: Cursor) -> RunFold:
        points = self._feeds.get(feed)
        if points is None or points.epoch != cursor.epoch:
            if points is not None and points.epoch > cursor.epoch:
                # An older epoch than the node knows: fold it without caching.
                points = _Checkpoints(cursor.epoch)
            else:
                points = self._feeds[feed] = _Checkpoints(cursor.epoch)
                while len(self._feeds) > self.max_feeds:
                    self._feeds.popitem(last=False)
        else:
            self._feeds.move_to_end(feed)
        start = points.before(cursor.offset)
        if start is None:
            offset, fold = 0, RunFold()
        else:
            offset, fold = start[0], start[1].copy()
        while offset < cursor.offset:
            limit = min(self.page, cursor.offset - offset)
            items = await self.log.read(feed, Cursor(cursor.epoch, offset), limit)
            if not items:
                break  # lost beyond this point: fold what there is
            if items[0].offset > offset + 1:
                # Retention trimmed the run's start: continue from the fold the
                # publishers kept at the trim point (see persist), if there is one.
                kept = Cursor(cursor.epoch, items[0].offset - 1)
                blob = await self.log.load_fold(feed, kept)
                if blob is not None:
                    with contextlib.suppress(ValueError):
                        fold = RunFold.load(blob)
                offset = kept.offset
            for item in items:
                if item.epoch != cursor.epoch or item.offset > cursor.offset:
                    break
                # An item that is not an object has nothing to fold (publishing
                # refuses those).
                with contextlib.suppress(GatewayError):
                    fold.apply(decode(item.data))
                offset = item.offset
                self.items_folded += 1
                if offset % self.interval == 0:
                    points.add(offset, fold.copy())
            else:
                continue
            break
        points.add(cursor.offset, fold.copy())
        return fold

    async def persist(self, feed: FeedKey, state: FeedState, retention: int) -> None:
        """Keep the fold at the next block boundary with the feed before retention trims
        the run up to it (run feeds trim in whole blocks of ``BLOCK``, see
        ``FeedLog.append``), so a node that never saw the trimmed start can still fold.

        Call after each append to a run feed; cheap until the feed nears its retention.
        """
        kept = state.head - (state.first - 1)
        if kept < retention - PERSIST_MARGIN:
            return
        boundary = ((state.first - 1) // BLOCK + 1) * BLOCK
        at = Cursor(state.epoch, boundary)
        if boundary > state.head or self._persisted.get(feed) == at:
            return
        if await self.log.load_fold(feed, at) is None:
            fold = await self.at(feed, at)
            await self.log.save_fold(feed, at, fold.dump(), keep_from=state.first - 1)
        self._persisted[feed] = at
        while len(self._persisted) > self.max_feeds:
            self._persisted.pop(next(iter(self._persisted)))
