"""Connection limits and the publish rate limit over real sockets (D5, D6: 429 rate_limited)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from anyio.abc import SocketAttribute
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidStatus

from gateway.app import Gateway
from tests.support import events as ev
from tests.support.node import auth, metric, open_ws, start_node, token
from tests.support.wait import until

pytestmark = pytest.mark.anyio


async def publish(client: httpx.AsyncClient, team: str, tenant: str = "acme") -> None:
    r = await client.post(f"/v1/teams/{team}/events", json=[ev.item()], headers=auth(tenant))
    assert r.status_code == 200, r.text


def assert_rate_limited(status: int, body: bytes | str) -> dict[str, Any]:
    assert status == 429
    parsed: dict[str, Any] = json.loads(body)
    assert list(parsed) == ["error"]
    assert sorted(parsed["error"]) == ["code", "message"]
    assert parsed["error"]["code"] == "rate_limited"
    return parsed


@contextlib.asynccontextmanager
async def sse_stream(
    client: httpx.AsyncClient, team: str, tenant: str = "acme"
) -> AsyncIterator[httpx.Response]:
    with anyio.fail_after(5):
        cm = client.stream("GET", f"/v1/teams/{team}/events", headers=auth(tenant))
        response = await cm.__aenter__()
    try:
        assert response.status_code == 200
        yield response
    finally:
        await cm.__aexit__(None, None, None)


async def refused_sse(client: httpx.AsyncClient, team: str, tenant: str = "acme") -> str:
    with anyio.fail_after(5):
        r = await client.get(f"/v1/teams/{team}/events", headers=auth(tenant))
    message: str = assert_rate_limited(r.status_code, r.content)["error"]["message"]
    return message


async def refused_ws(node: Gateway, tenant: str = "acme") -> str:
    with anyio.fail_after(5), pytest.raises(InvalidStatus) as info:
        async with open_ws(node, headers=auth(tenant)):
            pass
    response = info.value.response
    message: str = assert_rate_limited(response.status_code, response.body or b"")["error"][
        "message"
    ]
    return message


async def test_sse_streams_past_the_node_limit_are_refused() -> None:
    async with (
        start_node(max_connections=2) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        limits = node.context.limits
        team = ev.team_id()
        await publish(client, team)
        async with sse_stream(client, team):
            async with sse_stream(client, team):
                assert limits.count() == 2
                await refused_sse(client, team)
                assert limits.count() == 2
            await until(lambda: limits.count() == 1, 5, "one stream released")
            async with sse_stream(client, team):
                assert limits.count() == 2
        await until(lambda: limits.count() == 0, 5, "every stream released")
        assert metric(node, "gateway_limited_total", limit="connections") == 1


async def test_websocket_upgrades_past_the_node_limit_are_refused() -> None:
    async with start_node(max_connections=2) as node:
        limits = node.context.limits
        async with open_ws(node), open_ws(node) as second:
            assert limits.count() == 2
            await refused_ws(node)
            await second.close()
            await until(lambda: limits.count() == 1, 5, "one socket released")
            async with open_ws(node):
                assert limits.count() == 2
        await until(lambda: limits.count() == 0, 5, "every socket released")
        assert metric(node, "gateway_limited_total", limit="connections") == 1


async def test_sse_and_websocket_share_the_limit() -> None:
    async with (
        start_node(max_connections=2) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        team = ev.team_id()
        await publish(client, team)
        async with sse_stream(client, team), open_ws(node):
            await refused_sse(client, team)
            await refused_ws(node)
        assert metric(node, "gateway_limited_total", limit="connections") == 2


async def test_tenant_limit_refuses_only_that_tenant() -> None:
    async with (
        start_node(max_connections=10, max_tenant_connections=1) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        limits = node.context.limits
        acme, globex = ev.team_id(), ev.team_id()
        await publish(client, acme, "acme")
        await publish(client, globex, "globex")
        async with sse_stream(client, acme, "acme"):
            message = await refused_sse(client, acme, "acme")
            assert "globex" not in message
            ws_message = await refused_ws(node, "acme")
            assert "globex" not in ws_message
            # Another tenant still connects, by SSE and by WebSocket in turn.
            async with sse_stream(client, globex, "globex"):
                assert limits.count("globex") == 1
            await until(lambda: limits.count("globex") == 0, 5, "globex stream released")
            async with open_ws(node, headers=auth("globex")):
                assert limits.count("globex") == 1
                assert limits.count() == 2
        await until(lambda: limits.count() == 0, 5, "every stream released")
        assert metric(node, "gateway_limited_total", limit="tenant_connections") == 2


def _reset(stream: anyio.abc.SocketStream) -> None:
    """Make the next close a reset (SO_LINGER 0): the abrupt way a client can vanish."""
    sock: socket.socket = stream.extra(SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def _raw_request(node: Gateway, head: bytes, *, read_head: bool, reset: bool) -> None:
    stream = await anyio.connect_tcp(node.settings.host, node.port)
    try:
        await stream.send(head)
        if read_head:
            got = b""
            while b"\r\n\r\n" not in got:
                got += await stream.receive()
            assert got.startswith((b"HTTP/1.1 200", b"HTTP/1.1 101")), got[:40]
        if reset:
            _reset(stream)
    finally:
        await stream.aclose()


def _sse_head(team: str) -> bytes:
    return (
        f"GET /v1/teams/{team}/events HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token()}\r\n\r\n"
    ).encode()


def _ws_head() -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: gateway.v1\r\nAuthorization: Bearer {token()}\r\n\r\n"
    ).encode()


async def test_connect_and_drop_loops_leak_no_counts() -> None:
    async with (
        start_node() as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        limits = node.context.limits
        team = ev.team_id()
        await publish(client, team)
        with anyio.fail_after(60):
            for i in range(50):
                # Orderly: the client reads the head and closes.
                async with sse_stream(client, team):
                    pass
                ws: ClientConnection
                async with open_ws(node) as ws:
                    await ws.send(json.dumps({"type": "subscribe", "feed": f"team/{team}"}))
                # Abrupt: resets after the head, or gone before the answer.
                await _raw_request(node, _sse_head(team), read_head=True, reset=True)
                await _raw_request(node, _ws_head(), read_head=True, reset=True)
                await _raw_request(node, _sse_head(team), read_head=False, reset=i % 2 == 0)
                await _raw_request(node, _ws_head(), read_head=False, reset=i % 2 == 1)
        await until(lambda: limits.count() == 0, 10, "every lease released")
        assert limits.per_tenant == {}
        await until(lambda: not node.hub.audiences, 10, "every subscription closed")
        assert metric(node, "gateway_connections", transport="sse") == 0
        assert metric(node, "gateway_connections", transport="ws") == 0


async def test_publish_rate_limit_per_tenant() -> None:
    async with (
        start_node(publish_rate=5, publish_burst=5) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        now = [1000.0]
        node.context.publish_rate.clock = lambda: now[0]  # a frozen clock: no refill
        team = ev.team_id()
        path = f"/v1/teams/{team}/events"
        r = await client.post(path, json=[ev.item() for _ in range(6)], headers=auth())
        assert_rate_limited(r.status_code, r.content)
        assert r.headers["retry-after"].isdigit() and int(r.headers["retry-after"]) >= 1
        # Nothing was appended: the feed does not exist yet.
        missing = await client.get(path, headers=auth())
        assert missing.status_code == 404
        # Within the burst: accepted, and the first offset is 1.
        r = await client.post(path, json=[ev.item() for _ in range(3)], headers=auth())
        assert r.status_code == 200, r.text
        assert [c.split(":")[1] for c in r.json()["cursors"]] == ["1", "2", "3"]
        r = await client.post(path, json=[ev.item(), ev.item()], headers=auth())
        assert r.status_code == 200, r.text
        # The bucket is empty now: one more item waits a whole second (5 per second).
        r = await client.post(path, json=ev.item(), headers=auth())
        assert_rate_limited(r.status_code, r.content)
        assert r.headers["retry-after"] == "1"
        # Another tenant has its own bucket.
        other = ev.team_id()
        r = await client.post(
            f"/v1/teams/{other}/events",
            json=[ev.item() for _ in range(5)],
            headers=auth("globex"),
        )
        assert r.status_code == 200, r.text
        # Time passes: acme's bucket refills.
        now[0] += 1.0
        r = await client.post(path, json=[ev.item() for _ in range(5)], headers=auth())
        assert r.status_code == 200, r.text
        assert metric(node, "gateway_limited_total", limit="publish_rate") == 2
        assert (
            metric(node, "gateway_publish_rejections_total", code="rate_limited", path="http") == 2
        )
        assert metric(node, "gateway_published_items_total", kind="team", path="http") == 15
