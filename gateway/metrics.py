"""Every Prometheus metric the gateway exports, defined once (public interface).

Label values never carry team, run or tenant ids.  Tests build their own
:class:`Metrics` on a private registry; the app builds one per process.
The README's "Metrics" table lists these names; keep both in step.

Counters, the connection and subscription gauges and histograms are plain numbers
(:mod:`gateway.loopmetrics`) that one collector reads when ``/metrics`` is scraped:
prometheus_client's locked ones cost a reconnect, a publish and each fan-out batch a
visible share.  Only the node's event-loop thread updates them.  Two gauges stay
prometheus_client's: ``gateway_ready`` and ``gateway_buffered_bytes`` (read through a
function at scrape time).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Gauge, Info, ProcessCollector
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway import __version__
from gateway.loopmetrics import (
    LoopCounter,
    LoopGauge,
    LoopHistogram,
    LoopMetric,
    Sent,
)

__all__ = [
    "DISCONNECT_REASONS",
    "REFUSAL_REASONS",
    "ROTATION_REASONS",
    "VALIDATION_DISAGREEMENTS",
    "LoopCollector",
    "LoopHistogram",
    "Metrics",
    "Sent",
]

#: Disconnect reasons (``gateway_disconnects_total{reason}``): the client went away or
#: closed; too slow; the node shut down or drained; the token expired; an error
#: (protocol violation, store failure); the feed was reset (``epoch_restarted`` ends
#: an SSE stream); the format's stream ended with an item (a run's end on SSE).
#: ``gateway.fanout.driver.EndReason`` names the same reasons (a test checks).
DISCONNECT_REASONS = ("client", "slow", "shutdown", "auth", "error", "reset", "finished")

#: Why a feed moved to a new epoch (``gateway_epoch_rotations_total{reason}``): its data
#: was lost; this node saw items the store no longer has (a rollback); it was last
#: written on another server (a failover or a move: nothing can prove it continues).
ROTATION_REASONS = ("missing", "rollback", "moved")

#: Why a client connection was refused (``gateway_connections_refused_total{reason}``):
#: the node's or the tenant's stream limit (GATEWAY_MAX_CONNECTIONS,
#: GATEWAY_MAX_TENANT_CONNECTIONS: answered 429); the node's share of the open-files
#: limit (answered 503 and closed at once); the internal port's connection bound; the
#: kernel refused ``accept()`` (out of files or memory: accepting pauses).
REFUSAL_REASONS = ("connections", "tenant_connections", "files", "internal", "accept")

#: The Redis commands timed by ``gateway_redis_command_seconds{command}``.
REDIS_COMMANDS = (
    "append",
    "append_many",
    "state",
    "xread",
    "xrange",
    "verify",
    "inbox",
    "ping",
)

#: Items the fast validator (jsonschema-rs) refused and the explaining one (jsonschema)
#: found no fault in, by event type (``source:<kind>`` for a TeamSource); such items are
#: refused (gateway/validate.py).  Process-wide: validation runs below the node's wiring,
#: so every :class:`Metrics` of the process exposes this one counter.
VALIDATION_DISAGREEMENTS = LoopCounter(
    "gateway_validation_disagreements_total",
    "Published items refused because the fast validator (jsonschema-rs) rejected them "
    "and the reference one (jsonschema) found no error, by event type (source:<kind> "
    "for a TeamSource).  Process-wide.",
    ["type"],
)

# Histogram buckets (upper bounds).
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
FANOUT_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0)
REDIS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 15.0)
REPLAY_BUCKETS = (0, 1, 10, 32, 100, 500, 1000, 5000, 10_000, 50_000, 100_000)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...
        # (the dashboard's per-pod CPU, memory and file-descriptor panels).
        ProcessCollector(registry=self.registry)
        r = self.registry
        self.build = Info("gateway_build", "Build information.", registry=r)
        self.build.info({"version": __version__})
        self.connections = LoopGauge(
            "gateway_connections", "Open client connections.", ["transport"]
        )
        self.connects = LoopCounter(
            "gateway_connects_total",
            "Client connections opened (SSE streams started, WebSockets upgraded).",
            ["transport"],
        )
        self.disconnects = LoopCounter(
            "gateway_disconnects_total",
            "Closed client connections by reason: " + ", ".join(DISCONNECT_REASONS) + ".",
            ["transport", "reason"],
        )
        self.http_requests = LoopCounter(
            "gateway_http_requests_total",
            "HTTP requests answered, by route and status.",
            ["route", "status"],
        )
        self.published = LoopCounter(
            "gateway_published_items_total",
            "Items appended to feeds, by feed kind and entry path (http, inbox, producer).",
            ["kind", "path"],
        )
        self.runs_ended = LoopCounter(
            "gateway_runs_ended_total",
            "Runs ended, by what ended them: their producer's terminal event (producer) "
            "or their lease running out (lease).",
            ["by"],
        )
        self.live_runs = LoopGauge(
            "gateway_live_runs",
            "Live runs in the live-run index: every node's runs, as this node last counted.",
        )
        self.publish_rejections = LoopCounter(
            "gateway_publish_rejections_total",
            "Publish requests or inbox messages rejected, by error code and path.",
            ["code", "path"],
        )
        self.items_read = LoopCounter(
            "gateway_items_read_total", "Items read from the store by the live readers."
        )
        self.history_items = LoopCounter(
            "gateway_history_items_total",
            "Items read from the store as history for joining or catching-up clients.",
        )
        self.fanout_offers = LoopCounter(
            "gateway_fanout_offers_total",
            "Batches of frames handed to subscriber queues by the live readers.",
        )
        self.resumes = LoopCounter(
            "gateway_resumes_total",
            "Subscriptions opened, by outcome (live, replayed, epoch_restarted).",
            ["outcome"],
        )
        self.epoch_restarts = LoopCounter(
            "gateway_epoch_restarts_total",
            "epoch_restarted sent to followers whose position could not continue.",
        )
        self.epoch_rotations = LoopCounter(
            "gateway_epoch_rotations_total",
            "Feeds this node moved to a new epoch because their history could not be "
            "trusted, by reason: " + ", ".join(ROTATION_REASONS) + ".",
            ["reason"],
        )
        self.lost_items = LoopCounter(
            "gateway_lost_items_total",
            "Items this node had seen (acknowledged or delivered) that the store no "
            "longer has: lost in a failover, a restart or a restore (never recoverable).",
        )
        self.unreplicated_appends = LoopCounter(
            "gateway_unreplicated_appends_total",
            "Appends answered 503 because fewer than GATEWAY_REDIS_MIN_REPLICAS replicas "
            "acknowledged them in time (the items may still be there: retry with keys).",
        )
        self.handover_rereads = LoopCounter(
            "gateway_handover_rereads_total",
            "Joins where items arrived between the history read and going live "
            "(read again from the store, never lost).",
        )
        self.slow_consumer_actions = LoopCounter(
            "gateway_slow_consumer_actions_total",
            "Actions taken on subscribers that fell behind (catch_up, disconnect).",
            ["action"],
        )
        self.buffered_bytes = Gauge(
            "gateway_buffered_bytes",
            "Outbound bytes the node holds for clients that are behind (bounded by "
            "GATEWAY_MAX_NODE_BUFFER_BYTES).",
            registry=r,
        )
        self.redis_errors = LoopCounter("gateway_redis_errors_total", "Failed Redis operations.")
        self.inbox_messages = LoopCounter(
            "gateway_inbox_messages_total",
            "Inbox messages processed, by outcome (appended, dead_lettered; run inbox "
            "heartbeats: renewed, not_live).",
            ["outcome"],
        )
        self.limited = LoopCounter(
            "gateway_limited_total",
            "Connections or publish requests refused with 429, by limit (connections, "
            "tenant_connections, publish_rate).",
            ["limit"],
        )
        self.connections_refused = LoopCounter(
            "gateway_connections_refused_total",
            "Client connections refused, by reason: connections, tenant_connections (429 "
            "at GATEWAY_MAX_CONNECTIONS or GATEWAY_MAX_TENANT_CONNECTIONS), files (the "
            "node's share of the open-files limit: 503 and closed), internal (the internal "
            "port's bound), accept (the kernel refused accept(), out of files or memory: "
            "counted once per pause of accepting).",
            ["reason"],
        )
        self.sockets = Gauge(
            "gateway_sockets",
            "Open client TCP connections on GATEWAY_PORT (streams, WebSockets, idle "
            "keep-alive and publishing connections).",
            registry=r,
        )
        self.socket_limit = Gauge(
            "gateway_socket_limit",
            "Client TCP connections this node accepts at most: the open-files limit less "
            "what the node keeps for itself (docs/reliability.md).",
            registry=r,
        )
        self.validation_disagreements = VALIDATION_DISAGREEMENTS
        self.subscriptions = LoopGauge(
            "gateway_subscriptions",
            "Open subscriptions (joining or live) by transport (sse, ws) and feed kind "
            "(team, run).",
            ["transport", "kind"],
        )
        self.ready = Gauge(
            "gateway_ready",
            "1 when the last readiness check (/readyz) passed, else 0.",
            registry=r,
        )
        self.redis_command_seconds = LoopHistogram(
            "gateway_redis_command_seconds",
            "Duration of the Redis adapter's commands (failed ones too), by command: "
            + ", ".join(REDIS_COMMANDS)
            + ".  Blocking waits for new items are not commands.",
            REDIS_BUCKETS,
            ["command"],
        )
        self.replay_items = LoopHistogram(
            "gateway_replay_items",
            "Items of history replayed to a subscription when it joined (or resumed "
            "from a cursor), per join.",
            REPLAY_BUCKETS,
        )
        #: Live-path metrics kept as plain numbers (see the module docstring).
        self.delivery_lag = LoopHistogram(
            "gateway_delivery_lag_seconds",
            "Seconds from an item's append (the store's clock: Redis TIME, or this "
            "process's clock for the embedded log) to its write to the sockets of live "
            "subscribers; observed once per delivered batch per feed, for the batch's "
            "newest item.  History replays are not observed.",
            LAG_BUCKETS,
        )
        self.fanout_seconds = LoopHistogram(
            "gateway_fanout_seconds",
            "Seconds to encode one batch of a feed and hand it to all its live "
            "subscriptions on this node.",
            FANOUT_BUCKETS,
        )
        #: The frame and byte counts by transport, as the collector exposes them: made
        #: by :meth:`sent`; a hot path may keep this dict and look in it first.
        self.sent_by_transport: dict[str, Sent] = {}
        loop = [m for m in vars(self).values() if isinstance(m, LoopMetric)]
        r.register(LoopCollector(loop, self.sent_by_transport))

    def sent(self, transport: str) -> Sent:
        """The frame and byte counts of one transport (add to them directly)."""
        sent = self.sent_by_transport.get(transport)
        if sent is None:
            sent = self.sent_by_transport[transport] = Sent()
        return sent


class LoopCollector(Collector):
    """Exposes loop metrics (and the sent tallies) at scrape time."""

    def __init__(self, metrics: Sequence[LoopMetric], sent: dict[str, Sent]) -> None:
        self._metrics = metrics
        self._sent = sent

    def collect(self) -> Iterator[Metric]:
        frames = CounterMetricFamily(
            "gateway_frames_sent_total",
            "Event frames (items, live and history) written to clients, by transport.",
            labels=["transport"],
        )
        sent_bytes = CounterMetricFamily(
            "gateway_bytes_sent_total",
            "Bytes of those event frames as encoded (SSE messages without HTTP/1.1 "
            "chunk headers; WebSocket frames with theirs), by transport.",
            labels=["transport"],
        )
        for transport, sent in sorted(self._sent.items()):
            frames.add_metric([transport], sent.frames)
            sent_bytes.add_metric([transport], sent.bytes)
        yield frames
        yield sent_bytes
        for metric in self._metrics:
            yield metric.family()

    def describe(self) -> Iterator[Metric]:
        # Names only (the registry checks for duplicates); values come from collect().
        yield CounterMetricFamily("gateway_frames_sent_total", "", labels=["transport"])
        yield CounterMetricFamily("gateway_bytes_sent_total", "", labels=["transport"])
        for metric in self._metrics:
            yield metric.empty()
