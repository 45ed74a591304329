"""The delivery checker: what every client received, compared with what was acknowledged.

Pure code (no sockets, no clocks): the fault tests and the soak feed it what they
recorded and assert on its report.  Inputs, per feed (``"team/<id>"``):

- ``acked``: the producer's acknowledged ``(cursor, payload)`` pairs, in the order the
  producer got them.  ``payload`` is whatever identifies an item's content (the tests
  use the team event's ``event_id``, unique per item).
- ``traces``: one :class:`Trace` per client and feed: the cursor it first subscribed
  with and, in arrival order, every item (:class:`Received`) and every
  ``epoch_restarted`` (:class:`Restarted`) it got, across all its reconnects.
- ``final``: optionally, the feed as the store serves it at the end (every retained item
  of the current epoch, read by a fresh client after the faults).
- ``attempted``: optionally, every payload the producer ever sent (acknowledged or
  not), so that an item nobody published shows.

The rules (decisions D1, D2, D9), and the finding each broken rule produces:

- ``reused``: one ``(epoch, offset)`` of a feed names one payload everywhere (the
  acknowledgements, every client, the final stream); a cursor seen with two is reused.
- ``duplicated``: a client gets each cursor once, and a payload at most once per epoch;
  the producer's acknowledgements and the final stream likewise hold a payload once
  per epoch.
- ``out_of_order`` and ``gap``: a client's cursors only move forward, offset after offset
  within its epoch, to a later epoch only through ``epoch_restarted``, and a notice never
  points backwards.  Backwards is ``out_of_order``; forwards past an item, or into a new
  epoch without the notice, is a ``gap``.
- ``lost``: every acknowledged item after a client's start cursor reaches it, or an
  ``epoch_restarted`` tells it that it cannot (a notice covers everything between the
  client's position and the cursor it names).  Also ``lost`` (client ``"final"``): an
  acknowledged item of the final stream's epoch (from its first retained offset on)
  that the final stream does not hold, or one in an epoch later than the final one.
- ``phantom``: a payload a client got that the producer never sent.

Acknowledged items of epochs older than the final one were lost by the store and
replaced by a new epoch; that is allowed (D9) when announced, and is counted as
``rotated_away`` (not a failure).  ``start`` ``None`` means "subscribed with no
cursor": everything of the epoch of its first observation is expected, from offset 1.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: ``(epoch, offset)``; tuples order like cursors do.
Pos = tuple[int, int]
#: How many findings of one kind a failure message shows.
SHOWN = 8
#: The pseudo-client names of the producer's acknowledgements and of the final stream.
PRODUCER = "producer"
FINAL = "final"


def pos(cursor: str) -> Pos:
    """``"E:O"`` as ``(E, O)``; ValueError for anything else."""
    epoch, sep, offset = cursor.partition(":")
    if not sep or not epoch.isdigit() or not offset.isdigit():
        raise ValueError(f"not a cursor: {cursor!r}")
    return int(epoch), int(offset)


def text(p: Pos | None) -> str:
    return "none" if p is None else f"{p[0]}:{p[1]}"


@dataclass(frozen=True)
class Received:
    """One ``event`` a client got (``at``: when, on any clock; informational)."""

    cursor: Pos
    payload: str
    at: float = 0.0


@dataclass(frozen=True)
class Restarted:
    """One ``epoch_restarted`` a client got, with the cursor it was told to resume from."""

    cursor: Pos
    at: float = 0.0


Observation = Received | Restarted


@dataclass
class Trace:
    """One client's view of one feed, across all its connections."""

    client: str
    feed: str
    start: Pos | None = None
    observations: list[Observation] = field(default_factory=list)


@dataclass(frozen=True)
class Finding:
    kind: str
    feed: str
    client: str
    cursor: Pos | None
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.client} {self.feed} at {text(self.cursor)}: {self.detail}"


KINDS = ("lost", "duplicated", "reused", "out_of_order", "gap", "phantom")


@dataclass
class DeliveryReport:
    findings: list[Finding] = field(default_factory=list)
    #: Acknowledged items lost by the store and replaced by a later epoch (allowed, D9).
    rotated_away: int = 0
    #: Acknowledged items, items received by clients, epoch_restarted notices received.
    acked: int = 0
    received: int = 0
    restarts: int = 0

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def counts(self) -> dict[str, int]:
        """Findings per kind (every kind present, zeros included)."""
        counts = dict.fromkeys(KINDS, 0)
        for f in self.findings:
            counts[f.kind] += 1
        return counts

    @property
    def clean(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        counts = " ".join(f"{k}={v}" for k, v in self.counts().items())
        return (
            f"{counts} (acked={self.acked} received={self.received} "
            f"restarts={self.restarts} rotated_away={self.rotated_away})"
        )

    def message(self) -> str:
        """The summary, then up to :data:`SHOWN` findings of each kind."""
        lines = [self.summary()]
        for kind in KINDS:
            found = self.of(kind)
            lines += [f"  {f}" for f in found[:SHOWN]]
            if len(found) > SHOWN:
                lines.append(f"  ... and {len(found) - SHOWN} more {kind}")
        return "\n".join(lines)

    def assert_clean(self) -> None:
        if self.findings:
            raise AssertionError("delivery check failed: " + self.message())


# ---------------------------------------------------------------------------
# announced ranges
# ---------------------------------------------------------------------------


@dataclass
class _Walk:
    """The state of one trace after walking it."""

    received: set[Pos] = field(default_factory=set)
    #: ``(after, upto)``: every position p with after < p <= upto was announced lost.
    announced: list[tuple[Pos, Pos]] = field(default_factory=list)
    start: Pos | None = None
    end: Pos | None = None

    def covered(self, p: Pos) -> bool:
        return p in self.received or any(a < p <= b for a, b in self.announced)


_END_OF_EPOCH = 2**63


def _announce(walk: _Walk, here: Pos | None, to: Pos) -> None:
    """An ``epoch_restarted`` at position ``here`` pointing at ``to``."""
    after = here if here is not None else (-1, -1)
    if here is not None and to[0] > here[0]:
        # The rest of ``here``'s epoch, every epoch between, and ``to``'s epoch up to it.
        walk.announced.append((after, (here[0], _END_OF_EPOCH)))
        walk.announced.append(((here[0] + 1, -1), to))
    else:
        walk.announced.append((after, to))


def _walk(trace: Trace, out: list[Finding]) -> _Walk:
    walk = _Walk(start=trace.start)
    here = trace.start
    payloads_by_epoch: dict[tuple[int, str], Pos] = {}

    def find(kind: str, at: Pos | None, detail: str) -> None:
        out.append(Finding(kind, trace.feed, trace.client, at, detail))

    for index, obs in enumerate(trace.observations):
        where = f"(observation {index}, position {text(here)})"
        if isinstance(obs, Restarted):
            if here is not None and obs.cursor <= here:
                find(
                    "out_of_order",
                    obs.cursor,
                    f"epoch_restarted points back from {text(here)} {where}",
                )
            else:
                _announce(walk, here, obs.cursor)
                here = obs.cursor
            continue
        c = obs.cursor
        if here is None:
            here = (c[0], 0)
            walk.start = here
        if c in walk.received:
            find("duplicated", c, f"received again (payload {obs.payload}) {where}")
            continue
        seen_at = payloads_by_epoch.get((c[0], obs.payload))
        if seen_at is not None:
            find(
                "duplicated",
                c,
                f"payload {obs.payload} already received at {text(seen_at)} in this epoch {where}",
            )
        if c <= here:
            find("out_of_order", c, f"not after its position {where}")
            walk.received.add(c)
            continue
        if c[0] > here[0]:
            find(
                "gap",
                c,
                f"moved from epoch {here[0]} to {c[0]} without epoch_restarted {where}",
            )
        elif c[1] > here[1] + 1:
            find("gap", c, f"offsets {here[1] + 1}..{c[1] - 1} skipped without notice {where}")
        walk.received.add(c)
        payloads_by_epoch[(c[0], obs.payload)] = c
        here = c
    walk.end = here
    return walk


# ---------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------


def _unique_per_epoch(
    feed: str, who: str, items: Iterable[tuple[Pos, str]], out: list[Finding]
) -> None:
    first: dict[tuple[int, str], Pos] = {}
    for c, payload in items:
        other = first.setdefault((c[0], payload), c)
        if other != c:
            out.append(
                Finding("duplicated", feed, who, c, f"payload {payload} also at {text(other)}")
            )


def check(
    acked: Mapping[str, Sequence[tuple[str, str]]],
    traces: Sequence[Trace],
    final: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    attempted: Mapping[str, Iterable[str]] | None = None,
) -> DeliveryReport:
    """Check deliveries against the acknowledgements (see the module docstring)."""
    report = DeliveryReport()
    out = report.findings
    acked_pos = {feed: [(pos(c), p) for c, p in items] for feed, items in acked.items()}
    final_pos = {feed: [(pos(c), p) for c, p in items] for feed, items in (final or {}).items()}
    report.acked = sum(len(v) for v in acked_pos.values())

    # Who saw which payload at each cursor: the producer, every client, the final stream.
    names: dict[tuple[str, Pos], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for feed, items in acked_pos.items():
        _unique_per_epoch(feed, PRODUCER, items, out)
        for c, payload in items:
            names[(feed, c)][payload].add(PRODUCER)
    for feed, items in final_pos.items():
        _unique_per_epoch(feed, FINAL, items, out)
        for c, payload in items:
            names[(feed, c)][payload].add(FINAL)

    walks: list[tuple[Trace, _Walk]] = []
    for trace in traces:
        walks.append((trace, _walk(trace, out)))
        for obs in trace.observations:
            if isinstance(obs, Received):
                report.received += 1
                names[(trace.feed, obs.cursor)][obs.payload].add(trace.client)
            else:
                report.restarts += 1

    for (feed, c), by_payload in names.items():
        if len(by_payload) > 1:
            seen = "; ".join(
                f"{payload} ({', '.join(sorted(who))})"
                for payload, who in sorted(by_payload.items())
            )
            out.append(Finding("reused", feed, "*", c, f"names {len(by_payload)} payloads: {seen}"))

    if attempted is not None:
        sent = {feed: set(p) for feed, p in attempted.items()}
        for trace in traces:
            for obs in trace.observations:
                if isinstance(obs, Received) and obs.payload not in sent.get(trace.feed, set()):
                    out.append(
                        Finding(
                            "phantom",
                            trace.feed,
                            trace.client,
                            obs.cursor,
                            f"payload {obs.payload} was never sent by the producer",
                        )
                    )

    for trace, walk in walks:
        _lost_for_client(trace, walk, acked_pos.get(trace.feed, []), out)
    for feed, items in final_pos.items():
        report.rotated_away += _lost_in_store(feed, items, acked_pos.get(feed, []), out)
    return report


def _lost_for_client(
    trace: Trace, walk: _Walk, acked: Sequence[tuple[Pos, str]], out: list[Finding]
) -> None:
    for c, payload in acked:
        # Before the client's start: not expected.  A client that subscribed with no
        # cursor and got nothing at all has no start: everything is expected of it.
        if walk.start is not None and c <= walk.start:
            continue
        if walk.covered(c):
            continue
        out.append(
            Finding(
                "lost",
                trace.feed,
                trace.client,
                c,
                f"acknowledged payload {payload} never reached it and no epoch_restarted "
                f"covered it (start {text(walk.start)}, last position {text(walk.end)})",
            )
        )


def _lost_in_store(
    feed: str,
    final: Sequence[tuple[Pos, str]],
    acked: Sequence[tuple[Pos, str]],
    out: list[Finding],
) -> int:
    """Acknowledged items the final stream should hold; returns how many rotated away."""
    held = {c for c, _ in final}
    epoch = final[0][0][0] if final else None
    first = final[0][0][1] if final else None
    rotated = 0
    for c, payload in acked:
        if epoch is not None and c[0] < epoch:
            rotated += 1
        elif epoch is None:
            # The store holds nothing of the feed (lost, never published again).
            rotated += 1
        elif c[0] > epoch:
            out.append(
                Finding(
                    "lost", feed, FINAL, c, f"acknowledged in epoch {c[0]}, after the final one"
                )
            )
        elif c not in held and first is not None and c[1] >= first:
            out.append(
                Finding(
                    "lost",
                    feed,
                    FINAL,
                    c,
                    f"acknowledged payload {payload} is missing from the final stream of its "
                    f"epoch ({len(final)} items from offset {first}): lost without a new epoch",
                )
            )
    return rotated


__all__ = [
    "FINAL",
    "KINDS",
    "PRODUCER",
    "DeliveryReport",
    "Finding",
    "Observation",
    "Pos",
    "Received",
    "Restarted",
    "Trace",
    "check",
    "pos",
    "text",
]
