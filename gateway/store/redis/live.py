"""Live notification on Redis: the append step publishes new items on each feed's
pub/sub channel; a node subscribes (one connection, :mod:`listener`) to the channels of
the feeds it follows and takes the live items from those messages.

It reads a stream (one non-blocking ``XREAD`` for many feeds) only for a feed new to the
node, after a missed message, on a periodic sweep and after the listening connection was
replaced.  After the node reached another Redis server process (``RedisConnection.
suspect``), every followed feed is verified before reading on, so followers of a
rolled-back feed are told even when nothing is published.
"""

from __future__ import annotations

from collections.abc import Mapping

import anyio

from gateway.cursor import Cursor
from gateway.feed import FeedKey, StoredItem
from gateway.store.base import Batch, LiveFeed
from gateway.store.redis.connection import RedisConnection
from gateway.store.redis.feeds import RedisFeeds, stored_item
from gateway.store.redis.listener import Listener
from gateway.store.redis.listener import connect as connect_listener


class RedisLive(LiveFeed):
    def __init__(self, conn: RedisConnection, feeds: RedisFeeds) -> None:
        self.conn = conn
        self.feeds = feeds
        self._redis = conn.client
        self._listener: Listener | None = None
        conn.on_wake = self._poke
        #: Feeds the previous read followed, and their stream keys (cached).
        self._followed: set[FeedKey] = set()
        self._stream_keys: dict[FeedKey, bytes] = {}
        self._feeds_by_key: dict[bytes, FeedKey] = {}
        self._last_sweep = 0.0
        self._last_verify = 0.0
        #: Feeds whose channel the current listener's SUBSCRIBE Redis confirmed, and
        #: joins waiting for one (see following).
        self._confirmed: set[FeedKey] = set()
        self._waiters: dict[FeedKey, anyio.Event] = {}

    async def broadcast(self, feed: FeedKey, data: bytes) -> None:
        # On the feed's own channel, marked so readers tell it from the append step's
        # item messages (which start with a digit).
        with self.conn.io("broadcast"):
            await self._redis.publish(self._stream_key(feed), TRANSIENT_MARK + data)

    async def wake(self) -> None:
        await self.conn.wake()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

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

    def _poke(self) -> None:
        if self._listener is not None:
            self._listener.poke()

    def _replace_listener(self) -> None:
        """Drop the listening connection: the next read opens one to wherever the
        server is now (after a failover, a new master)."""
        listener, self._listener = self._listener, None
        self._confirmed.clear()
        if listener is not None:
            listener.close()

    #: Seconds between reads of every followed feed, whatever the notifications say:
    #: a safety net for a notification lost in a reconnect.
    SWEEP_SECONDS = 5.0
    #: Seconds between checks that every followed feed still continues what this node
    #: delivered (a loss that no publish and no reconnect reveals: a flush, another
    #: node's failover handling), so followers are told within this long.
    VERIFY_SECONDS = 5.0

    def _stream_key(self, feed: FeedKey) -> bytes:
        key = self._stream_keys.get(feed)
        if key is None:
            key = self._stream_keys[feed] = self.conn.feed_keys(feed)[1].encode()
            self._feeds_by_key[key] = feed
        return key

    async def read_new(
        self, positions: Mapping[FeedKey, Cursor], *, count: int, block_ms: int
    ) -> dict[FeedKey, Batch]:
        """Take the items the append step published for the followed feeds.

        The node subscribes to each followed feed's channel (one connection for all of
        them); the append step publishes the new items there, so the live path reads no
        stream at all.  Whatever cannot be taken from those messages is read from the
        streams with one non-blocking ``XREAD``: feeds new to this node, a message that
        does not continue the position (one was missed), and every followed feed on a
        periodic sweep and after the listening connection was replaced.
        """
        resets = {
            feed: Batch([], reset=self.conn.pending_resets.pop(feed))
            for feed in list(self.conn.pending_resets)
            if feed in positions
        }
        if len(self.conn.pending_resets) > 10_000:  # reset feeds nobody here follows
            self.conn.pending_resets.clear()
        now = anyio.current_time()
        suspect = self.conn.suspect
        if suspect or now - self._last_verify >= self.VERIFY_SECONDS:
            if suspect:
                # Another server (a restart, a failover): listen there, and check
                # everything followed before reading on.
                self._replace_listener()
            # Cleared first: a server change during the verify is verified next time.
            self.conn.suspect = False
            self._last_verify = now
            try:
                resets.update(await self.feeds.verify(positions))
            except BaseException:
                self.conn.suspect = True
                raise
        if resets:
            return resets
        with self.conn.io("read_new", within=block_ms / 1000 + self.conn.timeout):
            pushed, todo, stamps, transient = await self._listen(positions, block_ms)
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
        with self.conn.io("read_new", "xread"):
            reply = await self._redis.xread(streams, count=count)
        for key, entries in reply or ():
            feed = self._feeds_by_key[key]
            items = [stored_item(entry_id, fields) for entry_id, fields in entries]
            if self.feeds.continues(feed, items):
                appended = _seconds(entries[-1][1].get(b"t")) if entries else 0.0
                batch = out.setdefault(feed, Batch([]))
                batch.items, batch.appended = items, appended
            else:
                out[feed] = Batch([], reset=await self.feeds.rebase(feed))
        return out

    async def _listen(
        self, positions: Mapping[FeedKey, Cursor], block_ms: int
    ) -> tuple[
        dict[FeedKey, list[StoredItem]],
        set[FeedKey],
        dict[FeedKey, float],
        dict[FeedKey, list[tuple[int, bytes]]],
    ]:
        """Published items that continue each position, the feeds to read instead, the
        append time of each feed's newest published item, and transient messages."""
        now = anyio.current_time()
        sweep = self._listener is None or now - self._last_sweep >= self.SWEEP_SECONDS
        if self._listener is None:
            address = await self.conn.listener_address()
            self._listener = await connect_listener(address, self.conn.timeout)
            self._followed = set()
        listener = self._listener
        pushed: dict[FeedKey, list[StoredItem]] = {}
        todo: set[FeedKey] = set()
        stamps: dict[FeedKey, float] = {}
        transient: dict[FeedKey, list[tuple[int, bytes]]] = {}
        try:
            if sweep or self.conn.woken or len(positions) != len(self._followed):
                # The set of feeds changed: (un)subscribe, and read the new ones now.
                self.conn.woken = False
                current = set(positions)
                added, removed = current - self._followed, self._followed - current
                self._followed = current
                if added:
                    listener.subscribe([self._stream_key(f) for f in added])
                    # Read the new feeds only once the subscriptions are in force, so
                    # nothing published in between goes unseen.
                    with anyio.fail_after(self.conn.timeout):
                        await listener.confirmed()
                    self._confirm(added)
                if removed:
                    listener.unsubscribe([self._stream_key(f) for f in removed])
                    self._confirmed -= removed
                todo = current if sweep else added
            if sweep:
                self._last_sweep = now
                return pushed, todo, stamps, transient
            await self._gather(
                listener, positions, pushed, todo, stamps, transient, now + block_ms / 1000
            )
        except BaseException as exc:
            # The listening connection failed (or we were cancelled mid-read): start
            # over with a fresh one, subscriptions and a full sweep.
            self._listener = None
            self._confirmed.clear()
            listener.close()
            if isinstance(exc, OSError):  # ListenerLost, a timeout: Redis may have moved
                self.conn.suspect = True
            raise
        return pushed, todo, stamps, transient

    async def _gather(
        self,
        listener: Listener,
        positions: Mapping[FeedKey, Cursor],
        pushed: dict[FeedKey, list[StoredItem]],
        todo: set[FeedKey],
        stamps: dict[FeedKey, float],
        transient: dict[FeedKey, list[tuple[int, bytes]]],
        deadline: float,
    ) -> None:
        """Wait (at most until ``deadline``) for messages, then take all that are there."""
        seen: dict[FeedKey, Cursor] = {}
        for _ in range(1000):  # bounded; each round waits or takes messages
            if not todo and not self.conn.woken:
                await listener.wait(max(0.0, deadline - anyio.current_time()))
            woken = self.conn.woken
            for channel, payload in listener.take():
                feed = self._feeds_by_key.get(channel)
                if feed is None:
                    continue
                if payload.startswith(TRANSIENT_MARK):
                    before = 0 if feed in todo else len(pushed.get(feed, ()))
                    transient.setdefault(feed, []).append((before, payload[len(TRANSIENT_MARK) :]))
                    continue
                if feed in todo:
                    continue
                pos = seen.get(feed) or positions.get(feed)
                if pos is None:
                    continue
                announced, appended = _announced(payload)
                fresh = [
                    i
                    for i in announced
                    if i.epoch > pos.epoch or (i.epoch == pos.epoch and i.offset > pos.offset)
                ]
                if not fresh:
                    continue
                first = fresh[0]
                if (first.epoch == pos.epoch and first.offset == pos.offset + 1) or (
                    first.epoch > pos.epoch and first.offset == 1
                ):
                    pushed.setdefault(feed, []).extend(fresh)
                    seen[feed] = fresh[-1].cursor
                    stamps[feed] = appended
                else:
                    todo.add(feed)  # something was missed: read the stream instead
                    pushed.pop(feed, None)
                    stamps.pop(feed, None)
            if pushed or todo or transient or woken or anyio.current_time() >= deadline:
                return

    def _forget_keys(self, positions: Mapping[FeedKey, Cursor]) -> None:
        self._stream_keys = {f: k for f, k in self._stream_keys.items() if f in positions}
        self._feeds_by_key = {k: f for f, k in self._stream_keys.items()}


#: Starts a transient message on a feed's channel (item messages start with a digit).
TRANSIENT_MARK = b"T\n"


def _announced(payload: bytes) -> tuple[list[StoredItem], float]:
    """Parse what the append step published (see feed.lua): items in offset order, and
    their append time (0.0 if the header has none: an older append step's message)."""
    head, _, rest = payload.partition(b"\n")
    fields = head.split(b" ")
    epoch, offset = int(fields[0]), int(fields[1])
    appended = _seconds(fields[2]) if len(fields) > 2 else 0.0
    items: list[StoredItem] = []
    at, end = 0, len(rest)
    while at < end:
        newline = rest.index(b"\n", at)
        chain, _, size = rest[at:newline].partition(b" ")
        start = newline + 1
        at = start + int(size)
        items.append(StoredItem(epoch, offset, rest[start:at], chain.decode("ascii")))
        offset += 1
    return items, appended


def _seconds(text: bytes | None) -> float:
    """An append time as the append step writes it ("<s>.<us>"); 0.0 if absent or odd."""
    if not text:
        return 0.0
    try:
        return float(text)
    except ValueError:
        return 0.0
