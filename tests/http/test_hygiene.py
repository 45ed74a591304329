"""Tokens never appear in the node's logs or metrics; connection lines carry context."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
import structlog
from httpx_sse import aconnect_sse
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from gateway.net import logcontext
from tests.support import events as ev
from tests.support.node import start_node, token
from tests.support.wait import until

pytestmark = pytest.mark.anyio


async def test_tokens_are_not_logged_or_exported() -> None:
    good = token()
    bad = good[:-4] + "AAAA"  # a forged signature
    ws_token = token(subject="ws-user")
    # The node's merge processors: what a connection task binds reaches its lines, as in
    # production.
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars, logcontext.merge]
    ) as logs:
        async with start_node(None) as node, httpx.AsyncClient(base_url=node.url) as client:
            team = ev.team_id()
            r = await client.post(
                f"/v1/teams/{team}/events",
                json=ev.item(),
                headers={"Authorization": f"Bearer {good}"},
            )
            assert r.status_code == 200
            r = await client.get(
                f"/v1/teams/{team}/events", headers={"Authorization": f"Bearer {bad}"}
            )
            assert r.status_code == 401
            assert bad not in r.text and good not in r.text
            async with aconnect_sse(
                client, "GET", f"/v1/teams/{team}/events", params={"access_token": good}
            ) as source:
                async for _ in source.aiter_sse():
                    break
            # A WebSocket whose token rides in the subprotocol header.
            async with connect(
                f"ws://{node.settings.host}:{node.port}/v1/ws",
                subprotocols=[Subprotocol("gateway.v1"), Subprotocol(f"bearer.{ws_token}")],
                proxy=None,
                open_timeout=5,
                ping_interval=None,
            ) as ws:
                await ws.send(json.dumps({"type": "subscribe", "feed": f"team/{team}"}))
                with anyio.fail_after(5):
                    assert json.loads(await ws.recv())["type"] == "subscribed"
            await until(
                lambda: sum(e["event"] == "connection closed" for e in logs) == 2,
                5,
                "both connections logged as closed",
            )
            metrics = (await client.get("/metrics")).text
    text = repr(logs) + metrics
    for secret in (good, bad, good.split(".")[2], ws_token, ws_token.split(".")[2]):
        assert secret not in text
    # Each connection's lines carry its id, transport, tenant and address.
    for transport in ("sse", "ws"):
        lines = [e for e in logs if e.get("transport") == transport]
        assert [e["event"] for e in lines] == ["connection opened", "connection closed"]
        ids = {e["conn_id"] for e in lines}
        assert len(ids) == 1 and len(ids.pop()) == 12
        assert {e["tenant"] for e in lines} == {"acme"}
        assert all(e["remote"].startswith("127.0.0.1:") for e in lines)
        assert lines[-1]["reason"] == "client"
    sse_id = next(e["conn_id"] for e in logs if e.get("transport") == "sse")
    ws_id = next(e["conn_id"] for e in logs if e.get("transport") == "ws")
    assert sse_id != ws_id
