"""The run indexes in Redis: each thread's latest run, and the live runs.

The latest-run index: one string key per tenant and thread.

``<prefix>:{<tenant>:thread:<thread_id>}:latest`` holds ``<run_id> <started_at>`` (the
wall-clock seconds at which the run's RUN_STARTED was recorded).  The hash tag is the
thread's, not the run feed's: on a cluster the key lives on another slot than the run
feed, so recording is a command of its own after the feed's append (docs/storage.md).
The key has no expiry while its run is going; when the run ends it gets the run feed's
grace period, unless a later run has replaced it meanwhile (one script call, so the check
and the expiry cannot be split by another record).

The live-run index: per tenant, ``<prefix>:runs:live:{<tenant>}``, a sorted set of run
feed ids scored by when the run started (``GET /v1/runs``); and the due sets,
``<prefix>:runs:due:{<n>}``, members ``<tenant>/<feed id>`` scored by a deadline no
later than the run's lease (the sweep).  One due set on one Redis; on a cluster
:data:`CLUSTER_DUE_SETS`, a run's set chosen by a hash of its member, so that no shard
holds every run's entry.  Both are written by commands of their own (a run's feed is on
another slot): an entry is added before the run's start is appended and removed after
its end, and the feed's own lease is the truth (``feed.lua``).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, unquote

from gateway.feed import FeedKey, FeedKind
from gateway.store.interfaces import LatestRun, LiveRun, RunIndex
from gateway.store.redis.connection import RedisConnection
from gateway.store.redis.index import newest_first

#: PEXPIRE the key only if it still names the run (ARGV[1]) that ended.
EXPIRE_IF_LATEST = """
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


#: Due sets on a Redis Cluster (their hash tags spread them over the slots).
CLUSTER_DUE_SETS = 16


class RedisRuns(RunIndex):
    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn
        self._redis = conn.redis
        self._expire = self._redis.script(EXPIRE_IF_LATEST)
        self._due_sets = CLUSTER_DUE_SETS if conn.cluster else 1

    def key(self, tenant: str, thread_id: str) -> str:
        """The thread's index key; the tenant is percent-encoded as in feed tags, so no
        tenant can reach another's keys."""
        return f"{self.conn.prefix}:{{{quote(tenant, safe='')}:thread:{thread_id}}}:latest"

    async def record_run(self, tenant: str, thread_id: str, run_id: str, at: float) -> None:
        # SET without options also removes an expiry a previous run's end set.
        key, value = self.key(tenant, thread_id), f"{run_id} {at!r}".encode()
        await self._redis.call("record_run", lambda redis: redis.set(key, value), metric="set")

    async def latest_run(self, tenant: str, thread_id: str) -> LatestRun | None:
        key = self.key(tenant, thread_id)
        raw: bytes | None = await self._redis.call(
            "latest_run", lambda redis: redis.get(key), metric="get"
        )
        if raw is None:
            return None
        run_id, _, at = raw.decode("utf-8", "replace").partition(" ")
        try:
            started = float(at)
        except ValueError:
            started = 0.0  # written by something else: the run id is still usable
        return LatestRun(run_id, started)

    async def expire_run(self, tenant: str, thread_id: str, run_id: str, seconds: float) -> None:
        ms = max(1, int(seconds * 1000))
        key = self.key(tenant, thread_id)
        await self._redis.call(
            "expire_run",
            lambda redis: self._expire(keys=[key], args=[run_id, ms]),
            metric="expire_run",
        )

    # -- the live-run index ----------------------------------------------------------------

    def live_key(self, tenant: str) -> str:
        return f"{self.conn.prefix}:runs:live:{{{quote(tenant, safe='')}}}"

    def due_keys(self) -> list[str]:
        return [f"{self.conn.prefix}:runs:due:{{{n}}}" for n in range(self._due_sets)]

    @staticmethod
    def _member(feed: FeedKey) -> str:
        # The tenant percent-encoded holds no "/": the first one ends it.
        return f"{quote(feed.tenant, safe='')}/{feed.id}"

    def _due_key(self, member: str) -> str:
        n = zlib.crc32(member.encode()) % self._due_sets
        return f"{self.conn.prefix}:runs:due:{{{n}}}"

    async def track(self, feed: FeedKey, started_ms: int, deadline_ms: int) -> None:
        member = self._member(feed)

        def queue(pipe: Any) -> None:
            pipe.zadd(self.live_key(feed.tenant), {feed.id: started_ms})
            pipe.zadd(self._due_key(member), {member: deadline_ms})

        await self._redis.pipeline("live-run index update", queue, metric="live_runs")

    async def untrack(self, feeds: Sequence[FeedKey]) -> int:
        if not feeds:
            return 0

        def queue(pipe: Any) -> None:
            for feed in feeds:
                member = self._member(feed)
                pipe.zrem(self.live_key(feed.tenant), feed.id)
                pipe.zrem(self._due_key(member), member)

        replies = await self._redis.pipeline("live-run index update", queue, metric="live_runs")
        return sum(int(n) for n in replies[1::2])

    async def due(self, now_ms: int, limit: int) -> list[FeedKey]:
        if limit <= 0:
            return []

        def queue(pipe: Any) -> None:
            for key in self.due_keys():
                pipe.zrangebyscore(key, "-inf", now_ms, start=0, num=limit, withscores=True)

        replies = await self._redis.pipeline("live-run index read", queue, metric="live_runs")
        found = sorted((score, member) for reply in replies for member, score in reply)
        out: list[FeedKey] = []
        for _, member in found[:limit]:
            tenant, _, feed_id = member.decode().partition("/")
            out.append(FeedKey(unquote(tenant), FeedKind.RUN, feed_id))
        return out

    async def postpone(self, feed: FeedKey, deadline_ms: int) -> None:
        member = self._member(feed)
        key = self._due_key(member)
        await self._redis.call(
            "live-run index update",
            lambda redis: redis.zadd(key, {member: deadline_ms}, xx=True),
            metric="live_runs",
        )

    async def live_page(self, tenant: str, *, before: LiveRun | None, limit: int) -> list[LiveRun]:
        if limit <= 0:
            return []
        key = self.live_key(tenant)
        after = None if before is None else (before.started_ms, before.feed.id)

        async def scan(redis: Any) -> list[LiveRun]:
            # A tenant's live runs bound the steps (ended runs leave the set).
            rows = await newest_first(redis, key, after, limit)
            return [LiveRun(FeedKey(tenant, FeedKind.RUN, member), ms) for ms, member in rows]

        return await self._redis.call("live-run index read", scan, metric="live_runs")

    async def live_count(self) -> int:
        def queue(pipe: Any) -> None:
            for key in self.due_keys():
                pipe.zcard(key)

        replies = await self._redis.pipeline("live-run index read", queue, metric="live_runs")
        return sum(int(n) for n in replies)
