"""The Redis inboxes: producers in any language ``XADD`` here; gateway nodes append.

Stream ``<prefix>:inbox:team``; each message has the fields ``tenant``, ``team`` and
``body`` (the JSON of a ``POST /v1/teams/{team}/events`` body: one item or an array).
Stream ``<prefix>:inbox:run``; each message has the fields ``tenant``, ``thread``,
``run`` and ``body`` (one AG-UI event or an array, as ``POST .../ui/ag-ui`` takes),
and optionally ``idempotency_key`` (the ``Idempotency-Key`` header's meaning).
Nodes read it as members of the consumer group ``gateway``, apply exactly the HTTP
route's validation (:class:`~gateway.producer.Publisher`), append, and acknowledge.
A rejected message is copied, with ``reason`` (error code) and ``message``, to
``<prefix>:inbox:team:dead`` before it is acknowledged.  A message whose append fails
because Redis is unavailable stays pending and is retried; messages left pending by a
node that died are claimed after ``inbox_claim_ms``.  Appending is idempotent on
``event_id``, so a redelivered message never appends twice.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import redis.exceptions
import structlog

from gateway.errors import GatewayError, InvalidRequest, TooLarge, Unavailable
from gateway.feed import FeedKind
from gateway.log.redis import RedisLog
from gateway.metrics import Metrics
from gateway.producer import Publisher

log = structlog.get_logger("gateway.inbox")

GROUP = b"gateway"
#: Dead letters kept (approximately); older ones are trimmed.
DEAD_LETTER_LIMIT = 100_000
_FIELDS = {
    FeedKind.TEAM: ((b"tenant", b"team", b"body"), ()),
    FeedKind.RUN: ((b"tenant", b"thread", b"run", b"body"), (b"idempotency_key",)),
}


def inbox_key(prefix: str, kind: FeedKind = FeedKind.TEAM) -> str:
    return f"{prefix}:inbox:{kind.value}"


def dead_letter_key(prefix: str, kind: FeedKind = FeedKind.TEAM) -> str:
    return f"{prefix}:inbox:{kind.value}:dead"


class Inbox:
    def __init__(
        self,
        feed_log: RedisLog,
        publisher: Publisher,
        metrics: Metrics,
        *,
        prefix: str,
        max_body_bytes: int,
        claim_ms: int = 30_000,
        block_ms: int = 1_000,
        batch: int = 100,
        kind: FeedKind = FeedKind.TEAM,
    ) -> None:
        self.kind = kind
        self._redis: Any = feed_log.client
        #: Times the inbox's commands (gateway_redis_command_seconds{command="inbox"}).
        self._timed = feed_log.timed
        self._publisher = publisher
        self._metrics = metrics
        self._stream = inbox_key(prefix, kind).encode()
        self._dead = dead_letter_key(prefix, kind).encode()
        self._consumer = feed_log.node_id.encode()
        self._max_body = max_body_bytes
        self._claim_ms = claim_ms
        self._block_ms = block_ms
        self._batch = batch
        #: Monotonic time of the last completed read (for readiness).
        self.last_progress = 0.0

    async def ensure_group(self) -> None:
        try:
            with self._timed("inbox"):
                await self._redis.xgroup_create(self._stream, GROUP, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise Unavailable(f"cannot create inbox group: {exc}") from exc
        except (redis.exceptions.RedisError, OSError) as exc:
            raise Unavailable("redis unavailable creating the inbox group") from exc

    async def run(self) -> None:
        """Consume until cancelled; survives Redis outages with backoff."""
        backoff = 0.1
        own_pending = True  # first drain what this consumer left pending earlier
        while True:
            try:
                await self.ensure_group()
                if own_pending:
                    own_pending = await self._step("0", block=False)
                else:
                    await self._claim()
                    await self._step(">", block=True)
                backoff = 0.1
                self.last_progress = anyio.current_time()
            except (Unavailable, redis.exceptions.RedisError, OSError) as exc:
                self._metrics.redis_errors.inc()
                log.warning("inbox read failed", error=str(exc), retry_in=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                own_pending = True

    async def _step(self, start: str, *, block: bool) -> bool:
        """Read and process one batch; returns whether more of this kind may remain."""
        # A blocking read waits for producers: only non-blocking ones are timed.
        with self._timed("inbox") if not block else contextlib.nullcontext():
            reply = await self._redis.xreadgroup(
                GROUP,
                self._consumer,
                {self._stream: start},
                count=self._batch,
                block=self._block_ms if block else None,
            )
        messages = reply[0][1] if reply else []
        for msg_id, fields in messages:
            if fields is None:  # deleted while pending
                with self._timed("inbox"):
                    await self._redis.xack(self._stream, GROUP, msg_id)
                continue
            await self._process(msg_id, fields)
        return len(messages) == self._batch

    async def _claim(self) -> None:
        with self._timed("inbox"):
            reply = await self._redis.xautoclaim(
                self._stream, GROUP, self._consumer, self._claim_ms, "0-0", count=self._batch
            )
        for msg_id, fields in reply[1]:
            if fields:
                await self._process(msg_id, fields)
            else:
                with self._timed("inbox"):
                    await self._redis.xack(self._stream, GROUP, msg_id)

    async def _process(self, msg_id: bytes, fields: dict[bytes, bytes]) -> None:
        try:
            values = self._parse(fields)
            if self.kind is FeedKind.TEAM:
                await self._publisher.publish_team_json(
                    values[b"tenant"], values[b"team"], fields[b"body"], path="inbox"
                )
            else:
                await self._publisher.publish_run_json(
                    values[b"tenant"],
                    values[b"thread"],
                    values[b"run"],
                    fields[b"body"],
                    path="inbox",
                    idempotency_key=values.get(b"idempotency_key"),
                )
        except Unavailable:
            raise  # stays pending; retried after the outage
        except GatewayError as exc:
            await self._dead_letter(msg_id, fields, str(exc.code), exc.message)
            self._metrics.inbox_messages.labels(outcome="dead_lettered").inc()
        except Exception:
            # A poison message must never take the node down (nor every node that
            # claims it after): dead-letter it and go on.
            log.exception("inbox message failed", id=msg_id.decode(errors="replace"))
            await self._dead_letter(msg_id, fields, "internal", "the gateway failed on it")
            self._metrics.inbox_messages.labels(outcome="dead_lettered").inc()
        else:
            self._metrics.inbox_messages.labels(outcome="appended").inc()
        with self._timed("inbox"):
            await self._redis.xack(self._stream, GROUP, msg_id)

    def _parse(self, fields: dict[bytes, bytes]) -> dict[bytes, str]:
        """The message's text fields (all but ``body``), checked."""
        required, optional = _FIELDS[self.kind]
        unknown = set(fields) - set(required) - set(optional)
        if unknown:
            name = sorted(unknown)[0].decode("utf-8", "replace")[:64]
            raise InvalidRequest(f"message: unknown field {name!r}")
        for field in required:
            if field not in fields:
                raise InvalidRequest(f"message: missing field {field.decode()!r}")
        if len(fields[b"body"]) > self._max_body:
            raise TooLarge(f"body: larger than {self._max_body} bytes")
        values: dict[bytes, str] = {}
        for field, raw in fields.items():
            if field == b"body":
                continue
            try:
                values[field] = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidRequest(f"{field.decode()}: must be UTF-8") from exc
        if not values[b"tenant"]:
            raise InvalidRequest("tenant: must not be empty")
        return values

    async def _dead_letter(
        self, msg_id: bytes, fields: dict[bytes, bytes], reason: str, message: str
    ) -> None:
        entry = dict(fields)
        entry[b"id"] = msg_id
        entry[b"reason"] = reason.encode()
        entry[b"message"] = message.encode()
        with self._timed("inbox"):
            await self._redis.xadd(self._dead, entry, maxlen=DEAD_LETTER_LIMIT, approximate=True)
