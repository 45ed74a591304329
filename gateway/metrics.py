"""Every Prometheus metric the gateway exports, defined once (public interface).

Label values never carry team, run or tenant ids.  Tests build their own
:class:`Metrics` on a private registry; the app builds one per process.
The README's "Metrics" table lists these names; keep both in step.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Info

from gateway import __version__


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.build = Info("gateway_build", "Build information.", registry=r)
        self.build.info({"version": __version__})
        self.connections = Gauge(
            "gateway_connections", "Open client connections.", ["transport"], registry=r
        )
        self.disconnects = Counter(
            "gateway_disconnects_total",
            "Closed client connections by reason.",
            ["transport", "reason"],
            registry=r,
        )
        self.http_requests = Counter(
            "gateway_http_requests_total",
            "HTTP requests answered, by route and status.",
            ["route", "status"],
            registry=r,
        )
        self.published = Counter(
            "gateway_published_items_total",
            "Items appended to feeds, by feed kind and entry path (http, inbox, producer).",
            ["kind", "path"],
            registry=r,
        )
        self.publish_rejections = Counter(
            "gateway_publish_rejections_total",
            "Publish requests or inbox messages rejected, by error code and path.",
            ["code", "path"],
            registry=r,
        )
        self.items_read = Counter(
            "gateway_items_read_total", "Items read from the log by the live readers.", registry=r
        )
        self.history_items = Counter(
            "gateway_history_items_total",
            "Items read from the log as history for joining or catching-up clients.",
            registry=r,
        )
        self.fanout_offers = Counter(
            "gateway_fanout_offers_total",
            "Batches of frames handed to subscriber queues by the live readers.",
            registry=r,
        )
        self.resumes = Counter(
            "gateway_resumes_total",
            "Subscriptions opened, by outcome (live, replayed, epoch_restarted).",
            ["outcome"],
            registry=r,
        )
        self.epoch_restarts = Counter(
            "gateway_epoch_restarts_total",
            "epoch_restarted sent to followers whose position could not continue.",
            registry=r,
        )
        self.handover_rereads = Counter(
            "gateway_handover_rereads_total",
            "Joins where items arrived between the history read and going live "
            "(read again from the log, never lost).",
            registry=r,
        )
        self.slow_consumer_actions = Counter(
            "gateway_slow_consumer_actions_total",
            "Actions taken on subscribers that fell behind (catch_up, disconnect).",
            ["action"],
            registry=r,
        )
        self.buffered_bytes = Gauge(
            "gateway_buffered_bytes",
            "Outbound bytes the node holds for clients that are behind (bounded by "
            "GATEWAY_MAX_NODE_BUFFER_BYTES).",
            registry=r,
        )
        self.redis_errors = Counter(
            "gateway_redis_errors_total", "Failed Redis operations.", registry=r
        )
        self.inbox_messages = Counter(
            "gateway_inbox_messages_total",
            "Inbox messages processed, by outcome (appended, dead_lettered).",
            ["outcome"],
            registry=r,
        )
        self.limited = Counter(
            "gateway_limited_total",
            "Connections or publish requests refused with 429, by limit (connections, "
            "tenant_connections, publish_rate).",
            ["limit"],
            registry=r,
        )
