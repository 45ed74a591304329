"""The internal port (``GATEWAY_INTERNAL_PORT``): /metrics, /healthz and /readyz there
and not on the client port; /openapi.json and the /v1 routes on the client port only.
A real node, a real httpx client on each port."""

from __future__ import annotations

import httpx
import pytest

from gateway.config import Settings, load
from tests.support import events as ev
from tests.support.node import auth, start_node

pytestmark = pytest.mark.anyio

INTERNAL = ("/healthz", "/readyz", "/metrics")


def assert_not_found(r: httpx.Response) -> None:
    assert r.status_code == 404, (r.request.url, r.status_code, r.text)
    assert r.json() == {"error": {"code": "not_found", "message": "no such route"}}


async def test_the_operational_routes_move_to_the_internal_port() -> None:
    async with start_node(internal_port=0) as node:
        assert node.internal_port is not None and node.internal_port != node.port
        assert node.internal_url == f"http://127.0.0.1:{node.internal_port}"
        async with (
            httpx.AsyncClient(base_url=node.url, timeout=10) as public,
            httpx.AsyncClient(base_url=node.internal_url, timeout=10) as internal,
        ):
            # The internal port: health, readiness (with the connection counts), metrics.
            assert (await internal.get("/healthz")).json() == {"status": "ok"}
            ready = await internal.get("/readyz")
            assert ready.status_code == 200
            body = ready.json()
            assert (body["status"], body["reason"]) == ("ready", "ok")
            assert body["connections"]["limit"] == node.settings.max_connections
            metrics = await internal.get("/metrics")
            assert metrics.status_code == 200
            assert "gateway_connections_refused_total" in metrics.text
            assert (await internal.head("/readyz")).status_code == 200
            assert (await internal.post("/metrics")).status_code == 405
            # ... and nothing else.
            assert_not_found(await internal.get("/openapi.json"))
            assert_not_found(await internal.get("/console/"))
            assert_not_found(await internal.get("/v1/feeds?kind=team", headers=auth()))

            # The client port: 404 for those three, the rest as ever.
            for path in INTERNAL:
                assert_not_found(await public.get(path))
                assert (await public.head(path)).status_code == 404
            assert (await public.get("/openapi.json")).status_code == 200
            team = ev.team_id()
            r = await public.post(f"/v1/teams/{team}/events", json=[ev.item()], headers=auth())
            assert r.status_code == 200, r.text

            # Requests on both ports are counted by route, on the internal port's metrics.
            text = (await internal.get("/metrics")).text
            assert 'gateway_http_requests_total{route="readyz",status="200"}' in text
            assert 'gateway_http_requests_total{route="other",status="404"}' in text
            assert 'gateway_http_requests_total{route="team_events",status="200"} 1.0' in text

            # Draining: the client port stops taking connections, the internal port
            # stays and says 503, so probes see the drain.
            await node.drain(0.01)
            r = await internal.get("/readyz")
            assert r.status_code == 503 and r.json()["reason"] == "draining"
            with pytest.raises(httpx.ConnectError):
                async with httpx.AsyncClient(base_url=node.url, timeout=5) as fresh:
                    await fresh.get("/openapi.json")


async def test_without_an_internal_port_everything_is_on_the_client_port() -> None:
    async with (
        start_node() as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        assert node.internal_port is None and node.internal_url is None
        assert node.internal_server is None
        for path in (*INTERNAL, "/openapi.json"):
            assert (await client.get(path)).status_code == 200, path
        body = (await client.get("/readyz")).json()
        assert body["connections"]["sockets"] == 1  # this client


def test_internal_port_settings() -> None:
    assert Settings().internal_port is None and Settings().internal_host is None
    s = load(env={"GATEWAY_INTERNAL_PORT": "9090", "GATEWAY_INTERNAL_HOST": "127.0.0.1"})
    assert (s.internal_port, s.internal_host) == (9090, "127.0.0.1")
    assert load({"internal_port": "9091"}, env={"GATEWAY_INTERNAL_PORT": "9090"}).internal_port == (
        9091
    )
    assert load(env={"GATEWAY_INTERNAL_PORT": ""}).internal_port is None
    for env, words in (
        (
            {"GATEWAY_INTERNAL_PORT": "metrics"},
            "internal_port: cannot read 'metrics' as an integer",
        ),
        ({"GATEWAY_INTERNAL_PORT": "0"}, "internal_port must be between 1 and 65535"),
        ({"GATEWAY_INTERNAL_PORT": "70000"}, "internal_port must be between 1 and 65535"),
        ({"GATEWAY_INTERNAL_PORT": "8080"}, "internal_port must differ from port"),
        ({"GATEWAY_INTERNAL_HOST": "127.0.0.1"}, "internal_host needs internal_port"),
    ):
        with pytest.raises(ValueError) as caught:
            load(env=env)
        assert str(caught.value) == words
