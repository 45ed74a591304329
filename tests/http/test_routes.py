"""The operational routes: OpenAPI, health, readiness, metrics."""

from __future__ import annotations

import json
from importlib import resources

import anyio
import httpx
import pytest

from gateway.fanout.hub import Hooks
from tests.support.node import metric, start_node
from tests.support.redis_server import RedisServer

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
        # Ready once the first ping of the store is answered (at once on an idle machine).
        assert await readiness_becomes(client, 200, 10) == {"status": "ready", "reason": "ok"}
        metrics = (await client.get("/metrics")).text
        for name in ("gateway_connections", "gateway_items_read_total", "gateway_build_info"):
            assert name in metrics
        # Draining: readiness fails (the load balancer stops sending clients).
        await node.drain(0.01)
        r = await client.get("/readyz")
        assert r.status_code == 503 and r.json()["reason"] == "draining"


async def readiness_becomes(
    client: httpx.AsyncClient, status: int, within: float
) -> dict[str, str]:
    """Poll /readyz until it answers ``status`` (bounded); return that answer's status
    and reason (its connection counts left out: tests/http/test_internal_port.py)."""
    with anyio.fail_after(within, reason=f"/readyz did not answer {status} within {within}s"):
        while True:
            r = await client.get("/readyz")
            if r.status_code == status:
                body: dict[str, str] = r.json()
                return {"status": body["status"], "reason": body["reason"]}
            await anyio.sleep(0.05)


async def test_readiness_fails_while_the_feed_reader_is_stuck(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    hold = False
    held = anyio.Event()
    release = anyio.Event()

    async def before_read() -> None:
        # A read loop that never gets to its next read, as a hung call would leave it.
        if hold:
            held.set()
            await release.wait()

    stall = 1.0
    async with (
        start_node(
            url, prefix, hooks=Hooks(before_read=before_read), ready_stall_seconds=stall
        ) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        assert (await client.get("/readyz")).status_code == 200
        assert metric(node, "gateway_ready") == 1
        hold = True
        with anyio.fail_after(5):
            await held.wait()
        body = await readiness_becomes(client, 503, within=10 * stall)
        assert body == {"status": "not_ready", "reason": "feed reader is not making progress"}
        assert metric(node, "gateway_ready") == 0
        # The loop moves again: ready again, without a restart.
        hold = False
        release.set()
        body = await readiness_becomes(client, 200, within=10)
        assert body == {"status": "ready", "reason": "ok"}
        assert metric(node, "gateway_ready") == 1


@pytest.mark.redis_admin
async def test_readiness_fails_while_redis_does_not_answer() -> None:
    with RedisServer() as server:
        async with (
            start_node(server.url, "gwtest") as node,
            httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        ):
            assert (await client.get("/readyz")).status_code == 200
            server.pause()  # SIGSTOP: the port stays open, nothing answers
            try:
                body = await readiness_becomes(client, 503, within=10)
                assert body == {"status": "not_ready", "reason": "redis does not answer"}
                assert metric(node, "gateway_ready") == 0
            finally:
                server.resume()
            body = await readiness_becomes(client, 200, within=20)
            assert body["status"] == "ready"
            assert metric(node, "gateway_ready") == 1
