"""Prometheus metrics kept as plain numbers, updated only by the node's event loop.

prometheus_client's ``Counter``, ``Gauge`` and ``Histogram`` take a lock and run a few
checks on every update: 0.8-1 us for an ``inc``, 2.5 us for an ``observe``.  A reconnect
updates eight of them and a single-event publish three, so together they were a few
percent of each.  These classes add to ints and floats instead, and
:class:`gateway.metrics.LoopCollector` reads them when ``/metrics`` is scraped.  The
exposition is the same families, names, labels and samples, without the ``_created``
series.  This module is compiled with the kernel (CONTRIBUTING.md, "Building and the
compiled kernel"); the collector is not.

Contract: only one thread (the node's event-loop thread) updates a metric; a scrape
from another thread reads numbers that may be a moment old, never torn ones (each is
one Python object).  Label values come from fixed sets in the code (transports,
reasons, routes, statuses, commands); as a bound, a metric keeps at most
:data:`MAX_SERIES` label sets and counts any further ones in one series whose labels
are all ``"other"``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar, cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

#: How prometheus_client writes a bucket bound (``le``): Go's float format, "1e+06".
_le = cast(Callable[[float], str], floatToGoString)

#: Label sets one metric keeps at most (see the module docstring).
MAX_SERIES = 1000
OVERFLOW = "other"


class Sent:
    """Frames and bytes written to clients of one transport (plain ints, no lock)."""

    __slots__ = ("bytes", "frames")

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0


class LoopValue:
    """One series of a counter or gauge: add to :attr:`value`, or call the methods."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = value


class Bins:
    """One series of a histogram: per-bucket counts (not cumulative; the last is +Inf)
    and the sum.  An observation is one bisect; bounds are inclusive (``le``)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


S = TypeVar("S", LoopValue, Bins)


class LoopFamily(Generic[S]):
    """A metric's series by label values; without labels, its one series."""

    def __init__(self, name: str, doc: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.doc = doc
        self.labelnames = tuple(labelnames)
        self._series: dict[tuple[str, ...], S] = {}
        if not self.labelnames:
            self._series[()] = self._new()

    def _new(self) -> S:
        raise NotImplementedError

    def series(self) -> S:
        """The unlabelled metric's one series, to keep and update directly on a hot path
        (a family of labelled series has none: ``KeyError``)."""
        return self._series[()]

    def labels(self, *values: object, **by_name: object) -> S:
        """The series of these label values (positional, or all by name), made on first
        use; a value that is not a ``str`` is named by ``str()`` (as prometheus_client
        does).  Wrong names or a wrong count raise ``ValueError``, as prometheus_client."""
        if by_name:
            if values or set(by_name) != set(self.labelnames):
                raise ValueError(f"{self.name}: labels are {self.labelnames}")
            values = tuple(by_name[n] for n in self.labelnames)
        # Found as given first: the values the code passes are strs.
        series = self._series.get(cast("tuple[str, ...]", values))
        if series is None:
            if len(values) != len(self.labelnames) or not values:
                raise ValueError(f"{self.name}: labels are {self.labelnames}")
            names = tuple([str(v) for v in values])
            series = self._series.get(names)
            if series is None:
                if len(self._series) >= MAX_SERIES:
                    names = (OVERFLOW,) * len(names)
                    series = self._series.get(names)
                if series is None:
                    series = self._series[names] = self._new()
        return series

    def _items(self) -> Iterable[tuple[list[str], S]]:
        return ((list(values), s) for values, s in sorted(self._series.items()))

    def family(self) -> Metric:
        raise NotImplementedError

    def empty(self) -> Metric:
        """A family with this name and no samples (for ``describe``)."""
        raise NotImplementedError


class _Scalar(LoopFamily[LoopValue]):
    #: The exposition's family type (a counter's or a gauge's).
    _kind: type[CounterMetricFamily] | type[GaugeMetricFamily]

    def _new(self) -> LoopValue:
        return LoopValue()

    @property
    def value(self) -> float:
        """The unlabelled metric's value."""
        return self._series[()].value

    @value.setter
    def value(self, value: float) -> None:
        self._series[()].value = value

    def inc(self, amount: float = 1) -> None:
        self._series[()].value += amount

    def family(self) -> Metric:
        family = self._kind(self.name, self.doc, labels=self.labelnames)
        for values, series in self._items():
            family.add_metric(values, series.value)
        return family

    def empty(self) -> Metric:
        return self._kind(self.name, "", labels=self.labelnames)


class LoopCounter(_Scalar):
    """A counter (``name`` ends in ``_total``)."""

    _kind = CounterMetricFamily


class LoopGauge(_Scalar):
    """A gauge."""

    _kind = GaugeMetricFamily

    def dec(self, amount: float = 1) -> None:
        self._series[()].value -= amount

    def set(self, value: float) -> None:
        self._series[()].value = value


class LoopHistogram(LoopFamily[Bins]):
    """A histogram with fixed bucket bounds."""

    def __init__(
        self, name: str, doc: str, bounds: Sequence[float], labelnames: Sequence[str] = ()
    ) -> None:
        self.bounds = tuple(sorted(bounds))
        super().__init__(name, doc, labelnames)

    def _new(self) -> Bins:
        return Bins(self.bounds)

    def observe(self, value: float) -> None:
        """Observe into the unlabelled histogram."""
        self._series[()].observe(value)

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, bins in self._items():
            buckets: list[tuple[str, float]] = []
            total = 0
            for bound, count in zip(self.bounds, bins.counts, strict=False):
                total += count
                buckets.append((_le(bound), total))
            total += bins.counts[-1]
            buckets.append(("+Inf", total))
            family.add_metric(values, buckets, bins.sum)
        return family

    def empty(self) -> Metric:
        return HistogramMetricFamily(self.name, "", labels=self.labelnames)


LoopMetric = LoopCounter | LoopGauge | LoopHistogram
