"""The inbox consumer: producers in any language ``XADD`` to an inbox; nodes append.

Inbox ``team`` (stream ``<prefix>:inbox:team``): each message has the fields ``tenant``,
``team`` and ``body`` (the JSON of a ``POST /v1/teams/{team}/events`` body: one item or
an array).  Inbox ``run``: ``tenant``, ``thread``, ``run`` and ``body`` (one AG-UI event
or an array, as ``POST .../ui/ag-ui`` takes), and optionally ``idempotency_key`` (the
``Idempotency-Key`` header's meaning); or, to renew a live run's lease without
publishing (as ``POST .../heartbeat``), ``tenant``, ``thread``, ``run`` and ``heartbeat``
(``1``) and nothing else: acknowledged and counted (``renewed``, or ``not_live`` for a
run that is not live: heartbeats race with the run's end, so that is no error).  Inbox
``sparktide``: ``tenant`` and ``body`` (one
SparkTide event or an array of one run, as ``POST /v1/sparktide/events`` takes; the run
is the events' ``conversationId`` and ``runId``).  Inbox ``a2ui``: ``tenant``, ``thread``,
``run``, ``body`` (one A2UI message or an array) and optionally ``idempotency_key``.
Nodes read each inbox as members of one consumer
group, apply exactly the HTTP route's validation (:class:`~gateway.publisher.Publisher`),
append, and acknowledge.  A rejected message is copied, with ``reason`` (error code) and
``message``, to the inbox's dead letters before it is acknowledged.  A message whose
append fails because the store is unavailable stays pending and is retried; messages
left pending by a node that died are claimed after ``claim_ms``.  Appending is
idempotent on the item keys, so a redelivered message never appends twice
(docs/contract.md D4).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio
import structlog

from gateway.errors import GatewayError, InvalidRequest, TooLarge, Unavailable
from gateway.metrics import Metrics
from gateway.outage import Outage
from gateway.publisher import Publisher, Via
from gateway.store.interfaces import InboxMessage, InboxQueue

log = structlog.get_logger("gateway.inbox_consumer")

#: An inbox's message fields as text (all but ``body``), and the handler that acts on a
#: message (its ``body``, None when it has none) and names the outcome it counts.
Fields = dict[bytes, str]
Handler = Callable[[Publisher, Fields, bytes | None], Awaitable[str]]

#: Outcomes of a message (``gateway_inbox_messages_total``): appended; a heartbeat that
#: renewed a lease, or found no live run to renew.
APPENDED = "appended"
RENEWED = "renewed"
NOT_LIVE = "not_live"


def _body(body: bytes | None) -> bytes:
    """The message's ``body``, which the inbox requires."""
    if body is None:
        raise InvalidRequest("message: missing field 'body'")
    return body


async def _team(publisher: Publisher, values: Fields, body: bytes | None) -> str:
    await publisher.publish_team_json(
        values[b"tenant"], values[b"team"], _body(body), via=Via.INBOX
    )
    return APPENDED


async def _run(publisher: Publisher, values: Fields, body: bytes | None) -> str:
    if b"heartbeat" in values:
        return await _heartbeat(publisher, values, body)
    await publisher.publish_run_json(
        values[b"tenant"],
        values[b"thread"],
        values[b"run"],
        _body(body),
        via=Via.INBOX,
        idempotency_key=values.get(b"idempotency_key"),
    )
    return APPENDED


async def _heartbeat(publisher: Publisher, values: Fields, body: bytes | None) -> str:
    """A run inbox heartbeat: renew the run's lease, if the run is live."""
    if values[b"heartbeat"] != "1":
        raise InvalidRequest("heartbeat: must be 1")
    if body is not None or b"idempotency_key" in values:
        raise InvalidRequest("heartbeat: a heartbeat has no body and no idempotency_key")
    live = await publisher.heartbeat(values[b"tenant"], values[b"thread"], values[b"run"])
    return RENEWED if live else NOT_LIVE


async def _sparktide(publisher: Publisher, values: Fields, body: bytes | None) -> str:
    await publisher.publish_sparktide_json(values[b"tenant"], _body(body), via=Via.INBOX)
    return APPENDED


async def _a2ui(publisher: Publisher, values: Fields, body: bytes | None) -> str:
    await publisher.publish_a2ui_json(
        values[b"tenant"],
        values[b"thread"],
        values[b"run"],
        _body(body),
        via=Via.INBOX,
        idempotency_key=values.get(b"idempotency_key"),
    )
    return APPENDED


class InboxKind:
    """What one inbox carries: its name, required and optional fields, and the handler."""

    def __init__(
        self, name: str, required: tuple[bytes, ...], optional: tuple[bytes, ...], handler: Handler
    ) -> None:
        self.name = name
        self.required = required
        self.optional = optional
        self.handler = handler


#: Every inbox the nodes read.
INBOXES = (
    InboxKind("team", (b"tenant", b"team", b"body"), (), _team),
    # ``body`` is optional only to let a heartbeat go without one (``_run`` checks).
    InboxKind(
        "run",
        (b"tenant", b"thread", b"run"),
        (b"body", b"idempotency_key", b"heartbeat"),
        _run,
    ),
    InboxKind("sparktide", (b"tenant", b"body"), (), _sparktide),
    InboxKind("a2ui", (b"tenant", b"thread", b"run", b"body"), (b"idempotency_key",), _a2ui),
)


class Inbox:
    """One inbox's consumer loop; run :meth:`run` in the node's task group."""

    def __init__(
        self,
        queue: InboxQueue,
        kind: InboxKind,
        publisher: Publisher,
        metrics: Metrics,
        *,
        max_body_bytes: int,
        claim_ms: int = 30_000,
        block_ms: int = 1_000,
        batch: int = 100,
    ) -> None:
        self.queue = queue
        self.kind = kind
        self._publisher = publisher
        self._metrics = metrics
        self._max_body = max_body_bytes
        self._claim_ms = claim_ms
        self._block_ms = block_ms
        self._batch = batch
        #: Monotonic time of the last completed read (for readiness).
        self.last_progress = 0.0
        #: The loop's failures, logged once each (and its recovery).
        self._outage = Outage(log, "inbox read failed", inbox=queue.name)

    @property
    def name(self) -> str:
        """The inbox's name, with its shard (``team``, ``team:3``)."""
        return self.queue.name

    async def run(self) -> None:
        """Consume until cancelled; survives store outages with backoff.

        The consumer group is made once, and again after any failure (a Redis that
        restarted empty has lost it: the read fails until it exists).  Messages left
        pending by other consumers are looked for every tenth of ``claim_ms`` (at most
        once per read; at once again after a full batch), so one is claimed within
        1.1 x ``claim_ms`` of its delivery; an idle node pays one blocking read per inbox
        per ``block_ms`` and little else.
        """
        backoff = 0.1
        own_pending = True  # first drain what this consumer left pending earlier
        have_group = False
        next_claim = 0.0
        while True:
            try:
                if not have_group:
                    await self.queue.ensure_group()
                    have_group = True
                if own_pending:
                    own_pending = await self._step(pending=True)
                else:
                    now = anyio.current_time()
                    if now >= next_claim:
                        claimed = await self.queue.claim(self._claim_ms, self._batch)
                        # A full batch: more may wait, look again on the next read.
                        full = len(claimed) == self._batch
                        next_claim = now if full else now + self._claim_ms / 10_000
                        for message in claimed:
                            await self._process(message)
                    await self._step(pending=False)
                backoff = 0.1
                self._outage.recovered()
                self.last_progress = time.monotonic()
            except Unavailable as exc:
                self._metrics.redis_errors.inc()
                self._outage.failed(exc.message, retry_in=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                own_pending = True
                have_group = False

    async def _step(self, *, pending: bool) -> bool:
        """Read and process one batch; returns whether more of this kind may remain."""
        messages = await self.queue.read(
            pending=pending, block_ms=None if pending else self._block_ms, count=self._batch
        )
        for message in messages:
            await self._process(message)
        return len(messages) == self._batch

    async def _process(self, message: InboxMessage) -> None:
        fields = message.fields
        if fields is None:  # deleted while pending
            await self.queue.ack(message.id)
            return
        try:
            values = self._parse(fields)
            outcome = await self.kind.handler(self._publisher, values, fields.get(b"body"))
        except Unavailable:
            raise  # stays pending; retried after the outage
        except GatewayError as exc:
            await self.queue.dead_letter(message, str(exc.code), exc.message)
            self._metrics.inbox_messages.labels(outcome="dead_lettered").inc()
        except Exception:
            # A poison message must never take the node down (nor every node that
            # claims it after): dead-letter it and go on.
            log.exception("inbox message failed", id=message.id.decode(errors="replace"))
            await self.queue.dead_letter(message, "internal", "the gateway failed on it")
            self._metrics.inbox_messages.labels(outcome="dead_lettered").inc()
        else:
            self._metrics.inbox_messages.labels(outcome=outcome).inc()
        await self.queue.ack(message.id)

    def _parse(self, fields: dict[bytes, bytes]) -> Fields:
        """The message's text fields (all but ``body``), checked."""
        required, optional = self.kind.required, self.kind.optional
        unknown = set(fields) - set(required) - set(optional)
        if unknown:
            name = sorted(unknown)[0].decode("utf-8", "replace")[:64]
            raise InvalidRequest(f"message: unknown field {name!r}")
        for field in required:
            if field not in fields:
                raise InvalidRequest(f"message: missing field {field.decode()!r}")
        if len(fields.get(b"body", b"")) > self._max_body:
            raise TooLarge(f"body: larger than {self._max_body} bytes")
        values: Fields = {}
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
