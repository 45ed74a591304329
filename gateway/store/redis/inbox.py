"""The Redis inbox streams: producers ``XADD`` messages; nodes read them as the consumer
group ``gateway`` (docs/storage.md, "Inboxes").  What a message means, and what is
appended, is decided above this module (``gateway.inbox``)."""

from __future__ import annotations

from gateway.errors import Unavailable
from gateway.store.base import InboxMessage, InboxQueue
from gateway.store.redis.connection import RedisConnection

GROUP = b"gateway"
#: Dead letters kept (approximately); older ones are trimmed.
DEAD_LETTER_LIMIT = 100_000


def inbox_key(prefix: str, name: str) -> str:
    return f"{prefix}:inbox:{name}"


def dead_letter_key(prefix: str, name: str) -> str:
    return f"{prefix}:inbox:{name}:dead"


class RedisInboxQueue(InboxQueue):
    def __init__(self, conn: RedisConnection, name: str) -> None:
        self.name = name
        self.conn = conn
        self._redis = conn.client
        self._stream = inbox_key(conn.prefix, name).encode()
        self._dead = dead_letter_key(conn.prefix, name).encode()
        self._consumer = conn.node_id.encode()

    async def ensure_group(self) -> None:
        try:
            with self.conn.io("inbox group", "inbox"):
                await self._redis.xgroup_create(self._stream, GROUP, id="0", mkstream=True)
        except Unavailable as exc:
            if "BUSYGROUP" not in exc.message:
                raise Unavailable(f"cannot create inbox group: {exc.message}") from exc

    async def read(self, *, pending: bool, block_ms: int | None, count: int) -> list[InboxMessage]:
        # A blocking read waits for producers: only non-blocking ones are timed.
        within = self.conn.timeout + (block_ms or 0) / 1000
        with self.conn.io("inbox read", None if block_ms else "inbox", within=within):
            reply = await self._redis.xreadgroup(
                GROUP,
                self._consumer,
                {self._stream: "0" if pending else ">"},
                count=count,
                block=block_ms,
            )
        entries = reply[0][1] if reply else []
        return [InboxMessage(msg_id, fields) for msg_id, fields in entries]

    async def claim(self, idle_ms: int, count: int) -> list[InboxMessage]:
        with self.conn.io("inbox claim", "inbox"):
            reply = await self._redis.xautoclaim(
                self._stream, GROUP, self._consumer, idle_ms, "0-0", count=count
            )
        return [InboxMessage(msg_id, fields or None) for msg_id, fields in reply[1]]

    async def ack(self, message_id: bytes) -> None:
        with self.conn.io("inbox ack", "inbox"):
            await self._redis.xack(self._stream, GROUP, message_id)

    async def dead_letter(self, message: InboxMessage, reason: str, text: str) -> None:
        entry = dict(message.fields or {})
        entry[b"id"] = message.id
        entry[b"reason"] = reason.encode()
        entry[b"message"] = text.encode()
        with self.conn.io("inbox dead letter", "inbox"):
            await self._redis.xadd(self._dead, entry, maxlen=DEAD_LETTER_LIMIT, approximate=True)
