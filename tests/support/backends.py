"""Backends for tests that drive the store directly, and ways to break them."""

from __future__ import annotations

from gateway.feed import FeedKey
from gateway.store.interfaces import Backend
from gateway.store.memory import MemoryStore, memory_backend
from gateway.store.redis import RedisFeeds, redis_backend


def open_backend(url: str | None, prefix: str = "gwtest", **kw: object) -> Backend:
    """The embedded backend when ``url`` is None, else one on the Redis at ``url``."""
    if url is None:
        return memory_backend()
    return redis_backend(url, prefix=prefix, **kw)  # type: ignore[arg-type]


def redis_feeds(backend: Backend) -> RedisFeeds:
    """The Redis feed store of a Redis backend (its keys, its connection)."""
    feeds = backend.feeds
    assert isinstance(feeds, RedisFeeds), "a Redis backend is needed here"
    return feeds


async def lose(backend: Backend, feed: FeedKey) -> None:
    """Lose a feed's data the way a Redis flush would."""
    if isinstance(backend.feeds, MemoryStore):
        backend.feeds.drop(feed)
    else:
        feeds = redis_feeds(backend)
        await feeds.conn.client.delete(*feeds.keys(feed))
