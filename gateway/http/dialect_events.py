"""Other agent dialects in over HTTP (docs/dialects/sparktide.md, docs/dialects/a2ui.md).

- ``POST /v1/sparktide/events``: SparkTide AgentEvent 1.0 events (one or an array of one
  run), translated to AG-UI into the run feed ``run/<conversationId>/<runId>``.
- ``POST /v1/threads/{thread_id}/runs/{run_id}/a2ui``: A2UI v0.9 messages for a run,
  carried as AG-UI activities on its feed.

Both answer ``{"cursors": [...]}`` and apply the checks of every publish route (D4.5):
the ``publish`` scope, a JSON body, the body limit and the tenant's publish rate.  A run
outside the token's ``threads`` claim is 404 like any run the caller may not read; for
SparkTide the run is named by the body, so that check follows the body's validation.
"""

from __future__ import annotations

from gateway import access
from gateway.http.publish import send_cursors, start_publish
from gateway.http.route_context import RouteContext
from gateway.net.server import Request, Responder
from gateway.publisher import Via


async def publish_sparktide(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``POST /v1/sparktide/events``: one cursor per SparkTide event."""
    principal, rate = start_publish(context, request, lambda p: None)
    cursors = await context.publisher.publish_sparktide_json(
        principal.tenant,
        request.body,
        via=Via.HTTP,
        rate=rate,
        authorize=lambda thread_id, run_id: access.run_for(principal, thread_id, run_id),
    )
    send_cursors(responder, cursors)


async def publish_a2ui(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``POST .../a2ui``: one cursor per A2UI message; ``Idempotency-Key`` as for AG-UI."""
    thread_id, run_id = params["thread_id"], params["run_id"]
    principal, rate = start_publish(
        context, request, lambda p: access.run_for(p, thread_id, run_id)
    )
    cursors = await context.publisher.publish_a2ui_json(
        principal.tenant,
        thread_id,
        run_id,
        request.body,
        via=Via.HTTP,
        idempotency_key=request.headers.get("idempotency-key"),
        rate=rate,
    )
    send_cursors(responder, cursors)
