"""The HTTP routes: team feed (SSE), publishing, OpenAPI, health and metrics.

Each route authenticates, checks the path, then hands over to the hub or the
publisher.  Errors before a stream starts are JSON ``{"error": {code, message}}``
(seed rule 5); a feed another tenant owns answers exactly like a missing one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from importlib import resources

import anyio
import msgspec
import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.auth import Authenticator, Principal, bearer_token
from gateway.config import Settings
from gateway.errors import (
    Forbidden,
    GatewayError,
    MethodNotAllowed,
    NotFound,
    UnsupportedMediaType,
)
from gateway.fanout.hub import Hub
from gateway.fanout.subscriber import Outbox, Overflows, Subscription, SubState
from gateway.feed import FeedKey, is_team_id, team_feed
from gateway.http.runs import RunRoutes, request_cursor
from gateway.http.server import Request, Responder, Stream, connection_id
from gateway.http.websocket import Session, WebSocketRoute
from gateway.limits import ConnectionLimits, PublishRate
from gateway.metrics import Metrics
from gateway.producer import Publisher
from gateway.wire import sse
from gateway.wire.formats import TEAM_SSE

log = structlog.get_logger("gateway.routes")

_TEAM_EVENTS = re.compile(r"^/v1/teams/([^/]+)/events$")
_NO_SUCH_TEAM = "no such team"


_OPENAPI = resources.files("gateway.schemas").joinpath("gateway.openapi.json").read_bytes()


class Routes:
    def __init__(
        self,
        settings: Settings,
        hub: Hub,
        publisher: Publisher,
        authenticator: Authenticator,
        metrics: Metrics,
        ready: Callable[[], Awaitable[tuple[bool, str]]],
    ) -> None:
        self.settings = settings
        self.hub = hub
        self.publisher = publisher
        self.auth = authenticator
        self.metrics = metrics
        self.ready = ready
        #: Origins allowed to read the SSE routes from a browser (CORS); empty: none.
        self.cors_origins = frozenset(
            o.strip() for o in settings.cors_origins.split(",") if o.strip()
        )
        #: Open WebSocket sessions (for draining).
        self.sessions: set[Session] = set()

        def limited(limit: str) -> None:
            metrics.limited.labels(limit=limit).inc()

        #: Open streams (SSE and WebSocket) per node and per tenant, shared by both routes.
        self.limits = ConnectionLimits(
            settings.max_connections, settings.max_tenant_connections, limited
        )
        #: Items per tenant through HTTP publishing (not the inbox or the producer: D4).
        self.publish_rate = PublishRate(
            settings.publish_rate, settings.publish_burst, on_limited=limited
        )
        #: The AG-UI run-feed routes, with the node's fold cache.
        self.folds = publisher.folds
        self.runs = RunRoutes(self, self.folds)
        self.websocket = WebSocketRoute(
            settings, hub, authenticator, metrics, self.sessions, self.limits, self.folds
        )

    # -- dispatch --------------------------------------------------------------------

    async def __call__(self, request: Request, responder: Responder) -> None:
        path = request.path
        match = _TEAM_EVENTS.match(path)
        if match is not None:
            team = match.group(1)
            if request.method == "GET":
                await self.team_events(request, responder, team)
            elif request.method == "OPTIONS" and self.cors_origins:
                self.preflight(request, responder)
            elif request.method == "POST":
                await self.publish_team(request, responder, team)
            else:
                raise MethodNotAllowed("use GET to follow or POST to publish", allow="GET, POST")
            return
        if await self.runs.dispatch(request, responder):
            return
        if path == "/v1/ws":
            await self.websocket(request, responder)
            return
        if path.startswith("/v1/"):
            # Every /v1 route authenticates first (seed rule 1), unknown ones too.
            self.principal(request)
            raise NotFound("no such route")
        if request.method not in ("GET", "HEAD"):
            raise MethodNotAllowed("only GET is served here", allow="GET, HEAD")
        if path == "/healthz":
            responder.send(200, b'{"status":"ok"}')
        elif path == "/readyz":
            ok, why = await self.ready()
            body = msgspec.json.encode({"status": "ready" if ok else "not_ready", "reason": why})
            responder.send(200 if ok else 503, body)
        elif path == "/metrics":
            responder.send(
                200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST.encode()
            )
        elif path == "/openapi.json":
            responder.send(200, _OPENAPI)
        else:
            raise NotFound("no such route")

    # -- CORS (SSE routes only; off unless GATEWAY_CORS_ORIGINS is set) -------------

    def _allowed_origin(self, request: Request) -> str | None:
        origin = request.headers.get("origin")
        if origin is None or not self.cors_origins:
            return None
        if "*" in self.cors_origins or origin in self.cors_origins:
            return origin
        return None

    def cors_headers(self, request: Request) -> list[tuple[bytes, bytes]]:
        origin = self._allowed_origin(request)
        if origin is None:
            return []
        return [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
        ]

    def preflight(self, request: Request, responder: Responder, methods: bytes = b"GET") -> None:
        """Answer a browser's CORS preflight for following an SSE route."""
        headers = self.cors_headers(request)
        if headers:
            headers += [
                (b"access-control-allow-methods", methods),
                (
                    b"access-control-allow-headers",
                    b"Authorization, Last-Event-ID, Content-Type",
                ),
                (b"access-control-max-age", b"600"),
            ]
        responder.send(204, b"", headers=headers)

    # -- auth ------------------------------------------------------------------------

    def principal(self, request: Request) -> Principal:
        token = bearer_token(
            request.headers.get("authorization"), request.query_one("access_token")
        )
        return self.auth.verify(token)

    def _team_key(self, principal: Principal, team: str) -> FeedKey:
        # A malformed id, a team outside the token's claim and another tenant's team
        # all answer exactly like a missing team.
        if not is_team_id(team) or not principal.may_read_team(team):
            raise NotFound(_NO_SUCH_TEAM)
        return team_feed(principal.tenant, team)

    # -- GET /v1/teams/{team}/events -------------------------------------------------

    async def team_events(self, request: Request, responder: Responder, team: str) -> None:
        principal = self.principal(request)
        principal.require_subscribe()
        feed = self._team_key(principal, team)
        cursor = request_cursor(request)
        # Refused (429) before the stream starts; the lease is given back on every
        # exit path (client gone, errors, cancellation).
        with self.limits.acquire(principal.tenant):
            try:
                sub = await self.hub.open(feed, cursor, TEAM_SSE)
            except NotFound:
                raise NotFound(_NO_SUCH_TEAM) from None
            try:
                await self.stream_sse(request, responder, principal, sub)
            finally:
                self.hub.close(sub)

    async def stream_sse(
        self,
        request: Request,
        responder: Responder,
        principal: Principal,
        sub: Subscription,
        before: bytes = b"",
    ) -> None:
        """Start the 200 SSE response and serve ``sub`` on it until it ends.

        ``before`` is written first (a run's prelude).  The caller holds the
        connection lease and must close ``sub`` afterwards.
        """
        stream = responder.stream(200, sse.HEADERS + self.cors_headers(request))
        outbox = Outbox(stream, self.settings.max_queue_bytes, self.hub.budget)
        sub.outbox = outbox
        # Every log line of this connection's task carries its context.
        with structlog.contextvars.bound_contextvars(
            conn_id=connection_id(),
            transport="sse",
            tenant=principal.tenant,
            remote=responder.remote,
            feed=sub.feed.public_name,
        ):
            self.metrics.connections.labels(transport="sse").inc()
            self.metrics.connects.labels(transport="sse").inc()
            log.info("connection opened")
            reason = "error"
            try:
                if before:
                    with anyio.fail_after(self.settings.slow_client_timeout):
                        await stream.write(before)
                    outbox.wrote = True
                reason = await self._follow(sub, stream, principal.expires_at)
            except anyio.BrokenResourceError:
                reason = "client"
            except TimeoutError:
                self.metrics.slow_consumer_actions.labels(action="disconnect").inc()
                reason = "slow"
            except anyio.get_cancelled_exc_class():
                # The client went away (its connection was lost), or the node
                # is stopping.
                reason = "shutdown" if self.hub.draining else "client"
                raise
            finally:
                outbox.release()
                self.metrics.connections.labels(transport="sse").dec()
                self.metrics.disconnects.labels(transport="sse", reason=reason).inc()
                log.info("connection closed", reason=reason)
            stream.end()

    async def _follow(self, sub: Subscription, stream: Stream, expires_at: float) -> str:
        """Serve one subscription until it ends; returns the disconnect reason.

        The stream ends when the token expires (``expires_at``, wall clock): the client
        reconnects with a fresh token and its cursor (reason ``auth``).

        Live items are written by the hub straight into the transport; this task
        catches up, sends keepalives on silence and acts on state changes.
        Slow-consumer policy: a subscription whose transport buffer would pass its
        byte bound is taken off the live path; it catches up from the log by its own
        cursor (waiting for the socket) and rejoins; :class:`Overflows` decides when it
        is disconnected instead (reason ``slow``), and the client resumes from its last
        cursor.
        """
        keepalive = self.settings.keepalive_seconds
        outbox = sub.outbox
        assert outbox is not None
        overflows = Overflows()
        timeout = self.settings.slow_client_timeout

        async def write(data: bytes) -> None:
            # History waits for the socket, but not forever (a stopped client).
            with anyio.fail_after(timeout):
                await stream.write(data)

        try:
            while True:
                if sub.state is SubState.CATCHING_UP:
                    await self.hub.catch_up(sub, write)
                    outbox.wrote = True
                if sub.state is SubState.LIVE:
                    left = expires_at - time.time()
                    if left <= 0:
                        return "auth"
                    if not await sub.wait(min(keepalive, left)) and not outbox.wrote:
                        # Through the outbox, so a keepalive never passes the bound; when
                        # it is refused the client has unread data anyway.
                        outbox.try_write(sse.KEEPALIVE)
                    outbox.wrote = False
                    continue
                if sub.state is SubState.RESTARTED:
                    assert sub.restart_at is not None
                    await write(sub.fmt.restart(sub.feed, sub.restart_at))
                    return "reset"
                if sub.state is SubState.OVERFLOW:
                    if overflows.too_many(anyio.current_time()):
                        self.metrics.slow_consumer_actions.labels(action="disconnect").inc()
                        return "slow"
                    sub.state = SubState.CATCHING_UP
                    continue
                if sub.state is SubState.ENDED:
                    return "finished"  # the run ended (RUN_FINISHED or RUN_ERROR)
                if sub.state is SubState.CLOSED:
                    return "shutdown"
        except anyio.BrokenResourceError:
            return "client"
        except TimeoutError:
            self.metrics.slow_consumer_actions.labels(action="disconnect").inc()
            return "slow"
        except GatewayError as exc:
            # The store failed after the stream started: end it; the client resumes.
            log.warning("stream ended by an error", code=str(exc.code), error=exc.message)
            return "error"

    # -- POST /v1/teams/{team}/events ------------------------------------------------

    async def publish_team(self, request: Request, responder: Responder, team: str) -> None:
        principal, admit = self.start_publish(request, lambda p: self._team_key(p, team))
        cursors = await self.publisher.publish_team_json(
            principal.tenant, team, request.body, path="http", admit=admit
        )
        responder.send(200, msgspec.json.encode({"cursors": [str(c) for c in cursors]}))

    def start_publish(
        self, request: Request, may_publish: Callable[[Principal], object]
    ) -> tuple[Principal, Callable[[int], None]]:
        """The checks every HTTP publish route makes, in order: a token with the
        ``publish`` scope (403), ``may_publish`` (raises NotFound for a feed outside the
        token's claims), a JSON body (415, counted).  Returns the principal and the
        ``admit`` callback that applies the tenant's publish rate to the item count.
        """
        principal = self.principal(request)
        if "publish" not in principal.scopes:
            raise Forbidden("token lacks the publish scope")
        may_publish(principal)
        try:
            request.require_json()
        except UnsupportedMediaType as exc:
            self.publisher.reject(exc, "http")
            raise
        tenant = principal.tenant

        def admit(items: int) -> None:
            self.publish_rate.take(tenant, items)

        return principal, admit


__all__ = ["TEAM_SSE", "Routes"]
