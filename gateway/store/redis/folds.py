"""Run folds kept with their feed in Redis: the hash ``<prefix>:<tag>:f``, one field per
checkpoint (``<epoch>:<offset>`` -> the fold as compact JSON)."""

from __future__ import annotations

from typing import Any

from gateway.cursor import Cursor
from gateway.feed import FeedKey
from gateway.store.interfaces import FoldStore
from gateway.store.redis.connection import RedisConnection


class RedisFolds(FoldStore):
    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn
        self._redis = conn.redis

    async def save_fold(self, feed: FeedKey, at: Cursor, blob: bytes, *, keep_from: int) -> None:
        key = self.conn.fold_key(feed)
        meta = self.conn.feed_keys(feed)[1]

        async def save(redis: Any) -> None:
            fields = await redis.hkeys(key)
            stale = []
            for field in fields:
                epoch, _, offset = field.partition(b":")
                if int(epoch) != at.epoch or int(offset) < keep_from:
                    stale.append(field)
            ttl = await redis.pttl(meta)
            async with redis.pipeline(transaction=False) as pipe:
                pipe.hset(key, str(at), blob)
                if stale:
                    pipe.hdel(key, *stale)
                if ttl > 0:  # a finished run in its grace period: the fold goes with it
                    pipe.pexpire(key, ttl)
                await pipe.execute()

        await self._redis.call("save_fold", save)

    async def load_fold(self, feed: FeedKey, at: Cursor) -> bytes | None:
        key = self.conn.fold_key(feed)
        blob: bytes | None = await self._redis.call(
            "load_fold", lambda redis: redis.hget(key, str(at))
        )
        return blob
