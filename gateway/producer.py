"""Publishing: the one validate-then-append path, and the Python producer API.

:class:`Publisher` is shared by the HTTP route, the Redis inbox and :class:`Producer`,
so every entry path applies exactly the same validation (decisions D4).

Example (an agent runtime publishing straight into Redis, no HTTP hop)::

    producer = Producer.connect("redis://localhost:6379/0")
    cursor = await producer.publish_team(tenant, team, source, event)
    await producer.aclose()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from gateway.cursor import Cursor
from gateway.errors import InvalidRequest
from gateway.feed import NewItem, is_team_id, team_feed
from gateway.log.base import FeedLog
from gateway.metrics import Metrics
from gateway.validate import validate_team_publish
from gateway.wire.teamitem import team_payload


class Publisher:
    def __init__(self, feed_log: FeedLog, metrics: Metrics, *, team_retention: int) -> None:
        self.log = feed_log
        self.metrics = metrics
        self.team_retention = team_retention

    async def publish_team_json(
        self,
        tenant: str,
        team: str,
        raw: bytes,
        *,
        path: str,
        admit: Callable[[int], None] | None = None,
    ) -> list[Cursor]:
        """:meth:`publish_team` for a body still in JSON text (HTTP, the inbox)."""
        try:
            if not raw:
                raise InvalidRequest("body: expected JSON, got nothing")
            try:
                body = msgspec.json.decode(raw)
            except msgspec.DecodeError as exc:
                raise InvalidRequest(f"body: malformed JSON ({exc})") from exc
            except RecursionError as exc:
                raise InvalidRequest("body: JSON nested too deeply") from exc
        except InvalidRequest as exc:
            self.reject(exc, path)
            raise
        return await self.publish_team(tenant, team, body, path=path, admit=admit)

    def reject(self, exc: Exception, path: str) -> None:
        """Count a rejected publish (every entry path, every reason)."""
        code = getattr(exc, "code", "internal")
        self.metrics.publish_rejections.labels(code=str(code), path=path).inc()

    async def publish_team(
        self,
        tenant: str,
        team: str,
        body: object,
        *,
        path: str,
        admit: Callable[[int], None] | None = None,
    ) -> list[Cursor]:
        """Validate a D4 body (one item or an array) and append it, all or nothing.

        Raises InvalidRequest, IdempotencyKeyReused or Unavailable.  ``path`` names the
        entry path for metrics (http, inbox, producer).  ``admit``, if given, is called
        with the number of items before any validation and may refuse the whole body
        by raising (the HTTP route's publish rate limit).
        """
        try:
            if admit is not None:
                admit(len(body) if isinstance(body, list) else 1)
            if not is_team_id(team):
                raise InvalidRequest("team: must be a lowercase UUID")
            try:
                items = validate_team_publish(body, tenant=tenant, team=team)
                new = [
                    NewItem(item.event_id, team_payload(item.source, item.event), item.host_opening)
                    for item in items
                ]
            except RecursionError as exc:
                raise InvalidRequest("body: JSON nested too deeply") from exc
            result = await self.log.append(
                team_feed(tenant, team), new, retention=self.team_retention
            )
        except Exception as exc:
            self.reject(exc, path)
            raise
        self.metrics.published.labels(kind="team", path=path).inc(len(new))
        return result.cursors


class Producer:
    """The Python producer API: validate in-process and append directly to Redis."""

    def __init__(self, feed_log: FeedLog, *, team_retention: int = 10_000) -> None:
        self._log = feed_log
        self._publisher = Publisher(feed_log, Metrics(), team_retention=team_retention)

    @classmethod
    def connect(
        cls, redis_url: str, *, prefix: str = "gw", team_retention: int = 10_000
    ) -> Producer:
        """A producer appending to the Redis at ``redis_url`` (same prefix as the gateway)."""
        from gateway.log.redis import RedisLog

        return cls(RedisLog(redis_url, prefix=prefix), team_retention=team_retention)

    async def publish_team(
        self, tenant: str, team: str, source: dict[str, Any], event: dict[str, Any]
    ) -> Cursor:
        """Append one team event; returns its cursor (the first one, if a retry)."""
        cursors = await self._publisher.publish_team(
            tenant, team, {"source": source, "event": event}, path="producer"
        )
        return cursors[0]

    async def publish_team_batch(
        self, tenant: str, team: str, items: list[dict[str, Any]]
    ) -> list[Cursor]:
        """Append ``[{"source": ..., "event": ...}, ...]`` atomically; one cursor per item."""
        return await self._publisher.publish_team(tenant, team, items, path="producer")

    async def aclose(self) -> None:
        await self._log.aclose()
