"""The team feed routes: ``GET`` follows as SSE (D3), ``POST`` publishes (D4)."""

from __future__ import annotations

from gateway import access
from gateway.http import sse
from gateway.http.publish import send_cursors, start_publish
from gateway.http.route_context import RouteContext
from gateway.net.server import Request, Responder
from gateway.publisher import Via
from gateway.wire.formats import TEAM_SSE


async def follow(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET /v1/teams/{team}/events``: the team feed as SSE, resumable by cursor."""
    principal = context.principal(request)
    principal.require_subscribe()
    feed = access.team_for(principal, params["team"])
    cursor = sse.request_cursor(request)
    await sse.serve(
        context,
        request,
        responder,
        principal,
        feed,
        cursor,
        TEAM_SSE,
        not_found=access.NO_SUCH_TEAM,
    )


async def publish(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``POST /v1/teams/{team}/events``: one item or an array, all or nothing."""
    team = params["team"]
    principal, rate = start_publish(context, request, lambda p: access.team_for(p, team))
    cursors = await context.publisher.publish_team_json(
        principal.tenant, team, request.body, via=Via.HTTP, rate=rate
    )
    send_cursors(responder, cursors)
