"""The embedded backend: the same feed semantics as Redis, in this process's memory.

Used when no Redis URL is configured.  Nothing survives a restart: every feed starts a
new epoch when the process starts again, exactly as after a Redis data loss.  Appends
and reads never await in the middle, so each is atomic on the event loop.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence

import anyio
import anyio.lowlevel

from gateway.cursor import Cursor
from gateway.errors import HeadMoved, IdempotencyKeyReused, RunEnded
from gateway.feed import AppendResult, FeedKey, FeedKind, FeedState, NewItem, StoredItem
from gateway.limits import Charge
from gateway.store.hold import HoldPolicy
from gateway.store.interfaces import (
    INDEX_MAX_AGE_MS,
    INDEX_MAX_FEEDS,
    Backend,
    Batch,
    FeedIndex,
    FeedStore,
    FoldStore,
    IndexEntry,
    Lapse,
    LatestRun,
    Lease,
    LiveFeed,
    LiveRun,
    LiveSink,
    RunIndex,
    RunLease,
    epoch_floor,
    push,
)
from gateway.store.last_seen import chain_next


class _Feed:
    __slots__ = (
        "chain",
        "deadline_ms",
        "ended",
        "epoch",
        "head",
        "host",
        "items",
        "keys",
        "lease_ms",
        "started_ms",
    )

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.head = 0
        self.chain = ""
        self.host: bool | None = None
        #: (item, idempotency key, append time by time.time()) per retained item.
        self.items: deque[tuple[StoredItem, str | None, float]] = deque()
        self.keys: dict[str, int] = {}
        #: The run's terminal event is appended (an append with ``ends``).
        self.ended = False
        #: A live run's lease (wall-clock ms): when it started, its length, its
        #: deadline (None: no live run, or it ended).
        self.started_ms = 0
        self.lease_ms = 0
        self.deadline_ms: int | None = None

    def lease(self) -> Lease | None:
        if self.deadline_ms is None or self.ended:
            return None
        return Lease(self.started_ms, self.deadline_ms - self.lease_ms, self.deadline_ms)

    def state(self) -> FeedState:
        first = self.items[0][0].offset if self.items else self.head + 1
        return FeedState(self.epoch, self.head, first, bool(self.host), self.chain)

    def at(self, offset: int) -> StoredItem | None:
        if not self.items:
            return None
        index = offset - self.items[0][0].offset
        if 0 <= index < len(self.items):
            return self.items[index][0]
        return None


#: Transient messages kept per feed until a read collects them, and feeds with any.
TRANSIENT_BACKLOG = 1000
TRANSIENT_FEEDS = 10_000
#: Threads whose latest run is remembered (the least recently recorded are forgotten).
RUNS_LIMIT = 100_000


class MemoryStore(FeedStore, LiveFeed, FoldStore, RunIndex):
    """Feeds, live notification, folds and the latest-run index in one process (no
    inbox: producers in other processes cannot reach it)."""

    durable = False

    def __init__(self, *, tombstone_seconds: float = 86_400.0, linger: float = 0.002) -> None:
        super().__init__()
        #: How long a read waits after items went to few subscriptions (only the
        #: linger: no notification wakes this store's reader, so nothing is held).
        self.policy = HoldPolicy(linger)
        self._feeds: dict[FeedKey, _Feed] = {}
        #: Feeds to delete at a monotonic time (expire).
        self._expiry: dict[FeedKey, float] = {}
        #: Feeds deleted on purpose (expired), until a monotonic time.
        self._gone: dict[FeedKey, float] = {}
        #: Feeds recreated empty after a loss (see recreate); they live until expiry.
        self._tombstones: set[FeedKey] = set()
        self.tombstone_seconds = tombstone_seconds
        #: Fold checkpoints of run feeds (save_fold), by feed and cursor.
        self._folds: dict[FeedKey, dict[Cursor, bytes]] = {}
        #: Transient messages not yet collected: (epoch, head when sent, data).
        self._transient: dict[FeedKey, list[tuple[int, int, bytes]]] = {}
        self._changed = anyio.Event()
        self._last_epoch = 0
        #: Latest run per (tenant, thread), with the monotonic time it expires at.
        self._runs: OrderedDict[tuple[str, str], tuple[LatestRun, float | None]] = OrderedDict()
        #: The live-run index: run feed -> (started, due) in wall-clock ms.
        self._live: dict[FeedKey, tuple[int, int]] = {}

    def _get(self, feed: FeedKey) -> _Feed | None:
        deadline = self._expiry.get(feed)
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            del self._expiry[feed]
            self._feeds.pop(feed, None)
            if feed not in self._tombstones:
                self._gone[feed] = now + self.tombstone_seconds
            self._tombstones.discard(feed)
        return self._feeds.get(feed)

    def _is_gone(self, feed: FeedKey) -> bool:
        until = self._gone.get(feed)
        if until is not None and time.monotonic() >= until:
            del self._gone[feed]
            return False
        return until is not None

    async def recreate(self, feed: FeedKey) -> FeedState | None:
        f = self._get(feed)
        if f is not None:
            return f.state()
        if self.known.get(feed) is None or self._is_gone(feed):
            return None
        return self._recreate(feed)

    def _recreate(self, feed: FeedKey) -> FeedState:
        f = self._feeds[feed] = _Feed(self._new_epoch())
        self._tombstones.add(feed)
        self._expiry[feed] = time.monotonic() + self.tombstone_seconds
        state = f.state()
        self.known.reset(feed, state)
        return state

    async def broadcast(self, feed: FeedKey, data: bytes, charge: Charge | None = None) -> None:
        if charge is not None:
            charge.take()  # this node's bucket: the embedded store serves one node
        f = self._get(feed)
        pending = self._transient.setdefault(feed, [])
        if len(pending) < TRANSIENT_BACKLOG:  # nobody collects them: bounded
            pending.append((f.epoch if f else 0, f.head if f else 0, data))
        self._changed.set()
        self._changed = anyio.Event()

    async def offset_of(self, feed: FeedKey, key: str) -> int | None:
        f = self._get(feed)
        if f is None:
            return None
        offset = f.keys.get(key)
        return offset if offset is not None and f.at(offset) is not None else None

    async def save_fold(self, feed: FeedKey, at: Cursor, blob: bytes, *, keep_from: int) -> None:
        kept = {
            c: b
            for c, b in self._folds.get(feed, {}).items()
            if c.epoch == at.epoch and c.offset >= keep_from
        }
        kept[at] = blob
        self._folds[feed] = kept

    async def load_fold(self, feed: FeedKey, at: Cursor) -> bytes | None:
        if self._get(feed) is None:
            self._folds.pop(feed, None)
            return None
        return self._folds.get(feed, {}).get(at)

    async def expire(self, feed: FeedKey, seconds: float) -> None:
        if feed in self._feeds:
            self._expiry[feed] = time.monotonic() + seconds

    def _new_epoch(self) -> int:
        self._last_epoch = epoch_floor(int(time.time() * 1000), self._last_epoch)
        return self._last_epoch

    async def append(
        self,
        feed: FeedKey,
        items: Sequence[NewItem],
        *,
        retention: int,
        align: int = 0,
        expect: Cursor | None = None,
        charge: Charge | None = None,
        ends: bool = False,
        lease: RunLease | None = None,
    ) -> AppendResult:
        f = self._get(feed)
        new_epoch = f is None
        # Plan first so that a rejected batch writes nothing.
        planned: list[int | None] = []
        batch_keys: dict[str, tuple[bytes, int]] = {}
        next_offset = 0 if f is None else f.head
        for index, item in enumerate(items):
            existing: int | None = None
            if item.key:
                if item.key in batch_keys:
                    data, existing = batch_keys[item.key]
                    if data != item.data:
                        raise IdempotencyKeyReused(_reused(index))
                elif f is not None and item.key in f.keys:
                    existing = f.keys[item.key]
                    stored = f.at(existing)
                    if stored is not None and stored.data != item.data:
                        raise IdempotencyKeyReused(_reused(index))
            if existing is None:
                next_offset += 1
                existing_or_new = next_offset
                planned.append(None)
            else:
                existing_or_new = existing
                planned.append(existing)
            if item.key and item.key not in batch_keys:
                batch_keys[item.key] = (item.data, existing_or_new)
        if f is not None and f.ended and any(e is None for e in planned):
            raise RunEnded()
        if expect is not None and any(e is None for e in planned):
            head = Cursor(0, 0) if f is None else Cursor(f.epoch, f.head)
            if head != expect:
                raise HeadMoved(f"the feed's head is {head}, not {expect}: plan again")
        if charge is not None and any(e is None for e in planned):
            charge.take()  # this node's bucket: the embedded store serves one node
        if f is None:
            self._gone.pop(feed, None)  # published again: a feed like any other
            f = self._feeds[feed] = _Feed(self._new_epoch())
        elif feed in self._tombstones and any(e is None for e in planned):
            # A recreated feed gets its first item: a feed like any other from now on.
            self._tombstones.discard(feed)
            self._expiry.pop(feed, None)
        cursors: list[Cursor] = []
        now = time.time()
        for item, existing in zip(items, planned, strict=True):
            if existing is not None:
                cursors.append(Cursor(f.epoch, existing))
                continue
            f.head += 1
            f.chain = chain_next(f.chain, item.data)
            stored = StoredItem(f.epoch, f.head, item.data, f.chain)
            f.items.append((stored, item.key or None, now))
            if item.key:
                f.keys[item.key] = f.head
            if f.host is None and f.head == 1:
                f.host = item.host_opening
            cursors.append(stored.cursor)
        if ends and any(e is None for e in planned):
            f.ended = True
            f.deadline_ms = None
        elif lease is not None and any(e is None for e in planned):
            now_ms = int(now * 1000)
            if lease.starts:
                f.started_ms, f.lease_ms = now_ms, lease.ms
                f.deadline_ms = now_ms + lease.ms
            elif f.deadline_ms is not None:
                f.deadline_ms = now_ms + f.lease_ms
        excess = len(f.items) - retention
        if excess > 0 and align > 0:
            before = f.items[0][0].offset - 1
            excess = (before + excess) // align * align - before
        for _ in range(max(0, excess)):
            _, key, _ = f.items.popleft()
            if key is not None:
                f.keys.pop(key, None)
        state = f.state()
        self.known.advance(feed, f.epoch, f.head, f.chain)
        self._changed.set()
        self._changed = anyio.Event()
        return AppendResult(cursors, new_epoch, state)

    async def state(self, feed: FeedKey) -> FeedState | None:
        f = self._get(feed)
        return None if f is None else f.state()

    async def lease(self, feed: FeedKey) -> Lease | None:
        f = self._get(feed)
        return None if f is None else f.lease()

    async def renew(self, feed: FeedKey) -> Lease | None:
        f = self._get(feed)
        if f is None or f.lease() is None:
            return None
        f.deadline_ms = int(time.time() * 1000) + f.lease_ms
        return f.lease()

    async def lapse(self, feed: FeedKey, end: NewItem, *, retention: int, align: int = 0) -> Lapse:
        # No await between the check and the append (append has none): one step.
        f = self._get(feed)
        lease = None if f is None else f.lease()
        if lease is None:
            return Lapse()
        if lease.deadline_ms > int(time.time() * 1000):
            return Lapse(live=lease)
        return Lapse(
            ended=await self.append(feed, [end], retention=retention, align=align, ends=True)
        )

    async def read(self, feed: FeedKey, after: Cursor, limit: int) -> list[StoredItem]:
        f = self._get(feed)
        if f is None or f.epoch != after.epoch or not f.items:
            return []
        start = max(0, after.offset + 1 - f.items[0][0].offset)
        out = []
        for index in range(start, min(len(f.items), start + limit)):
            out.append(f.items[index][0])
        return out

    async def read_new(
        self,
        positions: Mapping[FeedKey, Cursor],
        sink: LiveSink,
        *,
        count: int,
        block_ms: int,
    ) -> None:
        # Everything is pushed by this call: there is no I/O callback to push from.
        found = self._collect(positions, count)
        waited = not found
        if waited:
            changed = self._changed
            with anyio.move_on_after(block_ms / 1000):
                await changed.wait()
            found = self._collect(positions, count)
        linger = self.policy.lingers(*push(sink, found))
        if linger:
            await anyio.sleep(linger)
        elif not waited:
            # Nothing above gave the loop a turn: let the followers act on what was
            # pushed before the next read (a deleted feed is found again on every read
            # until its followers have left, which they cannot do while this spins).
            await anyio.lowlevel.checkpoint()

    def _collect(self, positions: Mapping[FeedKey, Cursor], count: int) -> dict[FeedKey, Batch]:
        out: dict[FeedKey, Batch] = {}
        for feed, pos in positions.items():
            f = self._get(feed)
            if f is None:
                # Lost (a test's drop) or deleted on purpose: tell the followers.
                if self._is_gone(feed):
                    out[feed] = Batch([], gone=True)
                elif self.known.get(feed) is not None:
                    out[feed] = Batch([], reset=self._recreate(feed))
                continue
            if f.epoch == pos.epoch:
                items = self._after(f, pos.offset, count)
            elif f.epoch > pos.epoch:
                items = self._after(f, 0, count)
            else:
                items = []
            if items:
                newest = f.items[items[-1].offset - f.items[0][0].offset]
                out[feed] = Batch(items, appended=newest[2])
            pending = self._transient.pop(feed, None)
            if pending:
                batch = out.setdefault(feed, Batch([]))
                for epoch, head, data in pending:
                    before = head - pos.offset if epoch == pos.epoch else 0
                    batch.transient.append((max(0, min(len(batch.items), before)), data))
        if len(self._transient) > TRANSIENT_FEEDS:
            self._transient.clear()  # feeds nobody here follows
        return out

    @staticmethod
    def _after(f: _Feed, offset: int, count: int) -> list[StoredItem]:
        if not f.items:
            return []
        start = max(0, offset + 1 - f.items[0][0].offset)
        return [f.items[i][0] for i in range(start, min(len(f.items), start + count))]

    async def wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def record_run(self, tenant: str, thread_id: str, run_id: str, at: float) -> None:
        key = (tenant, thread_id)
        self._runs.pop(key, None)
        self._runs[key] = (LatestRun(run_id, at), None)
        while len(self._runs) > RUNS_LIMIT:
            self._runs.popitem(last=False)

    async def latest_run(self, tenant: str, thread_id: str) -> LatestRun | None:
        entry = self._runs.get((tenant, thread_id))
        if entry is None:
            return None
        latest, deadline = entry
        if deadline is not None and time.monotonic() >= deadline:
            del self._runs[(tenant, thread_id)]
            return None
        return latest

    async def expire_run(self, tenant: str, thread_id: str, run_id: str, seconds: float) -> None:
        entry = self._runs.get((tenant, thread_id))
        if entry is not None and entry[0].run_id == run_id:
            self._runs[(tenant, thread_id)] = (entry[0], time.monotonic() + seconds)

    async def track(self, feed: FeedKey, started_ms: int, deadline_ms: int) -> None:
        self._live[feed] = (started_ms, deadline_ms)

    async def untrack(self, feeds: Sequence[FeedKey]) -> int:
        return sum(self._live.pop(feed, None) is not None for feed in feeds)

    async def due(self, now_ms: int, limit: int) -> list[FeedKey]:
        found = sorted((due, feed) for feed, (_, due) in self._live.items() if due <= now_ms)
        return [feed for _, feed in found[: max(0, limit)]]

    async def postpone(self, feed: FeedKey, deadline_ms: int) -> None:
        entry = self._live.get(feed)
        if entry is not None:
            self._live[feed] = (entry[0], deadline_ms)

    async def live_page(self, tenant: str, *, before: LiveRun | None, limit: int) -> list[LiveRun]:
        ordered = sorted(
            (
                LiveRun(feed, started)
                for feed, (started, _) in self._live.items()
                if feed.tenant == tenant
            ),
            key=lambda run: (run.started_ms, run.feed.id),
            reverse=True,
        )
        if before is not None:
            ordered = [
                run
                for run in ordered
                if (run.started_ms, run.feed.id) < (before.started_ms, before.feed.id)
            ]
        return ordered[: max(0, limit)]

    async def live_count(self) -> int:
        return len(self._live)

    def drop(self, feed: FeedKey) -> None:
        """Forget a feed entirely, as a Redis data loss would (for tests and operators)."""
        self._feeds.pop(feed, None)


def _reused(index: int) -> str:
    return f"item {index}: event_id was already used for a different item"


class MemoryFeedIndex(FeedIndex):
    """The feed index in this process: per tenant and kind, feed id -> last activity."""

    def __init__(
        self, *, max_feeds: int = INDEX_MAX_FEEDS, max_age_ms: int = INDEX_MAX_AGE_MS
    ) -> None:
        self._max_feeds = max_feeds
        self._max_age_ms = max_age_ms
        self._entries: dict[tuple[str, FeedKind], dict[str, int]] = {}

    async def touch(self, entries: Sequence[tuple[FeedKey, int]]) -> None:
        changed: set[tuple[str, FeedKind]] = set()
        for feed, ms in entries:
            group = self._entries.setdefault((feed.tenant, feed.kind), {})
            if ms > group.get(feed.id, -1):
                group[feed.id] = ms
            changed.add((feed.tenant, feed.kind))
        for name in changed:
            self._trim(name)

    def _trim(self, name: tuple[str, FeedKind]) -> None:
        group = self._entries[name]
        oldest = max(group.values()) - self._max_age_ms
        stale = [feed for feed, ms in group.items() if ms < oldest]
        for feed in stale:
            del group[feed]
        # Trimmed in steps of a tenth, so that a full index does not sort on every touch.
        if len(group) > self._max_feeds + self._max_feeds // 10:
            keep = sorted(group.items(), key=lambda e: (e[1], e[0]))[-self._max_feeds :]
            self._entries[name] = dict(keep)
        if not self._entries[name]:
            del self._entries[name]

    async def page(
        self, tenant: str, kind: FeedKind, *, before: IndexEntry | None, limit: int
    ) -> list[IndexEntry]:
        group = self._entries.get((tenant, kind), {})
        if limit <= 0:
            return []
        ordered = sorted(group.items(), key=lambda e: (e[1], e[0]), reverse=True)
        if len(ordered) > self._max_feeds:
            ordered = ordered[: self._max_feeds]
        out: list[IndexEntry] = []
        for feed, ms in ordered:
            if before is not None and (ms, feed) >= (before.updated_ms, before.id):
                continue
            out.append(IndexEntry(feed, ms))
            if len(out) >= limit:
                break
        return out

    async def forget(self, tenant: str, kind: FeedKind, ids: Sequence[str]) -> None:
        group = self._entries.get((tenant, kind))
        if group is not None:
            for feed in ids:
                group.pop(feed, None)


def memory_backend(store: MemoryStore | None = None, index: FeedIndex | None = None) -> Backend:
    """The embedded backend (``store`` and ``index`` to share them between nodes in tests)."""
    store = store or MemoryStore()
    index = index or MemoryFeedIndex()
    return Backend(feeds=store, live=store, folds=store, runs=store, index=index, name="embedded")
