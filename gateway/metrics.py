"""Every Prometheus metric the gateway exports, defined once (public interface).

Label values never carry team, run or tenant ids.  Tests build their own
:class:`Metrics` on a private registry; the app builds one per process.
The README's "Metrics" table lists these names; keep both in step.

The fan-out hot path (once per batch per feed, sometimes per subscriber) does not use
prometheus_client's locked counters and histograms: it adds to plain numbers
(:class:`Sent`, :class:`LoopHistogram`) that a collector reads when ``/metrics`` is
scraped.  Only the node's event-loop thread updates them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar, cast

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway import __version__

M = TypeVar("M", Counter, Gauge, Histogram)

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

# Histogram buckets (upper bounds).
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
FANOUT_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0)
REDIS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 15.0)
REPLAY_BUCKETS = (0, 1, 10, 32, 100, 500, 1000, 5000, 10_000, 50_000, 100_000)


class Sent:
    """Frames and bytes written to clients of one transport (plain ints, no lock)."""

    __slots__ = ("bytes", "frames")

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0


class LoopCounter:
    """A counter updated only by the event loop: add to :attr:`value` (no lock).

    For the fan-out's per-batch counters, where prometheus-client's locked ``inc``
    was a visible share of the reader's time.
    """

    __slots__ = ("doc", "name", "value")

    def __init__(self, name: str, doc: str) -> None:
        self.name = name
        self.doc = doc
        self.value = 0

    def family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.doc, value=self.value)


class LoopHistogram:
    """A histogram updated only by the event loop: an observation is one bisect."""

    __slots__ = ("bounds", "counts", "doc", "name", "sum")

    def __init__(self, name: str, doc: str, bounds: Sequence[float]) -> None:
        self.name = name
        self.doc = doc
        self.bounds = tuple(sorted(bounds))
        #: Per bucket (not cumulative); the last one is +Inf.
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def family(self) -> HistogramMetricFamily:
        buckets: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            total += count
            buckets.append((_bound(bound), total))
        total += self.counts[-1]
        buckets.append(("+Inf", total))
        return HistogramMetricFamily(self.name, self.doc, buckets=buckets, sum_value=self.sum)


def _bound(value: float) -> str:
    return repr(float(value))


class _LoopCollector(Collector):
    """Exposes the plain-number metrics of :class:`Metrics` at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
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
        for transport, sent in sorted(m._sent.items()):
            frames.add_metric([transport], sent.frames)
            sent_bytes.add_metric([transport], sent.bytes)
        yield frames
        yield sent_bytes
        yield m.items_read.family()
        yield m.fanout_offers.family()
        yield m.delivery_lag.family()
        yield m.fanout_seconds.family()

    def describe(self) -> Iterator[Metric]:
        # Names only (the registry checks for duplicates); values come from collect().
        yield CounterMetricFamily("gateway_frames_sent_total", "", labels=["transport"])
        yield CounterMetricFamily("gateway_bytes_sent_total", "", labels=["transport"])
        yield CounterMetricFamily(self._metrics.items_read.name, "")
        yield CounterMetricFamily(self._metrics.fanout_offers.name, "")
        yield HistogramMetricFamily(self._metrics.delivery_lag.name, "")
        yield HistogramMetricFamily(self._metrics.fanout_seconds.name, "")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...
        # (the dashboard's per-pod CPU, memory and file-descriptor panels).
        ProcessCollector(registry=self.registry)
        r = self.registry
        self.build = Info("gateway_build", "Build information.", registry=r)
        self.build.info({"version": __version__})
        self.connections = Gauge(
            "gateway_connections", "Open client connections.", ["transport"], registry=r
        )
        self.connects = Counter(
            "gateway_connects_total",
            "Client connections opened (SSE streams started, WebSockets upgraded).",
            ["transport"],
            registry=r,
        )
        self.disconnects = Counter(
            "gateway_disconnects_total",
            "Closed client connections by reason: " + ", ".join(DISCONNECT_REASONS) + ".",
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
        self.items_read = LoopCounter(
            "gateway_items_read_total", "Items read from the store by the live readers."
        )
        self.history_items = Counter(
            "gateway_history_items_total",
            "Items read from the store as history for joining or catching-up clients.",
            registry=r,
        )
        self.fanout_offers = LoopCounter(
            "gateway_fanout_offers_total",
            "Batches of frames handed to subscriber queues by the live readers.",
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
        self.epoch_rotations = Counter(
            "gateway_epoch_rotations_total",
            "Feeds this node moved to a new epoch because their history could not be "
            "trusted, by reason: " + ", ".join(ROTATION_REASONS) + ".",
            ["reason"],
            registry=r,
        )
        self.lost_items = Counter(
            "gateway_lost_items_total",
            "Items this node had seen (acknowledged or delivered) that the store no "
            "longer has: lost in a failover, a restart or a restore (never recoverable).",
            registry=r,
        )
        self.unreplicated_appends = Counter(
            "gateway_unreplicated_appends_total",
            "Appends answered 503 because fewer than GATEWAY_REDIS_MIN_REPLICAS replicas "
            "acknowledged them in time (the items may still be there: retry with keys).",
            registry=r,
        )
        self.handover_rereads = Counter(
            "gateway_handover_rereads_total",
            "Joins where items arrived between the history read and going live "
            "(read again from the store, never lost).",
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
        self.subscriptions = Gauge(
            "gateway_subscriptions",
            "Open subscriptions (joining or live) by transport (sse, ws) and feed kind "
            "(team, run).",
            ["transport", "kind"],
            registry=r,
        )
        self.ready = Gauge(
            "gateway_ready",
            "1 when the last readiness check (/readyz) passed, else 0.",
            registry=r,
        )
        self.redis_command_seconds = Histogram(
            "gateway_redis_command_seconds",
            "Duration of the Redis adapter's commands (failed ones too), by command: "
            + ", ".join(REDIS_COMMANDS)
            + ".  Blocking waits for new items are not commands.",
            ["command"],
            buckets=REDIS_BUCKETS,
            registry=r,
        )
        self.replay_items = Histogram(
            "gateway_replay_items",
            "Items of history replayed to a subscription when it joined (or resumed "
            "from a cursor), per join.",
            buckets=REPLAY_BUCKETS,
            registry=r,
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
        self._sent: dict[str, Sent] = {}
        r.register(_LoopCollector(self))

    #: Labelled children remembered at most (label values come from small sets).
    MAX_CHILDREN = 4096

    def child(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)``, remembered: prometheus_client builds, checks and
        locks on every ``labels()`` call (a few microseconds each, several per
        request on the hot paths)."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            if len(self._children) >= self.MAX_CHILDREN:
                self._children.clear()
            found = self._children[key] = metric.labels(*values)
        return cast(M, found)

    def sent(self, transport: str) -> Sent:
        """The frame and byte counts of one transport (add to them directly)."""
        sent = self._sent.get(transport)
        if sent is None:
            sent = self._sent[transport] = Sent()
        return sent
