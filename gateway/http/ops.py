"""The operational routes (D8): health, readiness, metrics and the OpenAPI document.

They need no token, answer ``GET`` and ``HEAD`` only, and never depend on a feed.
"""

from __future__ import annotations

from importlib import resources

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.http.route_context import RouteContext
from gateway.net.server import Request, Responder

_OPENAPI = resources.files("gateway.schemas").joinpath("gateway.openapi.json").read_bytes()


async def healthz(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """The process is alive (does not depend on Redis)."""
    responder.send(200, b'{"status":"ok"}')


async def readyz(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """The node can serve: the store answers, its readers progress, it is not draining.

    The body also says how many connections the node holds (``connections``: streams,
    client TCP connections, the open-files limit; gateway/net/capacity.py)."""
    ok, why = await context.ready()
    answer: dict[str, object] = {"status": "ready" if ok else "not_ready", "reason": why}
    if context.capacity is not None:
        answer["connections"] = await context.capacity.snapshot()
    responder.send(200 if ok else 503, msgspec.json.encode(answer))


async def metrics(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    responder.send(200, generate_latest(context.metrics.registry), CONTENT_TYPE_LATEST.encode())


async def openapi(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    responder.send(200, _OPENAPI)
