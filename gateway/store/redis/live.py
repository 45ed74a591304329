"""Live notification on Redis: the append step publishes new items on each feed's
pub/sub channel; a node subscribes to the channels of the feeds it follows and takes the
live items from those messages.

One listening connection (:mod:`.client.subscriber`) per server: the one Redis, or on a cluster
each shard master that owns a followed feed (sharded pub/sub, ``SSUBSCRIBE``: a node
subscribes only where its feeds live, and a channel whose slot migrates is subscribed
again where it lives then).  A stream is read (one non-blocking ``XREAD`` per call; per
feed on a cluster) only for a feed new to the node, after a missed message, on a
periodic sweep and after a listener was replaced.  After the node reached another Redis
server process (``RedisConnection.suspect``), and every :data:`RedisLive.VERIFY_SECONDS`,
every followed feed is verified, so followers of a feed that rolled back or was lost are
told even when nothing is published.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping
from typing import Any

import anyio

from gateway.cursor import Cursor
from gateway.feed import FeedKey, StoredItem
from gateway.limits import Charge
from gateway.store.hold import HoldPolicy
from gateway.store.interfaces import Batch, LiveFeed, LiveSink, Positions, push
from gateway.store.redis.client import (
    HandOver,
    ListenerAddress,
    Messages,
    PubSubConnection,
    PubSubLost,
    Waker,
)
from gateway.store.redis.connection import RedisConnection
from gateway.store.redis.feeds import RedisFeeds, stored_item

#: What one wait for messages returns: items per feed, feeds to read from their stream,
#: append times, transient messages.
_Gathered = tuple[
    dict[FeedKey, list[StoredItem]],
    set[FeedKey],
    dict[FeedKey, float],
    dict[FeedKey, list[tuple[int, bytes]]],
]


class RedisLive(LiveFeed):
    #: Seconds between reads of every followed feed, whatever the notifications say:
    #: a safety net for a notification lost in a reconnect.
    SWEEP_SECONDS = 5.0
    #: Seconds between checks that every followed feed still continues what this node
    #: delivered (a loss that no publish and no reconnect reveals: a flush, another
    #: node's failover handling), so followers are told within this long.
    VERIFY_SECONDS = 5.0
    #: When a check could not reach some feed (its shard down or moving): again after.
    VERIFY_RETRY_SECONDS = 0.5

    def __init__(self, conn: RedisConnection, feeds: RedisFeeds, *, linger: float = 0.002) -> None:
        self.conn = conn
        self.feeds = feeds
        self._redis = conn.redis
        self._waker = Waker()
        #: One listener per server address, and where each followed feed listens.
        self._listeners: dict[ListenerAddress, PubSubConnection] = {}
        self._route: dict[FeedKey, ListenerAddress] = {}
        feeds.on_rebased = self._wake
        #: Set by :meth:`wake`: the reader re-reads its subscriptions (and reports the
        #: feeds' pending resets) on its next turn.
        self.woken = False
        #: Feeds the previous read followed, and their stream keys (cached).
        self._followed: set[FeedKey] = set()
        #: The generation of the positions ``_followed`` was taken from (None: unknown).
        self._followed_generation: int | None = None
        self._stream_keys: dict[FeedKey, bytes] = {}
        self._feeds_by_key: dict[bytes, FeedKey] = {}
        self._last_sweep = 0.0
        self._last_verify = 0.0
        #: Feeds whose channel a listener's SUBSCRIBE Redis confirmed, and joins waiting
        #: for one (see following).
        self._confirmed: set[FeedKey] = set()
        self._waiters: dict[FeedKey, anyio.Event] = {}
        #: When to hold the listeners, and for how long (``linger``: the longest, in
        #: seconds).
        self.policy = HoldPolicy(linger)
        #: The timer that ends a hold of the listeners (see hold), while one lasts.
        self._release: asyncio.TimerHandle | None = None
        #: Batches pushed from a listener's callback while the reader waited (counted
        #: for tests).
        self.handed_over = 0

    async def broadcast(self, feed: FeedKey, data: bytes, charge: Charge | None = None) -> None:
        # On the feed's own channel, marked so readers tell it from the append step's
        # item messages (which start with a digit).
        channel = self._stream_key(feed)
        if charge is not None:
            if not self.conn.cluster:  # the take and the publish in one call
                await self.feeds.take(charge, (channel, TRANSIENT_MARK + data))
                return
            await self.feeds.take(charge)
        message = TRANSIENT_MARK + data
        if self.conn.cluster:
            await self._redis.call(
                "broadcast", lambda redis: redis.execute_command("SPUBLISH", channel, message)
            )
        else:
            await self._redis.call("broadcast", lambda redis: redis.publish(channel, message))

    async def wake(self) -> None:
        self._wake()

    def _wake(self) -> None:
        """Make the reader return from its wait and re-read its feeds."""
        self.woken = True
        self._waker.wake()

    @property
    def reading(self) -> bool:
        """Whether every listener reads now (False while a hold lasts)."""
        return all(listener.reading for listener in self._listeners.values())

    def hold(self, limit: float) -> None:
        """Stop reading every listener for at most ``limit`` seconds, as long as the
        recent rate makes it pay (:meth:`HoldPolicy.hold_length`), unless a hold
        already lasts: what is published meanwhile waits in the kernel, and is then
        read at once, in one wake-up of the node instead of one each.  Returns at once:
        the next read waits, and the held messages reach it when the hold ends."""
        self._hold_for(self.policy.hold_length(limit))

    def _hold_for(self, seconds: float) -> None:
        """Stop reading every listener for ``seconds`` (none if 0), unless a hold
        already lasts."""
        if self._release is not None or seconds <= 0:
            return
        for listener in self._listeners.values():
            listener.hold()
        self._release = asyncio.get_running_loop().call_later(seconds, self._end_hold)

    def _end_hold(self) -> None:
        self._release = None
        for listener in self._listeners.values():
            listener.release()

    def close(self) -> None:
        if self._release is not None:
            self._release.cancel()
            self._release = None
        for listener in self._listeners.values():
            listener.close()

    async def following(self, feed: FeedKey) -> None:
        if feed in self._confirmed:
            return
        event = self._waiters.get(feed)
        if event is None:
            event = self._waiters[feed] = anyio.Event()
        with anyio.move_on_after(self.conn.timeout):
            await event.wait()
        if not event.is_set() and self._waiters.get(feed) is event:
            del self._waiters[feed]

    def _confirm(self, feeds: set[FeedKey]) -> None:
        self._confirmed |= feeds
        for feed in feeds:
            event = self._waiters.pop(feed, None)
            if event is not None:
                event.set()

    def _replace_listeners(self) -> None:
        """Drop every listening connection: the next read opens them to wherever the
        servers are now (after a failover, a new master), and reads every feed."""
        listeners, self._listeners = self._listeners, {}
        for listener in listeners.values():
            listener.close()
        self._route.clear()
        self._followed = set()
        self._followed_generation = None
        self._confirmed.clear()

    def _stream_key(self, feed: FeedKey) -> bytes:
        key = self._stream_keys.get(feed)
        if key is None:
            key = self._stream_keys[feed] = self.conn.feed_keys(feed)[1].encode()
            self._feeds_by_key[key] = feed
        return key

    async def read_new(
        self,
        positions: Mapping[FeedKey, Cursor],
        sink: LiveSink,
        *,
        count: int,
        block_ms: int,
    ) -> None:
        """Take the items the append step published for the followed feeds and push
        them into ``sink``.

        Whatever cannot be taken from the messages is read from the streams: feeds new
        to this node, a message that does not continue the position (one was missed),
        and every followed feed on a periodic sweep and after a listener was replaced.

        While this waits with nothing else to do, messages whose items continue their
        feed's position are pushed as they arrive (:meth:`_hand_over`).  After a push
        to few subscriptions the listeners are held (:class:`HoldPolicy`).
        """
        items, offers = push(sink, await self._read(positions, sink, count, block_ms))
        self.hold(self.policy.lingers(items, offers))

    async def _read(
        self, positions: Mapping[FeedKey, Cursor], sink: LiveSink, count: int, block_ms: int
    ) -> dict[FeedKey, Batch]:
        """What :meth:`read_new` pushes at its end, by feed, in order."""
        resets = {
            feed: Batch([], reset=self.feeds.pending_resets.pop(feed))
            for feed in list(self.feeds.pending_resets)
            if feed in positions
        }
        if len(self.feeds.pending_resets) > 10_000:  # reset feeds nobody here follows
            self.feeds.pending_resets.clear()
        now = time.monotonic()
        suspect = self.conn.suspect
        if suspect or now - self._last_verify >= self.VERIFY_SECONDS:
            if suspect:
                # Another server (a restart, a failover): listen there, and check
                # everything followed before reading on.
                self._replace_listeners()
            # Cleared first: a server change during the verify is verified next time.
            self.conn.suspect = False
            self._last_verify = now
            try:
                resets.update(await self.feeds.verify(positions))
            except BaseException:
                self.conn.suspect = True
                raise
            if self.feeds.deferred:
                self._last_verify = now - self.VERIFY_SECONDS + self.VERIFY_RETRY_SECONDS
        if resets:
            return resets
        # No cancel scope around the wait (several us per wake-up, at agent rates a
        # share of every event): each wait inside has its own bound (the waker's
        # timer, the subscribe's confirmation, the listener's connect, redis-py's
        # socket timeouts for the cluster's topology).
        pushed, todo, stamps, transient = await self._listen(positions, block_ms, sink)
        if len(self._stream_keys) > 2 * len(positions) + 1000:
            self._forget_keys(positions)
        out: dict[FeedKey, Batch] = {}
        for feed, messages in transient.items():
            if feed in positions:
                out[feed] = Batch([], transient=messages)
        for feed, items in pushed.items():
            if feed in todo or feed not in positions:
                continue
            if self.feeds.continues(feed, items):
                batch = out.setdefault(feed, Batch([]))
                batch.items, batch.appended = items, stamps.get(feed, 0.0)
            else:
                out[feed] = Batch([], reset=await self.feeds.rebase(feed))
        if not todo:
            return out
        streams: dict[bytes, bytes] = {}
        for feed in todo:
            pos = positions.get(feed)
            if pos is not None:  # still followed after the wait
                streams[self._stream_key(feed)] = b"%d-%d" % (pos.epoch, pos.offset)
        if not streams:
            return out
        reply = await self._redis.call(
            "read_new", lambda redis: self._xread(redis, streams, count), metric="xread"
        )
        for key, entries in reply:
            feed = self._feeds_by_key[key]
            items = [stored_item(entry_id, fields) for entry_id, fields in entries]
            if self.feeds.continues(feed, items):
                appended = _seconds(entries[-1][1].get(b"t")) if entries else 0.0
                batch = out.setdefault(feed, Batch([]))
                batch.items, batch.appended = items, appended
            else:
                out[feed] = Batch([], reset=await self.feeds.rebase(feed))
        return out

    async def _xread(self, redis: Any, streams: dict[bytes, bytes], count: int) -> list[Any]:
        """New entries of each stream after its position: one XREAD (streams of one
        server), or on a cluster one per stream in one pipeline (split by shard).  Each
        is ``[key, entries]``."""
        if not self.conn.cluster:
            reply = await redis.xread(streams, count=count)
            return list(reply or ())
        # Initialised and run without async with (a compiled module waits inside none,
        # CONTRIBUTING.md): execute() resets the pipeline itself.
        pipe = await redis.pipeline(transaction=False).initialize()
        for key, position in streams.items():
            pipe.execute_command(
                "XREAD", "COUNT", count, "STREAMS", key, position, **self.conn.routed(key)
            )
        replies = await pipe.execute()
        return [entry for reply in replies for entry in reply or ()]

    # -- listening -------------------------------------------------------------------------

    async def _listener_at(self, address: ListenerAddress) -> PubSubConnection:
        listener = self._listeners.get(address)
        if listener is None:
            listener = await self._redis.subscribe(address, self._waker)
            self._listeners[address] = listener
        return listener

    def _lost(self) -> bool:
        """Drop failed listeners and the feeds they carried (listened to again and read
        from their streams next); True if any failed."""
        failed = [a for a, listener in self._listeners.items() if listener.failed is not None]
        for address in failed:
            self._listeners.pop(address).close()
        if failed:
            gone = {feed for feed, address in self._route.items() if address in failed}
            for feed in gone:
                del self._route[feed]
            self._followed -= gone
            self._followed_generation = None
            self._confirmed -= gone
        return bool(failed)

    def _moved(self) -> bool:
        """Channels a shard dropped by itself (their slot migrated): listen again where
        they live now.  True if any moved."""
        moved: set[FeedKey] = set()
        for listener in self._listeners.values():
            for channel in listener.take_dropped():
                feed = self._feeds_by_key.get(channel)
                if feed is not None:
                    moved.add(feed)
        if not moved:
            return False
        for feed in moved:
            self._route.pop(feed, None)
        self._followed -= moved
        self._followed_generation = None
        self._confirmed -= moved
        return True

    async def _listen(
        self, positions: Mapping[FeedKey, Cursor], block_ms: int, sink: LiveSink
    ) -> _Gathered:
        """Published items that continue each position, the feeds to read instead, the
        append time of each feed's newest published item, and transient messages."""
        now = time.monotonic()
        lost = self._lost()
        moved = self._moved()
        if lost or moved:
            # A listener lost (Redis may have moved) or channels migrated: ask the cluster
            # who serves what now, and check the feeds before reading on.
            self.conn.suspect = self.conn.suspect or lost
            await self.conn.refresh_topology()
        sweep = lost or not self._listeners or now - self._last_sweep >= self.SWEEP_SECONDS
        pushed: dict[FeedKey, list[StoredItem]] = {}
        todo: set[FeedKey] = set()
        stamps: dict[FeedKey, float] = {}
        transient: dict[FeedKey, list[tuple[int, bytes]]] = {}
        try:
            # The same generation: the same set of feeds as last time (no pass over it).
            generation = positions.generation if isinstance(positions, Positions) else None
            same = generation is not None and generation == self._followed_generation
            current = self._followed if same else set(positions)
            if sweep or moved or self.woken or (not same and current != self._followed):
                # The set of feeds changed: (un)subscribe, and read the new ones now.
                self.woken = False
                added, removed = current - self._followed, self._followed - current
                # A failure here forgets the generation too (_replace_listeners below).
                await self._subscribe(added)
                self._unsubscribe(removed)
                self._followed = current
                todo = set(current) if sweep else added
            self._followed_generation = generation
            if sweep:
                self._last_sweep = now
                return pushed, todo, stamps, transient
            hand_over = functools.partial(self._hand_over, positions, sink)
            await self._gather(
                positions, pushed, todo, stamps, transient, now + block_ms / 1000, hand_over
            )
        except BaseException as exc:
            # A listener failed (or we were cancelled mid-read): start over with fresh
            # ones, subscriptions and a full sweep.
            self._replace_listeners()
            if isinstance(exc, PubSubLost):  # lost, not made, unconfirmed: Redis may have moved
                self.conn.suspect = True
            raise
        return pushed, todo, stamps, transient

    async def _subscribe(self, feeds: set[FeedKey]) -> None:
        """Listen to ``feeds`` on their servers; return once Redis confirmed it, so that
        nothing published from then on goes unseen (the caller reads them now)."""
        if not feeds:
            return
        by_address: dict[ListenerAddress, list[FeedKey]] = {}
        if self.conn.cluster:
            await self.conn.topology()
            for feed in feeds:
                address = self.conn.shard_of(self._stream_key(feed))
                by_address.setdefault(address, []).append(feed)
        else:
            by_address[await self.conn.listener_address()] = list(feeds)
        listeners = []
        for address, group in by_address.items():
            listener = await self._listener_at(address)
            listener.subscribe([self._stream_key(f) for f in group])
            for feed in group:
                self._route[feed] = address
            listeners.append(listener)
        await self._redis.confirmed(listeners)
        self._confirm(feeds)

    def _unsubscribe(self, feeds: set[FeedKey]) -> None:
        by_address: dict[ListenerAddress, list[bytes]] = {}
        for feed in feeds:
            address = self._route.pop(feed, None)
            if address is not None:
                by_address.setdefault(address, []).append(self._stream_key(feed))
        for address, channels in by_address.items():
            listener = self._listeners.get(address)
            if listener is not None:
                listener.unsubscribe(channels)
        self._confirmed -= feeds
        # A shard none of our feeds live on any more: close its connection.
        used = set(self._route.values())
        for address in [a for a in self._listeners if a not in used]:
            self._listeners.pop(address).close()

    async def _gather(
        self,
        positions: Mapping[FeedKey, Cursor],
        pushed: dict[FeedKey, list[StoredItem]],
        todo: set[FeedKey],
        stamps: dict[FeedKey, float],
        transient: dict[FeedKey, list[tuple[int, bytes]]],
        deadline: float,
        hand_over: HandOver | None = None,
    ) -> None:
        """Wait (at most until ``deadline``) for messages, then take all that are there.

        While it waits, messages go to ``hand_over`` (if given) as they arrive."""
        seen: dict[FeedKey, Cursor] = {}
        for _ in range(1000):  # bounded; each round waits or takes messages
            waiting = any(listener.messages for listener in self._listeners.values())
            if not todo and not self.woken and not waiting:
                await self._waker.wait(max(0.0, deadline - time.monotonic()), hand_over)
            woken = self.woken
            for listener in list(self._listeners.values()):
                if listener.failed is not None:
                    raise listener.failed
                if listener.dropped:
                    woken = True  # channels moved: resubscribe them first
                for channel, payload in listener.take():
                    self._take(channel, payload, positions, pushed, todo, stamps, transient, seen)
            if pushed or todo or transient or woken or time.monotonic() >= deadline:
                return

    def _hand_over(
        self, positions: Mapping[FeedKey, Cursor], sink: LiveSink, messages: Messages
    ) -> Messages:
        """Messages that arrived while the reader waits with nothing else to do: push
        each feed's items that continue its position into ``sink``, one batch per
        feed, and leave the rest to the reader, in order: a feed's messages from the
        first one not handed over (a gap, a transient message, a reset pending for
        it), and every message while a server change or a wake-up is pending.

        ``positions`` is the reader's live view: the sink moves it on.  Then holds the
        listeners as the policy says (:meth:`HoldPolicy.hold`)."""
        conn = self.conn
        if self.woken or conn.suspect:
            return messages
        resets = self.feeds.pending_resets
        feeds_by_key = self._feeds_by_key
        left: Messages = []
        refused: set[FeedKey] = set()
        batches: dict[FeedKey, Batch] = {}
        size = 0
        for channel, payload in messages:
            size += len(payload)
            feed = feeds_by_key.get(channel)
            if feed is None:
                continue  # not followed (any more): the reader would drop it too
            if feed in refused or feed in resets or payload.startswith(TRANSIENT_MARK):
                refused.add(feed)
                left.append((channel, payload))
                continue
            batch = batches.get(feed)
            pos = batch.items[-1].cursor if batch is not None else positions.get(feed)
            if pos is None:
                continue
            fresh, appended, continues, before = _after(payload, pos)
            if not fresh:
                continue
            if not continues or not self.feeds.continues(feed, fresh, before):
                # Something was missed, or the items are not what this node saw: the
                # reader reads the stream, or moves the feed on.
                refused.add(feed)
                left.append((channel, payload))
                continue
            if batch is None:
                batches[feed] = Batch(fresh, appended=appended)
            else:
                batch.items.extend(fresh)
                batch.appended = appended
        policy = self.policy
        policy.arrived(len(messages), time.monotonic())
        if batches:
            self.handed_over += len(batches)
            items, offers = push(sink, batches)
            self._hold_for(policy.hold(items, offers, size))
        return left

    def _take(
        self,
        channel: bytes,
        payload: bytes,
        positions: Mapping[FeedKey, Cursor],
        pushed: dict[FeedKey, list[StoredItem]],
        todo: set[FeedKey],
        stamps: dict[FeedKey, float],
        transient: dict[FeedKey, list[tuple[int, bytes]]],
        seen: dict[FeedKey, Cursor],
    ) -> None:
        """One message of a feed's channel: transient, the next items, or a sign that
        something was missed (the feed is read from its stream instead)."""
        feed = self._feeds_by_key.get(channel)
        if feed is None:
            return
        if payload.startswith(TRANSIENT_MARK):
            before = 0 if feed in todo else len(pushed.get(feed, ()))
            transient.setdefault(feed, []).append((before, payload[len(TRANSIENT_MARK) :]))
            return
        if feed in todo:
            return
        pos = seen.get(feed) or positions.get(feed)
        if pos is None:
            return
        fresh, appended, continues, _ = _after(payload, pos)
        if not fresh:
            return
        if continues:
            pushed.setdefault(feed, []).extend(fresh)
            seen[feed] = fresh[-1].cursor
            stamps[feed] = appended
        else:
            todo.add(feed)  # something was missed: read the stream instead
            pushed.pop(feed, None)
            stamps.pop(feed, None)

    def _forget_keys(self, positions: Mapping[FeedKey, Cursor]) -> None:
        self._stream_keys = {f: k for f, k in self._stream_keys.items() if f in positions}
        self._feeds_by_key = {k: f for f, k in self._stream_keys.items()}


#: Starts a transient message on a feed's channel (item messages start with a digit).
TRANSIENT_MARK = b"T\n"


def _after(payload: bytes, pos: Cursor) -> tuple[list[StoredItem], float, bool, str | None]:
    """The items a message announces after ``pos``, their append time, whether they
    continue ``pos`` (else something was missed before them), and the chain value
    announced right before the first of them (None if the message does not say)."""
    announced, appended, before = _announced(payload)
    if not announced:
        return [], appended, False, None
    # One epoch per message, offsets in order: the items after ``pos`` are a suffix.
    epoch, first = announced[0].epoch, announced[0].offset
    pos_epoch, pos_offset = pos
    skip = 0 if epoch > pos_epoch else min(max(pos_offset + 1 - first, 0), len(announced))
    if epoch < pos_epoch or skip == len(announced):
        return [], appended, False, None
    if skip:
        announced, before = announced[skip:], announced[skip - 1].chain
    first += skip
    continues = (epoch == pos_epoch and first == pos_offset + 1) or (
        epoch > pos_epoch and first == 1
    )
    return announced, appended, continues, before


def _announced(payload: bytes) -> tuple[list[StoredItem], float, str | None]:
    """Parse what the append step published (see feed.lua): items in offset order,
    their append time (0.0 if the header has none: an older append step's message),
    and the chain value before the first item (None from an append step older still).
    """
    # Lines are decoded to str before they are split and their numbers read: the str
    # operations are the cheaper ones (this runs for every message a node receives).
    newline = payload.find(b"\n")
    if newline < 0:
        newline = len(payload)  # a header alone: no items
    fields = payload[:newline].decode("ascii").split(" ")
    epoch, offset = int(fields[0]), int(fields[1])
    appended = _seconds(fields[2]) if len(fields) > 2 else 0.0
    before = fields[3] if len(fields) > 3 else None
    items: list[StoredItem] = []
    at, end = newline + 1, len(payload)
    while at < end:
        newline = payload.index(b"\n", at)
        chain, _, size = payload[at:newline].decode("ascii").partition(" ")
        start = newline + 1
        at = start + int(size)
        items.append(StoredItem(epoch, offset, payload[start:at], chain))
        offset += 1
    return items, appended, before


def _seconds(text: bytes | str | None) -> float:
    """An append time as the append step writes it ("<s>.<us>"); 0.0 if absent or odd."""
    if not text:
        return 0.0
    try:
        return float(text)
    except ValueError:
        return 0.0
