"""Clients of the fault tests: WebSocket and SSE followers that resume, recording everything.

A follower follows team feeds through one URL (a load balancer or one node) until it
is cancelled, and behaves as a correct client of decisions D2/D6 should:

- on any disconnect (a close frame, a cut stream, an error) it reconnects at once and
  resumes every feed after its last cursor (a connect that fails is retried after
  :data:`RETRY_DELAY`);
- on ``epoch_restarted`` it resubscribes with the cursor it was given (WebSocket: on the
  same socket; SSE: the stream closes, it reconnects with that ``Last-Event-ID``);
- on ``not_found`` / ``unavailable`` (a feed whose data was lost, a store that cannot
  be reached) it retries that feed after :data:`RETRY_DELAY` (D1: retryable).

It records, per feed, a :class:`tests.support.delivery.Trace` (every event and notice,
duplicates included, never filtered), every connection (the node that served it,
from HAProxy's ``X-Gateway-Node``, when it opened and closed and why), notes (error
frames, refused requests, unexpected messages) and the delivery latency of every
event stamped by :class:`tests.support.publisher.Publisher`.  It never sleeps to
synchronise; callers poll its state with :func:`tests.support.wait.until`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from httpx_sse import aconnect_sse
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Subprotocol

from tests.support.delivery import Pos, Received, Restarted, Trace, pos
from tests.support.node import auth
from tests.support.publisher import sent_at

#: Seconds before retrying a connect that failed or a feed that was not found.
RETRY_DELAY = 0.1
OPEN_TIMEOUT = 5.0
#: An SSE stream silent this long is treated as dead (keep the gateway's keepalive shorter).
SSE_READ_TIMEOUT = 20.0
RETRYABLE_CODES = frozenset({"not_found", "unavailable"})


@dataclass
class Connection:
    """One connection (WebSocket) or one stream (SSE) of a follower."""

    node: str
    opened: float
    feed: str | None = None  # SSE: the feed of the stream
    closed: float | None = None
    #: A WebSocket close code ("1012"), "end" (an SSE stream ended), "reset" (it ended
    #: after epoch_restarted), "cut" (no close frame / truncated), "error: ...".
    reason: str | None = None


@dataclass(frozen=True)
class Note:
    at: float
    feed: str | None
    what: str


class Follower:
    """What the WebSocket and SSE followers share: the records."""

    transport = "?"

    def __init__(
        self, name: str, feeds: Sequence[str], *, start: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.feeds = list(feeds)
        start = start or {}
        self.traces = {
            f: Trace(name, f, pos(start[f]) if f in start else None, []) for f in self.feeds
        }
        self.connections: list[Connection] = []
        self.notes: list[Note] = []
        self.latencies: list[float] = []

    async def run(self, url: str) -> None:
        """Follow through ``url`` until cancelled (see the subclasses)."""
        raise NotImplementedError

    # -- state -------------------------------------------------------------

    def resume_cursor(self, feed: str) -> str | None:
        """Where this client resumes ``feed``: its last event or notice, else its start."""
        trace = self.traces[feed]
        p: Pos | None = trace.observations[-1].cursor if trace.observations else trace.start
        return None if p is None else f"{p[0]}:{p[1]}"

    def position(self, feed: str) -> Pos | None:
        cursor = self.resume_cursor(feed)
        return None if cursor is None else pos(cursor)

    def received(self, feed: str) -> int:
        return sum(isinstance(o, Received) for o in self.traces[feed].observations)

    def restarts(self, feed: str | None = None) -> list[Restarted]:
        feeds = [feed] if feed is not None else self.feeds
        return [o for f in feeds for o in self.traces[f].observations if isinstance(o, Restarted)]

    def notes_with(self, text: str) -> list[Note]:
        return [n for n in self.notes if text in n.what]

    @property
    def open_connection(self) -> Connection | None:
        return next((c for c in reversed(self.connections) if c.closed is None), None)

    # -- recording ---------------------------------------------------------

    def _note(self, feed: str | None, what: str) -> None:
        self.notes.append(Note(time.monotonic(), feed, what))

    def _event(self, feed: str, cursor: str, item: dict[str, Any]) -> None:
        now = time.monotonic()
        c = item.get("cursor", {})
        if f"{c.get('epoch')}:{c.get('offset')}" != cursor:
            self._note(feed, f"frame cursor {cursor} != item cursor {c}")
        payload = str(item.get("event", {}).get("event_id"))
        self.traces[feed].observations.append(Received(pos(cursor), payload, now))
        sent = sent_at(item)
        if sent is not None:
            self.latencies.append(now - sent)

    def _restart(self, feed: str, cursor: str) -> None:
        self.traces[feed].observations.append(Restarted(pos(cursor), time.monotonic()))


class WsFollower(Follower):
    """Every feed on one WebSocket (``gateway.v1``).  ``await follower.run(url)``."""

    transport = "ws"

    async def run(self, url: str) -> None:
        while True:
            try:
                async with connect(
                    url,
                    subprotocols=[Subprotocol("gateway.v1")],
                    additional_headers=auth(),
                    compression=None,
                    proxy=None,
                    open_timeout=OPEN_TIMEOUT,
                    close_timeout=2,
                    ping_interval=None,
                    max_size=None,
                ) as ws:
                    node = ws.response.headers.get("x-gateway-node") if ws.response else None
                    conn = Connection(node or url, time.monotonic())
                    self.connections.append(conn)
                    conn.reason = await self._session(ws)
                    conn.closed = time.monotonic()
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                self._note(None, f"connect failed: {exc!r}")
                await anyio.sleep(RETRY_DELAY)  # retry backoff after a failed connect

    async def _subscribe(self, ws: ClientConnection, feed: str) -> None:
        message: dict[str, Any] = {"type": "subscribe", "feed": feed}
        if (after := self.resume_cursor(feed)) is not None:
            message["after"] = after
        await ws.send(json.dumps(message))

    async def _subscribe_later(self, ws: ClientConnection, feed: str) -> None:
        await anyio.sleep(RETRY_DELAY)  # retry backoff for a retryable error
        with contextlib.suppress(ConnectionClosed):
            await self._subscribe(ws, feed)

    async def _session(self, ws: ClientConnection) -> str:
        async with anyio.create_task_group() as tg:
            try:
                for feed in self.feeds:
                    await self._subscribe(ws, feed)
                while True:
                    frame = json.loads(await ws.recv())
                    kind, feed = frame.get("type"), frame.get("feed")
                    if kind == "event" and feed in self.traces:
                        self._event(feed, frame["cursor"], frame["data"])
                    elif kind == "epoch_restarted" and feed in self.traces:
                        self._restart(feed, frame["cursor"])
                        await self._subscribe(ws, feed)
                    elif kind == "subscribed":
                        pass
                    elif kind == "error" and frame.get("code") in RETRYABLE_CODES and feed:
                        after = self.resume_cursor(feed)
                        self._note(feed, f"error {frame['code']} (after {after})")
                        tg.start_soon(self._subscribe_later, ws, feed)
                    else:
                        self._note(feed, f"unexpected frame {frame}")
            except ConnectionClosed as exc:
                return str(exc.rcvd.code) if exc.rcvd is not None else "cut"
            finally:
                tg.cancel_scope.cancel()
        raise AssertionError("unreachable")  # pragma: no cover


class SseFollower(Follower):
    """One SSE stream per feed (``GET /v1/teams/{team}/events``).  ``await run(url)``."""

    transport = "sse"

    async def run(self, base_url: str) -> None:
        timeout = httpx.Timeout(OPEN_TIMEOUT, read=SSE_READ_TIMEOUT)
        limits = httpx.Limits(max_keepalive_connections=0)  # a fresh connection each time
        async with (
            httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client,
            anyio.create_task_group() as tg,
        ):
            for feed in self.feeds:
                tg.start_soon(self._follow, client, feed)

    async def _follow(self, client: httpx.AsyncClient, feed: str) -> None:
        team = feed.removeprefix("team/")
        while True:
            if not await self._stream(client, feed, team):
                await anyio.sleep(RETRY_DELAY)  # retry backoff after a refused stream

    async def _stream(self, client: httpx.AsyncClient, feed: str, team: str) -> bool:
        """One stream; True when it was served (reconnect at once), False when refused."""
        headers = auth()
        after = self.resume_cursor(feed)
        if after is not None:
            headers["Last-Event-ID"] = after
        conn: Connection | None = None
        try:
            async with aconnect_sse(
                client, "GET", f"/v1/teams/{team}/events", headers=headers
            ) as source:
                r = source.response
                node = r.headers.get("x-gateway-node") or str(client.base_url)
                if r.status_code != 200:
                    body = (await r.aread()).decode(errors="replace")[:200]
                    self._note(feed, f"status {r.status_code} {body} (after {after})")
                    return False
                conn = Connection(node, time.monotonic(), feed)
                self.connections.append(conn)
                conn.reason = "end"
                async for sse in source.aiter_sse():
                    data = json.loads(sse.data)
                    if data.get("kind") == "epoch_restarted":
                        self._restart(feed, sse.id)
                        conn.reason = "reset"
                    elif data.get("kind") == "event":
                        self._event(feed, sse.id, data)
                    else:
                        self._note(feed, f"unexpected item {data}")
        except httpx.HTTPError as exc:
            if conn is None:
                self._note(feed, f"connect failed: {exc!r}")
                return False
            conn.reason = "cut"
        finally:
            if conn is not None:
                conn.closed = time.monotonic()
        return True


async def read_feed(ws_url: str, feed: str, within: float = 20.0) -> list[tuple[str, str]]:
    """The feed as the store serves it now: every retained item of the current epoch.

    A fresh WebSocket subscribes without a cursor and reads up to the head that its
    ``subscribed`` answer names.  A feed that does not exist reads as ``[]``.
    """
    items: list[tuple[str, str]] = []
    with anyio.fail_after(within, reason=f"reading {feed} to its head"):
        async with connect(
            ws_url,
            subprotocols=[Subprotocol("gateway.v1")],
            additional_headers=auth(),
            compression=None,
            proxy=None,
            open_timeout=OPEN_TIMEOUT,
            ping_interval=None,
            max_size=None,
        ) as ws:
            await ws.send(json.dumps({"type": "subscribe", "feed": feed}))
            head: Pos | None = None
            while True:
                frame = json.loads(await ws.recv())
                if frame.get("type") == "subscribed":
                    head = pos(frame["cursor"])
                    if head[1] == 0:
                        return items
                elif frame.get("type") == "event":
                    items.append((frame["cursor"], str(frame["data"]["event"]["event_id"])))
                    if head is not None and pos(frame["cursor"]) >= head:
                        return items
                elif frame.get("type") == "error" and frame.get("code") == "not_found":
                    return items
                else:
                    raise AssertionError(f"reading {feed}: unexpected frame {frame}")


__all__ = [
    "RETRY_DELAY",
    "Connection",
    "Follower",
    "Note",
    "SseFollower",
    "WsFollower",
    "read_feed",
]
