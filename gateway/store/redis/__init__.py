"""The Redis backend: feeds in Redis Streams, live items over pub/sub, folds and inboxes.

This package is the only place that talks to redis-py; everything it raises is a
:class:`~gateway.errors.GatewayError` (docs/storage.md has the key layout).
"""

from __future__ import annotations

from gateway.metrics import Metrics
from gateway.store.interfaces import Backend, InboxQueue
from gateway.store.redis.connection import RedisConnection
from gateway.store.redis.feeds import RedisFeeds
from gateway.store.redis.folds import RedisFolds
from gateway.store.redis.inbox import RedisInboxQueue
from gateway.store.redis.index import RedisFeedIndex
from gateway.store.redis.live import RedisLive
from gateway.store.redis.runs import RedisRuns
from gateway.store.redis.settings import RedisSettings, check, from_settings


def redis_backend(
    url: str | RedisSettings,
    *,
    prefix: str = "gw",
    node_id: str | None = None,
    max_connections: int = 32,
    metrics: Metrics | None = None,
    timeout: float = 3.0,
    min_replicas: int = 0,
    replica_timeout_ms: int = 500,
    tombstone_seconds: float = 86_400.0,
    cluster: bool = False,
    inbox_shards: int = 1,
    linger: float = 0.002,
) -> Backend:
    """A backend on the Redis at ``url`` (``redis://``, ``rediss://``, ``unix://``,
    ``redis+sentinel://``; with ``cluster`` a seed node of a Redis Cluster), or the one
    its settings name (:func:`from_settings`; see :mod:`gateway.store.redis.settings`).
    ``inbox_shards`` > 1 spreads each inbox over that many streams
    (``<prefix>:inbox:{<name>:<n>}``), each on its own slot.  ``linger`` is the longest
    hold of live notifications, in seconds (:class:`~gateway.store.hold.HoldPolicy`)."""
    conn = RedisConnection(
        url,
        prefix=prefix,
        node_id=node_id,
        max_connections=max_connections,
        metrics=metrics,
        timeout=timeout,
        cluster=cluster,
    )
    feeds = RedisFeeds(
        conn,
        tombstone_seconds=tombstone_seconds,
        min_replicas=min_replicas,
        replica_timeout_ms=replica_timeout_ms,
    )
    live = RedisLive(conn, feeds, linger=linger)

    def inbox(name: str) -> list[InboxQueue]:
        if inbox_shards <= 1:
            return [RedisInboxQueue(conn, name)]
        return [RedisInboxQueue(conn, name, shard) for shard in range(inbox_shards)]

    async def close() -> None:
        live.close()
        await conn.aclose()

    return Backend(
        feeds=feeds,
        live=live,
        folds=RedisFolds(conn),
        inbox=inbox,
        runs=RedisRuns(conn),
        ping=conn.ping,
        close=close,
        index=RedisFeedIndex(conn),
        name="redis",
    )


__all__ = [
    "RedisConnection",
    "RedisFeedIndex",
    "RedisFeeds",
    "RedisFolds",
    "RedisInboxQueue",
    "RedisLive",
    "RedisRuns",
    "RedisSettings",
    "check",
    "from_settings",
    "redis_backend",
]
