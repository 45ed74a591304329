"""SparkTide and A2UI into run feeds: check, plan against what the run holds, append.

The translations are pure (:mod:`gateway.dialects.sparktide_agui`,
:mod:`gateway.dialects.a2ui`); this module gives them what the run feed holds and
appends what they derive, all or nothing (``docs/dialects/sparktide.md``,
``docs/dialects/a2ui.md``).  :class:`~gateway.publisher.Publisher` calls it for every
entry path (HTTP, the inboxes, the Python producer).

**One writer per run at a time.**  What a body derives depends on the run's state at the
moment it is appended, so reading that state and appending must not interleave with
another publish to the same run.  On one node :class:`RunLocks` serialises them.
Across nodes:

- SparkTide: every derived item is keyed ``sparktide:<messageId>:<sequence>#<k>`` and the
  translation is deterministic, so two nodes that planned from the same state for the
  same sequence derive the same keys: the append step answers the second with the first's
  cursors (same body) or refuses it as a whole (another body, 409).  A node can only plan
  sequence ``n + 1`` after it saw ``n`` in the feed, so no gap and no second event for a
  sequence is ever appended.
- Both append with the head they planned at (``FeedStore.append(expect=...)``): when
  another writer (another node, an AG-UI publish to the same run) appended in between,
  the append step refuses the batch and writes nothing, and the body is planned again
  from the run as it is now, at most :data:`REPLANS` times (then 503, nothing appended).
  So A2UI's registry rule (create before update, no second create), checked against the
  run's fold, holds across nodes too.

**SparkTide's per-run state.**  Kept per run feed on this node with the head it is valid
at (bounded, least recently used dropped).  When the feed's head is elsewhere (another
node or entry path appended, the node restarted) it is rebuilt: the message and what is
open from the run's fold (``state_from_fold``), the last sequence by probing the derived
items' keys (sequences are contiguous and retention trims the oldest first, so the held
ones form one range).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
import msgspec
import structlog

from gateway.agui.events import TERMINAL, decode, encode
from gateway.cursor import Cursor
from gateway.dialects import a2ui, sparktide
from gateway.dialects.sparktide import RunState
from gateway.dialects.sparktide_agui import Planned, plan, state_from_fold
from gateway.errors import (
    GatewayError,
    HeadMoved,
    IdempotencyKeyReused,
    InvalidRequest,
    RunEnded,
    Unavailable,
)
from gateway.fanout.foldcache import BLOCK as FOLD_BLOCK
from gateway.fanout.foldcache import FoldCache
from gateway.feed import AppendResult, FeedKey, FeedState, NewItem, is_run_part, run_feed
from gateway.limits import Charge
from gateway.store.interfaces import FeedStore, RunLease

log = structlog.get_logger("gateway.publish_dialects")

Event = dict[str, Any]
#: Checks that the caller may publish to a run (thread id, run id); raises NotFound.
Authorize = Callable[[str, str], object]

#: How long a publish waits for the run's lock before answering ``unavailable``.
LOCK_WAIT: Final = 10.0
#: Runs whose SparkTide state a node keeps.
MAX_STATES: Final = 1024
#: Most AG-UI events one SparkTide event derives: its opening, its row, closing up to
#: ``MAX_OPEN`` open things, the text's end and the terminal event.
MAX_DERIVED: Final = 300
#: Items read at once when looking for the end of a held event's derived items.
HELD_PAGE: Final = 16
#: The longest Idempotency-Key (as the AG-UI route's).
MAX_IDEMPOTENCY_KEY: Final = 200
#: Plans of one body when other writers keep appending to its run in between.
REPLANS: Final = 5


def _busy() -> Unavailable:
    return Unavailable(
        f"run: other writers appended to the run each of the {REPLANS} times this body "
        "was planned; nothing was appended: retry"
    )


class _Raced(Exception):
    """The append step refused a SparkTide batch: another writer took a sequence first."""


class RunLocks:
    """One lock per run feed that publishes are waiting for or holding on this node.

    A lock exists only while someone holds or waits for it, so the table is bounded by
    the publishes in flight.
    """

    def __init__(self) -> None:
        self._locks: dict[FeedKey, tuple[anyio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    @contextlib.asynccontextmanager
    async def hold(self, feed: FeedKey, wait: float = LOCK_WAIT) -> AsyncIterator[None]:
        """Hold the run's lock; Unavailable after ``wait`` seconds of waiting for it."""
        lock, users = self._locks.get(feed, (None, 0))
        if lock is None:
            lock = anyio.Lock()
        self._locks[feed] = (lock, users + 1)
        try:
            try:
                with anyio.fail_after(wait):
                    await lock.acquire()
            except TimeoutError:
                raise Unavailable("the run is busy with other publishes: retry") from None
            try:
                yield
            finally:
                lock.release()
        finally:
            held, users = self._locks[feed]
            if users == 1:
                del self._locks[feed]
            else:
                self._locks[feed] = (held, users - 1)


def _held_key(message_id: str, sequence: int) -> str:
    return sparktide.item_keys({"messageId": message_id, "sequence": sequence}, 1)[0]


def _derived_from(event: Event) -> tuple[object, object]:
    """``(messageId, sequence)`` of the SparkTide event a stored AG-UI event came from."""
    raw = event.get("rawEvent")
    if not isinstance(raw, dict):
        return None, None
    return raw.get("messageId"), raw.get("sequence")


def _where(index: int, array: bool) -> str:
    return f"[{index}]" if array else "event"


class DialectRuns:
    """Publishing SparkTide events and A2UI messages to run feeds (see the module
    docstring).  One per :class:`~gateway.publisher.Publisher`."""

    def __init__(
        self,
        feeds: FeedStore,
        folds: FoldCache,
        *,
        run_retention: int,
        run_finished_ttl: float,
        max_states: int = MAX_STATES,
        on_run: Callable[[FeedKey, bool, bool], Awaitable[None]] | None = None,
        lease_for: Callable[[FeedKey, bool, bool], Awaitable[RunLease | None]] | None = None,
    ) -> None:
        self.feeds = feeds
        #: Told after each append ``(feed, started, ended)``: the latest-run index.
        self.on_run = on_run
        #: Asked before each append ``(feed, starts, ends)``: what it does to the run's
        #: lease (a run that starts is indexed as live first).
        self.lease_for = lease_for
        self.folds = folds
        self.run_retention = run_retention
        self.run_finished_ttl = run_finished_ttl
        self.locks = RunLocks()
        self.max_states = max_states
        #: SparkTide state per run feed, with the head cursor it is valid at.
        self._states: OrderedDict[FeedKey, tuple[Cursor, RunState]] = OrderedDict()
        #: Times another writer's items landed between a plan and its append (the body
        #: was planned again).
        self.replans = 0

    # -- SparkTide --------------------------------------------------------------------

    async def sparktide(
        self,
        tenant: str,
        body: object,
        *,
        authorize: Authorize | None = None,
        charge: Charge | None = None,
    ) -> tuple[list[Cursor], int]:
        """Publish a SparkTide body (one event or an array, one run), all or nothing.

        Returns one cursor per event (the cursor of the last AG-UI event derived from
        it; a retried event's first cursor) and how many items were appended.  Raises
        InvalidRequest (400), IdempotencyKeyReused (409), NotFound (from ``authorize``),
        RateLimited (``charge``, taken by the append: a body of retries takes nothing)
        or Unavailable.
        """
        try:
            events = sparktide.check_body(body)
        except RecursionError as exc:
            raise InvalidRequest("body: JSON nested too deeply") from exc
        array = isinstance(body, list)
        thread_id, run_id = sparktide.feed_of(events[0])
        if authorize is not None:
            authorize(thread_id, run_id)
        feed = run_feed(tenant, thread_id, run_id)
        async with self.locks.hold(feed):
            raced = False
            for _ in range(REPLANS):
                try:
                    return await self._sparktide_once(feed, events, array, charge)
                except HeadMoved:
                    self._replanned(feed)
                except _Raced as exc:
                    # Another writer appended a different event for one of our sequences
                    # since we read the run: plan again from what it holds now, to answer
                    # as if it had come first (409 naming the event, or a retry).
                    if raced:
                        raise IdempotencyKeyReused(
                            "event.sequence: another publish to this run took one of the "
                            "body's sequences with a different event"
                        ) from exc
                    raced = True
                    self._replanned(feed)
        raise _busy()

    async def _sparktide_once(
        self, feed: FeedKey, events: list[Event], array: bool, charge: Charge | None
    ) -> tuple[list[Cursor], int]:
        head = await self.feeds.state(feed)
        state = await self._sparktide_state(feed, head, events, array)
        held = await self._held_events(feed, head, state, events)
        after, planned = plan(state, events, {k: raw for k, (raw, _) in held.items()}, array=array)
        new = [
            NewItem(key, encode(event))
            for p in planned
            if not p.retry
            for key, event in zip(p.item_keys, p.derived, strict=True)
        ]
        if not new:
            return [held[p.key][1] for p in planned], 0
        terminal = any(e["type"] in TERMINAL for p in planned for e in p.derived)
        try:
            result = await self._append(feed, head, new, terminal=terminal, charge=charge)
        except IdempotencyKeyReused as exc:
            raise _Raced from exc
        if self._continued(head, result, len(new)):
            self._remember(feed, result.state.head_cursor, after)
        else:
            self._states.pop(feed, None)
        return _answer(planned, result.cursors, held), _appended(head, result)

    def _replanned(self, feed: FeedKey) -> None:
        self.replans += 1
        self._states.pop(feed, None)
        log.info("another writer appended to the run first: planning again", feed=feed.public_name)

    def _remember(self, feed: FeedKey, at: Cursor, state: RunState) -> None:
        self._states[feed] = (at, state)
        self._states.move_to_end(feed)
        while len(self._states) > self.max_states:
            self._states.popitem(last=False)

    async def _sparktide_state(
        self, feed: FeedKey, head: FeedState | None, events: list[Event], array: bool
    ) -> RunState:
        """The run's SparkTide state at ``head`` (kept, or rebuilt; module docstring)."""
        if head is None or head.head == 0:
            return RunState()
        kept = self._states.get(feed)
        if kept is not None and kept[0] == head.head_cursor:
            self._states.move_to_end(feed)
            return kept[1]
        fold = await self.folds.at(feed, head.head_cursor)
        base = state_from_fold(fold, None)
        if base.message_id is None:
            raise InvalidRequest(
                f"{_where(0, array)}.runId: the run feed already holds events that "
                "SparkTide did not start (its RUN_STARTED carries no SparkTide rawEvent)"
            )
        sequence = await self._last_sequence(feed, base.message_id, events, array)
        state = msgspec.structs.replace(base, sequence=sequence)
        self._remember(feed, head.head_cursor, state)
        return state

    async def _is_held(self, feed: FeedKey, message_id: str, sequence: int) -> bool:
        if sequence < 1:
            return False
        return await self.feeds.offset_of(feed, _held_key(message_id, sequence)) is not None

    async def _last_sequence(
        self, feed: FeedKey, message_id: str, events: list[Event], array: bool
    ) -> int:
        """The last sequence of ``message_id`` the run holds, found by probing keys from
        the body's first event of that message: ``n`` held (a retry), ``n - 1`` held (the
        next event), or 1 held (a gap); otherwise the event is refused here."""
        index = next((i for i, e in enumerate(events) if e["messageId"] == message_id), None)
        if index is None:
            return 0  # another message: the translation refuses it, whatever the sequence
        n: int = events[index]["sequence"]
        if await self._is_held(feed, message_id, n):
            low = n
        elif await self._is_held(feed, message_id, n - 1):
            return n - 1  # n is not held, and the held ones are one range
        elif n > 2 and await self._is_held(feed, message_id, 1):
            low = 1  # a gap: find the last sequence, for the sequence rule's answer
        else:
            where = _where(index, array)
            if n == 1:
                raise InvalidRequest(
                    f"{where}.sequence: 1 is at or below the message's last sequence, and "
                    "the run no longer holds it (sequences only increase)"
                )
            raise InvalidRequest(
                f"{where}.sequence: {n} does not continue the message: the run holds neither "
                f"it nor sequence {n - 1} (a gap, or a sequence the run no longer holds)"
            )
        # Galloping, then bisecting: ``low`` is held, ``high`` is not.
        step = 1
        while await self._is_held(feed, message_id, low + step):
            low, step = low + step, step * 2
        high = low + step
        while high - low > 1:
            middle = (low + high) // 2
            if await self._is_held(feed, message_id, middle):
                low = middle
            else:
                high = middle
        return low

    async def _held_events(
        self, feed: FeedKey, head: FeedState | None, state: RunState, events: list[Event]
    ) -> dict[str, tuple[Event, Cursor]]:
        """For the body's events the run may already hold (its message, a sequence at or
        below the state's), the event held under the key and the cursor of the last
        AG-UI event derived from it."""
        out: dict[str, tuple[Event, Cursor]] = {}
        if head is None or state.message_id is None:
            return out
        for event in events:
            key = sparktide.event_key(event)
            if (
                key in out
                or event["messageId"] != state.message_id
                or event["sequence"] > state.sequence
            ):
                continue
            found = await self._held(feed, head.epoch, event)
            if found is not None:
                out[key] = found
        return out

    async def _held(self, feed: FeedKey, epoch: int, event: Event) -> tuple[Event, Cursor] | None:
        first = await self.feeds.offset_of(feed, sparktide.item_keys(event, 1)[0])
        if first is None:
            return None
        source = (event["messageId"], event["sequence"])
        raw: object = None
        last = first
        after = Cursor(epoch, first - 1)
        # The derived items of one event are consecutive (one append): read until the
        # first item derived from another event.
        while last - first < MAX_DERIVED:
            items = await self.feeds.read(feed, after, HELD_PAGE)
            for item in items:
                stored = decode(item.data)
                if item.offset == first:
                    raw = stored.get("rawEvent")
                elif _derived_from(stored) != source:
                    break
                last = item.offset
            else:
                if len(items) == HELD_PAGE:
                    after = Cursor(epoch, last)
                    continue
            break
        if not isinstance(raw, dict):
            return None
        return raw, Cursor(epoch, last)

    # -- A2UI -------------------------------------------------------------------------

    async def a2ui(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        body: object,
        *,
        idempotency_key: str | None = None,
        charge: Charge | None = None,
    ) -> tuple[list[Cursor], int]:
        """Publish A2UI messages (one or an array) to a run, all or nothing.

        The run must have started (its feed holds ``RUN_STARTED``) and not ended.
        ``idempotency_key`` makes a retried request safe: the same key with the same
        messages answers the first cursors, with other messages (or another number of
        them) 409.  ``charge`` is taken by the append (a retry takes nothing).  Returns
        one cursor per message and how many items were appended.
        """
        if not is_run_part(thread_id):
            raise InvalidRequest("thread_id: must match ^[A-Za-z0-9_.-]{1,128}$")
        if not is_run_part(run_id):
            raise InvalidRequest("run_id: must match ^[A-Za-z0-9_.-]{1,128}$")
        key = idempotency_key
        if key is not None and not 0 < len(key) <= MAX_IDEMPOTENCY_KEY:
            raise InvalidRequest(f"Idempotency-Key: 1 to {MAX_IDEMPOTENCY_KEY} characters")
        feed = run_feed(tenant, thread_id, run_id)
        async with self.locks.hold(feed):
            for _ in range(REPLANS):
                try:
                    return await self._a2ui_once(feed, body, key, charge)
                except HeadMoved:
                    self._replanned(feed)
        raise _busy()

    async def _a2ui_once(
        self, feed: FeedKey, body: object, key: str | None, charge: Charge | None
    ) -> tuple[list[Cursor], int]:
        head = await self.feeds.state(feed)
        if head is None or head.head == 0:
            raise InvalidRequest(
                "run: the run has not started: publish its RUN_STARTED first "
                "(A2UI surfaces live in a run)"
            )
        first = None if key is None else await self.feeds.offset_of(feed, f"a2ui:{key}#0")
        if key is not None and first is not None:
            # A retry: derive again from the fold the first request was derived from,
            # so the append step finds every item already there (or refuses).
            await self._check_request_key(feed, key, body)
            at = Cursor(head.epoch, first - 1)
        else:
            at = head.head_cursor
        fold = await self.folds.at(feed, at)
        if at == head.head_cursor:
            if fold.run_started is None:
                raise InvalidRequest(
                    "run: the run has not started: publish its RUN_STARTED first "
                    "(A2UI surfaces live in a run)"
                )
            if fold.terminal is not None:
                raise RunEnded(
                    f"run: the run has ended ({fold.terminal.get('type')}); nothing "
                    "more can be published to it"
                )
        try:
            messages = a2ui.check_body(body, live=a2ui.live_surfaces(fold))
            derived = a2ui.derive(messages, fold)
        except RecursionError as exc:
            raise InvalidRequest("body: JSON nested too deeply") from exc
        new = [
            NewItem(None if key is None else f"a2ui:{key}#{i}", encode(event))
            for i, event in enumerate(derived)
        ]
        try:
            result = await self._append(feed, head, new, terminal=False, charge=charge)
        except IdempotencyKeyReused as exc:
            raise IdempotencyKeyReused(
                "Idempotency-Key was already used for different messages"
            ) from exc
        appended = _appended(head, result)
        kept = self._states.get(feed)
        # A2UI activities change nothing of what SparkTide's state holds.
        if (
            appended
            and kept is not None
            and kept[0] == head.head_cursor
            and self._continued(head, result, len(new))
        ):
            self._remember(feed, result.state.head_cursor, kept[1])
        return result.cursors, appended

    async def _check_request_key(self, feed: FeedKey, key: str, body: object) -> None:
        """A retained key must come back with as many messages (the messages themselves
        are compared by the append step, item by item)."""
        n = len(body) if isinstance(body, list) and body else 1
        if (
            await self.feeds.offset_of(feed, f"a2ui:{key}#{n - 1}") is None
            or await self.feeds.offset_of(feed, f"a2ui:{key}#{n}") is not None
        ):
            raise IdempotencyKeyReused(
                "Idempotency-Key was already used for a different list of messages"
            )

    # -- both -------------------------------------------------------------------------

    async def _append(
        self,
        feed: FeedKey,
        head: FeedState | None,
        new: list[NewItem],
        *,
        terminal: bool,
        charge: Charge | None = None,
    ) -> AppendResult:
        """Append to the run feed as the AG-UI route does (whole-block retention, the
        run's end recorded with its ``terminal`` event, the finished run's grace period,
        the fold kept before retention trims the start), if its head is still
        ``head``: else HeadMoved, nothing written (and ``charge`` not taken: the next
        plan's append takes it); RunEnded, nothing written, once the run has ended."""
        expect = Cursor(0, 0) if head is None else head.head_cursor
        # A run feed that was empty starts with its RUN_STARTED (SparkTide's first
        # event; A2UI needs a started run and never starts one).
        starts = head is None or head.head == 0
        lease = None
        if self.lease_for is not None:
            lease = await self.lease_for(feed, starts, terminal)
        result = await self.feeds.append(
            feed,
            new,
            retention=self.run_retention,
            align=FOLD_BLOCK,
            expect=expect,
            charge=charge,
            ends=terminal,
            lease=lease,
        )
        if terminal and self.run_finished_ttl > 0:
            await self.feeds.expire(feed, self.run_finished_ttl)
        if self.on_run is not None:
            await self.on_run(feed, starts, terminal)
        try:
            await self.folds.persist(feed, result.state, self.run_retention)
        except GatewayError as exc:
            # Appended all the same; the next append near the limit tries again.
            log.warning("keeping a run's fold failed", error=exc.message)
        return result

    @staticmethod
    def _continued(head: FeedState | None, result: AppendResult, n: int) -> bool:
        """The append added exactly our ``n`` items right after the head we planned at."""
        start = 0 if head is None else head.head
        if head is not None and (result.new_epoch or result.state.epoch != head.epoch):
            return False
        offsets = [c.offset for c in result.cursors]
        return offsets == list(range(start + 1, start + n + 1)) and result.state.head == start + n


def _appended(head: FeedState | None, result: AppendResult) -> int:
    """How many of the append's items are new (the others were already there)."""
    if head is None or result.new_epoch:
        return len(result.cursors)
    return sum(1 for c in result.cursors if c.offset > head.head)


def _answer(
    planned: list[Planned], cursors: list[Cursor], held: Mapping[str, tuple[Event, Cursor]]
) -> list[Cursor]:
    """One cursor per SparkTide event: the last of its derived items' cursors, or, for a
    retry, that of its first occurrence (in this body, or held by the run)."""
    last: dict[str, Cursor] = {}
    index = 0
    for p in planned:
        if not p.retry:
            index += len(p.derived)
            last[p.key] = cursors[index - 1]
    return [last[p.key] if p.key in last else held[p.key][1] for p in planned]
