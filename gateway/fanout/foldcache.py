"""The node's fold cache: run folds at any cursor, cheap for long runs.

A client joining a run anywhere but its start needs the run folded up to its cursor
(:mod:`gateway.agui.fold`).  Re-reading and re-folding a long run from Redis for every
such client would make late joins cost O(run length) each, so each node keeps, per
run feed it served, checkpoints of the fold every ``interval`` items: a join reads and
folds at most ``interval`` items past the nearest checkpoint, and joins of the same
feed at the same cursor share one computation.  Checkpoints also outlive retention:
once a node has folded a run's start, trimming it does not lose what the prelude
needs on that node.

Checkpoints are kept as dumped bytes (:meth:`RunFold.dump`).  Bounds: at most
``max_feeds`` feeds and ``max_bytes`` of checkpoints (least recently used feeds dropped
first), ``MAX_CHECKPOINTS`` checkpoints per feed (thinned to every other one when full);
encoded preludes are cached for repeated joins at the same cursor within a quarter of
``max_bytes``.
"""

from __future__ import annotations

import bisect
import contextlib
from collections import OrderedDict

import msgspec

from gateway.agui.events import decode, encode
from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.dialects import a2ui
from gateway.errors import GatewayError
from gateway.fanout.shared_reads import SharedReads
from gateway.feed import FeedKey, FeedState
from gateway.store.interfaces import FeedStore, FoldStore
from gateway.wire.format import A2UI_PRELUDE, AGUI_PRELUDE

MAX_CHECKPOINTS = 64
#: Run feeds trim in whole blocks of this many items, and keep the fold at each block
#: boundary (persist).
BLOCK = 1000
#: persist starts this many items before retention would trim (a publish appends at
#: most MAX_BATCH_ITEMS = 1000 items at once).
PERSIST_MARGIN = 3 * BLOCK


class _Checkpoints:
    """One feed's fold checkpoints, as dumped bytes (compact; loaded when used)."""

    __slots__ = ("blobs", "epoch", "offsets", "size")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.offsets: list[int] = []
        self.blobs: list[bytes] = []
        self.size = 0

    def before(self, offset: int) -> tuple[int, bytes] | None:
        """The checkpoint at or below ``offset`` closest to it."""
        at = bisect.bisect_right(self.offsets, offset) - 1
        if at < 0:
            return None
        return self.offsets[at], self.blobs[at]

    def add(self, offset: int, blob: bytes) -> None:
        at = bisect.bisect_left(self.offsets, offset)
        if at < len(self.offsets) and self.offsets[at] == offset:
            return
        self.offsets.insert(at, offset)
        self.blobs.insert(at, blob)
        self.size += len(blob)
        if len(self.offsets) > MAX_CHECKPOINTS:
            self.thin()

    def thin(self) -> None:
        """Keep every other checkpoint, and always the newest."""
        keep = [*range(0, len(self.offsets) - 1, 2), len(self.offsets) - 1]
        self.offsets = [self.offsets[i] for i in keep]
        self.blobs = [self.blobs[i] for i in keep]
        self.size = sum(len(b) for b in self.blobs)


Prelude = tuple[list[bytes], bool]


class FoldCache:
    """Run folds at cursors, with per-feed checkpoints (see the module docstring)."""

    def __init__(
        self,
        feeds: FeedStore,
        folds: FoldStore,
        *,
        page: int = 500,
        interval: int = 1000,
        max_feeds: int = 256,
        max_bytes: int = 128 * 1024 * 1024,
    ) -> None:
        self.feeds = feeds
        self.fold_store = folds
        self.page = page
        self.interval = interval
        self.max_feeds = max_feeds
        #: Bound on the checkpoints' bytes on this node, and on cached preludes.
        self.max_bytes = max_bytes
        self._feeds: OrderedDict[FeedKey, _Checkpoints] = OrderedDict()
        self._folds_read: SharedReads[RunFold] = SharedReads()
        self._preludes_read: SharedReads[Prelude] = SharedReads()
        #: Encoded preludes recently served, by feed and cursor (LRU, bounded in bytes).
        self._preludes: OrderedDict[tuple[FeedKey, Cursor, str], Prelude] = OrderedDict()
        self._prelude_bytes = 0
        #: Items folded from the store (for tests and the benchmark).
        self.items_folded = 0
        #: The checkpoint :meth:`persist` last kept, per feed.
        self._persisted: dict[FeedKey, Cursor] = {}

    async def at(self, feed: FeedKey, cursor: Cursor) -> RunFold:
        """The run folded over items ``1..cursor.offset`` of ``cursor.epoch``.

        Concurrent callers for the same cursor share the result: read it, never change
        it (``copy()`` first to fold on).  Items the store no longer retains and no
        checkpoint covers are missing from the fold.  Raises Unavailable when the store
        cannot be read.
        """
        return await self._folds_read.do((feed, cursor), lambda: self._compute(feed, cursor))

    async def prelude(self, feed: FeedKey, cursor: Cursor, kind: str = AGUI_PRELUDE) -> Prelude:
        """The prelude at ``cursor``, each event as compact JSON, and whether the run had
        ended there.  Shared by every join at the same cursor (encoded once).

        ``kind`` (``Format.prelude_kind``): :data:`AGUI_PRELUDE`, the D7 prelude, whose
        ``MESSAGES_SNAPSHOT`` carries A2UI surfaces compacted
        (:data:`gateway.dialects.a2ui.PRELUDE_COMPACTORS`); :data:`A2UI_PRELUDE`, the A2UI
        messages that rebuild the live surfaces (:func:`gateway.dialects.a2ui.rejoin_messages`).
        """
        key = (feed, cursor, kind)
        cached = self._preludes.get(key)
        if cached is not None:
            self._preludes.move_to_end(key)
            return cached
        return await self._preludes_read.do(key, lambda: self._encode_prelude(feed, cursor, kind))

    async def _encode_prelude(self, feed: FeedKey, cursor: Cursor, kind: str) -> Prelude:
        thread_id, run_id = feed.id.split("/", 1)
        fold = await self.at(feed, cursor)
        if kind == A2UI_PRELUDE:
            events = [msgspec.json.encode(m) for m in a2ui.rejoin_messages(fold)]
        else:
            compactors = a2ui.PRELUDE_COMPACTORS
            events = [encode(e) for e in fold.prelude(thread_id, run_id, compactors=compactors)]
        prelude = (events, fold.terminal is not None)
        size = sum(len(e) for e in prelude[0])
        if size <= self.max_bytes // 4:
            self._preludes[(feed, cursor, kind)] = prelude
            self._prelude_bytes += size
            while self._prelude_bytes > self.max_bytes // 4 or len(self._preludes) > 64:
                _, (old, _) = self._preludes.popitem(last=False)
                self._prelude_bytes -= sum(len(e) for e in old)
        return prelude

    def _points(self, feed: FeedKey, epoch: int) -> _Checkpoints:
        points = self._feeds.get(feed)
        if points is not None and points.epoch == epoch:
            self._feeds.move_to_end(feed)
            return points
        if points is not None and points.epoch > epoch:
            return _Checkpoints(epoch)  # an older epoch than the node knows: not kept
        points = self._feeds[feed] = _Checkpoints(epoch)
        while len(self._feeds) > self.max_feeds:
            self._feeds.popitem(last=False)
        return points

    def _bound(self, current: _Checkpoints) -> None:
        """Keep the checkpoints within ``max_bytes``: least recently used feeds first."""
        total = sum(p.size for p in self._feeds.values())
        while total > self.max_bytes and len(self._feeds) > 1:
            feed, points = next(iter(self._feeds.items()))
            if points is current:
                break
            del self._feeds[feed]
            total -= points.size
        while total > self.max_bytes and len(current.offsets) > 1:
            before = current.size
            current.thin()
            total -= before - current.size
            if current.size == before:
                break

    async def _compute(self, feed: FeedKey, cursor: Cursor) -> RunFold:
        points = self._points(feed, cursor.epoch)
        start = points.before(cursor.offset)
        offset, fold = 0, RunFold()
        if start is not None:
            with contextlib.suppress(ValueError):
                offset, fold = start[0], RunFold.load(start[1])
        while offset < cursor.offset:
            limit = min(self.page, cursor.offset - offset)
            items = await self.feeds.read(feed, Cursor(cursor.epoch, offset), limit)
            if not items:
                break  # lost beyond this point: fold what there is
            if items[0].offset > offset + 1:
                # Retention trimmed the run's start: continue from the fold the
                # publishers kept at the trim point (see persist), if there is one.
                kept = Cursor(cursor.epoch, items[0].offset - 1)
                blob = await self.fold_store.load_fold(feed, kept)
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
                    points.add(offset, fold.dump())
            else:
                continue
            break
        points.add(cursor.offset, fold.dump())
        self._bound(points)
        return fold

    async def persist(self, feed: FeedKey, state: FeedState, retention: int) -> None:
        """Keep the fold at the next block boundary with the feed before retention trims
        the run up to it (run feeds trim in whole blocks of ``BLOCK``, see
        ``FeedStore.append``), so a node that never saw the trimmed start can still fold.

        Call after each append to a run feed; cheap until the feed nears its retention.
        """
        kept = state.head - (state.first - 1)
        if kept < retention - PERSIST_MARGIN:
            return
        boundary = ((state.first - 1) // BLOCK + 1) * BLOCK
        at = Cursor(state.epoch, boundary)
        if boundary > state.head or self._persisted.get(feed) == at:
            return
        if await self.fold_store.load_fold(feed, at) is None:
            fold = await self.at(feed, at)
            await self.fold_store.save_fold(feed, at, fold.dump(), keep_from=state.first - 1)
        self._persisted[feed] = at
        while len(self._persisted) > self.max_feeds:
            self._persisted.pop(next(iter(self._persisted)))
