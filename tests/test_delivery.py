"""The delivery checker of the fault suite (tests/support/delivery.py), without sockets."""

from __future__ import annotations

import pytest

from tests.support.delivery import (
    DeliveryReport,
    Observation,
    Received,
    Restarted,
    Trace,
    check,
    pos,
)

F = "team/t"


def r(cursor: str, payload: str) -> Received:
    return Received(pos(cursor), payload)


def x(cursor: str) -> Restarted:
    return Restarted(pos(cursor))


def acks(*pairs: str) -> dict[str, list[tuple[str, str]]]:
    """``acks("5:1=a", "5:2=b")``: the producer's acknowledgements of feed F."""
    return {F: [tuple(p.split("=")) for p in pairs]}  # type: ignore[misc]


def trace(*obs: Observation, start: str | None = None, client: str = "c1") -> Trace:
    return Trace(client, F, pos(start) if start else None, list(obs))


def kinds(report: DeliveryReport) -> dict[str, int]:
    return {k: v for k, v in report.counts().items() if v}


ACKED = acks("5:1=a", "5:2=b", "5:3=c")

# (name, acknowledged, client observations, start cursor, findings per kind)
CASES = [
    ("exact", ACKED, [r("5:1", "a"), r("5:2", "b"), r("5:3", "c")], None, {}),
    ("resumed after a start cursor", ACKED, [r("5:3", "c")], "5:2", {}),
    ("missing tail", ACKED, [r("5:1", "a"), r("5:2", "b")], None, {"lost": 1}),
    ("nothing at all", ACKED, [], None, {"lost": 3}),
    ("a hole", ACKED, [r("5:1", "a"), r("5:3", "c")], None, {"gap": 1, "lost": 1}),
    (
        "a cursor twice",
        ACKED,
        [r("5:1", "a"), r("5:2", "b"), r("5:2", "b"), r("5:3", "c")],
        None,
        {"duplicated": 1},
    ),
    (
        "backwards",
        ACKED,
        [r("5:1", "a"), r("5:3", "c"), r("5:2", "b")],
        None,
        {"gap": 1, "out_of_order": 1},
    ),
    (
        "same payload twice in an epoch",
        acks("5:1=a", "5:2=a"),
        [r("5:1", "a"), r("5:2", "a")],
        None,
        {"duplicated": 2},
    ),
    (
        "another payload at an acknowledged cursor",
        ACKED,
        [r("5:1", "a"), r("5:2", "z"), r("5:3", "c")],
        None,
        {"reused": 1},
    ),
    (
        "announced loss, then the new epoch",
        acks("5:1=a", "5:2=b", "5:3=c", "9:1=d"),
        [r("5:1", "a"), x("9:0"), r("9:1", "d")],
        None,
        {},
    ),
    (
        "new epoch without the notice",
        acks("5:1=a", "5:2=b", "9:1=d"),
        [r("5:1", "a"), r("9:1", "d")],
        None,
        {"gap": 1, "lost": 1},
    ),
    (
        "trimmed, announced in the same epoch",
        ACKED,
        [r("5:1", "a"), x("5:2"), r("5:3", "c")],
        None,
        {},
    ),
    (
        "a notice pointing backwards",
        ACKED,
        [r("5:1", "a"), r("5:2", "b"), x("5:1"), r("5:3", "c")],
        None,
        {"out_of_order": 1},
    ),
    (
        "an item at the notice's own cursor",
        ACKED,
        [r("5:1", "a"), x("5:2"), r("5:2", "b")],
        None,
        {"out_of_order": 1, "lost": 1},
    ),
    (
        "a notice first, with no start cursor",
        acks("5:1=a", "9:1=d"),
        [x("9:0"), r("9:1", "d")],
        None,
        {},
    ),
    (
        "an older epoch is not expected of a later joiner",
        acks("5:1=a", "9:1=d"),
        [r("9:1", "d")],
        None,
        {},
    ),
]


@pytest.mark.parametrize(
    ("acked", "observations", "start", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_findings(
    acked: dict[str, list[tuple[str, str]]],
    observations: list[Observation],
    start: str | None,
    expected: dict[str, int],
) -> None:
    report = check(acked, [trace(*observations, start=start)])
    assert kinds(report) == expected, report.message()


def test_reuse_between_two_clients_names_both_payloads_and_who_saw_them() -> None:
    report = check(
        acks("5:1=a"),
        [trace(r("5:1", "a"), client="ws1"), trace(r("5:1", "b"), client="sse2")],
    )
    [finding] = report.of("reused")
    assert finding.cursor == (5, 1)
    assert "a (producer, ws1)" in finding.detail and "b (sse2)" in finding.detail
    assert "reused: * team/t at 5:1: names 2 payloads" in report.message()


def test_lost_message_names_client_payload_and_positions() -> None:
    report = check(acks("5:1=a", "5:2=b"), [trace(r("5:1", "a"), client="ws3")])
    [finding] = report.of("lost")
    assert str(finding) == (
        "lost: ws3 team/t at 5:2: acknowledged payload b never reached it and no "
        "epoch_restarted covered it (start 5:0, last position 5:1)"
    )
    with pytest.raises(AssertionError, match="lost=1 duplicated=0"):
        report.assert_clean()


def test_phantom_payload() -> None:
    report = check(acks("5:1=a"), [trace(r("5:1", "a"), r("5:2", "q"))], attempted={F: ["a"]})
    assert kinds(report) == {"phantom": 1}, report.message()


def test_unacknowledged_but_attempted_payload_is_fine() -> None:
    # A publish whose answer was lost: appended, never acknowledged, sent again later.
    report = check(acks("5:1=a"), [trace(r("5:1", "a"), r("5:2", "q"))], attempted={F: ["a", "q"]})
    assert report.clean, report.message()


def test_final_stream() -> None:
    clients = [trace(r("5:1", "a"), r("5:2", "b"))]
    # Complete: clean.
    assert check(acks("5:1=a", "5:2=b"), clients, final={F: [("5:1", "a"), ("5:2", "b")]}).clean
    # The store lost 5:2 and kept the epoch: lost (in the store, without a new epoch).
    report = check(acks("5:1=a", "5:2=b"), clients, final={F: [("5:1", "a")]})
    [finding] = report.of("lost")
    assert finding.client == "final" and finding.cursor == (5, 2)
    # Rolled back and then went on with other content at 5:2: reused.
    report = check(acks("5:1=a", "5:2=b"), clients, final={F: [("5:1", "a"), ("5:2", "z")]})
    assert kinds(report) == {"reused": 1}
    # Lost with a new epoch: allowed, counted.
    report = check(
        acks("5:1=a", "5:2=b", "9:1=c"),
        [trace(r("5:1", "a"), r("5:2", "b"), x("9:0"), r("9:1", "c"))],
        final={F: [("9:1", "c")]},
    )
    assert report.clean and report.rotated_away == 2, report.message()
    # Trimmed by retention below the first retained offset: not lost.
    assert check(acks("5:1=a", "5:2=b"), [], final={F: [("5:2", "b")]}).clean


def test_producer_acknowledging_one_payload_twice_in_an_epoch() -> None:
    report = check(acks("5:1=a", "5:2=a"), [])
    assert kinds(report) == {"duplicated": 1}


def test_many_findings_are_shown_bounded() -> None:
    acked = {F: [(f"5:{i}", f"p{i}") for i in range(1, 30)]}
    report = check(acked, [trace(r("5:1", "p1"))])
    assert report.counts()["lost"] == 28
    assert "... and 20 more lost" in report.message()


def test_cursor_parsing() -> None:
    assert pos("12:0") == (12, 0)
    for bad in ("12", "a:1", "1:-1", ""):
        with pytest.raises(ValueError):
            pos(bad)
