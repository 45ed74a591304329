"""The producer of the fault tests: publishes team events over HTTP and records the answers.

:class:`Publisher` publishes batches of team events (``POST /v1/teams/{team}/events``)
to one base URL (a load balancer) or round-robin over several (one per node), and
records, per feed (``"team/<id>"``):

- ``acked``: every ``(cursor, event_id)`` a 200 answered, in order (what the delivery
  checker compares everything with);
- ``attempted``: every ``event_id`` ever sent, answered or not (an item whose answer
  was lost may still be in the feed: it is not a phantom).

:meth:`Publisher.publish` retries what a client should retry (a transport error, 429,
502, 503, 504) with the same body, so the same ``event_id``\\ s (a retry is safe: D4),
with a short backoff, for at most ``retry_within`` seconds.  :meth:`Publisher.attempt`
sends once, without retrying, and reports status, error code and elapsed time (the
hang tests measure that).  Each event's text starts with ``t:<monotonic seconds>|`` (the
send time, see :func:`sent_at`), padded to ``text_bytes``, so followers in the same
process can measure delivery latency.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from tests.support import events as ev
from tests.support.node import auth

RETRYABLE = frozenset({429, 502, 503, 504})
#: Seconds one publish is retried before the publisher gives up (and fails the test).
RETRY_WITHIN = 30.0
BACKOFF_MIN = 0.05
BACKOFF_MAX = 0.5
REQUEST_TIMEOUT = 15.0


class PublishFailed(AssertionError):
    """A publish that could not be completed (retries exhausted, or a final error)."""


@dataclass(frozen=True)
class Attempt:
    """One request, not retried."""

    status: int | None  # None: transport error
    code: str | None  # the error code of a JSON error body
    elapsed: float
    cursors: list[str] | None
    error: str | None = None


def sent_at(team_item: dict[str, Any]) -> float | None:
    """The send time stamped in a team item's text by :class:`Publisher`, if any."""
    text = team_item.get("event", {}).get("data", {}).get("text", "")
    if not isinstance(text, str) or not text.startswith("t:"):
        return None
    try:
        return float(text[2:].split("|", 1)[0])
    except ValueError:
        return None


class Publisher:
    """See the module docstring.  Use as ``async with``."""

    def __init__(
        self,
        base_urls: str | Sequence[str],
        teams: Sequence[str],
        *,
        tenant: str = "acme",
        text_bytes: int = 64,
        max_batch: int = 3,
        retry_within: float = RETRY_WITHIN,
    ) -> None:
        self.urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        self.teams = list(teams)
        self.tenant = tenant
        self.text_bytes = text_bytes
        self.max_batch = max_batch
        self.retry_within = retry_within
        self.acked: dict[str, list[tuple[str, str]]] = {f"team/{t}": [] for t in teams}
        self.attempted: dict[str, set[str]] = {f"team/{t}": set() for t in teams}
        self.statuses: Counter[str] = Counter()
        self.retries = 0
        self._clients: list[httpx.AsyncClient] = []
        self._next = 0

    async def __aenter__(self) -> Publisher:
        self._clients = [httpx.AsyncClient(base_url=u, timeout=REQUEST_TIMEOUT) for u in self.urls]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for c in self._clients:
            await c.aclose()

    # -- bodies ------------------------------------------------------------

    def body(self, team: str, n: int) -> list[dict[str, Any]]:
        stamp = f"t:{time.monotonic():.6f}|"
        text = stamp + "x" * max(0, self.text_bytes - len(stamp))
        items = [ev.item(ev.message(text)) for _ in range(n)]
        self.attempted[f"team/{team}"].update(i["event"]["event_id"] for i in items)
        return items

    def _client(self) -> httpx.AsyncClient:
        client = self._clients[self._next % len(self._clients)]
        self._next += 1
        return client

    def _record(self, team: str, body: list[dict[str, Any]], cursors: list[str]) -> None:
        if len(cursors) != len(body):
            raise PublishFailed(f"{len(body)} items answered with {len(cursors)} cursors")
        ids = [item["event"]["event_id"] for item in body]
        self.acked[f"team/{team}"] += list(zip(cursors, ids, strict=True))

    # -- publishing --------------------------------------------------------

    async def attempt(
        self, team: str, n: int = 1, *, request_timeout: float = REQUEST_TIMEOUT, body: Any = None
    ) -> Attempt:
        """One request without retry; a 200 is recorded as acknowledged."""
        body = body if body is not None else self.body(team, n)
        started = time.monotonic()
        try:
            r = await self._client().post(
                f"/v1/teams/{team}/events",
                json=body,
                headers=auth(self.tenant),
                timeout=request_timeout,
            )
        except httpx.HTTPError as exc:
            self.statuses["transport"] += 1
            return Attempt(None, None, time.monotonic() - started, None, repr(exc))
        elapsed = time.monotonic() - started
        self.statuses[str(r.status_code)] += 1
        if r.status_code == 200:
            cursors: list[str] = r.json()["cursors"]
            self._record(team, body, cursors)
            return Attempt(200, None, elapsed, cursors)
        code = None
        with contextlib.suppress(ValueError, KeyError, TypeError):
            code = r.json()["error"]["code"]
        return Attempt(r.status_code, code, elapsed, None, r.text[:200])

    async def publish(self, team: str, n: int = 1) -> list[str]:
        """Publish ``n`` items, retrying (same body) what is retryable; their cursors."""
        body = self.body(team, n)
        deadline = time.monotonic() + self.retry_within
        backoff = BACKOFF_MIN
        history: list[str] = []
        while True:
            a = await self.attempt(team, n, body=body)
            if a.status == 200:
                assert a.cursors is not None
                return a.cursors
            history.append(f"{a.status} {a.code or a.error}")
            if a.status is not None and a.status not in RETRYABLE:
                raise PublishFailed(f"publish to {team}: {a.status} {a.error}")
            if time.monotonic() + backoff > deadline:
                raise PublishFailed(
                    f"publish to {team} not done within {self.retry_within}s: {history[-5:]}"
                )
            self.retries += 1
            await anyio.sleep(backoff)  # retry backoff
            backoff = min(BACKOFF_MAX, backoff * 2)

    async def run(self, stop: anyio.Event, *, pace: float = 0.01) -> None:
        """Publish batches of 1..``max_batch`` items round the teams until ``stop``."""
        i = 0
        while not stop.is_set():
            for team in self.teams:
                await self.publish(team, 1 + i % self.max_batch)
                i += 1
            await anyio.sleep(pace)  # pacing: a steady stream, not a flood

    # -- counts ------------------------------------------------------------

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def head(self, feed: str) -> str | None:
        """The last acknowledged cursor of ``feed``."""
        items = self.acked[feed]
        return items[-1][0] if items else None

    def summary(self) -> str:
        return f"acked={self.total} retries={self.retries} statuses={dict(self.statuses)}"


__all__ = ["RETRYABLE", "Attempt", "PublishFailed", "Publisher", "sent_at"]
