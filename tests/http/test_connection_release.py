"""A closed client connection (WebSocket or SSE) is freed by reference counting alone.

With the cycle collector off, whatever a connection leaves in a reference cycle stays in
the heap for good; a node under a reconnect storm then pays a collection of thousands of
such objects (a connection, its session, its entries, the cancelled tasks' tracebacks)
every few milliseconds.  Each test closes connections in one way and waits, bounded,
until none of the node's per-connection objects is left.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection

from gateway.app import Gateway
from gateway.fanout.driver import Driver
from gateway.http.websocket import Socket, _Entry
from gateway.net.server import HttpConnection
from tests.support import events as ev
from tests.support.node import auth, open_ws, start_node
from tests.support.wait import until

pytestmark = pytest.mark.anyio

PER_CONNECTION = (HttpConnection, Socket, _Entry, Driver)


@pytest.fixture
async def node(node_redis: tuple[str | None, str]) -> AsyncIterator[Gateway]:
    url, prefix = node_redis
    async with start_node(url, prefix) as n:
        yield n


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def left() -> list[object]:
    # type(), not isinstance(): a dead weak proxy in the heap raises on isinstance.
    return [o for o in gc.get_objects() if type(o) in PER_CONNECTION]


async def team_with_history(node: Gateway, n: int = 3) -> str:
    team = ev.team_id()
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as http:
        for _ in range(n):
            r = await http.post(f"/v1/teams/{team}/events", json=ev.item(), headers=auth())
            assert r.status_code in (200, 201)
    return team


async def subscribe(ws: ClientConnection, team: str, after: str | None = "0:0") -> None:
    """Subscribe to ``team``'s feed, from its start unless ``after`` is None."""
    message = {"type": "subscribe", "feed": f"team/{team}"}
    if after is not None:
        message["after"] = after
    await ws.send(json.dumps(message))


async def recv_type(ws: ClientConnection, kind: str) -> dict[str, object]:
    """The next frame of type ``kind`` (the history before it is skipped)."""
    with anyio.fail_after(5):
        while True:
            frame: dict[str, object] = json.loads(await ws.recv())
            if frame["type"] == kind:
                return frame


async def test_a_socket_closed_after_subscribe_and_unsubscribe_is_freed(
    node: Gateway, no_collector: None
) -> None:
    team = await team_with_history(node)
    async with open_ws(node) as ws:
        await subscribe(ws, team)
        await recv_type(ws, "subscribed")
        await ws.send(json.dumps({"type": "unsubscribe", "feed": f"team/{team}"}))
        await subscribe(ws, team, after=None)
        await recv_type(ws, "subscribed")
        assert left(), "the node holds the open connection"
    await until(lambda: not left(), 5, "the closed connection freed without the collector")


async def test_a_socket_closed_while_its_subscriptions_join_is_freed(
    node: Gateway, no_collector: None
) -> None:
    """Closing at once cancels the entries' tasks mid-join or mid-catch-up."""
    teams = [await team_with_history(node) for _ in range(3)]
    for _ in range(5):
        async with open_ws(node) as ws:
            for team in teams:
                await subscribe(ws, team)
    await until(lambda: not left(), 5, "the closed connections freed without the collector")


async def test_a_socket_whose_connection_is_lost_is_freed(
    node: Gateway, no_collector: None
) -> None:
    """A reset (no close handshake) cancels the session while it waits."""
    team = await team_with_history(node)
    async with open_ws(node) as ws:
        await subscribe(ws, team)
        await recv_type(ws, "subscribed")
        ws.transport.abort()
    await until(lambda: not left(), 5, "the lost connection freed without the collector")


@contextlib.asynccontextmanager
async def team_stream(node: Gateway, team: str, query: str = "") -> AsyncIterator[httpx.Response]:
    """An SSE stream of ``team``'s feed (``query``: the request's query string)."""
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as http,
        http.stream("GET", f"/v1/teams/{team}/events{query}", headers=auth()) as resp,
    ):
        yield resp


async def test_an_sse_stream_the_client_closes_is_freed(node: Gateway, no_collector: None) -> None:
    team = await team_with_history(node)
    async with team_stream(node, team) as resp:
        ids = []
        async for line in resp.aiter_lines():
            if line.startswith("id:"):
                ids.append(line)
            if len(ids) == 3:
                break
        assert {type(o) for o in left()} >= {HttpConnection, Driver}, "streaming"
    await until(lambda: not left(), 5, "the closed stream freed without the collector")


async def test_an_sse_stream_the_node_ends_is_freed(node: Gateway, no_collector: None) -> None:
    """A cursor of another epoch: the node sends ``epoch_restarted`` and ends the stream."""
    team = await team_with_history(node)
    async with team_stream(node, team, "?after=0:0") as resp:
        body = await resp.aread()
    assert b"epoch_restarted" in body
    await until(lambda: not left(), 5, "the ended stream freed without the collector")
