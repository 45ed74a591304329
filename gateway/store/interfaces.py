"""What a backend must do, by concern: feed storage, live notification, fold storage,
and (where the backend has one) an inbox queue.

Semantics of feed storage (docs/contract.md D1), identical for every implementation and
tested against both (``tests/store``):

- Offsets in an epoch are contiguous from 1; ``append`` assigns the next ones atomically.
- An item whose key (a team event's ``event_id``) the feed still retains is not appended
  again: its original cursor is returned.  The same key with different data raises
  :class:`~gateway.errors.IdempotencyKeyReused` and nothing of the batch is appended.
- A feed moves to a new, larger epoch whenever its history cannot be trusted: its
  metadata is missing (data loss; also how a feed is created), or what this node saw of
  it earlier is no longer there (a failover or restore rolled it back).  The new epoch
  starts empty.
- Retention keeps at most ``retention`` items per feed; trimming never changes the epoch.
- Every item carries a hash-chain value ``chain = sha1_hex(previous_chain + data)`` so
  a reader can tell that what follows its position continues what it saw.

A :class:`Backend` bundles what one backend offers; the application asks it for a
capability (``backend.inbox``, ``backend.runs``, ``backend.ping``, ``backend.index``)
instead of testing its type.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import msgspec

from gateway.cursor import Cursor
from gateway.errors import IdempotencyKeyReused, Unavailable
from gateway.feed import AppendResult, FeedKey, FeedKind, FeedState, NewItem, StoredItem
from gateway.limits import Charge
from gateway.store.last_seen import KnownPositions


def epoch_floor(now_ms: int, previous: int) -> int:
    """A new epoch: the clock in ms, or one more than the previous if that is not later."""
    return now_ms if now_ms > previous else previous + 1


class Batch(msgspec.Struct):
    """What one live read found for one feed, as a store assembles it before
    :func:`push` hands it to the hub.

    ``reset`` is set when the feed's history no longer continues the position that was
    read from (a rollback or a loss was detected and the feed moved to a new epoch, or
    is gone): followers of the feed must be told ``epoch_restarted``.  A reset and
    ``gone`` reach the hub as a gap (:meth:`LiveSink.on_gap`), the rest as items
    (:meth:`LiveSink.on_items`).
    """

    items: list[StoredItem]
    reset: FeedState | None = None
    #: Wall-clock time (seconds) the newest item was appended, by the store's clock
    #: (Redis TIME); 0.0 when unknown.  For ``gateway_delivery_lag_seconds``.
    appended: float = 0.0
    #: Transient messages (never stored, see :meth:`LiveFeed.broadcast`), each with the
    #: number of this batch's items that came before it.
    transient: list[tuple[int, bytes]] = msgspec.field(default_factory=list)
    #: The feed was deleted on purpose (a finished run's grace period ended): its
    #: followers are told ``not_found``, as a new request would be.
    gone: bool = False


class Joined(NamedTuple):
    """A feed's state and the first history read with it (:meth:`FeedStore.joined`)."""

    state: FeedState | None
    #: The position ``items`` continue (None: nothing was read).
    after: Cursor | None
    items: list[StoredItem]


def history_start(state: FeedState | None, after: Cursor | None) -> Cursor | None:
    """Where a join's history starts in ``state``: after ``after``, or before the first
    retained item without one; None when ``after`` is of another epoch or past the head
    (the join restarts or is refused: nothing to read)."""
    if state is None:
        return None
    if after is None:
        return Cursor(state.epoch, state.first - 1)
    if after.epoch != state.epoch or after.offset > state.head:
        return None
    return after


class FeedStore(abc.ABC):
    """Where feeds are kept: append, state, history reads."""

    #: Whether items survive a restart of the gateway.
    durable: bool = False

    def __init__(self) -> None:
        #: What this node last saw of each feed.
        self.known = KnownPositions()

    @abc.abstractmethod
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
        """Append ``items`` in order as one atomic step; see the module docstring.

        With ``align`` > 0 retention trims whole blocks only: the first retained
        offset minus one stays a multiple of ``align`` (the feed keeps up to
        ``align - 1`` items beyond ``retention``).

        With ``expect`` the step appends only if the feed's head is still there
        (``Cursor(0, 0)``: the feed does not exist), else raises HeadMoved and writes
        nothing: a writer that planned its items from the feed's state cannot
        interleave with another (docs/storage.md).  A batch whose items are all
        retries (keys already held) is answered whatever the head.

        With ``charge`` (an HTTP publish request's items) the step takes the request's
        item count from its tenant's publish-rate bucket, or raises RateLimited and
        writes nothing; a batch of retries only takes nothing.  The rate is checked
        after everything else, so a batch refused for another reason takes nothing
        either (docs/storage.md, "The publish rate").

        With ``ends`` the batch ends a run (it holds the run's terminal event, last):
        the step records the end with the items.  Once a feed's current epoch holds
        an end, a batch with any new item is refused (RunEnded, nothing written); a
        batch of exact retries is still answered with its first cursors (the retries
        are recognised before the end is checked).  An end also ends the run's lease.

        With ``lease`` (a run feed's batch that does not end it) the step keeps the
        run's lease in the same step (docs/contract.md, "Runs end"): a batch that
        starts the run (``lease.starts``) gives it a lease of ``lease.ms`` from the
        store's clock now; any other batch with a new item renews the lease the run
        holds (to now plus its length), and does nothing to a run that never started.

        Raises IdempotencyKeyReused (message names the item index), HeadMoved,
        RunEnded, RateLimited or Unavailable.
        """

    async def append_many(
        self, appends: Sequence[tuple[FeedKey, Sequence[NewItem]]], *, retention: int
    ) -> list[AppendResult | IdempotencyKeyReused | Unavailable]:
        """:meth:`append` for several feeds at once (one round trip on Redis).

        Each feed's items are one atomic step; the feeds are not one step together.
        Returns one entry per element of ``appends``, in order: its result, or the
        error its step met.  Raises Unavailable when the store could not be reached at
        all: then any step may or may not have happened (retrying keyed items is safe,
        as with :meth:`append`).
        """
        results: list[AppendResult | IdempotencyKeyReused | Unavailable] = []
        for feed, items in appends:
            try:
                results.append(await self.append(feed, items, retention=retention))
            except (IdempotencyKeyReused, Unavailable) as exc:
                results.append(exc)
        return results

    @abc.abstractmethod
    async def state(self, feed: FeedKey) -> FeedState | None:
        """The feed's current state, or ``None`` when the feed does not exist."""

    @abc.abstractmethod
    async def read(self, feed: FeedKey, after: Cursor, limit: int) -> list[StoredItem]:
        """Up to ``limit`` items of epoch ``after.epoch`` with offsets above ``after.offset``.

        Returns ``[]`` when there are none, including when the feed has since moved to
        another epoch (the caller re-reads :meth:`state` to find out).
        """

    async def joined(self, feed: FeedKey, after: Cursor | None, limit: int) -> Joined:
        """:meth:`state`, and up to ``limit`` items from :func:`history_start` read with
        it: what a join needs first, in one round trip where the store can (Redis: one
        script call instead of a state check and a history read).

        The items are a :meth:`read` from ``Joined.after`` at the time of the state
        (a trimmed position gives items that do not continue it, as ``read`` does).
        Raises what :meth:`state` raises; a read that fails here is left to the
        catch-up (``Joined.after`` None), where a store failure ends the stream."""
        state = await self.state(feed)
        start = history_start(state, after)
        if start is None:
            return Joined(state, None, [])
        try:
            return Joined(state, start, await self.read(feed, start, limit))
        except Unavailable:
            return Joined(state, None, [])

    @abc.abstractmethod
    async def offset_of(self, feed: FeedKey, key: str) -> int | None:
        """The offset of the retained item appended with idempotency ``key``, if any."""

    async def recreate(self, feed: FeedKey) -> FeedState | None:
        """A feed whose data was lost but that this node remembers (it saw it), in an
        empty new epoch, so that old cursors and followers get ``epoch_restarted``
        instead of 404 (contract D9).  None when the node does not remember it, or it
        was deleted on purpose.  The recreated feed lives for a while unless something
        is appended to it."""
        return None

    @abc.abstractmethod
    async def expire(self, feed: FeedKey, seconds: float) -> None:
        """Delete the feed ``seconds`` from now (a finished run's grace period).

        Until then it is served as usual; afterwards it does not exist (404) until
        something is published to it again, in a new epoch (D1).
        """

    @abc.abstractmethod
    async def lease(self, feed: FeedKey) -> Lease | None:
        """The lease of the live run ``feed`` holds (None: no live run there: it never
        started, it ended, or the feed does not exist).  Raises Unavailable."""

    @abc.abstractmethod
    async def renew(self, feed: FeedKey) -> Lease | None:
        """Renew the lease of the live run ``feed`` holds without appending (a
        heartbeat): its deadline moves to the store's clock now plus its length.  The
        lease as renewed, or None when there is no live run.  Raises Unavailable."""

    @abc.abstractmethod
    async def lapse(self, feed: FeedKey, end: NewItem, *, retention: int, align: int = 0) -> Lapse:
        """End the live run ``feed`` holds with ``end`` if its lease has run out, in one
        atomic step with the check, as an append with ``ends`` would (the end is
        recorded; retention as for :meth:`append`).

        However many callers race, and whatever they last saw of the feed, one end
        is appended: a caller that comes after finds no live run.  Returns what the
        step found: ``Lapse(ended=...)`` when it appended ``end`` now,
        ``Lapse(live=...)`` when the lease has not run out (renewed meanwhile), and
        ``Lapse()`` when there is no live run (ended by its producer or by another
        caller, never started, or no feed).  Raises Unavailable.
        """


class Positions(Mapping[FeedKey, Cursor]):
    """The positions a node follows, for :meth:`LiveFeed.read_new`, with a
    :attr:`generation` that changes whenever the set of feeds in it does (not when a
    position moves): a reader that saw the same generation may skip comparing the sets,
    which costs a pass over every followed feed on each read."""

    __slots__ = ()
    generation: int


class LiveSink(Protocol):
    """Where a :class:`LiveFeed` pushes what it learns of the feeds a node follows (the
    hub).  Called synchronously, from the store's reader task or from its own I/O
    callback; must not raise and must not block."""

    def on_items(self, feed: FeedKey, batch: Batch) -> int:
        """Items (and transient messages) of ``feed`` that continue the position the
        store judged them against.  Moves that position on before it returns.  Returns
        how many subscriptions the batch was offered to on this node (0: none, or the
        feed is not followed any more): the store's hold policy weighs it."""
        ...

    def on_gap(self, feed: FeedKey, reset: FeedState | None) -> None:
        """What this node delivered of ``feed`` no longer continues: the feed moved to
        ``reset`` (a new epoch, or its history rolled back), or is gone (None: deleted
        on purpose).  Its followers are told."""
        ...


def push(sink: LiveSink, batches: Mapping[FeedKey, Batch]) -> tuple[int, int]:
    """Hand each feed's batch to ``sink``, in order: a reset or a loss to
    :meth:`LiveSink.on_gap` (first), items and transient messages to
    :meth:`LiveSink.on_items`.  The one way a store hands what it read to the hub.

    Returns the items pushed to followed feeds and the offers they made (items times
    subscriptions reached), for the store's hold policy."""
    items = offers = 0
    for feed, batch in batches.items():
        if batch.gone or batch.reset is not None:
            sink.on_gap(feed, None if batch.gone else batch.reset)
            if not batch.items and not batch.transient:
                continue
            batch = Batch(batch.items, appended=batch.appended, transient=batch.transient)
        reached = sink.on_items(feed, batch)
        if reached:  # else the feed is not followed here any more: not counted
            items += len(batch.items)
            offers += reached * len(batch.items)
    return items, offers


class LiveFeed(abc.ABC):
    """How a node learns of new items (and transient messages) of the feeds it follows.

    The store pushes: :meth:`read_new` hands everything it learns to a
    :class:`LiveSink`; when notifications wake the node, the store alone decides
    whether to let them gather (its hold policy, :mod:`gateway.store.hold`)."""

    @abc.abstractmethod
    async def read_new(
        self,
        positions: Mapping[FeedKey, Cursor],
        sink: LiveSink,
        *,
        count: int,
        block_ms: int,
    ) -> None:
        """Wait up to ``block_ms`` for items beyond each position and push what came
        into ``sink`` (:func:`push`); return after pushing anything the wait could not
        hand over, on timeout, or after :meth:`wake`.  The caller calls it again to
        keep following.

        Items of a newer epoch follow the position's epoch's items in the same batch.
        While it waits with nothing else to do, a store may push batches of items that
        exactly continue their feeds' positions (no reset, no transient message) from
        its own I/O callback, and keep waiting: ``positions`` is a live view, which
        the sink moves on, and the store judges the next message against it.
        Anything else (a gap, a transient message, a reset) is pushed by this call
        itself, in order.
        """

    @abc.abstractmethod
    async def broadcast(self, feed: FeedKey, data: bytes, charge: Charge | None = None) -> None:
        """Send ``data`` to the feed's live followers on every node; never stored.

        Followers get it in :attr:`Batch.transient` of their next read; a node not
        following the feed at that moment never sees it (transient by definition).
        With ``charge`` it is sent only if the charge's items could be taken from the
        tenant's publish-rate bucket (else RateLimited), as by :meth:`FeedStore.append`.
        """

    @abc.abstractmethod
    async def wake(self) -> None:
        """Make a blocked :meth:`read_new` return soon (the set of feeds changed)."""

    async def following(self, feed: FeedKey) -> None:  # noqa: B027 - optional hook
        """Return once this node receives ``feed``'s live notifications (transient
        messages included), or after a bound; a join waits for it before going live, so
        a follower misses no transient message sent after its join.  Stores that
        deliver everything through reads return at once."""


class FoldStore(abc.ABC):
    """Run folds kept with their feed, so that trimming a run's start loses nothing the
    prelude needs (``gateway.fanout.foldcache``)."""

    @abc.abstractmethod
    async def save_fold(self, feed: FeedKey, at: Cursor, blob: bytes, *, keep_from: int) -> None:
        """Keep ``blob`` (a run's fold after item ``at``) with the feed; drop the ones of
        other epochs and those below offset ``keep_from``."""

    @abc.abstractmethod
    async def load_fold(self, feed: FeedKey, at: Cursor) -> bytes | None:
        """The blob :meth:`save_fold` kept for ``at``, if any."""


class RunLease(NamedTuple):
    """What an append to a run feed does to the run's lease: ``starts`` when the batch
    starts the run, which then holds a lease of ``ms``; otherwise the batch renews the
    lease the run holds (``ms`` unused: the run keeps the length it started with)."""

    starts: bool
    ms: int = 0


#: An append that renews its run's lease.
RENEWS = RunLease(False)


class Lease(msgspec.Struct, frozen=True):
    """A live run's lease as its feed records it, in wall-clock milliseconds of the
    store's clock: when the run started, when the lease was last renewed (its last
    publish or heartbeat) and when it runs out."""

    started_ms: int
    renewed_ms: int
    deadline_ms: int


class Lapse(NamedTuple):
    """What :meth:`FeedStore.lapse` found: the run ended now (``ended``), is still live
    (``live``), or neither (no live run)."""

    ended: AppendResult | None = None
    live: Lease | None = None


class LiveRun(NamedTuple):
    """An entry of the live-run index: the run feed and when its run started (ms)."""

    feed: FeedKey
    started_ms: int


class LatestRun(msgspec.Struct, frozen=True):
    """A thread's latest run: its id and when its RUN_STARTED was recorded (wall clock, s)."""

    run_id: str
    started_at: float


class RunIndex(abc.ABC):
    """The run indexes: which run of a thread is the latest (the AI SDK reconnect route,
    contract D10), and which runs are live (the lease sweep and ``GET /v1/runs``).

    The latest-run index:

    Keys are per tenant and thread; one entry per thread (the latest run replaces the
    previous one).  An entry lives as long as its run feed: no expiry while the run is
    going, and the run feed's grace period once it has ended (:meth:`expire_run`).
    Recording is a step of its own after the run feed's append: of two runs of one
    thread started at once, the one recorded last wins.
    """

    @abc.abstractmethod
    async def record_run(self, tenant: str, thread_id: str, run_id: str, at: float) -> None:
        """``run_id`` is now the thread's latest run (its RUN_STARTED was appended at
        ``at``); any expiry of the entry is removed."""

    @abc.abstractmethod
    async def latest_run(self, tenant: str, thread_id: str) -> LatestRun | None:
        """The thread's latest run, or None when the tenant's thread has none recorded."""

    @abc.abstractmethod
    async def expire_run(self, tenant: str, thread_id: str, run_id: str, seconds: float) -> None:
        """Forget the entry ``seconds`` from now, if it still names ``run_id`` (its run
        ended; a later run's entry is left alone)."""

    # The live-run index.  An entry names a run feed that may hold a live run: entries
    # are added before the run's start is appended and removed after its end, so every
    # live run has one; the feed's own lease (FeedStore.lease) is the truth, and an
    # entry whose feed holds no live run is dropped by whoever finds it.  Each entry
    # also carries a deadline no later than the lease's, by which it is found when due.

    @abc.abstractmethod
    async def track(self, feed: FeedKey, started_ms: int, deadline_ms: int) -> None:
        """Add the run feed to the live-run index, due at ``deadline_ms``."""

    @abc.abstractmethod
    async def untrack(self, feeds: Sequence[FeedKey]) -> int:
        """Drop the run feeds from the live-run index (their runs ended); how many of
        them it held."""

    @abc.abstractmethod
    async def due(self, now_ms: int, limit: int) -> list[FeedKey]:
        """Up to ``limit`` indexed run feeds due at ``now_ms`` (earliest first)."""

    @abc.abstractmethod
    async def postpone(self, feed: FeedKey, deadline_ms: int) -> None:
        """Make an indexed run feed due at ``deadline_ms`` (its lease was renewed); a
        feed no longer indexed stays out."""

    @abc.abstractmethod
    async def live_page(self, tenant: str, *, before: LiveRun | None, limit: int) -> list[LiveRun]:
        """Up to ``limit`` of the tenant's indexed run feeds, latest started first (ties
        by feed id, descending), starting after ``before`` in that order."""

    @abc.abstractmethod
    async def live_count(self) -> int:
        """How many run feeds the index holds (every tenant)."""


class InboxMessage(msgspec.Struct, frozen=True):
    """One message a producer added to an inbox; ``fields`` is None when it was deleted
    while pending."""

    id: bytes
    fields: dict[bytes, bytes] | None


class InboxQueue(abc.ABC):
    """One inbox stream read by the nodes as a consumer group (docs/storage.md)."""

    #: The inbox's name (``team``, ``run``, ...), for logs and readiness.
    name: str

    @abc.abstractmethod
    async def ensure_group(self) -> None:
        """Create the consumer group (and the stream) unless it exists."""

    @abc.abstractmethod
    async def read(self, *, pending: bool, block_ms: int | None, count: int) -> list[InboxMessage]:
        """Up to ``count`` messages: this consumer's own pending ones (``pending``) or
        new ones, waiting up to ``block_ms`` for them (None: do not wait)."""

    @abc.abstractmethod
    async def claim(self, idle_ms: int, count: int) -> list[InboxMessage]:
        """Messages pending on other consumers for at least ``idle_ms`` (dead nodes)."""

    @abc.abstractmethod
    async def ack(self, message_id: bytes) -> None:
        """The message is done (appended or dead-lettered)."""

    @abc.abstractmethod
    async def dead_letter(self, message: InboxMessage, reason: str, text: str) -> None:
        """Copy a rejected message, with its reason code and message, to the dead letters."""


#: Bounds of a feed index: entries per tenant and kind (the least recently active go
#: first), and how long an entry stays without activity (one day).
INDEX_MAX_FEEDS = 10_000
INDEX_MAX_AGE_MS = 86_400_000


class IndexEntry(msgspec.Struct, frozen=True):
    """One feed in a tenant's feed index: its id (``FeedKey.id``) and when it was last
    recorded as active (wall-clock milliseconds)."""

    id: str
    updated_ms: int


class FeedIndex(abc.ABC):
    """Each tenant's recently active feeds of each kind, most recent first (the listing
    of ``GET /v1/feeds``, contract D11).

    Entries are ordered by ``(updated_ms, id)``, descending.  The index is bounded: at
    most :data:`INDEX_MAX_FEEDS` entries per tenant and kind (the least recently active
    are dropped) and none older than :data:`INDEX_MAX_AGE_MS` (measured from the newest
    time recorded).  An entry does not say that its feed still exists: readers check the
    feed's state and :meth:`forget` the ones that are gone.
    """

    @abc.abstractmethod
    async def touch(self, entries: Sequence[tuple[FeedKey, int]]) -> None:
        """Record each feed as active at the given time (ms), all in one round trip.

        A time earlier than the one an entry has does not move it back (several nodes
        record the same feed).  Raises Unavailable.
        """

    @abc.abstractmethod
    async def page(
        self, tenant: str, kind: FeedKind, *, before: IndexEntry | None, limit: int
    ) -> list[IndexEntry]:
        """Up to ``limit`` entries of the tenant's feeds of ``kind``, most recent first,
        starting after ``before`` in that order (from the start when None)."""

    @abc.abstractmethod
    async def forget(self, tenant: str, kind: FeedKind, ids: Sequence[str]) -> None:
        """Drop the entries of feeds found not to exist (an active feed comes back with
        its next :meth:`touch`)."""


@dataclass
class Backend:
    """What one backend offers, by capability.

    ``inbox`` is None for a backend without inboxes (the embedded one); ``ping`` is None
    when there is no server to ask (readiness then does not depend on it); ``index`` is
    None for a backend that keeps no feed index (then nothing lists feeds); ``runs`` is
    None for a backend that keeps no latest-run index (the reconnect route then finds
    no run).
    """

    feeds: FeedStore
    live: LiveFeed
    folds: FoldStore
    #: The streams of a named inbox (one, or one per shard of a sharded inbox).
    inbox: Callable[[str], Sequence[InboxQueue]] | None = None
    runs: RunIndex | None = None
    ping: Callable[[], Awaitable[None]] | None = None
    close: Callable[[], Awaitable[None]] | None = None
    index: FeedIndex | None = None
    #: Short name for logs: ``redis``, ``embedded``.
    name: str = "embedded"

    @property
    def durable(self) -> bool:
        return self.feeds.durable

    async def aclose(self) -> None:
        if self.close is not None:
            await self.close()
