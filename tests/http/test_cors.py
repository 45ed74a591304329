"""CORS for the SSE routes: off by default, and exactly the configured origins."""

from __future__ import annotations

import httpx
import pytest

from tests.support import events as ev
from tests.support.node import auth, start_node

pytestmark = pytest.mark.anyio


async def first_headers(client: httpx.AsyncClient, team: str, origin: str) -> httpx.Headers:
    async with client.stream(
        "GET", f"/v1/teams/{team}/events", headers={**auth(), "Origin": origin}
    ) as response:
        assert response.status_code == 200
        return response.headers


async def test_cors_is_off_by_default() -> None:
    async with start_node(None) as node, httpx.AsyncClient(base_url=node.url) as client:
        team = ev.team_id()
        await client.post(f"/v1/teams/{team}/events", json=ev.item(), headers=auth())
        headers = await first_headers(client, team, "https://app.example")
        assert "access-control-allow-origin" not in headers
        r = await client.options(f"/v1/teams/{team}/events", headers={"Origin": "https://x"})
        assert r.status_code == 405


async def test_configured_origins_only() -> None:
    async with (
        start_node(None, cors_origins="https://app.example, https://other.example") as node,
        httpx.AsyncClient(base_url=node.url) as client,
    ):
        team = ev.team_id()
        await client.post(f"/v1/teams/{team}/events", json=ev.item(), headers=auth())
        headers = await first_headers(client, team, "https://app.example")
        assert headers["access-control-allow-origin"] == "https://app.example"
        assert headers["vary"] == "Origin"
        headers = await first_headers(client, team, "https://evil.example")
        assert "access-control-allow-origin" not in headers
        r = await client.options(
            f"/v1/teams/{team}/events",
            headers={
                "Origin": "https://other.example",
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "authorization, last-event-id",
            },
        )
        assert r.status_code == 204
        assert r.headers["access-control-allow-origin"] == "https://other.example"
        assert r.headers["access-control-allow-methods"] == "GET"
        assert "Authorization" in r.headers["access-control-allow-headers"]
        assert "Last-Event-ID" in r.headers["access-control-allow-headers"]
        r = await client.options(f"/v1/teams/{team}/events", headers={"Origin": "https://evil"})
        assert r.status_code == 204
        assert "access-control-allow-origin" not in r.headers
