"""Feed storage on Redis Streams: the append step, states, history reads, rollback checks.

Appending and rollback checks are one Lua step (``feed.lua`` beside this file; the key
layout and the step are described in docs/storage.md), which also takes a publish
request's items from its tenant's rate bucket (``bucket.lua``).  Every read is checked against
what this node saw of the feed (the hash chain), so a history that was rolled back is
noticed by whoever reads it first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any
from urllib.parse import quote

import structlog

from gateway.cursor import Cursor
from gateway.errors import GatewayError, HeadMoved, IdempotencyKeyReused, RunEnded, Unavailable
from gateway.feed import AppendResult, FeedKey, FeedState, NewItem, StoredItem
from gateway.limits import Charge
from gateway.store.interfaces import (
    Batch,
    FeedStore,
    Joined,
    Lapse,
    Lease,
    RunLease,
    history_start,
)
from gateway.store.redis.connection import RedisConnection

log = structlog.get_logger("gateway.store")

_MAX_SEQ = 18446744073709551615  # stream ids are <ms>-<seq>, both 64-bit

_LUA = resources.files("gateway.store.redis")
#: The publish rate's bucket (a Lua function), prepended to the scripts that take from it.
_BUCKET = _LUA.joinpath("bucket.lua").read_text()
SCRIPT = _BUCKET + _LUA.joinpath("feed.lua").read_text()
#: A take of its own (a cluster's charged appends; a transient message's).
TAKE_SCRIPT = _BUCKET + _LUA.joinpath("take.lua").read_text()


def stored_item(entry_id: bytes, fields: dict[bytes, bytes]) -> StoredItem:
    """A stream entry (id ``<epoch>-<offset>``, fields ``d`` and ``c``) as an item."""
    epoch, _, offset = entry_id.partition(b"-")
    return StoredItem(int(epoch), int(offset), fields[b"d"], fields[b"c"].decode("ascii"))


def _fields(flat: list[bytes]) -> dict[bytes, bytes]:
    """An entry's fields as a script gets them from XRANGE (``[name, value, ...]``)."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _lease_arg(lease: RunLease | None) -> str:
    """A lease as ``feed.lua``'s ARGV[12]: "" none, "r" renew, "s<ms>" start."""
    if lease is None:
        return ""
    return f"s{lease.ms}" if lease.starts else "r"


def _lease(started: bytes | None, renewed_ms: int, deadline: bytes) -> Lease:
    return Lease(int(started or renewed_ms), renewed_ms, int(deadline))


class RedisFeeds(FeedStore):
    durable = True

    #: Feeds checked per round trip when verifying after a server change.
    VERIFY_BATCH = 500

    def __init__(
        self,
        conn: RedisConnection,
        *,
        tombstone_seconds: float = 86_400.0,
        min_replicas: int = 0,
        replica_timeout_ms: int = 500,
    ) -> None:
        super().__init__()
        self.conn = conn
        self._redis = conn.redis
        self._script = self._redis.script(SCRIPT)
        self._take = self._redis.script(TAKE_SCRIPT)
        #: Each tenant's bucket key, remembered like the feeds' keys (see rate_key).
        self._rate_keys: dict[str, str] = {}
        #: How long a feed ``recreate`` makes lives unless something is appended.
        self.tombstone_ms = max(1, int(tombstone_seconds * 1000))
        #: Appends wait for this many replicas (``WAIT``), else answer Unavailable.
        self.min_replicas = min_replicas
        self.replica_timeout_ms = replica_timeout_ms
        self._publish = conn.publish_command
        #: Script calls of one loop iteration that go through redis-py (state checks;
        #: appends when not pipelined) in one pipeline (not on a cluster, whose calls
        #: go to their shards one by one anyway).
        self._batcher = None if conn.cluster else self._redis.batcher(self._flush)
        #: Appends go over the node's one pipelined connection
        #: (``RedisClient.run_pipelined``), and so does the periodic verify; not on a
        #: cluster, nor with ``min_replicas`` (its WAIT must follow the writes on
        #: their connection).  State checks and history reads stay on redis-py's pool:
        #: concurrent subscribes share them (the hub's shared reads), and a faster
        #: call is shared by fewer.
        self._pipelined = not min_replicas and self._redis.pipelined
        #: Where the pipelined append steps are timed (its series, looked up once).
        self._append_seconds = conn.command_seconds("append")
        #: The last :meth:`verify` could not check some feed (try again soon).
        self.deferred = False
        #: Feeds a request moved to a new epoch: this node's live reader reports them
        #: to their followers (and takes them out).
        self.pending_resets: dict[FeedKey, FeedState] = {}
        #: Called when a request moved a feed on (set by the live reader: it wakes).
        self.on_rebased: Callable[[], None] | None = None
        if min_replicas and conn.cluster:
            raise ValueError(
                "redis_min_replicas needs one connection per write and its WAIT: not "
                "available on a Redis Cluster"
            )

    def keys(self, feed: FeedKey) -> tuple[str, str, str]:
        return self.conn.feed_keys(feed)

    def _script_keys(self, feed: FeedKey) -> list[str]:
        return list(self.conn.feed_keys(feed))

    def rate_key(self, tenant: str) -> str:
        """The tenant's publish-rate bucket, ``<prefix>:rate:{<tenant>}`` (percent-encoded
        as in feed keys; its own hash slot on a cluster)."""
        key = self._rate_keys.get(tenant)
        if key is None:
            if len(self._rate_keys) >= self.conn.keys.FEED_KEYS_KEPT:
                self._rate_keys.clear()
            key = self._rate_keys[tenant] = f"{self.conn.prefix}:rate:{{{quote(tenant, safe='')}}}"
        return key

    # -- the append step -----------------------------------------------------------------

    def _args(
        self,
        feed: FeedKey,
        mode: str,
        retention: int,
        items: Sequence[NewItem],
        align: int = 0,
        expect: Cursor | None = None,
        page: tuple[str, int] | None = None,
        charge: Charge | None = None,
        ends: bool = False,
        lease: RunLease | None = None,
    ) -> list[Any]:
        """The append step's ARGV (see ``feed.lua``); ``page`` (check mode): where the
        history page read with the state starts, and its item count; ``charge``: the
        publish rate's arguments, after the items; ``ends``: the append's batch ends
        the run (mode ``end``, which records it); ``lease``: what the batch does to
        its run's lease (an end ends it)."""
        known_epoch, known_offset, known_chain = self.known.split(feed)
        args: list[Any] = [
            "end" if ends and mode == "append" else mode,
            retention,
            known_epoch,
            known_offset,
            known_chain,
            len(items),
            align,
            self.conn.identity,
            self.tombstone_ms,
            self._publish,
            "" if expect is None else str(expect),
            _lease_arg(lease) if not ends else "",
        ]
        for item in items:
            args += [item.key or "", item.data, "1" if item.host_opening else "0"]
        if page is not None:
            args += page
        if charge is not None:
            args += [*charge.rate.args, charge.items]
        return args

    async def _run(
        self,
        feed: FeedKey,
        mode: str,
        retention: int,
        items: Sequence[NewItem],
        align: int = 0,
        expect: Cursor | None = None,
        page: tuple[str, int] | None = None,
        charge: Charge | None = None,
        ends: bool = False,
        lease: RunLease | None = None,
    ) -> Any:
        args = self._args(feed, mode, retention, items, align, expect, page, charge, ends, lease)
        keys = self._script_keys(feed)
        if charge is not None:
            keys.append(self.rate_key(charge.tenant))
        if self.conn.cluster:
            await self.conn.topology()  # learnt once, single-flight (see there)
        # A lapse appends (a run's end) like an append: acknowledged by as many replicas.
        appends = mode == "append" or mode == "lapse"
        if appends and self._pipelined:
            # Bounded by the connection itself (its write timer): no cancel scope per call.
            started = time.perf_counter()
            try:
                [reply] = await self._redis.run_pipelined("append", self._script, [(keys, args)])
            finally:
                if self._append_seconds is not None:
                    self._append_seconds.observe(time.perf_counter() - started)
            if isinstance(reply, Unavailable):
                raise reply
            return reply
        if self._batcher is not None and (not appends or not self.min_replicas):
            reply = await self._batcher.submit((keys, args))
            if isinstance(reply, Unavailable):
                raise reply
            return reply
        metric = "append" if appends else "state"
        if not appends or not self.min_replicas:
            return await self._redis.call(
                mode, lambda _: self._script(keys=keys, args=args), metric=metric
            )
        # WAIT on the same connection as the write (one pipeline): how many
        # replicas have it.  Too few: the items may still be lost in a failover.
        [reply, replicas] = await self._redis.run_script(
            mode,
            self._script,
            [(keys, args)],
            metric=metric,
            wait=(self.min_replicas, self.replica_timeout_ms),
        )
        if isinstance(reply, Unavailable):
            raise reply
        if reply[0] == b"ok" and int(replicas) < self.min_replicas:
            self.conn.metrics_unreplicated()
            raise Unavailable(
                f"appended, but {int(replicas)} of {self.min_replicas} replicas "
                f"acknowledged within {self.replica_timeout_ms} ms: it may be lost in a "
                "failover; retrying with the same keys is safe"
            )
        return reply

    @staticmethod
    def _state(reply: list[Any]) -> FeedState:
        return FeedState(
            epoch=int(reply[1]),
            head=int(reply[2]),
            first=int(reply[3]),
            host=reply[5] == b"1",
            chain=reply[4].decode("ascii"),
        )

    def _appended(
        self, feed: FeedKey, reply: list[Any], charge: Charge | None = None
    ) -> AppendResult:
        """The append step's reply as a result (raises IdempotencyKeyReused, HeadMoved,
        or RateLimited for the ``charge`` it was sent with)."""
        if charge is not None:
            if reply[0] == b"limited":
                raise charge.refused(float(reply[1]))
            if reply[0] == b"ok" and (reply[1] != reply[7] or reply[2] != reply[8]):
                charge.taken = True  # it appended (epoch or head moved), so it took
        if reply[0] == b"reused":
            raise IdempotencyKeyReused(
                f"item {int(reply[1])}: event_id was already used for a different item"
            )
        if reply[0] == b"moved":
            raise HeadMoved("the feed's head moved since the append was planned: plan again")
        if reply[0] == b"ended":
            raise RunEnded()
        state = self._state(reply)
        cursors = [Cursor(state.epoch, int(off)) for off in reply[11:]]
        self._rotated(feed, reply)
        # Forward only: the reply to a call that ran earlier may be taken after that
        # of one that ran later (concurrent appends to one feed).
        self.known.advance(feed, state.epoch, state.head, state.chain)
        return AppendResult(cursors, reply[6] != b"", state)

    def _rotated(self, feed: FeedKey, reply: list[Any]) -> None:
        """Count and log a move to a new epoch this call made, and what this node had
        seen of the feed that the store no longer holds (acknowledged, then lost)."""
        reason = reply[6].decode()
        if not reason or (reason == "missing" and reply[9] == b"0"):
            return  # a new feed (to this node)
        lost = int(reply[10])
        self.conn.metrics_rotation(reason, lost)
        log.warning(
            "feed moved to a new epoch",
            reason=reason,
            kind=feed.kind.value,
            store=self.conn.identity,
            lost_items=lost,
            new_epoch=int(reply[1]),
        )

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
        if charge is not None and self.conn.cluster:
            return await self._append_charged(
                feed, items, retention, align, expect, charge, ends=ends, lease=lease
            )
        reply = await self._run(
            feed, "append", retention, items, align, expect, charge=charge, ends=ends, lease=lease
        )
        return self._appended(feed, reply, charge)

    async def _append_charged(
        self,
        feed: FeedKey,
        items: Sequence[NewItem],
        retention: int,
        align: int,
        expect: Cursor | None,
        charge: Charge,
        *,
        ends: bool = False,
        lease: RunLease | None = None,
    ) -> AppendResult:
        """A charged append on a cluster: the tenant's bucket is on its own slot, and a
        script may touch one slot's keys only, so the take is a call of its own before
        the append, and what an append that appended nothing took (retries only, or
        refused as reused or moved) is given back by another.  An append that failed
        (Unavailable: it may have happened) keeps what it took."""
        await self.take(charge)
        reply = await self._run(
            feed, "append", retention, items, align, expect, ends=ends, lease=lease
        )
        # The refusal is kept and raised after the give-back, not waited on inside its
        # handler (a compiled module must not wait there: CONTRIBUTING.md).
        refused: GatewayError | None = None
        try:
            result = self._appended(feed, reply)
        except (IdempotencyKeyReused, HeadMoved, RunEnded) as exc:
            refused = exc
        if refused is not None:
            await self._give_back(charge)  # refused: nothing appended
            raise refused
        if reply[1] == reply[7] and reply[2] == reply[8]:
            # Epoch and head as they were: nothing appended.
            await self._give_back(charge)
        return result

    async def take(self, charge: Charge, publish: tuple[str | bytes, bytes] | None = None) -> None:
        """Take ``charge`` from its tenant's bucket in a call of its own (``take.lua``),
        and if it took, publish ``publish`` (a channel and a message) in the same call
        (not on a cluster: the channel's slot is the feed's, not the bucket's; then
        published by the caller).  Raises RateLimited (nothing taken, nothing published)
        or Unavailable."""
        args: list[Any] = [*charge.rate.args, charge.items]
        if publish is not None:
            args += [self._publish, *publish]
        if self.conn.cluster:
            # Before the slot map is known redis-py sends a script to a node of its own
            # choosing, and keeps doing so on the MOVED it gets (its routing is decided
            # once per call): the map is learnt first, as for every other call.
            await self.conn.topology()
        key = self.rate_key(charge.tenant)
        held = await self._redis.call("publish rate", lambda _: self._take(keys=[key], args=args))
        if held is not None:
            raise charge.refused(float(held))
        charge.taken = True

    async def _give_back(self, charge: Charge) -> None:
        """Return what a charged append that appended nothing took (a failure is logged:
        the tenant then waits for the refill)."""
        charge.taken = False
        args = [*charge.rate.args, -charge.items]
        try:
            key = self.rate_key(charge.tenant)
            await self._redis.call("publish rate", lambda _: self._take(keys=[key], args=args))
        except GatewayError as exc:
            log.warning("giving back a publish's rate tokens failed", error=exc.message)

    async def _flush(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        # Timed as an append if the batch holds one, else as the state checks it is.
        writes = ("append", "end", "lapse")
        command = "append" if any(args[0] in writes for _, args in calls) else "state"
        return await self._redis.run_script("append step", self._script, calls, metric=command)

    async def append_many(
        self, appends: Sequence[tuple[FeedKey, Sequence[NewItem]]], *, retention: int
    ) -> list[AppendResult | IdempotencyKeyReused | Unavailable]:
        # One pipeline of EVALSHA calls: one write and one read for every feed, instead
        # of a pool checkout and a round trip each.
        calls = [
            (self._script_keys(feed), self._args(feed, "append", retention, items))
            for feed, items in appends
        ]
        wait = (self.min_replicas, self.replica_timeout_ms) if self.min_replicas else None
        if self._pipelined:
            replies = await self._redis.call(
                "append",
                lambda _: self._redis.run_pipelined("append", self._script, calls),
                metric="append_many",
            )
        else:
            replies = await self._redis.run_script(
                "append", self._script, calls, metric="append_many", wait=wait
            )
        if wait is not None:
            replicas = replies.pop()
            if isinstance(replicas, int) and replicas < self.min_replicas:
                self.conn.metrics_unreplicated()
                raise Unavailable(
                    f"appended, but {replicas} of {self.min_replicas} replicas "
                    "acknowledged in time; retrying with the same keys is safe"
                )
        results: list[AppendResult | IdempotencyKeyReused | Unavailable] = []
        for (feed, _), reply in zip(appends, replies, strict=True):
            if isinstance(reply, Unavailable):
                results.append(reply)
                continue
            try:
                results.append(self._appended(feed, reply))
            except IdempotencyKeyReused as exc:
                results.append(exc)
        return results

    # -- state and history ---------------------------------------------------------------

    async def state(self, feed: FeedKey) -> FeedState | None:
        return await self._checked(feed, await self._run(feed, "check", 1, ()))

    async def _checked(self, feed: FeedKey, reply: list[Any]) -> FeedState | None:
        """The state a check-mode call answered (None: no such feed); a rollback it
        found and moved the feed on from is told to this node's reader."""
        if reply[0] in (b"absent", b"gone"):
            return None
        state = self._state(reply)
        if reply[6]:
            self._rotated(feed, reply)
            await self._rebased(feed, state)
        return state

    async def joined(self, feed: FeedKey, after: Cursor | None, limit: int) -> Joined:
        # The state check and the first page in one script call: a join's two round
        # trips through redis-py become one.
        page = "*" if after is None else f"{after.epoch}:{after.offset}"
        reply = await self._run(feed, "check", 1, (), page=(page, limit))
        state = await self._checked(feed, reply)
        if state is None or reply[6]:  # no feed, or a new epoch (nothing read)
            return Joined(state, None, [])
        start = history_start(state, after)
        if start is None or len(reply) < 12:  # another epoch (not read), past the head
            return Joined(state, None, [])
        items = [stored_item(entry_id, _fields(flat)) for entry_id, flat in reply[11]]
        if items and not self.continues(feed, items):
            # Not what this node saw (the check passed, so unlikely): the join reads
            # its history the usual way, which moves the feed on.
            return Joined(state, None, [])
        return Joined(state, start, items)

    async def recreate(self, feed: FeedKey) -> FeedState | None:
        """A feed this node remembers but whose data was lost, in an empty new epoch
        (with a lifetime) so that its followers and old cursors get epoch_restarted;
        None if it was deleted on purpose (or this node never knew it)."""
        if self.known.get(feed) is None:
            return None
        return await self.rebase(feed)

    async def _rebased(self, feed: FeedKey, state: FeedState) -> None:
        """A request noticed a rollback and moved the feed on: tell this node's reader."""
        self.known.reset(feed, state)
        self.pending_resets[feed] = state
        if self.on_rebased is not None:
            self.on_rebased()

    async def rebase(self, feed: FeedKey) -> FeedState | None:
        """Check the feed (moving it to a new epoch if it rolled back, recreating it if
        it was lost); None if it is gone."""
        reply = await self._run(feed, "recreate", 1, ())
        if reply[0] == b"gone":
            self.known.forget(feed)
            return None
        state = self._state(reply)
        if reply[6]:
            self._rotated(feed, reply)
        self.known.reset(feed, state)
        return state

    # -- a run's lease ---------------------------------------------------------------------

    async def lease(self, feed: FeedKey) -> Lease | None:
        meta = self.keys(feed)[0]
        fields = ("epoch", "end", "gone", "rs", "rl", "rd")
        reply = await self._redis.call(
            "run lease", lambda redis: redis.hmget(meta, fields), metric="state"
        )
        epoch, end, gone, started, length, deadline = reply
        # As feed.lua tells a live run (a "gone" feed's meta outlives its stream only
        # after its run ended, so "gone" alone says no live run here).
        if epoch is None or gone is not None or deadline is None or length is None:
            return None
        if end is not None and end == epoch:
            return None
        return _lease(started, int(deadline) - int(length), deadline)

    async def renew(self, feed: FeedKey) -> Lease | None:
        reply = await self._run(feed, "renew", 1, ())
        if reply[0] != b"ok":
            return None
        return _lease(reply[1], int(reply[2]), reply[3])

    async def lapse(self, feed: FeedKey, end: NewItem, *, retention: int, align: int = 0) -> Lapse:
        reply = await self._run(feed, "lapse", retention, (end,), align)
        if reply[0] == b"absent":
            return Lapse()
        if reply[0] == b"live":
            return Lapse(live=_lease(reply[1], int(reply[2]), reply[3]))
        return Lapse(ended=self._appended(feed, reply))

    async def offset_of(self, feed: FeedKey, key: str) -> int | None:
        idem = self.keys(feed)[2]
        raw = await self._redis.call("offset_of", lambda redis: redis.hget(idem, key))
        return None if raw is None else int(raw)

    async def expire(self, feed: FeedKey, seconds: float) -> None:
        ms = max(1, int(seconds * 1000))
        meta, stream, idem = self.keys(feed)

        def queue(pipe: Any) -> None:
            for key in (stream, idem, self.conn.fold_key(feed)):
                pipe.pexpire(key, ms)
            # Deleted on purpose, not lost: the metadata outlives the stream, marked
            # "gone", so followers are told not_found and no node recreates the feed
            # (for a while after the deletion; see feed.lua).
            pipe.hset(meta, "gone", b"1")
            pipe.pexpire(meta, ms + self.tombstone_ms)

        await self._redis.pipeline("expire", queue)

    async def read(self, feed: FeedKey, after: Cursor, limit: int) -> list[StoredItem]:
        _, stream, _ = self.keys(feed)
        start, end = f"{after.epoch}-{after.offset + 1}", f"{after.epoch}-{_MAX_SEQ}"
        entries = await self._redis.call(
            "read", lambda redis: redis.xrange(stream, start, end, limit), metric="xrange"
        )
        items = [stored_item(entry_id, fields) for entry_id, fields in entries]
        if items and not self.continues(feed, items):
            # The stored history contradicts what this node saw: move the feed on.
            await self.state(feed)
            return []
        return items

    def continues(self, feed: FeedKey, items: list[StoredItem], before: str | None = None) -> bool:
        """Check items against what this node saw of the feed, then remember them
        (:meth:`KnownPositions.continues`; ``before``: the chain value announced right
        before ``items[0]``, if known)."""
        return self.known.continues(feed, items, before)

    async def _check(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """The answers to one chunk of :meth:`verify`'s calls (an error in its place)."""
        if self._pipelined:
            return await self._redis.call(
                "verify",
                lambda _: self._redis.run_pipelined("verify", self._script, calls),
                metric="verify",
            )
        return await self._redis.run_script("verify", self._script, calls, metric="verify")

    async def verify(self, positions: Mapping[FeedKey, Cursor]) -> dict[FeedKey, Batch]:
        """Check that each followed feed still continues what this node delivered.

        Returns a :class:`Batch` for every feed that does not: ``reset`` with the state
        it is in now (a rollback or a move found by this check, a newer epoch another
        node started, or a feed whose data was lost, recreated empty in a new epoch),
        or ``gone`` for one deleted on purpose.  Run after the node reached another
        server, and periodically.
        """
        out: dict[FeedKey, Batch] = {}
        deferred: list[tuple[FeedKey, Exception]] = []
        # A live view: feeds may come and go meanwhile, so take a list first.
        feeds = list(positions)
        for start in range(0, len(feeds), self.VERIFY_BATCH):
            chunk = feeds[start : start + self.VERIFY_BATCH]
            calls = [
                (self._script_keys(feed), self._args(feed, "recreate", 1, ())) for feed in chunk
            ]
            replies = await self._check(calls)
            for feed, reply in zip(chunk, replies, strict=True):
                position = positions.get(feed)
                if position is None:
                    continue
                if isinstance(reply, Unavailable):
                    # This feed alone could not be checked now (on a cluster: its
                    # shard is down or its slot moving): checked again soon.
                    deferred.append((feed, reply))
                    continue
                if reply[0] == b"gone":
                    self.known.forget(feed)
                    out[feed] = Batch([], gone=True)
                    continue
                state = self._state(reply)
                if reply[6]:
                    self._rotated(feed, reply)
                self.known.reset(feed, state)
                if reply[6] or state.epoch != position.epoch or state.head < position.offset:
                    out[feed] = Batch([], reset=state)
        self.deferred = bool(deferred)
        if deferred:
            feed, error = deferred[0]
            log.warning(
                "feeds not checked; again shortly", feeds=len(deferred), first=str(feed),
                error=str(error),
            )  # fmt: skip
        return out
