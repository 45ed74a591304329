"""The feed log on Redis Streams.

Key layout (all keys of one feed share the hash tag ``{<tenant>:<kind>:<id>}``, so
they live in one Redis Cluster slot):

- ``<prefix>:<tag>:m``: hash ``epoch``, ``head``, ``chain``, ``host``
- ``<prefix>:<tag>:s``: stream; entry id ``<epoch>-<offset>``, fields ``d`` (data),
  ``c`` (chain value after the item), ``k`` (idempotency key)
- ``<prefix>:<tag>:i``: hash idempotency key -> offset, for retained items only
- pub/sub channel ``<prefix>:<tag>:s`` (the stream's name): the append step publishes the
  new items there; nodes following the feed subscribe to it
- ``<prefix>:node:<node>:wake``: a pub/sub channel that wakes this node's reader

Appending and rollback checks are one Lua step (``feed.lua`` beside this file).
Every ``redis.exceptions`` error is translated to :class:`~gateway.errors.Unavailable`
here; nothing above this module sees redis-py's exceptions.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from typing import Any

import anyio
import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.maint_notifications import MaintNotificationsConfig

from gateway.cursor import Cursor
from gateway.errors import IdempotencyKeyReused, Unavailable
from gateway.feed import AppendResult, FeedKey, FeedState, NewItem, StoredItem
from gateway.log.base import Batch, FeedLog, chain_next, split_known
from gateway.log.listener import Listener
from gateway.log.listener import connect as connect_listener
from gateway.metrics import Metrics

_MAX_SEQ = 18446744073709551615  # stream ids are <ms>-<seq>, both 64-bit
_SCRIPT = resources.files("gateway.log").joinpath("feed.lua").read_text()


@contextlib.contextmanager
def _translate(what: str) -> Iterator[None]:
    """Map redis-py and socket failures to Unavailable (the boundary of the adapter)."""
    try:
        yield
    except redis.exceptions.ResponseError as exc:
        raise Unavailable(f"redis rejected {what}: {exc}") from exc
    except (redis.exceptions.RedisError, OSError) as exc:
        raise Unavailable(f"redis unavailable during {what}") from exc


class RedisLog(FeedLog):
    durable = True

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "gw",
        node_id: str | None = None,
        max_connections: int = 32,
    ) -> None:
        super().__init__()
        # A bounded pool that makes callers wait for a connection instead of failing:
        # a thousand clients joining at once share a few dozen connections.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=30,
            decode_responses=False,
            socket_connect_timeout=5,
            socket_keepalive=True,
            health_check_interval=30,
            # No command here blocks for long (reads wait on pub/sub with their own
            # timeout), so a Redis that stops answering fails calls instead of hanging.
            socket_timeout=15,
            protocol=2,
            # After a Redis restart or failover, pooled connections are stale: the
            # pool must notice (its check is skipped while maintenance notifications
            # are on) and a command that meets a dead connection is retried on a new
            # one.  Retrying the append step is safe for keyed items: the retry
            # returns the first attempt's cursor.
            maint_notifications_config=MaintNotificationsConfig(enabled=False),
            retry=Retry(ExponentialBackoff(cap=0.25, base=0.01), 2),
            retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError],
            redis_connect_func=self._on_connect,
        )
        # redis-py's own annotations are looser than its replies; the adapter owns them.
        self._redis: Any = aioredis.Redis(connection_pool=pool)
        self._prefix = prefix
        self._script = self._redis.register_script(_SCRIPT)
        self.node_id = node_id or f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._wake = f"{prefix}:node:{self.node_id}:wake".encode()
        self._listener: Listener | None = None
        self._url = url
        #: Feeds the previous read followed, and their stream keys (cached).
        self._followed: set[FeedKey] = set()
        self._stream_keys: dict[FeedKey, bytes] = {}
        self._feeds_by_key: dict[bytes, FeedKey] = {}
        self._last_sweep = 0.0
        self._woken = False
        # Set when the node reaches a different Redis server process (a restart, a
        # failover) or a command failed: the next read verifies what this node follows.
        self._suspect = False
        # Feeds moved to a new epoch by a request path; the reader reports them next.
        self._pending_resets: dict[FeedKey, FeedState] = {}
        # The identity of the Redis server process last connected to (INFO run_id).
        self._run_id: bytes | None = None
        #: How many times this node found itself talking to another Redis process.
        self.server_changes = 0
        #: Where command durations go (``gateway_redis_command_seconds``); set by the app.
        self.metrics: Metrics | None = None

    async def _on_connect(self, connection: Any) -> None:
        """Every new connection: the usual handshake, then note which server it reached.

        Commands retried on a fresh connection hide a restart from the callers; the
        server's ``run_id`` does not: when it changes, everything this node follows is
        verified before it reads on (a restored snapshot or a promoted replica may have
        rolled feeds back).
        """
        await connection.on_connect_check_health(check_health=True)
        await connection.send_command("INFO", "server")
        info = await connection.read_response()
        run_id = None
        for line in bytes(info).splitlines():
            if line.startswith(b"run_id:"):
                run_id = line[7:].strip()
        if run_id != self._run_id:
            if self._run_id is not None:
                self._suspect = True
                self.server_changes += 1
            self._run_id = run_id

    @property
    def client(self) -> Any:
        """The redis-py client, for other adapters in this package (inbox, health)."""
        return self._redis

    def keys(self, feed: FeedKey) -> tuple[str, str, str]:
        base = f"{self._prefix}:{feed.tag()}"
        return base + ":m", base + ":s", base + ":i"

    @contextlib.contextmanager
    def _io(self, what: str, command: str | None = None) -> Iterator[None]:
        # A failed command alone is no reason to verify everything: a restart or a
        # failover shows as a new run_id (_on_connect) or a lost listener (_listen).
        started = time.perf_counter()
        try:
            with _translate(what):
                yield
        finally:
            if command is not None:
                self._observe(command, time.perf_counter() - started)

    def _observe(self, command: str, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.redis_command_seconds.labels(command=command).observe(seconds)

    @contextlib.contextmanager
    def timed(self, command: str) -> Iterator[None]:
        """Time a command another adapter of this package sends (the inbox); no
        translation of errors."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self._observe(command, time.perf_counter() - started)

    def _args(
        self, feed: FeedKey, mode: str, retention: int, items: Sequence[NewItem], align: int = 0
    ) -> list[Any]:
        """The append step's ARGV (see ``feed.lua``)."""
        known_epoch, known_offset, known_chain = split_known(self.known(feed))
        args: list[Any] = [
            mode, retention, known_epoch, known_offset, known_chain, len(items), align,
        ]
        for item in items:
            args += [item.key or "", item.data, "1" if item.host_opening else "0"]
        return args

    async def _run(
        self, feed: FeedKey, mode: str, retention: int, items: Sequence[NewItem], align: int = 0
    ) -> Any:
        args = self._args(feed, mode, retention, items, align)
        with self._io(mode, "append" if mode == "append" else "state"):
            return await self._script(keys=list(self.keys(feed)), args=args)

    @staticmethod
    def _state(reply: list[Any]) -> FeedState:
        return FeedState(
            epoch=int(reply[1]),
            head=int(reply[2]),
            first=int(reply[3]),
            host=reply[5] == b"1",
            chain=reply[4].decode("ascii"),
        )

    def _appended(self, feed: FeedKey, reply: list[Any]) -> AppendResult:
        """The append step's reply as a result (raises IdempotencyKeyReused)."""
        if reply[0] == b"reused":
            raise IdempotencyKeyReused(
                f"item {int(reply[1])}: event_id was already used for a different item"
            )
        state = self._state(reply)
        cursors = [Cursor(state.epoch, int(off)) for off in reply[7:]]
        self._reset_known(feed, state)
        return AppendResult(cursors, reply[6] != b"", state)

    async def append(
        self, feed: FeedKey, items: Sequence[NewItem], *, retention: int, align: int = 0
    ) -> AppendResult:
        return self._appended(feed, await self._run(feed, "append", retention, items, align))

    async def append_many(
        self, appends: Sequence[tuple[FeedKey, Sequence[NewItem]]], *, retention: int
    ) -> list[AppendResult | IdempotencyKeyReused | Unavailable]:
        # One pipeline of EVALSHA calls: one write and one read for every feed, instead
        # of a pool checkout and a round trip each.
        calls = [
            (feed, [*self.keys(feed)], self._args(feed, "append", retention, items))
            for feed, items in appends
        ]
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        with self._io("append", "append_many"):
            for attempt in range(2):
                async with self._redis.pipeline(transaction=False) as pipe:
                    for i in todo:
                        _, keys, args = calls[i]
                        pipe.evalsha(self._script.sha, len(keys), *keys, *args)
                    answers = await pipe.execute(raise_on_error=False)
                for i, answer in zip(todo, answers, strict=True):
                    replies[i] = answer
                # A server that lost its scripts (a restart, SCRIPT FLUSH) ran none of
                # those calls: load the script and send just them again.
                todo = [
                    i for i in todo if isinstance(replies[i], redis.exceptions.NoScriptError)
                ]
                if not todo or attempt:
                    break
                await self._redis.script_load(_SCRIPT)
        results: list[AppendResult | IdempotencyKeyReused | Unavailable] = []
        for (feed, _, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception):
                results.append(Unavailable(f"redis rejected append: {reply}"))
                continue
            try:
                results.append(self._appended(feed, reply))
            except IdempotencyKeyReused as exc:
                results.append(exc)
        return results

    async def state(self, feed: FeedKey) -> FeedState | None:
        reply = await self._run(feed, "check", 1, ())
        if reply[0] == b"absent":
            return None
        state = self._state(reply)
        if reply[6] == b"rollback":
            await self._rebased(feed, state)
        return state

    async def broadcast(self, feed: FeedKey, data: bytes) -> None:
        # On the feed's own channel, marked so readers tell it from the append step's
        # item messages (which start with a digit).
        with self._io("broadcast"):
            await self._redis.publish(self._stream_key(feed), TRANSIENT_MARK + data)

    async def offset_of(self, feed: FeedKey, key: str) -> int | None:
        with self._io("offset_of"):
            raw = await self._redis.hget(self.keys(feed)[2], key)
        return None if raw is None else int(raw)

    def _fold_key(self, feed: FeedKey) -> str:
        # Beside the feed's other keys (same hash slot).
        return f"{self._prefix}:{feed.tag()}:f"

    async def save_fold(self, feed: FeedKey, at: Cursor, blob: bytes, *, keep_from: int) -> None:
        key = self._fold_key(feed)
        with self._io("save_fold"):
            fields = await self._redis.hkeys(key)
            stale = []
            for field in fields:
                epoch, _, offset = field.partition(b":")
                if int(epoch) != at.epoch or int(offset) < keep_from:
                    stale.append(field)
            ttl = await self._redis.pttl(self.keys(feed)[1])
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hset(key, str(at), blob)
                if stale:
                    pipe.hdel(key, *stale)
                if ttl > 0:  # a finished run in its grace period: the fold goes with it
                    pipe.pexpire(key, ttl)
                await pipe.execute()

    async def load_fold(self, feed: FeedKey, at: Cursor) -> bytes | None:
        with self._io("load_fold"):
            blob: bytes | None = await self._redis.hget(self._fold_key(feed), str(at))
        return blob

    async def expire(self, feed: FeedKey, seconds: float) -> None:
        ms = max(1, int(seconds * 1000))
        with self._io("expire"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in (*self.keys(feed), self._fold_key(feed)):
                    pipe.pexpire(key, ms)
                await pipe.execute()

    async def _rebased(self, feed: FeedKey, state: FeedState) -> None:
        """A request noticed a rollback and moved the feed on: tell this node's reader."""
        self._reset_known(feed, state)
        self._pending_resets[feed] = state
        with contextlib.suppress(Unavailable):
            await self.wake()

    async def read(self, feed: FeedKey, after: Cursor, limit: int) -> list[StoredItem]:
        _, stream, _ = self.keys(feed)
        with self._io("read", "xrange"):
            entries = await self._redis.xrange(
                stream, f"{after.epoch}-{after.offset + 1}", f"{after.epoch}-{_MAX_SEQ}", limit
            )
        items = [_item(entry_id, fields) for entry_id, fields in entries]
        if items and not self._continues(feed, items):
            # The stored history contradicts what this node saw: move the feed on.
            await self.state(feed)
            return []
        return items

    def _continues(self, feed: FeedKey, items: list[StoredItem]) -> bool:
        """Check items against what this node saw of the feed, then remember them."""
        known = self.known(feed)
        for item in items:
            if known is not None and item.epoch == known.epoch:
                if item.offset == known.offset and item.chain != known.chain:
                    return False
                if item.offset == known.offset + 1 and item.chain != chain_next(
                    known.chain, item.data
                ):
                    return False
            if known is None or (item.epoch, item.offset) > (known.epoch, known.offset):
                self._remember(feed, item.epoch, item.offset, item.chain)
                known = self.known(feed)
        return True

    #: Seconds between reads of every followed feed, whatever the notifications say:
    #: a safety net for a notification lost in a reconnect.
    SWEEP_SECONDS = 5.0

    def _stream_key(self, feed: FeedKey) -> bytes:
        key = self._stream_keys.get(feed)
        if key is None:
            key = self._stream_keys[feed] = self.keys(feed)[1].encode()
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
            feed: Batch([], reset=self._pending_resets.pop(feed))
            for feed in list(self._pending_resets)
            if feed in positions
        }
        if len(self._pending_resets) > 10_000:  # reset feeds nobody here follows
            self._pending_resets.clear()
        if self._suspect:
            # Cleared first: a server change during the verify is verified next time.
            self._suspect = False
            try:
                resets.update(await self.verify(positions))
            except BaseException:
                self._suspect = True
                raise
        if resets:
            return resets
        with self._io("read_new"):
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
            if self._continues(feed, items):
                batch = out.setdefault(feed, Batch([]))
                batch.items, batch.appended = items, stamps.get(feed, 0.0)
            else:
                out[feed] = Batch([], reset=await self._rebase(feed))
        if not todo:
            return out
        streams: dict[bytes, bytes] = {}
        for feed in todo:
            pos = positions.get(feed)
            if pos is not None:  # still followed after the wait
                streams[self._stream_key(feed)] = b"%d-%d" % (pos.epoch, pos.offset)
        if not streams:
            return out
        with self._io("read_new", "xread"):
            reply = await self._redis.xread(streams, count=count)
        for key, entries in reply or ():
            feed = self._feeds_by_key[key]
            items = [_item(entry_id, fields) for entry_id, fields in entries]
            if self._continues(feed, items):
                appended = _seconds(entries[-1][1].get(b"t")) if entries else 0.0
                batch = out.setdefault(feed, Batch([]))
                batch.items, batch.appended = items, appended
            else:
                out[feed] = Batch([], reset=await self._rebase(feed))
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
            listener = await connect_listener(self._url)
            try:
                listener.subscribe([self._wake])
                with anyio.fail_after(10):
                    await listener.confirmed()
            except BaseException:
                listener.close()
                raise
            self._listener = listener
            self._followed = set()
        listener = self._listener
        pushed: dict[FeedKey, list[StoredItem]] = {}
        todo: set[FeedKey] = set()
        stamps: dict[FeedKey, float] = {}
        transient: dict[FeedKey, list[tuple[int, bytes]]] = {}
        try:
            if sweep or self._woken or len(positions) != len(self._followed):
                # The set of feeds changed: (un)subscribe, and read the new ones now.
                self._woken = False
                current = set(positions)
                added, removed = current - self._followed, self._followed - current
                self._followed = current
                if added:
                    listener.subscribe([self._stream_key(f) for f in added])
                    # Read the new feeds only once the subscriptions are in force, so
                    # nothing published in between goes unseen.
                    with anyio.fail_after(10):
                        await listener.confirmed()
                if removed:
                    listener.unsubscribe([self._stream_key(f) for f in removed])
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
            listener.close()
            if isinstance(exc, OSError):  # ListenerLost, a timeout: Redis may have moved
                self._suspect = True
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
            if not todo:
                await listener.wait(max(0.0, deadline - anyio.current_time()))
            woken = False
            for channel, payload in listener.take():
                if channel == self._wake:
                    woken = True
                    continue
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

    async def _rebase(self, feed: FeedKey) -> FeedState | None:
        reply = await self._run(feed, "check", 1, ())
        if reply[0] == b"absent":
            self._forget(feed)
            return None
        state = self._state(reply)
        self._reset_known(feed, state)
        return state

    #: Feeds checked per round trip when verifying after a server change.
    VERIFY_BATCH = 500

    async def verify(self, positions: Mapping[FeedKey, Cursor]) -> dict[FeedKey, Batch]:
        out: dict[FeedKey, Batch] = {}
        # A live view: feeds may come and go meanwhile, so take a list first.
        feeds = [feed for feed in list(positions) if self.known(feed) is not None]
        for start in range(0, len(feeds), self.VERIFY_BATCH):
            chunk = feeds[start : start + self.VERIFY_BATCH]
            with self._io("verify", "verify"):
                async with self._redis.pipeline(transaction=False) as pipe:
                    for feed in chunk:
                        known_epoch, known_offset, known_chain = split_known(self.known(feed))
                        args: list[Any] = [
                            "check",
                            1,
                            known_epoch,
                            known_offset,
                            known_chain,
                            0,
                            "",
                        ]
                        await self._script(keys=list(self.keys(feed)), args=args, client=pipe)
                    replies = await pipe.execute()
            for feed, reply in zip(chunk, replies, strict=True):
                if reply[0] != b"absent" and reply[6] == b"rollback":
                    state = self._state(reply)
                    self._reset_known(feed, state)
                    out[feed] = Batch([], reset=state)
        return out

    async def wake(self) -> None:
        self._woken = True
        with self._io("wake", "wake"):
            await self._redis.publish(self._wake, b"1")

    async def ping(self) -> None:
        with self._io("ping", "ping"):
            await self._redis.ping()

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.close()
        with contextlib.suppress(Exception):
            await self._redis.aclose()


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


def _item(entry_id: bytes, fields: dict[bytes, bytes]) -> StoredItem:
    epoch, _, offset = entry_id.partition(b"-")
    return StoredItem(int(epoch), int(offset), fields[b"d"], fields[b"c"].decode("ascii"))
