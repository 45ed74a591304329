"""A Python client that follows feeds and resumes by itself.

It connects over WebSocket (``gateway.v1``, many feeds on one socket) or SSE (one
stream per team feed), remembers the last cursor of every feed, and after any
disconnect (network failure, node drain 1012, too slow 4008, token expiry 4001)
reconnects with jittered exponential backoff and resumes each feed after its last
cursor.  Your code sees one unbroken stream per feed, each item once, in order::

    async with FeedClient("http://gw:8080", get_token) as client:
        async for item in client.follow(["team/0190f5a2-..."]):
            if isinstance(item, Event):
                handle(item.feed, item.cursor, item.data)
            else:  # Restarted: the feed could not continue from our cursor
                resync(item.feed)

``token`` is a string or a function returning a fresh one; it is called on every
(re)connect.  When a feed cannot continue from the client's cursor (its history was
trimmed, or the feed was rebuilt in a new epoch) the client yields
:class:`Restarted` and resumes from the cursor the gateway named; items between the
two may be missing, which is what that notice says.

Needs the ``client`` extra for SSE (``httpx``, ``httpx-sse``); WebSocket uses
``websockets``, a core dependency.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

import anyio
import anyio.abc
import msgspec
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from gateway.cursor import Cursor, parse_cursor


class Event(msgspec.Struct, frozen=True):
    """One item of a feed (a TeamItem's ``data`` for team feeds)."""

    feed: str
    cursor: str
    data: Any


class Restarted(msgspec.Struct, frozen=True):
    """The feed could not continue from the client's cursor; it resumes from ``cursor``."""

    feed: str
    cursor: str


Item = Event | Restarted

#: Close codes after which reconnecting is pointless without a change (bad request).
_FATAL_CLOSES = {1008}


class FeedError(Exception):
    """The gateway refused a feed for good (not found, invalid cursor, no access)."""

    def __init__(self, feed: str | None, code: str, message: str) -> None:
        super().__init__(f"{feed or 'socket'}: {code}: {message}")
        self.feed = feed
        self.code = code


class FeedClient:
    def __init__(
        self,
        base_url: str,
        token: str | Callable[[], str],
        *,
        transport: Literal["ws", "sse"] = "ws",
        cursors: dict[str, str] | None = None,
        min_backoff: float = 0.1,
        max_backoff: float = 10.0,
        max_attempts: int | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.transport = transport
        #: The last cursor received per feed; pass it to a later client to resume.
        self.cursors: dict[str, str] = dict(cursors or {})
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.max_attempts = max_attempts
        #: How many times the client has reconnected (for tests and dashboards).
        self.reconnects = 0
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> FeedClient:
        self._stack = contextlib.AsyncExitStack()
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        await self._stack.aclose()
        self._tg = None

    def token(self) -> str:
        return self._token() if callable(self._token) else self._token

    def _accept(self, feed: str, cursor: str) -> bool:
        """True for an item after the feed's last cursor (so nothing is yielded twice)."""
        last = self.cursors.get(feed)
        if last is not None:
            new, old = parse_cursor(cursor), parse_cursor(last)
            if new.epoch == old.epoch and new.offset <= old.offset:
                return False
        self.cursors[feed] = cursor
        return True

    async def follow(self, feeds: Sequence[str]) -> AsyncIterator[Item]:
        """Yield items of ``feeds`` forever, reconnecting and resuming as needed.

        Raises :class:`FeedError` when the gateway refuses a feed for good, and gives
        up after ``max_attempts`` failed connection attempts in a row when set.
        """
        if self.transport == "sse":
            async for item in self._sse_follow(feeds):
                yield item
            return
        attempt = 0
        while True:
            progressed = False
            try:
                async for item in self._ws(feeds):
                    progressed = True
                    attempt = 0
                    yield item
            except (OSError, WebSocketException, anyio.EndOfStream, _Retry) as exc:
                closed = exc.rcvd if isinstance(exc, ConnectionClosed) else None
                if closed is not None and closed.code in _FATAL_CLOSES:
                    raise FeedError(None, "policy_violation", closed.reason) from exc
                if isinstance(exc, InvalidStatus) and exc.response.status_code in (400, 403):
                    raise FeedError(None, "refused", str(exc)) from exc
            if not progressed:
                attempt += 1
                if self.max_attempts is not None and attempt > self.max_attempts:
                    raise FeedError(None, "unavailable", "gave up reconnecting")
            self.reconnects += 1
            await anyio.sleep(self._backoff(attempt))

    def _backoff(self, attempt: int) -> float:
        # Full jitter: many clients of a drained node do not come back at once.
        ceiling = min(self.max_backoff, self.min_backoff * (2 ** max(0, attempt - 1)))
        return random.uniform(self.min_backoff / 2, max(self.min_backoff, ceiling))

    # -- WebSocket -------------------------------------------------------------------

    async def _ws(self, feeds: Sequence[str]) -> AsyncIterator[Item]:
        url = self.base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        async with connect(
            url + "/v1/ws",
            subprotocols=["gateway.v1"],  # type: ignore[list-item]
            additional_headers={"Authorization": f"Bearer {self.token()}"},
            max_size=None,
        ) as socket:
            pending = set(feeds)
            for feed in feeds:
                message: dict[str, str] = {"type": "subscribe", "feed": feed}
                if feed in self.cursors:
                    message["after"] = self.cursors[feed]
                await socket.send(json.dumps(message))
            async for raw in socket:
                frame = json.loads(raw)
                kind = frame.get("type")
                feed = frame.get("feed")
                if kind == "event":
                    if self._accept(feed, frame["cursor"]):
                        yield Event(feed, frame["cursor"], frame["data"])
                elif kind == "epoch_restarted":
                    self.cursors[feed] = frame["cursor"]
                    yield Restarted(feed, frame["cursor"])
                    pending.add(feed)  # a not_found now is retryable, as on connect
                    await socket.send(
                        json.dumps({"type": "subscribe", "feed": feed, "after": frame["cursor"]})
                    )
                elif kind == "error":
                    code = frame.get("code", "")
                    if code == "not_found" and feed in pending:
                        # D1: a feed whose data was lost is 404 until published again.
                        raise _Retry
                    raise FeedError(feed, code, frame.get("message", ""))
                elif kind == "subscribed":
                    pending.discard(feed)

    # -- SSE ---------------------------------------------------------------------------

    async def _sse_follow(self, feeds: Sequence[str]) -> AsyncIterator[Item]:
        """One stream per feed, each reconnecting on its own, merged in arrival order."""
        if self._tg is None:
            raise RuntimeError("use 'async with FeedClient(...)' to follow feeds over SSE")
        send, receive = anyio.create_memory_object_stream[Item | FeedError](0)
        scope = anyio.CancelScope()

        async def run_all() -> None:
            with scope:
                async with anyio.create_task_group() as tg:
                    for feed in feeds:
                        tg.start_soon(self._sse_feed, feed, send)

        self._tg.start_soon(run_all)
        try:
            async with receive:
                async for item in receive:
                    if isinstance(item, FeedError):
                        raise item
                    yield item
        finally:
            scope.cancel()

    async def _sse_feed(
        self, feed: str, send: anyio.abc.ObjectSendStream[Item | FeedError]
    ) -> None:
        import httpx
        from httpx_sse import aconnect_sse

        kind, _, team = feed.partition("/")
        if kind != "team":
            await send.send(FeedError(feed, "invalid_request", "SSE follows team feeds"))
            return
        attempt = 0
        timeout = httpx.Timeout(10, read=None)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=timeout) as client:
            while True:
                headers = {"Authorization": f"Bearer {self.token()}"}
                if feed in self.cursors:
                    headers["Last-Event-ID"] = self.cursors[feed]
                try:
                    async with aconnect_sse(
                        client, "GET", f"/v1/teams/{team}/events", headers=headers
                    ) as source:
                        status = source.response.status_code
                        if status not in (200, 404, 429, 502, 503, 504):
                            body = json.loads(await source.response.aread())["error"]
                            await send.send(FeedError(feed, body["code"], body["message"]))
                            return
                        async for sse in source.aiter_sse() if status == 200 else _nothing():
                            attempt = 0
                            if not sse.data:
                                continue  # not an event (some decoders yield these)
                            data = json.loads(sse.data)
                            if data.get("kind") == "epoch_restarted":
                                self.cursors[feed] = sse.id
                                await send.send(Restarted(feed, sse.id))
                            elif self._accept(feed, sse.id):
                                await send.send(Event(feed, sse.id, data))
                except (httpx.HTTPError, OSError, ValueError, KeyError):
                    pass  # reconnect below
                attempt += 1
                if self.max_attempts is not None and attempt > self.max_attempts:
                    await send.send(FeedError(feed, "unavailable", "gave up reconnecting"))
                    return
                self.reconnects += 1
                await anyio.sleep(self._backoff(attempt))


async def _nothing() -> AsyncIterator[Any]:
    return
    yield  # pragma: no cover


class _Retry(Exception):
    """Reconnect (with backoff) and resume."""


__all__ = ["Cursor", "Event", "FeedClient", "FeedError", "Item", "Restarted"]
