"""Who ended an SSE stream or a WebSocket, as the node counts it
(``gateway_disconnects_total``) and logs it: the client's leaving is ``client``; a node
that stops (without draining first) ends its streams itself: ``shutdown``."""

from __future__ import annotations

import contextlib

import anyio
import httpx
import pytest
import websockets
from httpx_sse import aconnect_sse

from gateway.app import Gateway
from tests.support import events as ev
from tests.support.node import auth, metric, token
from tests.support.wait import until

pytestmark = pytest.mark.anyio


def ends(node: Gateway, reason: str) -> float:
    return metric(node, "gateway_disconnects_total", transport="sse", reason=reason)


async def test_a_stream_the_node_stops_is_its_shutdown_and_one_left_is_the_clients(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    r = await client.post(f"/v1/teams/{team}/events", json=[ev.item()], headers=auth())
    assert r.status_code == 200, r.text
    path = f"/v1/teams/{team}/events"
    with anyio.fail_after(10):
        # One client leaves.
        async with aconnect_sse(client, "GET", path, headers=auth()) as source:
            await anext(source.aiter_sse())
        await until(lambda: ends(node, "client") == 1, 5, "the client's leaving counted")
        # The node stops under another (as it does on its way out, without a drain).
        async with aconnect_sse(client, "GET", path, headers=auth()) as source:
            events = source.aiter_sse()
            await anext(events)
            await node.server.aclose()
            with contextlib.suppress(httpx.HTTPError):
                async for _ in events:
                    pass
    assert ends(node, "shutdown") == 1
    assert ends(node, "client") == 1


async def test_a_socket_the_node_stops_is_its_shutdown_and_one_left_is_the_clients(
    node: Gateway,
) -> None:
    def ws_ends(reason: str) -> float:
        return metric(node, "gateway_disconnects_total", transport="ws", reason=reason)

    url = f"ws://{node.settings.host}:{node.port}/v1/ws"
    offer = ["gateway.v1", f"bearer.{token()}"]
    with anyio.fail_after(10):
        async with websockets.connect(url, subprotocols=offer):  # type: ignore[arg-type]
            pass  # the client closes
        await until(lambda: ws_ends("client") == 1, 5, "the client's leaving counted")
        async with websockets.connect(url, subprotocols=offer) as socket:  # type: ignore[arg-type]
            await node.server.aclose()  # the node stops under it, without a drain
            with contextlib.suppress(websockets.ConnectionClosed):
                await socket.recv()
        await until(lambda: ws_ends("shutdown") == 1, 5, "the node's stop counted")
    assert ws_ends("client") == 1
