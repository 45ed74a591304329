"""The Redis inbox streams: producers ``XADD`` messages; nodes read them as the consumer
group ``gateway`` (docs/storage.md, "Inboxes").  What a message means, and what is
appended, is decided above this module (``gateway.inbox_consumer``)."""

from __future__ import annotations

from typing import Any

from gateway.errors import Unavailable
from gateway.store.interfaces import InboxMessage, InboxQueue
from gateway.store.redis.connection import RedisConnection

GROUP = b"gateway"
#: Dead letters kept (approximately); older ones are trimmed.
DEAD_LETTER_LIMIT = 100_000


def inbox_key(prefix: str, name: str, shard: int | None = None) -> str:
    """An inbox stream: ``<prefix>:inbox:<name>``, or shard ``n`` of a sharded inbox
    ``<prefix>:inbox:{<name>:<n>}`` (the hash tag puts each shard in its own slot)."""
    if shard is None:
        return f"{prefix}:inbox:{name}"
    return f"{prefix}:inbox:{{{name}:{shard}}}"


def dead_letter_key(prefix: str, name: str, shard: int | None = None) -> str:
    return inbox_key(prefix, name, shard) + ":dead"


class RedisInboxQueue(InboxQueue):
    """One inbox stream (one shard of a sharded inbox)."""

    def __init__(self, conn: RedisConnection, name: str, shard: int | None = None) -> None:
        self.name = name if shard is None else f"{name}:{shard}"
        self.conn = conn
        self._redis = conn.redis
        self._stream = inbox_key(conn.prefix, name, shard).encode()
        self._dead = dead_letter_key(conn.prefix, name, shard).encode()
        self._consumer = conn.node_id.encode()

    async def ensure_group(self) -> None:
        await self.conn.topology()
        try:
            # Named for its shard: redis-py routes XGROUP CREATE by the wrong word.
            routed = self.conn.routed(self._stream)
            await self._redis.call(
                "inbox group",
                lambda redis: redis.execute_command(
                    "XGROUP", "CREATE", self._stream, GROUP, "0", "MKSTREAM", **routed
                ),
                metric="inbox",
            )
        except Unavailable as exc:
            if "BUSYGROUP" not in exc.message:
                raise Unavailable(f"cannot create inbox group: {exc.message}") from exc

    async def read(self, *, pending: bool, block_ms: int | None, count: int) -> list[InboxMessage]:
        # A blocking read waits for producers: only non-blocking ones are timed.
        within = self.conn.timeout + (block_ms or 0) / 1000
        args: list[Any] = ["XREADGROUP", "GROUP", GROUP, self._consumer, "COUNT", count]
        if block_ms is not None:
            args += ["BLOCK", block_ms]
        args += ["STREAMS", self._stream, "0" if pending else ">"]
        routed = self.conn.routed(self._stream)
        reply = await self._redis.call(
            "inbox read",
            lambda redis: redis.execute_command(*args, **routed),
            metric=None if block_ms else "inbox",
            within=within,
        )
        entries = reply[0][1] if reply else []
        return [InboxMessage(msg_id, fields) for msg_id, fields in entries]

    async def claim(self, idle_ms: int, count: int) -> list[InboxMessage]:
        reply = await self._redis.call(
            "inbox claim",
            lambda redis: redis.xautoclaim(
                self._stream, GROUP, self._consumer, idle_ms, "0-0", count=count
            ),
            metric="inbox",
        )
        return [InboxMessage(msg_id, fields or None) for msg_id, fields in reply[1]]

    async def ack(self, message_id: bytes) -> None:
        await self._redis.call(
            "inbox ack", lambda redis: redis.xack(self._stream, GROUP, message_id), metric="inbox"
        )

    async def dead_letter(self, message: InboxMessage, reason: str, text: str) -> None:
        entry = dict(message.fields or {})
        entry[b"id"] = message.id
        entry[b"reason"] = reason.encode()
        entry[b"message"] = text.encode()
        await self._redis.call(
            "inbox dead letter",
            lambda redis: redis.xadd(self._dead, entry, maxlen=DEAD_LETTER_LIMIT, approximate=True),
            metric="inbox",
        )
