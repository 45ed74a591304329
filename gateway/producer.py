"""The Python producer API: an agent runtime validates in-process and appends straight
to Redis (no HTTP hop), with exactly the validation of the HTTP routes.

Example::

    producer = Producer.connect("redis://localhost:6379/0")
    cursor = await producer.publish_team(tenant, team, source, event)
    async with producer.run(tenant, thread_id, run_id) as run:
        await run.publish({"type": "TEXT_MESSAGE_START", "messageId": "m1"})
    await producer.aclose()
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway.activity import FeedActivity
from gateway.cursor import Cursor
from gateway.errors import GatewayError, RunEnded, Unavailable
from gateway.fanout.foldcache import FoldCache
from gateway.metrics import Metrics
from gateway.outage import Outage
from gateway.publisher import Publisher, Via
from gateway.run_lease import (
    AGUI_ENDS,
    DEFAULT_LEASE_SECONDS,
    check_lease_setting,
    requested_lease,
)
from gateway.store.interfaces import Backend
from gateway.store.redis import redis_backend

log = structlog.get_logger("gateway.producer")

#: The ``code`` of the ``RUN_ERROR`` that :meth:`Producer.run` ends a run with when its
#: block raised, and when its block was cancelled (or interrupted otherwise).
PRODUCER_ERROR: Final = "producer_error"
PRODUCER_CANCELLED: Final = "producer_cancelled"
#: Seconds :meth:`Producer.run` spends at most on the run's end when its block exits
#: (retrying while Redis is unavailable): past them the run's lease ends it instead.
END_SECONDS: Final = 10.0
#: Longest ``RUN_ERROR`` message taken from an exception (viewers see it).
MAX_ERROR_MESSAGE: Final = 1000
#: The Idempotency-Keys of the start and the end :meth:`Producer.run` publishes: a
#: retried start or end is answered, not appended again.
START_KEY: Final = "gateway.producer.run.start"
END_KEY: Final = "gateway.producer.run.end"


class Producer:
    """The Python producer API: validate in-process and append directly to Redis."""

    def __init__(
        self,
        backend: Backend,
        *,
        team_retention: int = 10_000,
        run_retention: int = 100_000,
        run_finished_ttl: float = 3600.0,
        agui_strict: bool = False,
        run_lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        """ValueError when ``run_lease_seconds`` is outside gateway.run_lease's bounds."""
        check_lease_setting(run_lease_seconds)
        self._backend = backend
        #: The lease a run holds unless its start asks for another.
        self.run_lease_seconds = run_lease_seconds
        self._publisher = Publisher(
            backend.feeds,
            backend.live,
            FoldCache(backend.feeds, backend.folds),
            Metrics(),
            team_retention=team_retention,
            run_retention=run_retention,
            run_finished_ttl=run_finished_ttl,
            agui_strict=agui_strict,
            # No loop of its own: each feed is written to the index at most once a second.
            activity=None if backend.index is None else FeedActivity(backend.index),
            runs=backend.runs,
            lease_seconds=run_lease_seconds,
        )

    @classmethod
    def connect(
        cls,
        redis_url: str,
        *,
        prefix: str = "gw",
        team_retention: int = 10_000,
        run_retention: int = 100_000,
        run_finished_ttl: float = 3600.0,
        agui_strict: bool = False,
        cluster: bool = False,
        run_lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> Producer:
        """A producer appending to the Redis at ``redis_url`` (same prefix as the gateway;
        with ``cluster``, any node of a Redis Cluster, as GATEWAY_REDIS_CLUSTER).

        Use the gateway's retention settings: each append trims to the retention given.
        ``run_lease_seconds`` is the lease of the runs it starts unless a start asks for
        another (GATEWAY_RUN_LEASE_SECONDS's meaning; ValueError outside 5 to 3600).
        """
        check_lease_setting(run_lease_seconds)
        return cls(
            redis_backend(redis_url, prefix=prefix, cluster=cluster),
            team_retention=team_retention,
            run_retention=run_retention,
            run_finished_ttl=run_finished_ttl,
            agui_strict=agui_strict,
            run_lease_seconds=run_lease_seconds,
        )

    async def publish_team(
        self, tenant: str, team: str, source: dict[str, Any], event: dict[str, Any]
    ) -> Cursor:
        """Append one team event; returns its cursor (the first one, if a retry)."""
        cursors = await self._publisher.publish_team(
            tenant, team, {"source": source, "event": event}, via=Via.PRODUCER
        )
        return cursors[0]

    async def publish_team_batch(
        self, tenant: str, team: str, items: list[dict[str, Any]]
    ) -> list[Cursor]:
        """Append ``[{"source": ..., "event": ...}, ...]`` atomically; one cursor per item."""
        return await self._publisher.publish_team(tenant, team, items, via=Via.PRODUCER)

    async def publish_team_many(
        self, tenant: str, batches: Mapping[str, list[dict[str, Any]]]
    ) -> dict[str, list[Cursor] | GatewayError]:
        """Append to several teams in one Redis round trip: ``{team: [item, ...]}``.

        Validates every batch first (InvalidRequest, naming the team, and nothing is
        appended).  Each team's batch is atomic, the teams are not atomic together:
        the result maps each team to its cursors or to the error its append met
        (IdempotencyKeyReused, Unavailable), so check every value.
        """
        return await self._publisher.publish_team_many(tenant, batches, via=Via.PRODUCER)

    async def publish_run(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        events: dict[str, Any] | list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        lease_seconds: float | None = None,
    ) -> list[Cursor]:
        """Append AG-UI events (one or a list) to a run feed atomically; one cursor each.

        Every append renews the run's lease; one that holds ``RUN_STARTED`` starts it,
        of ``lease_seconds`` (None: the producer's ``run_lease_seconds``; InvalidRequest
        outside 5 to 3600).  Prefer :meth:`run`, which also ends the run.
        """
        return await self._publisher.publish_run(
            tenant,
            thread_id,
            run_id,
            events,
            via=Via.PRODUCER,
            idempotency_key=idempotency_key,
            lease_seconds=lease_seconds,
        )

    async def heartbeat(self, tenant: str, thread_id: str, run_id: str) -> bool:
        """Renew a live run's lease without publishing anything; False when the run is
        not live (never started, ended, or its lease already ran out).  Raises
        InvalidRequest (bad ids) or Unavailable."""
        return await self._publisher.heartbeat(tenant, thread_id, run_id)

    def run(
        self, tenant: str, thread_id: str, run_id: str, *, lease_seconds: float | None = None
    ) -> ProducerRun:
        """A run as an async context manager that always ends it::

            async with producer.run(tenant, thread_id, run_id) as run:
                await run.publish(events)

        Entering publishes ``RUN_STARTED`` (with ``lease_seconds``, as for
        :meth:`publish_run`), and while the block runs the run's lease is renewed in
        the background (see :class:`ProducerRun`).  Leaving publishes ``RUN_FINISHED``,
        or, when the block raised, ``RUN_ERROR`` and the exception goes on; nothing
        when the block already ended the run through :meth:`ProducerRun.publish`.
        InvalidRequest at once for a ``lease_seconds`` outside 5 to 3600.
        """
        lease = requested_lease(lease_seconds, self.run_lease_seconds)
        return ProducerRun(self, tenant, thread_id, run_id, lease_seconds=lease)

    async def publish_sparktide(
        self, tenant: str, events: dict[str, Any] | list[dict[str, Any]]
    ) -> list[Cursor]:
        """Translate SparkTide events (one or a list, of one run) to AG-UI and append them
        to the run feed ``run/<conversationId>/<runId>`` atomically; one cursor per event
        (that of the last AG-UI event derived from it; a retry answers its first)."""
        return await self._publisher.publish_sparktide(tenant, events, via=Via.PRODUCER)

    async def publish_a2ui(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        messages: dict[str, Any] | list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> list[Cursor]:
        """Append A2UI messages (one or a list) to a run that has started, as AG-UI
        activities, atomically; one cursor per message."""
        return await self._publisher.publish_a2ui(
            tenant,
            thread_id,
            run_id,
            messages,
            via=Via.PRODUCER,
            idempotency_key=idempotency_key,
        )

    async def aclose(self) -> None:
        await self._backend.aclose()


class ProducerRun:
    """One run of :meth:`Producer.run`: the async context manager and, inside the
    block, the handle that publishes to the run.

    While the block runs, a task of the context manager's own task group renews the
    run's lease whenever a third of it passed without a publish renewing it, so a run
    stays live however long the block waits between publishes, and a producer that
    dies stops renewing it: its lease runs out and every gateway node's lease sweep
    ends it with ``RUN_ERROR`` ``producer_lost``.  A heartbeat that fails (Redis
    unavailable) is retried within a second and logged once, with its recovery; it
    never interrupts the block.  A heartbeat that finds the run no longer live (ended
    by its lease, or by a publish that did not go through :meth:`publish`) stops the
    renewals and is logged; the block's next :meth:`publish` raises RunEnded.

    Leaving the block publishes the run's end, retried while Redis is unavailable for
    at most :data:`END_SECONDS` (even when the block was cancelled: the end is shielded
    from the cancellation):

    - the block returned: ``RUN_FINISHED``; RunEnded when the run had already ended
      otherwise (its lease ran out), Unavailable when the end could not be published;
    - the block raised an Exception: ``RUN_ERROR`` with the exception's text as its
      message (at most :data:`MAX_ERROR_MESSAGE` characters; viewers see it) and the
      code :data:`PRODUCER_ERROR`; anything else (a cancellation, KeyboardInterrupt):
      ``RUN_ERROR`` with the code :data:`PRODUCER_CANCELLED`.  The block's exception
      goes on unchanged; failing to publish the error is logged, not raised over it;
    - the block ended the run itself (a terminal event through :meth:`publish`, or a
      publish refused with RunEnded): nothing.

    An end that could not be published leaves the run to its lease.
    """

    def __init__(
        self,
        producer: Producer,
        tenant: str,
        thread_id: str,
        run_id: str,
        *,
        lease_seconds: float,
    ) -> None:
        self._producer = producer
        self.tenant = tenant
        self.thread_id = thread_id
        self.run_id = run_id
        #: The lease the run asked for when it started.
        self.lease_seconds = lease_seconds
        #: Seconds between two renewals of the lease (a third of it: two may fail).
        self.heartbeat_interval = lease_seconds / 3
        #: The cursor of the run's ``RUN_STARTED`` (set on entering).
        self.started: Cursor | None = None
        #: Whether the run is known to have ended (its end published, or refused as
        #: ended); nothing more is published at the block's exit then.
        self.ended = False
        self._renewed = 0.0  # monotonic time of the last renewal (publish or heartbeat)
        self._entered = False
        self._tasks: TaskGroup | None = None
        self._outage = Outage(
            log, "renewing a run's lease failed", tenant=tenant, thread_id=thread_id, run_id=run_id
        )

    async def publish(
        self,
        events: dict[str, Any] | list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> list[Cursor]:
        """Append AG-UI events (one or a list) to the run, as :meth:`Producer.publish_run`
        does; one cursor each.  A terminal event (``RUN_FINISHED``, ``RUN_ERROR``) ends
        the run: the block's exit then publishes nothing more, and so does RunEnded
        (the run had ended already)."""
        batch = events if isinstance(events, list) else [events]
        try:
            cursors = await self._producer.publish_run(
                self.tenant,
                self.thread_id,
                self.run_id,
                events,
                idempotency_key=idempotency_key,
            )
        except RunEnded:
            # Refused because the run had ended, unless the body itself put something
            # after its own end (then the run goes on).
            if not any(_ends(event) for event in batch[:-1]):
                self.ended = True
            raise
        self._renewed = time.monotonic()
        if batch and _ends(batch[-1]):
            self.ended = True
        return cursors

    async def __aenter__(self) -> ProducerRun:
        """Publish ``RUN_STARTED`` and start renewing the lease.  Raises what the
        publish raises (then nothing runs, and a start that was appended all the same
        is ended by its lease); entering twice is a RuntimeError."""
        if self._entered:
            raise RuntimeError("a ProducerRun is entered once")
        self._entered = True
        start = {"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id}
        [self.started] = await self._producer.publish_run(
            self.tenant,
            self.thread_id,
            self.run_id,
            start,
            idempotency_key=START_KEY,
            lease_seconds=self.lease_seconds,
        )
        self._renewed = time.monotonic()
        tasks = anyio.create_task_group()
        await tasks.__aenter__()
        tasks.start_soon(self._renew)
        self._tasks = tasks
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the renewals, then publish the run's end (see the class)."""
        tasks, self._tasks = self._tasks, None
        assert tasks is not None
        tasks.cancel_scope.cancel()
        interrupted: BaseException | None = None
        try:
            # A cancellation of the block passes through the group's scope (an outer
            # scope's is raised again below); any other exception stays the block's.
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                await tasks.__aexit__(exc_type, exc, tb)
            else:
                await tasks.__aexit__(None, None, None)
        except BaseException as caught:  # raised again after the end
            interrupted = caught
        if exc is None:
            await self._end(
                {"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id},
                raising=interrupted is None,
            )
        else:
            await self._end(_error_event(exc), raising=False)
        if interrupted is not None and interrupted is not exc:
            raise interrupted

    async def _end(self, event: dict[str, Any], *, raising: bool) -> None:
        """Publish the run's end unless it ended already, shielded from cancellation and
        retried while Redis is unavailable, for at most :data:`END_SECONDS`.  With
        ``raising``, what it could not do is raised (RunEnded, Unavailable, ...);
        otherwise it is logged."""
        if self.ended:
            return
        delay = 0.1
        try:
            with anyio.CancelScope(shield=True), anyio.fail_after(END_SECONDS):
                while True:
                    try:
                        await self.publish(event, idempotency_key=END_KEY)
                        return
                    except Unavailable:
                        await anyio.sleep(delay)
                        delay = min(delay * 2, 1.0)
        except TimeoutError:
            error: Exception = Unavailable(
                f"the run's end could not be published in {END_SECONDS:g} s: its lease will end it"
            )
        except Exception as exc:  # raised or logged below
            error = exc
        if raising:
            raise error
        log.warning(
            "ending a run failed: its lease will end it",
            tenant=self.tenant,
            thread_id=self.thread_id,
            run_id=self.run_id,
            end=event["type"],
            error=str(error),
        )

    async def _renew(self) -> None:
        """Renew the lease whenever a third of it passed since the last renewal, until
        cancelled or the run is found no longer live.  Never raises (but cancelled)."""
        retry = min(1.0, self.heartbeat_interval)
        while True:
            due = self._renewed + self.heartbeat_interval
            await anyio.sleep(max(0.0, due - time.monotonic()))
            if self.ended:
                return
            if time.monotonic() < self._renewed + self.heartbeat_interval:
                continue  # a publish renewed the lease meanwhile
            try:
                live = await self._producer.heartbeat(self.tenant, self.thread_id, self.run_id)
            except Exception as exc:  # logged once; the block goes on
                self._outage.failed(str(getattr(exc, "message", exc)) or type(exc).__name__)
                await anyio.sleep(retry)
                continue
            self._outage.recovered()
            if not live:
                if not self.ended:
                    log.warning(
                        "a run's lease could not be renewed: the run is no longer live",
                        tenant=self.tenant,
                        thread_id=self.thread_id,
                        run_id=self.run_id,
                    )
                return
            self._renewed = time.monotonic()


def _ends(event: object) -> bool:
    """Whether an AG-UI event ends its run."""
    return isinstance(event, dict) and event.get("type") in AGUI_ENDS


def _error_event(exc: BaseException) -> dict[str, Any]:
    """The ``RUN_ERROR`` that ends a run whose block raised ``exc``."""
    if isinstance(exc, Exception):
        message = str(exc) or type(exc).__name__
        return {
            "type": "RUN_ERROR",
            "message": message[:MAX_ERROR_MESSAGE],
            "code": PRODUCER_ERROR,
        }
    return {
        "type": "RUN_ERROR",
        "message": f"the producer stopped the run ({type(exc).__name__})",
        "code": PRODUCER_CANCELLED,
    }
