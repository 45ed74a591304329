"""The Python producer API: an agent runtime validates in-process and appends straight
to Redis (no HTTP hop), with exactly the validation of the HTTP routes.

Example::

    producer = Producer.connect("redis://localhost:6379/0")
    cursor = await producer.publish_team(tenant, team, source, event)
    await producer.aclose()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.activity import FeedActivity
from gateway.cursor import Cursor
from gateway.errors import GatewayError
from gateway.fanout.foldcache import FoldCache
from gateway.metrics import Metrics
from gateway.publisher import Publisher, Via
from gateway.store.interfaces import Backend
from gateway.store.redis import redis_backend


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
    ) -> None:
        self._backend = backend
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
    ) -> Producer:
        """A producer appending to the Redis at ``redis_url`` (same prefix as the gateway;
        with ``cluster``, any node of a Redis Cluster, as GATEWAY_REDIS_CLUSTER).

        Use the gateway's retention settings: each append trims to the retention given.
        """
        return cls(
            redis_backend(redis_url, prefix=prefix, cluster=cluster),
            team_retention=team_retention,
            run_retention=run_retention,
            run_finished_ttl=run_finished_ttl,
            agui_strict=agui_strict,
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
    ) -> list[Cursor]:
        """Append AG-UI events (one or a list) to a run feed atomically; one cursor each."""
        return await self._publisher.publish_run(
            tenant,
            thread_id,
            run_id,
            events,
            via=Via.PRODUCER,
            idempotency_key=idempotency_key,
        )

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
