"""Every route the gateway serves, as data (the OpenAPI document describes the same)."""

from __future__ import annotations

from gateway.http import (
    ai_sdk_streams,
    console,
    dialect_events,
    feed_listing,
    ops,
    run_feeds,
    run_listing,
    teams,
    websocket,
)
from gateway.http.router import Route

FOLLOW_OR_PUBLISH = "use GET to follow or POST to publish"
ONLY_GET = "only GET is served here"

ROUTES: tuple[Route, ...] = (
    Route(
        "team_events",
        "/v1/teams/{team}/events",
        {"GET": teams.follow, "POST": teams.publish},
        FOLLOW_OR_PUBLISH,
        preflight=b"GET",
    ),
    Route(
        "run_agui",
        "/v1/threads/{thread_id}/runs/{run_id}/ui/ag-ui",
        {"GET": run_feeds.follow, "POST": run_feeds.publish},
        FOLLOW_OR_PUBLISH,
        preflight=b"GET",
    ),
    Route(
        "run_ai_sdk",
        "/v1/threads/{thread_id}/runs/{run_id}/ui/ai-sdk",
        {"GET": ai_sdk_streams.follow},
        ONLY_GET,
        preflight=b"GET",
    ),
    Route(
        "run_events",
        "/v1/threads/{thread_id}/runs/{run_id}/events",
        {"GET": run_feeds.follow_stream, "POST": run_feeds.publish_stream},
        FOLLOW_OR_PUBLISH,
        preflight=b"GET",
    ),
    Route(
        "run_heartbeat",
        "/v1/threads/{thread_id}/runs/{run_id}/heartbeat",
        {"POST": run_feeds.heartbeat},
        "use POST to renew a live run's lease",
        preflight=b"POST",
    ),
    Route("runs", "/v1/runs", {"GET": run_listing.list_runs}, ONLY_GET, preflight=b"GET"),
    Route(
        "agui_attach",
        "/v1/ui/ag-ui/{agent}",
        {"POST": run_feeds.attach},
        "use POST with a RunAgentInput",
        preflight=b"POST",
        streams=frozenset({"POST"}),
    ),
    Route("feeds", "/v1/feeds", {"GET": feed_listing.list_feeds}, ONLY_GET, preflight=b"GET"),
    Route(
        "ai_sdk_reconnect",
        "/v1/ui/ai-sdk/{agent}/{chat_id}/stream",
        {"GET": ai_sdk_streams.reconnect},
        ONLY_GET,
        preflight=b"GET",
    ),
    Route(
        "ws",
        "/v1/ws",
        {"GET": websocket.upgrade},
        "the WebSocket route takes GET upgrades only",
    ),
    Route(
        "sparktide_events",
        "/v1/sparktide/events",
        {"POST": dialect_events.publish_sparktide},
        "use POST to publish SparkTide events",
    ),
    Route(
        "run_a2ui",
        "/v1/threads/{thread_id}/runs/{run_id}/a2ui",
        {"POST": dialect_events.publish_a2ui},
        "use POST to publish A2UI messages",
    ),
    Route("healthz", "/healthz", {"GET": ops.healthz}, ONLY_GET, public=True),
    Route("readyz", "/readyz", {"GET": ops.readyz}, ONLY_GET, public=True),
    Route("metrics", "/metrics", {"GET": ops.metrics}, ONLY_GET, public=True),
    Route("openapi", "/openapi.json", {"GET": ops.openapi}, ONLY_GET, public=True),
    # The console (D11): 404 unless GATEWAY_CONSOLE is on.
    Route("console", "/console", {"GET": console.redirect}, ONLY_GET, public=True),
    Route("console", "/console/", {"GET": console.page}, ONLY_GET, public=True),
    Route("console", "/console/{name}", {"GET": console.asset}, ONLY_GET, public=True),
)

#: The routes of the internal port (GATEWAY_INTERNAL_PORT); with one, the client port
#: does not serve them (``/openapi.json`` stays there: it documents the public API).
INTERNAL_NAMES = frozenset({"healthz", "readyz", "metrics"})
INTERNAL_ROUTES: tuple[Route, ...] = tuple(r for r in ROUTES if r.name in INTERNAL_NAMES)


def client_routes(*, internal: bool) -> tuple[Route, ...]:
    """The client port's routes: all of them, or, with an internal port, all but
    :data:`INTERNAL_ROUTES` (404 there)."""
    if not internal:
        return ROUTES
    return tuple(r for r in ROUTES if r.name not in INTERNAL_NAMES)
