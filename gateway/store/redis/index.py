"""The feed index in Redis: one sorted set per tenant and kind, scored by last activity.

Key ``<prefix>:index:{<tenant>}:<kind>`` (the tenant percent-encoded, as in feed keys;
both kinds of a tenant share a hash slot), members the feed ids, scores the wall-clock
milliseconds of the last recorded activity.  Every :meth:`RedisFeedIndex.touch` is one
pipelined round trip for all the feeds it records: ``ZADD GT`` (a node with a slower
clock never moves an entry back), then the bounds (entries older than a day before the
newest, and all but the newest :data:`~gateway.store.interfaces.INDEX_MAX_FEEDS`), and an
expiry of the whole set a day after its last touch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from gateway.feed import FeedKey, FeedKind
from gateway.store.interfaces import INDEX_MAX_AGE_MS, INDEX_MAX_FEEDS, FeedIndex, IndexEntry
from gateway.store.redis.connection import RedisConnection

#: Entries one ZRANGE reads while skipping ties at the start of a page (each step reads
#: this many more, so a page costs one call unless many feeds share one millisecond).
SCAN_STEP = 64


async def newest_first(
    redis: Any, key: str, before: tuple[int, str] | None, limit: int, *, bound: int | None = None
) -> list[tuple[int, str]]:
    """Up to ``limit`` members of the sorted set ``key`` as ``(score, member)``, highest
    score first (ties by member, descending), starting strictly after ``before`` in that
    order; scores are integers (ms).  Reads in ZRANGE steps; entries sharing ``before``'s
    score at or above its member are skipped.  ``bound``: entries looked at, at most
    (None: the set's size bounds the steps)."""
    top = "+inf" if before is None else str(before[0])
    out: list[tuple[int, str]] = []
    offset = 0
    while bound is None or offset <= bound:
        want = limit - len(out) + SCAN_STEP * (offset > 0)
        rows = await redis.zrange(
            key, top, "-inf", desc=True, byscore=True, offset=offset, num=want, withscores=True
        )
        offset += len(rows)
        for member, score in rows:
            entry = (int(score), member.decode())
            if before is not None and entry >= before:
                continue
            out.append(entry)
            if len(out) >= limit:
                return out
        if len(rows) < want:
            break
    return out


class RedisFeedIndex(FeedIndex):
    def __init__(
        self,
        conn: RedisConnection,
        *,
        max_feeds: int = INDEX_MAX_FEEDS,
        max_age_ms: int = INDEX_MAX_AGE_MS,
    ) -> None:
        self.conn = conn
        self._max_feeds = max_feeds
        self._max_age_ms = max_age_ms

    def key(self, tenant: str, kind: FeedKind) -> str:
        return f"{self.conn.prefix}:index:{{{quote(tenant, safe='')}}}:{kind.value}"

    async def touch(self, entries: Sequence[tuple[FeedKey, int]]) -> None:
        groups: dict[str, dict[str, int]] = {}
        for feed, ms in entries:
            group = groups.setdefault(self.key(feed.tenant, feed.kind), {})
            group[feed.id] = max(ms, group.get(feed.id, ms))
        if not groups:
            return

        def queue(pipe: Any) -> None:
            for key, group in groups.items():
                newest = max(group.values())
                pipe.zadd(key, group, gt=True)
                pipe.zremrangebyscore(key, "-inf", f"({newest - self._max_age_ms}")
                pipe.zremrangebyrank(key, 0, -(self._max_feeds + 1))
                pipe.pexpire(key, self._max_age_ms)

        await self.conn.redis.pipeline("feed index update", queue, metric="index_touch")

    async def page(
        self, tenant: str, kind: FeedKind, *, before: IndexEntry | None, limit: int
    ) -> list[IndexEntry]:
        if limit <= 0:
            return []
        key = self.key(tenant, kind)
        after = None if before is None else (before.updated_ms, before.id)

        async def scan(redis: Any) -> list[IndexEntry]:
            rows = await newest_first(redis, key, after, limit, bound=self._max_feeds)
            return [IndexEntry(member, ms) for ms, member in rows]

        return await self.conn.redis.call("feed index read", scan, metric="index_page")

    async def forget(self, tenant: str, kind: FeedKind, ids: Sequence[str]) -> None:
        if ids:
            key = self.key(tenant, kind)
            await self.conn.redis.call(
                "feed index update", lambda redis: redis.zrem(key, *ids), metric="index_forget"
            )
