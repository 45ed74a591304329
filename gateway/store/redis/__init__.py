"""The Redis backend: feeds in Redis Streams, live items over pub/sub, folds and inboxes.

This package is the only place that talks to redis-py; everything it raises is a
:class:`~gateway.errors.GatewayError` (docs/storage.md has the key layout).
"""

from __future__ import annotations

from gateway.metrics import Metrics
from gateway.store.base import Backend, InboxQueue
from gateway.store.redis.connection import RedisConnection
from gateway.store.redis.feeds import RedisFeeds
from gateway.store.redis.folds import RedisFolds
from gateway.store.redis.inbox import RedisInboxQueue
from gateway.store.redis.live import RedisLive
from gateway.store.redis.runs import RedisRuns


def redis_backend(
    url: str,
    *,
    prefix: str = "gw",
    node_id: str | None = None,
    max_connections: int = 32,
    metrics: Metrics | None = None,
) -> Backend:
    """A backend on the Redis at ``url`` (``redis://``, ``rediss://``, ``unix://``)."""
    conn = RedisConnection(
        url, prefix=prefix, node_id=node_id, max_connections=max_connections, metrics=metrics
    )
    feeds = RedisFeeds(conn)
    live = RedisLive(conn, feeds)

    def inbox(name: str) -> InboxQueue:
        return RedisInboxQueue(conn, name)

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
        name="redis",
    )


__all__ = [
    "RedisConnection",
    "RedisFeeds",
    "RedisFolds",
    "RedisInboxQueue",
    "RedisLive",
    "RedisRuns",
    "redis_backend",
]
