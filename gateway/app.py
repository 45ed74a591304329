"""Wiring: build every part from the settings and run them in one task group."""

from __future__ import annotations

import contextlib
import logging
import resource
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import anyio.abc
import structlog

from gateway import native
from gateway.activity import FeedActivity
from gateway.auth import Authenticator
from gateway.config import Settings
from gateway.fanout.foldcache import FoldCache
from gateway.fanout.hub import Hooks, Hub
from gateway.http.cors import Cors
from gateway.http.route_context import RouteContext
from gateway.http.router import Router
from gateway.http.routes import INTERNAL_ROUTES, client_routes
from gateway.inbox_consumer import INBOXES, Inbox
from gateway.lease_sweep import LeaseSweep
from gateway.limits import (
    LIMIT_CONNECTIONS,
    LIMIT_TENANT_CONNECTIONS,
    ConnectionLimits,
    PublishRate,
)
from gateway.metrics import Metrics
from gateway.net import logcontext
from gateway.net.capacity import (
    INTERNAL_MAX_SOCKETS,
    Capacity,
    Refusals,
    file_limit,
    raise_file_limit,
    reserved_files,
    socket_limit,
)
from gateway.net.connections import Connections, Ticker
from gateway.net.server import HttpServer
from gateway.publisher import Publisher
from gateway.readiness import Readiness
from gateway.store.interfaces import Backend
from gateway.store.memory import MemoryStore, memory_backend
from gateway.store.redis import from_settings, redis_backend

log = structlog.get_logger("gateway")

#: Largest request body the internal port reads (its routes take none).
INTERNAL_MAX_BODY = 1024


def configure_logging(
    settings: Settings, stream: TextIO | None = None, *, once: bool = False
) -> None:
    """Log with structlog to ``stream`` (default stderr): one JSON object per line
    (production), or coloured console lines (``auto``: when the stream is a terminal).

    Lines carry the context bound in the emitting task: a connection's ``conn_id``,
    ``transport``, ``tenant`` and ``remote`` (``http/logcontext.py``), and whatever is
    bound with ``structlog.contextvars``.  ``once``: the
    process configures logging this once (``gateway serve``), so each module's logger
    is built on first use and kept; otherwise (tests configure again and again) it is
    built on every call, about 1.5% of a WebSocket reconnect's CPU.
    """
    out = sys.stderr if stream is None else stream
    fmt = settings.log_format
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    tail: list[structlog.types.Processor] = (
        # The console renderer formats exceptions itself.
        [structlog.dev.ConsoleRenderer()]
        if fmt == "console"
        else [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    )
    level = logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            logcontext.merge,  # a connection's fields (gateway/net/logcontext.py)
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *tail,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=once,
    )


@dataclass
class Gateway:
    """A running node: its parts and the ports it listens on."""

    settings: Settings
    backend: Backend
    metrics: Metrics
    hub: Hub
    publisher: Publisher
    server: HttpServer
    port: int
    inboxes: list[Inbox]
    context: RouteContext
    #: The listener of /metrics, /healthz and /readyz when GATEWAY_INTERNAL_PORT is set.
    internal_server: HttpServer | None = None
    internal_port: int | None = None

    @property
    def draining(self) -> bool:
        return self.hub.draining

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    @property
    def internal_url(self) -> str | None:
        """Where /metrics, /healthz and /readyz are served: the internal port's URL, or
        None when they share the client port (:attr:`url`)."""
        if self.internal_port is None:
            return None
        host = self.settings.internal_host or self.settings.host
        return f"http://{host}:{self.internal_port}"

    async def drain(self, window: float) -> None:
        """Stop taking connections and end every open stream, spread over ``window`` s.

        Readiness answers 503 from the start, so a load balancer stops sending new
        clients; the open streams end in slices so that their reconnects (to other
        nodes) do not arrive all at once.  Returns when every stream has been ended.
        The internal port keeps listening: probes see the 503.
        """
        self.hub.draining = True
        self.server.stop_listening()
        closers: list[Callable[[], None]] = [c.shutdown for c in self.context.connections]
        log.info("draining", connections=len(closers), window_seconds=window)
        slices = max(1, min(len(closers), int(window * 10)))
        for index in range(slices):
            for close in closers[index::slices]:
                close()
            if index + 1 < slices:
                await anyio.sleep(window / slices)


def build_backend(settings: Settings, metrics: Metrics | None = None) -> Backend:
    """The backend the settings name: Redis when a URL is set, else the embedded one."""
    if settings.redis_url:
        return redis_backend(
            from_settings(settings),
            prefix=settings.redis_prefix,
            node_id=settings.node_id,
            max_connections=settings.redis_max_connections,
            metrics=metrics,
            timeout=settings.redis_timeout_seconds,
            min_replicas=settings.redis_min_replicas,
            replica_timeout_ms=settings.redis_replica_timeout_ms,
            tombstone_seconds=settings.redis_tombstone_seconds,
            cluster=settings.redis_cluster,
            inbox_shards=settings.redis_inbox_shards,
            linger=settings.fanout_linger_ms / 1000,
        )
    return memory_backend(
        MemoryStore(
            tombstone_seconds=settings.redis_tombstone_seconds,
            linger=settings.fanout_linger_ms / 1000,
        )
    )


@contextlib.asynccontextmanager
async def running(
    settings: Settings,
    *,
    backend: Backend | None = None,
    hooks: Hooks | None = None,
    metrics: Metrics | None = None,
) -> AsyncIterator[Gateway]:
    """Start a node inside the caller's event loop; stop it when the block exits.

    Tests use this to run real nodes on free ports; ``gateway serve`` uses :func:`serve`.
    """
    metrics = metrics or Metrics()
    backend = backend or build_backend(settings, metrics)
    hub = Hub(
        backend.feeds,
        backend.live,
        metrics,
        read_batch=settings.read_batch,
        read_block_ms=settings.read_block_ms,
        history_page=settings.history_page,
        max_node_buffer_bytes=settings.max_node_buffer_bytes,
        max_queue_bytes=settings.max_queue_bytes,
        hooks=hooks,
    )
    metrics.buffered_bytes.set_function(lambda: hub.budget.total)
    folds = FoldCache(backend.feeds, backend.folds)
    # The feed index (GET /v1/feeds) hears of appends once per feed per second.
    activity = None if backend.index is None else FeedActivity(backend.index)
    publisher = Publisher(
        backend.feeds,
        backend.live,
        folds,
        metrics,
        team_retention=settings.team_retention,
        run_retention=settings.run_retention,
        run_finished_ttl=settings.run_finished_ttl_seconds,
        agui_strict=settings.agui_strict,
        activity=activity,
        runs=backend.runs,
        lease_seconds=settings.run_lease_seconds,
    )
    # Every node sweeps the live runs whose lease ran out.
    sweep = None if backend.runs is None else LeaseSweep(publisher, backend.runs, metrics)
    # One consumer per inbox, when the backend has inboxes.
    inboxes: list[Inbox] = []
    if backend.inbox is not None:
        inboxes = [
            Inbox(
                queue,
                kind,
                publisher,
                metrics,
                max_body_bytes=settings.max_body_bytes,
                claim_ms=settings.inbox_claim_ms,
                block_ms=settings.read_block_ms,
            )
            for kind in INBOXES
            for queue in backend.inbox(kind.name)
        ]

    # A read loop that has not completed a read (an empty one counts) for this long is
    # stuck: a blocking read returns within read_block_ms.
    ready = Readiness(
        ping=backend.ping,
        is_draining=lambda: hub.draining,
        hub=hub,
        inboxes=[(inbox.name, inbox) for inbox in inboxes],
        stalled_after=settings.ready_stall_seconds + settings.read_block_ms / 1000,
        ping_bound=settings.redis_timeout_seconds,
        metrics=metrics,
    )

    # Client connections the open-files limit leaves room for (docs/reliability.md).
    files = file_limit()
    max_sockets = socket_limit(files.soft, reserved_files(settings))
    servers: list[HttpServer] = []

    def refusal_details(reason: str) -> dict[str, Any]:
        if reason == LIMIT_CONNECTIONS:
            return {"open": limits.total, "limit": limits.max_connections}
        if reason == LIMIT_TENANT_CONNECTIONS:
            return {"limit": limits.max_tenant_connections}
        if reason == "internal":
            return {"limit": INTERNAL_MAX_SOCKETS}
        sockets = servers[0].open_sockets if servers else None
        return {"sockets": sockets, "socket_limit": max_sockets, "files_soft": files.soft}

    refusals = Refusals(metrics.connections_refused, details=refusal_details)

    def limited(limit: str) -> None:
        metrics.limited.labels(limit=limit).inc()
        if limit in (LIMIT_CONNECTIONS, LIMIT_TENANT_CONNECTIONS):
            refusals(limit)

    limits = ConnectionLimits(settings.max_connections, settings.max_tenant_connections, limited)
    capacity = Capacity(
        limits,
        socket_limit=max_sockets,
        sockets=lambda: servers[0].open_sockets if servers else 0,
    )
    metrics.sockets.set_function(lambda: servers[0].open_sockets if servers else 0)
    metrics.socket_limit.set(max_sockets)

    # A key file that is missing or broken at start-up is a configuration error.
    authenticator = Authenticator.from_settings(settings)
    tick = Ticker.tick_seconds(settings.ws_ping_interval, settings.ws_ping_timeout)
    connections = Connections(slot_seconds=tick / 4)
    context = RouteContext(
        settings=settings,
        hub=hub,
        feeds=backend.feeds,
        folds=folds,
        publisher=publisher,
        auth=authenticator,
        metrics=metrics,
        limits=limits,
        publish_rate=PublishRate(settings.publish_rate, settings.publish_burst, on_limited=limited),
        cors=Cors(settings.cors_origins),
        connections=connections,
        ready=ready,
        index=backend.index,
        runs=backend.runs,
        capacity=capacity,
    )
    internal = settings.internal_port is not None
    async with anyio.create_task_group() as tg:
        # With an internal port, /metrics, /healthz and /readyz are served there only.
        router = Router(client_routes(internal=internal), context)

        server = HttpServer(
            router,
            max_body=settings.max_body_bytes,
            requests=metrics.http_requests,
            max_sockets=max_sockets,
            on_refused=refusals,
        )
        servers.append(server)
        internal_server = None
        if internal:
            internal_server = HttpServer(
                Router(INTERNAL_ROUTES, context),
                max_body=INTERNAL_MAX_BODY,
                requests=metrics.http_requests,
                max_sockets=INTERNAL_MAX_SOCKETS,
                on_refused=refusals,
                refuse_reason="internal",
            )
        tg.start_soon(refusals.run)
        hub.last_progress = time.monotonic()
        tg.start_soon(hub.run)
        tg.start_soon(ready.run)
        ticker = Ticker(connections)
        tg.start_soon(ticker.run)
        for inbox in inboxes:
            inbox.last_progress = time.monotonic()
            tg.start_soon(inbox.run)
        if activity is not None:
            tg.start_soon(activity.run)
        if sweep is not None:
            tg.start_soon(sweep.run)
        try:
            port = await server.start(settings.host, settings.port)
            internal_port = None
            if internal_server is not None and settings.internal_port is not None:
                internal_port = await internal_server.start(
                    settings.internal_host or settings.host, settings.internal_port
                )
            yield Gateway(
                settings,
                backend,
                metrics,
                hub,
                publisher,
                server,
                port,
                inboxes,
                context,
                internal_server=internal_server,
                internal_port=internal_port,
            )
        finally:
            with anyio.CancelScope(shield=True):
                await server.aclose()
                if internal_server is not None:
                    await internal_server.aclose()
            tg.cancel_scope.cancel()
    await backend.aclose()


def _raise_file_limit(settings: Settings) -> None:
    """Raise the soft open-files limit to the hard one, and say what it is now: one
    info line, and a warning when it leaves room for fewer client connections than
    GATEWAY_MAX_CONNECTIONS streams (or could not be raised)."""
    before, after, error = raise_file_limit()
    reserved = reserved_files(settings)
    sockets = socket_limit(after.soft, reserved)
    hard = None if after.hard == resource.RLIM_INFINITY else after.hard  # None: unlimited
    log.info(
        "open-files limit",
        soft=after.soft,
        hard=hard,
        soft_before=before.soft,
        socket_limit=sockets,
        reserved=reserved,
    )
    if error is not None:
        log.warning(
            "could not raise the soft open-files limit to the hard one",
            error=error,
            soft=after.soft,
            hard=hard,
        )
    if sockets < settings.max_connections:
        log.warning(
            "the open-files limit leaves room for fewer client connections than "
            "GATEWAY_MAX_CONNECTIONS: past socket_limit new connections get 503; raise "
            "the hard limit (ulimit -n, systemd LimitNOFILE, the container runtime's "
            "nofile) or lower GATEWAY_MAX_CONNECTIONS",
            socket_limit=sockets,
            max_connections=settings.max_connections,
            soft=after.soft,
            hard=hard,
        )


async def serve(
    settings: Settings, *, beside: Callable[[Gateway], Coroutine[Any, Any, None]] | None = None
) -> None:
    """Run a node until cancelled (``gateway serve``).

    ``beside``, if given, runs next to the node once it listens (dev mode's demo), and
    is cancelled when a signal starts the drain.
    """
    configure_logging(settings, once=True)
    _raise_file_limit(settings)
    if settings.redis_url is None:
        log.warning(
            "no Redis URL configured: running on the embedded in-memory log; "
            "NOTHING IS DURABLE (set GATEWAY_REDIS_URL or --redis-url)"
        )
    if (
        settings.jwt_secret is None
        and settings.jwt_public_key_file is None
        and settings.jwt_jwks_file is None
    ):
        log.warning(
            "no authenticator configured: every /v1 route answers 401; set "
            "GATEWAY_JWT_SECRET (HS256; mint tokens with 'gateway token'), "
            "GATEWAY_JWT_PUBLIC_KEY_FILE (PEM) or GATEWAY_JWT_JWKS_FILE (JWKS) to accept tokens"
        )
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with running(settings) as node:
            log.info(
                "gateway listening",
                url=node.url,
                internal_url=node.internal_url,
                log=node.backend.name,
                keepalive_seconds=settings.keepalive_seconds,
                compiled_kernel=native.status(),
            )
            async with anyio.create_task_group() as companions:
                if beside is not None:
                    companions.start_soon(beside, node)
                async for signum in signals:
                    log.info("signal received: draining", signal=signal.Signals(signum).name)
                    break
                companions.cancel_scope.cancel()
            async with anyio.create_task_group() as tg:
                tg.start_soon(node.drain, settings.drain_seconds)

                async def force() -> None:
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        log.warning("second signal: exiting now", signal=name)
                        tg.cancel_scope.cancel()
                        return

                tg.start_soon(force)
                with anyio.move_on_after(settings.drain_seconds + 5):
                    await node.hub.wait_idle()
                tg.cancel_scope.cancel()
        log.info("stopped")


__all__ = ["Gateway", "Hooks", "configure_logging", "running", "serve"]
