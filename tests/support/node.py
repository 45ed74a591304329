"""Run real gateway nodes inside the test's event loop, on free ports."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from gateway.app import Gateway, running
from gateway.auth import mint
from gateway.config import Settings
from gateway.fanout.hub import Hooks
from gateway.metrics import Metrics
from gateway.store.interfaces import Backend

SECRET = "test-secret-of-at-least-32-bytes-long!!"


def settings(redis_url: str | None = None, prefix: str = "gwtest", **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 0,
        "redis_url": redis_url,
        "redis_prefix": prefix,
        "jwt_secret": SECRET,
        "read_block_ms": 200,
        "uvloop": False,
        "log_format": "json",
    }
    values.update(overrides)
    return Settings(**values)


@contextlib.asynccontextmanager
async def start_node(
    redis_url: str | None = None,
    prefix: str = "gwtest",
    *,
    backend: Backend | None = None,
    hooks: Hooks | None = None,
    **overrides: Any,
) -> AsyncIterator[Gateway]:
    async with running(
        settings(redis_url, prefix, **overrides), backend=backend, hooks=hooks, metrics=Metrics()
    ) as node:
        yield node


def token(
    tenant: str = "acme",
    scopes: Sequence[str] = ("subscribe", "publish"),
    *,
    teams: Sequence[str] | None = None,
    threads: Sequence[str] | None = None,
    ttl: int = 3600,
    subject: str = "tester",
) -> str:
    return mint(
        SECRET,
        tenant=tenant,
        subject=subject,
        scopes=scopes,
        teams=teams,
        threads=threads,
        ttl_seconds=ttl,
    )


def auth(tenant: str = "acme", **kw: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(tenant, **kw)}"}


def metric(node: Gateway, name: str, **labels: str) -> float:
    value = node.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def ws_url(node: Gateway) -> str:
    return f"ws://{node.settings.host}:{node.port}/v1/ws"


def open_ws(
    node: Gateway,
    *,
    headers: dict[str, str] | None = None,
    subprotocols: Sequence[str] = ("gateway.v1",),
    **kw: Any,
) -> connect:
    """A real websockets client of ``node`` (no client pings, no compression, bounded
    waits); ``headers`` default to a bearer token of tenant acme."""
    return connect(
        ws_url(node),
        subprotocols=[Subprotocol(p) for p in subprotocols] or None,
        additional_headers=auth() if headers is None else headers,
        compression=None,
        proxy=None,
        open_timeout=5,
        close_timeout=2,
        ping_interval=None,
        **kw,
    )


async def lease_ends(nodes: Sequence[Gateway], expected: int, within: float = 5.0) -> list[float]:
    """Each node's ``gateway_runs_ended_total{by="lease"}``, once they add up to at least
    ``expected`` (polled: a node counts an end when its lapse step answers, which may be
    after the end reached the viewers through another connection)."""

    def counts() -> list[float]:
        return [metric(n, "gateway_runs_ended_total", by="lease") for n in nodes]

    with anyio.fail_after(within, reason=f"{expected} lease ends not counted: {counts()}"):
        while sum(counts()) < expected:  # noqa: ASYNC110 - counters another task moves
            await anyio.sleep(0.02)
    return counts()
