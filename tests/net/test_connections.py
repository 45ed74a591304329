"""The timer wheel of :class:`~gateway.net.connections.Connections` (pure logic)."""

from __future__ import annotations

from gateway.net.connections import Connections

SLOT_SECONDS = 0.25


class Timed:
    def __init__(self, name: str) -> None:
        self.name = name

    def shutdown(self) -> None:  # pragma: no cover - not used here
        pass

    def tick(self, now: float, wall: float) -> float:  # pragma: no cover - not used here
        return now

    def __repr__(self) -> str:
        return self.name


def test_a_connection_is_due_in_the_slot_of_its_time_and_then_off_the_wheel() -> None:
    conns = Connections()
    a = Timed("a")
    conns.add_timed(a, 100.1)
    assert conns.due(100.0) == []
    assert conns.due(100.0 + SLOT_SECONDS - 0.01) == []  # 100.1 rounds up to 100.25
    assert conns.due(100.25) == [a]
    assert conns.due(200.0) == []  # taken: the ticker schedules it again
    assert len(conns) == 1 and conns.timed() == [a]


def test_only_what_came_due_is_visited() -> None:
    conns = Connections()
    idle = [Timed(f"idle{i}") for i in range(1000)]
    for conn in idle:
        conns.add_timed(conn, 120.0)
    soon = Timed("soon")
    conns.add_timed(soon, 101.0)
    visited = [conns.due(100.0 + t / 4) for t in range(1, 20 * 4)]  # 100.25 .. 119.75
    assert [c for batch in visited for c in batch] == [soon]
    assert sorted(conns.due(120.0), key=repr) == sorted(idle, key=repr)


def test_schedule_moves_earlier_never_later() -> None:
    conns = Connections()
    a = Timed("a")
    conns.add_timed(a, 110.0)
    conns.schedule(a, 130.0)  # later: stays at 110
    assert conns.due(104.0) == []
    conns.schedule(a, 105.0)  # earlier: moves
    assert conns.due(105.0) == [a]
    assert conns.due(110.0) == []  # not left behind in its old slot


def test_an_overdue_time_is_due_at_the_next_look() -> None:
    conns = Connections()
    a, b = Timed("a"), Timed("b")
    conns.add_timed(a, 50.0)
    assert conns.due(60.0) == [a]
    conns.schedule(a, 10.0)  # in the past
    conns.add_timed(b, 0.0)
    assert sorted(conns.due(60.0 + SLOT_SECONDS), key=repr) == [a, b]


def test_a_discarded_connection_is_never_due_nor_scheduled_again() -> None:
    conns = Connections()
    a = Timed("a")
    conns.add_timed(a, 101.0)
    conns.discard(a)
    conns.schedule(a, 101.0)
    assert conns.due(200.0) == []
    assert len(conns) == 0 and conns.timed() == []
