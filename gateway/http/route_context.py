"""Everything a route handler may use, built once per node in ``gateway.app``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gateway.auth import Authenticator, Principal, bearer_token
from gateway.config import Settings
from gateway.fanout.driver import Driver
from gateway.fanout.foldcache import FoldCache
from gateway.fanout.hub import Hub
from gateway.fanout.policy import Overflows
from gateway.http.cors import Cors
from gateway.limits import ConnectionLimits, PublishRate
from gateway.metrics import Metrics
from gateway.net.capacity import Capacity
from gateway.net.connections import Connections
from gateway.net.server import Request
from gateway.publisher import Publisher
from gateway.store.interfaces import FeedIndex, FeedStore, RunIndex

Readiness = Callable[[], Awaitable[tuple[bool, str]]]


@dataclass
class RouteContext:
    settings: Settings
    hub: Hub
    #: Feed storage, for the few routes that read a feed's state themselves.
    feeds: FeedStore
    folds: FoldCache
    publisher: Publisher
    auth: Authenticator
    metrics: Metrics
    #: Open streams per node and per tenant (SSE and WebSocket share them).
    limits: ConnectionLimits
    #: Items per tenant through HTTP publishing (not the inbox or the producer: D4).
    publish_rate: PublishRate
    cors: Cors
    #: Open SSE streams and WebSocket sockets (for draining and socket timers).
    connections: Connections
    #: ``/readyz``: whether the node can serve, and why not.
    ready: Readiness
    #: The tenants' recently active feeds (``GET /v1/feeds``); None: not kept.
    index: FeedIndex | None = None
    #: The latest run of each thread (the AI SDK reconnect route); None: not kept.
    runs: RunIndex | None = None
    #: The node's connections and their limits, for ``/readyz``; None: not reported.
    capacity: Capacity | None = None
    #: ``auth.verify``, bound once for the node: every WebSocket session holds it, and
    #: reading ``auth.verify`` per socket would make (and keep) a bound method each.
    verify: Callable[[str], Principal] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.verify = self.auth.verify

    def principal(self, request: Request) -> Principal:
        """The caller, from ``Authorization: Bearer`` or the ``access_token`` query
        parameter (EventSource), never two different tokens; raises Unauthenticated."""
        token = bearer_token(
            request.headers.get("authorization"), request.query.get("access_token", ())
        )
        return self.auth.verify(token)

    def driver(self, overflows: Overflows) -> Driver:
        """A driver for one new subscription of a connection (``overflows`` is the
        connection's slow-consumer record)."""
        return Driver(
            self.hub,
            self.folds,
            self.metrics,
            write_timeout=self.settings.slow_client_timeout,
            overflows=overflows,
        )
