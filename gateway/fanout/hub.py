"""One reader per feed per node, and the hand-over from history to live.

The hub keeps an :class:`Audience` for every feed that has subscribers on this node.
One reader task follows all audiences with a single blocking multi-feed read, encodes
each new item once per wire format in use, and offers the same bytes to every live
subscription.  A joining subscription reads history in bounded pages on its own
connection task and attaches to the audience when its position has reached the
audience's (no await between that check and the attach, so no item can slip between
history and live; items the subscription already has are filtered by offset).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import anyio
import structlog

from gateway.cursor import Cursor
from gateway.errors import InvalidCursor, NotFound, Unavailable
from gateway.fanout.outbox import NodeBudget
from gateway.fanout.shared_reads import SharedReads
from gateway.fanout.subscription import Chunk, Subscription, SubState, end_index
from gateway.feed import FeedKey, FeedKind, FeedState, StoredItem
from gateway.metrics import Metrics, Sent
from gateway.outage import Outage
from gateway.resume import Replay, Restart, plan, restart_cursor
from gateway.store.interfaces import Batch, FeedStore, Joined, LiveFeed, Positions
from gateway.wire.format import Encoder, Format

log = structlog.get_logger("gateway.hub")

#: Bound on history rounds in one catch-up: each round reads one page or re-checks the
#: feed.  A subscription that cannot reach the live position within this many rounds
#: (the feed grows faster than it can read) is ended as too slow.
MAX_CATCHUP_ROUNDS = 10_000

HistoryHook = Callable[[Subscription], Awaitable[None]]

#: Items in a joining client's first history page; later pages hold about PAGE_BYTES.
FIRST_PAGE = 32
PAGE_BYTES = 1024 * 1024


@dataclass
class Hooks:
    """Test hooks; production leaves them empty."""

    #: Awaited after each history page is written and before the attach check.
    after_history_page: HistoryHook | None = None
    #: Awaited by the reader at the top of each loop iteration (a test can hold it).
    before_read: Callable[[], Awaitable[None]] | None = None


class Audience:
    """The hub's state of one feed on this node: who follows it here (its
    subscriptions), how far the reader has delivered it, and the encoders its stateful
    formats share."""

    __slots__ = ("encoders", "feed", "position", "subs")

    def __init__(self, feed: FeedKey, position: Cursor) -> None:
        self.feed = feed
        #: The last position the reader has delivered (or the head when created).
        self.position = position
        #: Every subscription of this feed on this node, live or catching up.
        self.subs: set[Subscription] = set()
        #: Stateful formats' encoders by format name, each with the position it is at:
        #: one per format, shared by every live subscriber of it.
        self.encoders: dict[str, tuple[Encoder, Cursor]] = {}


class _Encoded:
    """One batch encoded in one format, and how many subscriptions took it whole."""

    __slots__ = ("chunks", "size", "taken", "transport")

    def __init__(self, transport: str, chunks: list[Chunk]) -> None:
        self.transport = transport
        self.chunks = chunks
        self.size = sum(len(chunk.data) for chunk in chunks)
        self.taken = 0


class _Positions(Positions):
    """The audiences' positions as a read-only mapping, without copying them.  The hub
    bumps :attr:`generation` whenever it adds or removes an audience."""

    # Declared here as well as on Positions: a compiled class (gateway/native.py) lays
    # out the attributes it declares.
    generation: int

    def __init__(self, audiences: dict[FeedKey, Audience]) -> None:
        self._audiences = audiences
        self.generation = 0

    def __getitem__(self, feed: FeedKey) -> Cursor:
        return self._audiences[feed].position

    def get(self, feed: FeedKey, default: Cursor | None = None) -> Cursor | None:  # type: ignore[override]
        # Mapping's own goes through __getitem__ and a KeyError: this is the hand-over's
        # lookup of every message.
        audience = self._audiences.get(feed)
        return default if audience is None else audience.position

    def __contains__(self, feed: object) -> bool:
        return feed in self._audiences

    def __iter__(self) -> Iterator[FeedKey]:
        return iter(self._audiences)

    def __len__(self) -> int:
        return len(self._audiences)


class Hub:
    """Fan-out for one node.  Run :meth:`run` in the node's task group."""

    def __init__(
        self,
        feeds: FeedStore,
        live: LiveFeed,
        metrics: Metrics,
        *,
        read_batch: int = 1000,
        read_block_ms: int = 1000,
        history_page: int = 500,
        max_node_buffer_bytes: int = 256 * 1024 * 1024,
        max_queue_bytes: int = 1024 * 1024,
        hooks: Hooks | None = None,
    ) -> None:
        self.feeds = feeds
        self.live = live
        self.metrics = metrics
        self.read_batch = read_batch
        self.read_block_ms = read_block_ms
        self.history_page = history_page
        self.hooks = hooks or Hooks()
        #: Live writes are at most this large, so each fits a connection's bound.
        self.offer_chunk_bytes = max(1, max_queue_bytes // 4)
        #: The node-wide bound on bytes buffered for clients (shared by every outbox).
        self.budget = NodeBudget(max_node_buffer_bytes)
        self.audiences: dict[FeedKey, Audience] = {}
        self._changed = anyio.Event()
        self._idle = anyio.Event()
        #: Set when the node drains: no new subscriptions.
        self.draining = False
        #: A live view of every audience's position (no copy per read).
        self._positions = _Positions(self.audiences)
        # Joining clients share state reads and history pages (shared reads).
        self._joins: SharedReads[Joined] = SharedReads()
        self._pages: SharedReads[list[StoredItem]] = SharedReads()
        #: Monotonic time of the reader's last completed read (for readiness).
        self.last_progress = 0.0
        #: The reader's failures, logged once each (and its recovery).
        self._outage = Outage(log, "feed read failed")
        self._failing = False
        # The series every delivered batch updates, looked up once: ``Metrics`` is
        # interpreted, and finding them in it cost each batch more than updating them.
        self._items_read = metrics.items_read.series()
        self._offers = metrics.fanout_offers.series()
        self._fanout_seconds = metrics.fanout_seconds.series()
        self._delivery_lag = metrics.delivery_lag.series()
        self._sent: dict[str, Sent] = metrics.sent_by_transport

    # -- joining -------------------------------------------------------------------

    async def open(
        self,
        feed: FeedKey,
        cursor: Cursor | None,
        fmt: Format,
    ) -> Subscription:
        """Plan a subscription (D2) and register it; nothing has been sent yet.

        Raises NotFound (no such feed) or InvalidCursor before any output, so the
        route can still answer with an error status.  The returned subscription is
        either ``CATCHING_UP`` (call :meth:`catch_up` next) or ``RESTARTED``.
        A host team (a team feed that began with a host ``team_opened``) is not
        served on any transport (D3): it answers like a missing feed.  After
        this returns the caller must eventually call :meth:`close`.
        """
        if self.draining:
            raise Unavailable("this node is draining: reconnect to another")
        joined = await self._joined(feed, cursor)
        state = joined.state
        if state is None:
            # Lost, but this node remembers it: an empty new epoch, so that the cursor
            # gets epoch_restarted rather than a bare 404 (contract D9).
            state = await self.feeds.recreate(feed)
        if state is None or (feed.kind is FeedKind.TEAM and state.host):
            raise NotFound("no such feed")
        try:
            decision: Replay | Restart | None = plan(cursor, state)
        except InvalidCursor:
            decision = None  # the fresh read below waits outside this handler (README)
        if decision is None:
            # The state may be a read shared with joins that started before this
            # cursor was handed out: judge the cursor against a fresh read.
            fresh = await self.feeds.state(feed)
            if fresh is None:
                raise NotFound("no such feed") from None
            state = fresh
            decision = plan(cursor, state)
        if isinstance(decision, Restart):
            sub = Subscription(feed, fmt, decision.cursor)
            sub.head = state.head_cursor
            sub.restarted(decision.cursor)
            self.metrics.resumes.labels("epoch_restarted").inc()
            return sub
        sub = Subscription(feed, fmt, decision.after)
        sub.head = state.head_cursor
        if joined.state is state and joined.after == decision.after:
            sub.prefetched = (decision.after, joined.items)  # for the first catch-up round
        outcome = "live" if decision.after.offset == state.head else "replayed"
        self.metrics.resumes.labels(outcome).inc()
        await self._register(sub, state)
        return sub

    async def _joined(self, feed: FeedKey, cursor: Cursor | None) -> Joined:
        """The feed's state with the first history page after ``cursor``, shared by
        the joins that ask for the same at the same time."""
        limit = min(self.history_page, FIRST_PAGE)
        return await self._joins.do(
            (feed, cursor), functools.partial(self.feeds.joined, feed, cursor, limit)
        )

    async def wait_idle(self) -> None:
        """Return once no subscription is open on this node."""
        while self.audiences:
            if self._idle.is_set():
                self._idle = anyio.Event()
            await self._idle.wait()

    async def _register(self, sub: Subscription, state: FeedState) -> None:
        self.metrics.subscriptions.labels(sub.fmt.transport, sub.feed.kind.value).inc()
        audience = self.audiences.get(sub.feed)
        created = audience is None
        if audience is None:
            audience = self.audiences[sub.feed] = Audience(sub.feed, state.head_cursor)
            self._positions.generation += 1
            self._changed.set()
        audience.subs.add(sub)
        try:
            if created:
                await self.live.wake()
            # Live notifications flowing before the join goes live: no transient
            # message sent after it can pass it by.
            await self.live.following(sub.feed)
        except BaseException:
            # Cancelled (or failed) before the caller holds the subscription: it could
            # never close it, so close it here.
            self.close(sub)
            raise

    async def catch_up(self, sub: Subscription, write: Callable[[bytes], Awaitable[None]]) -> None:
        """Write history from ``sub.position`` until the subscription can go live.

        Pages are written with ``write`` (which waits for the socket), so memory stays
        bounded by one page.  Returns with ``sub.state`` ``LIVE`` (attached) or
        ``RESTARTED`` (the caller sends the restart frame and ends).  Raises NotFound
        when a run feed was deleted (its grace period ended) while it was read, and
        Unavailable when the store fails.
        """
        if sub.replayed:  # a slow consumer's catch-up, not a join
            await self._catch_up(sub, write, [])
            return
        pages: list[int] = []
        try:
            await self._catch_up(sub, write, pages)
        finally:
            # The join's replay, observed once however it ended.
            sub.replayed = True
            self.metrics.replay_items.observe(sum(pages))

    async def _catch_up(
        self, sub: Subscription, write: Callable[[bytes], Awaitable[None]], pages: list[int]
    ) -> None:
        """:meth:`catch_up`; appends the item count of each page written to ``pages``."""
        feed = sub.feed
        # Pages are bounded by count and, adaptively, by bytes: the first page is
        # small, later ones hold about PAGE_BYTES of the items seen so far.
        limit = min(self.history_page, FIRST_PAGE)
        for _ in range(MAX_CATCHUP_ROUNDS):
            # The page read with the join's state serves the first round or none: a
            # subscription that goes live at once must not find it in a later catch-up
            # (an overflow's), where it would no longer continue the position.
            prefetched, sub.prefetched = sub.page_at_position(), None
            if sub.state is not SubState.CATCHING_UP:  # closed (drain) or restarted
                return
            audience = self.audiences.get(feed)
            if audience is None or sub not in audience.subs:  # closed meanwhile
                sub.state = SubState.CLOSED
                return
            if sub.position >= audience.position:
                sub.state = SubState.LIVE
                self._adopt_encoder(audience, sub)
                return
            target = audience.position
            position = sub.position
            if prefetched is not None:
                # Read with the join's state (Hub.open), from this very position.
                items = prefetched
                if not items:
                    continue  # items came since: the next round reads them
            else:
                items = await self._pages.do(
                    (feed, position, limit),
                    functools.partial(self.feeds.read, feed, position, limit),
                )
            if not items:
                if not await self._check_position(sub):
                    return
                continue
            first = items[0]
            if first.epoch != position.epoch or first.offset != position.offset + 1:
                # Retention trimmed past the position while we were reading: the feed
                # is complete only from the first retained item (D2, "trimmed").
                sub.restarted(Cursor(first.epoch, first.offset - 1))
                self.metrics.epoch_restarts.inc()
                return
            end = end_index(items, sub.fmt.ends)
            if end is not None:
                items = items[: end + 1]  # the stream ends with this item
            encoder = sub.encoder
            if encoder is not None:
                page = b"".join(encoder.frame(feed, item) for item in items)
            else:
                page = b"".join(sub.fmt.frame(feed, item) for item in items)
            await write(page)
            sub.position = items[-1].cursor
            average = max(1, len(page) // len(items))
            limit = max(1, min(self.history_page, PAGE_BYTES // average))
            self.metrics.history_items.inc(len(items))
            pages.append(len(items))
            sent = self.metrics.sent(sub.fmt.transport)
            sent.frames += len(items)
            sent.bytes += len(page)
            if end is not None:
                sub.state = SubState.ENDED
                return
            if self.hooks.after_history_page is not None:
                await self.hooks.after_history_page(sub)
            if sub.position >= target and self._behind(sub):
                # The hand-over window: items arrived after this history read and
                # before the attach; the next round reads them from the store.
                self.metrics.handover_rereads.inc()
        # Could not catch up: end it; the client resumes from where it is.
        sub.restarted(sub.position)
        self.metrics.epoch_restarts.inc()

    @staticmethod
    def _adopt_encoder(audience: Audience, sub: Subscription) -> None:
        """A stateful subscription goes live: its encoder becomes the audience's (the
        one already there, at the audience's position, serves it just as well)."""
        encoder, sub.encoder = sub.encoder, None
        if encoder is not None and sub.fmt.name not in audience.encoders:
            audience.encoders[sub.fmt.name] = (encoder, sub.position)

    def _behind(self, sub: Subscription) -> bool:
        audience = self.audiences.get(sub.feed)
        return audience is not None and sub.position < audience.position

    async def _check_position(self, sub: Subscription) -> bool:
        """History read nothing: is the position still valid?  False if restarted.

        Raises NotFound when the feed is a run that was deleted meanwhile.
        """
        # A fresh read: a restart must not rest on a stale, shared one.
        state = await self.feeds.state(sub.feed)
        if state is None:
            # Lost meanwhile: recreated in a new epoch if this node remembers it (the
            # subscription then gets epoch_restarted below), else still None.
            state = await self.feeds.recreate(sub.feed)
        if state is None and sub.feed.kind is FeedKind.RUN:
            # A run feed is deleted on purpose when its grace period ends (D7): nothing
            # more will come, so a join that meets the deletion is told what a new
            # request would be (SSE: the stream ends; WebSocket: an error frame).
            raise NotFound("no such feed")
        pos = sub.position
        if state is not None and (
            state.epoch != pos.epoch or pos.offset + 1 < state.first or pos.offset > state.head
        ):
            sub.restarted(restart_cursor(state))
            self.metrics.epoch_restarts.inc()
            return False
        audience = self.audiences.get(sub.feed)
        if (
            audience is not None
            and audience.position.epoch == pos.epoch
            and (state is None or state.head <= pos.offset)
        ):
            # The audience believes in items the store no longer has (lost, or rolled
            # back; the reader reports it): let the subscription attach and wait.
            audience.position = min(audience.position, pos)
        return True

    def close(self, sub: Subscription) -> None:
        """Unregister a subscription (idempotent).  Drops the audience with its last one."""
        if sub.state is not SubState.RESTARTED:
            sub.state = SubState.CLOSED
        audience = self.audiences.get(sub.feed)
        if audience is None or sub not in audience.subs:
            return
        audience.subs.remove(sub)
        self.metrics.subscriptions.labels(sub.fmt.transport, sub.feed.kind.value).dec()
        name = sub.fmt.name
        if name in audience.encoders and not any(s.fmt.name == name for s in audience.subs):
            del audience.encoders[name]
        if not audience.subs:
            del self.audiences[sub.feed]
            self._positions.generation += 1
            if not self.audiences:
                self._idle.set()

    # -- the reader ------------------------------------------------------------------

    async def run(self) -> None:
        """Follow every audience's feed until cancelled."""
        backoff = 0.05
        while True:
            if self.hooks.before_read is not None:
                await self.hooks.before_read()
            if not self.audiences:
                self.last_progress = time.monotonic()
                self._changed = anyio.Event()
                with anyio.move_on_after(self.read_block_ms / 1000):
                    await self._changed.wait()
                continue
            read = False
            try:
                await self.live.read_new(
                    self._positions, self, count=self.read_batch, block_ms=self.read_block_ms
                )
                read = True
            except Unavailable as exc:
                self.metrics.redis_errors.inc()
                self._failing = True
                self._outage.failed(exc.message, retry_in=backoff)
            except Exception:
                # A bug must not stop the node's only reader: log it, back off, go on.
                self.metrics.redis_errors.inc()
                log.exception("feed read failed unexpectedly", retry_in=backoff)
            if not read:
                # The back-off is awaited here, not in the handlers: compiled, a
                # coroutine must not wait while an exception is handled (CONTRIBUTING.md,
                # "Code in the compiled modules").
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            backoff = 0.05
            if self._failing:
                self._failing = False
                self._outage.recovered()
            self.last_progress = time.monotonic()

    # -- what the store pushes (gateway.store.interfaces.LiveSink) ----------------------------

    def on_items(self, feed: FeedKey, batch: Batch) -> int:
        """A batch that continues the audience's position (from the reader's read, or
        from the store's I/O callback while the reader waits): offered to every live
        subscription.  Returns how many subscriptions the audience had (0: no audience)."""
        audience = self.audiences.get(feed)
        if audience is None:
            return 0
        reached = len(audience.subs)
        self._dispatch_safely(audience, batch)
        return reached

    def on_gap(self, feed: FeedKey, reset: FeedState | None) -> None:
        """The feed no longer continues what was delivered: it moved to ``reset``, or
        is gone (None).  Its subscriptions are restarted or told it is gone."""
        audience = self.audiences.get(feed)
        if audience is not None:
            gap = Batch([], gone=True) if reset is None else Batch([], reset=reset)
            self._dispatch_safely(audience, gap)

    def _dispatch_safely(self, audience: Audience, batch: Batch) -> None:
        try:
            self._dispatch(audience, batch)
        except Exception:
            # One feed's trouble must not stop the node's reader for all (nor reach
            # the store's I/O callback it may run in).
            log.exception("dispatch failed", kind=audience.feed.kind.value)

    def _dispatch(self, audience: Audience, batch: Batch) -> None:
        if batch.gone:
            for sub in list(audience.subs):
                if sub.state in (SubState.LIVE, SubState.CATCHING_UP):
                    sub.gone()
            return
        if batch.transient:
            self._dispatch_with_transients(audience, batch)
            return
        reset = batch.reset
        if reset is not None:
            # What was read no longer continues what this node delivered.  A new epoch
            # ends the subscriptions of older ones (those that joined the new one are
            # fine); without a new epoch no position in it can be trusted, so all end.
            newer = reset.epoch > audience.position.epoch
            self._restart_all(audience, reset.epoch if newer else None, restart_cursor(reset))
            audience.position = reset.head_cursor
        items = batch.items
        if not items:
            return
        epoch = audience.position.epoch
        # Split at an epoch change: the new epoch's items come after the old one's.
        split = 0
        while split < len(items) and items[split].epoch == epoch:
            split += 1
        if split:
            self._deliver(audience, items[:split], batch.appended)
        if split < len(items):
            first = items[split]
            self._restart_all(audience, first.epoch, Cursor(first.epoch, first.offset - 1))
            audience.position = Cursor(first.epoch, first.offset - 1)
            self._deliver(audience, items[split:], batch.appended)

    def _dispatch_with_transients(self, audience: Audience, batch: Batch) -> None:
        """Items and transient messages, in the order they were sent."""
        items = batch.items
        done = 0
        for before, data in batch.transient:
            before = min(max(before, done), len(items))
            if before > done:
                self._dispatch(audience, Batch(items[done:before], appended=batch.appended))
                done = before
            self._send_transient(audience, data)
        self._dispatch(audience, Batch(items[done:], reset=batch.reset, appended=batch.appended))

    def _send_transient(self, audience: Audience, data: bytes) -> None:
        """A transient message to every live subscription whose format carries them.

        Encoded once per format; a connection that cannot take it at once misses it
        (it is transient: never stored, never replayed), it is not taken off the live
        path for it.
        """
        encoded: dict[str, bytes] = {}
        live = SubState.LIVE
        for sub in audience.subs:
            transient = sub.fmt.transient
            if sub.state is not live or transient is None or sub.outbox is None:
                continue
            frame = encoded.get(sub.fmt.name)
            if frame is None:
                frame = encoded[sub.fmt.name] = transient(audience.feed, data)
            if frame:  # a message with nothing to say in this format writes nothing
                sub.outbox.try_write(frame)

    def _restart_all(self, audience: Audience, epoch: int | None, cursor: Cursor) -> None:
        """End every live subscription of an epoch older than ``epoch`` (None: all)."""
        for sub in list(audience.subs):
            if sub.state is SubState.LIVE and (epoch is None or sub.position.epoch < epoch):
                sub.restarted(cursor)
                self.metrics.epoch_restarts.inc()

    def _deliver(self, audience: Audience, items: list[StoredItem], appended: float = 0.0) -> None:
        """Offer a batch to every live subscription: encoded once per format, shared.

        ``appended`` is the wall-clock time the newest item was appended (0: unknown).
        """
        started = time.perf_counter()
        last = audience.position = items[-1].cursor
        encoded: dict[str, _Encoded] = {}
        live = SubState.LIVE
        # Over a copy: a subscription taken off the live path tells its owner at once
        # (Subscription.notify), which may close it, and so leave the set, meanwhile.
        for sub in tuple(audience.subs):
            if sub.state is not live:
                continue
            enc = encoded.get(sub.fmt.name)
            if enc is None:
                enc = encoded[sub.fmt.name] = _Encoded(
                    sub.fmt.transport, self._encode(audience, sub.fmt, items, last)
                )
            if not enc.chunks:  # a stateful format without an encoder here: catch up
                sub.overflow()
                continue
            for chunk in enc.chunks:
                if not sub.offer(chunk):
                    sub.overflow()
                    self.metrics.slow_consumer_actions.labels(action="catch_up").inc()
                    break
                if sub.state is not live:  # its stream ended with an item of this chunk
                    break
            else:
                enc.taken += 1
        if audience.encoders:
            # An encoder no live subscriber used this batch did not advance: drop it
            # (a subscriber catching up brings its own).
            for name in [n for n in audience.encoders if n not in encoded]:
                del audience.encoders[name]
        # Metrics once per batch (per format), not per subscriber.
        delivered = 0
        for enc in encoded.values():
            if enc.taken:
                delivered += enc.taken
                sent = self._sent.get(enc.transport)
                if sent is None:
                    sent = self.metrics.sent(enc.transport)
                sent.frames += enc.taken * len(items)
                sent.bytes += enc.taken * enc.size
        self._items_read.value += len(items)
        self._offers.value += delivered
        self._fanout_seconds.observe(time.perf_counter() - started)
        if delivered and appended:
            self._delivery_lag.observe(max(0.0, time.time() - appended))

    def _encode(
        self, audience: Audience, fmt: Format, items: list[StoredItem], last: Cursor
    ) -> list[Chunk]:
        """Encode a batch once, in chunks of at most ``offer_chunk_bytes`` (whole frames).

        Chunks keep every write within a connection's byte bound: a connection that
        takes everything at once gets the chunks back to back.  A stateful format is
        framed by the audience's encoder (items at or before its position get no frames:
        every live subscriber of it is past them); without one (or with one of another
        epoch) there is nothing to offer: ``[]``.  ``last`` is ``items[-1].cursor``,
        built once by the caller and shared by the last chunk.
        """
        feed = audience.feed
        if fmt.encoder is None:
            frames = [fmt.frame(feed, item) for item in items]
        else:
            entry = audience.encoders.get(fmt.name)
            if entry is None or entry[1].epoch != items[0].epoch:
                audience.encoders.pop(fmt.name, None)
                return []
            encoder, at = entry
            frames = [b"" if item.cursor <= at else encoder.frame(feed, item) for item in items]
            audience.encoders[fmt.name] = (encoder, max(at, last))
        limit = self.offer_chunk_bytes
        chunks: list[Chunk] = []
        start = size = 0
        for index, frame in enumerate(frames):
            if size and size + len(frame) > limit:
                chunks.append(Chunk(items[start:index], frames[start:index], fmt.ends))
                start, size = index, 0
            size += len(frame)
        chunks.append(
            Chunk(items[start:], frames[start:], fmt.ends, last)
            if start
            else Chunk(items, frames, fmt.ends, last)
        )
        return chunks
