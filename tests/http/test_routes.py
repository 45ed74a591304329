"""The operational routes: OpenAPI, health, readiness, metrics."""

from __future__ import annotations

import json
from importlib import resources

import httpx
import pytest

from tests.support.node import start_node

pytestmark = pytest.mark.anyio


async def test_openapi_health_ready_metrics(node_redis: tuple[str | None, str]) -> None:
    url, prefix = node_redis
    async with (
        start_node(url, prefix) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        r = await client.get("/openapi.json")
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        packaged = resources.files("gateway.schemas").joinpath("gateway.openapi.json")
        assert r.json() == json.loads(packaged.read_text())
        assert "/v1/teams/{team}/events" in r.json()["paths"]
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        metrics = (await client.get("/metrics")).text
        for name in ("gateway_connections", "gateway_items_read_total", "gateway_build_info"):
            assert name in metrics
        # Draining: readiness fails (the load balancer stops sending clients).
        await node.drain(0.01)
        r = await client.get("/readyz")
        assert r.status_code == 503 and r.json()["reason"] == "draining"
