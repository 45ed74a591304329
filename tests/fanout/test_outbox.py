"""The byte bounds of outboxes (per connection and per node), as pure logic."""

from __future__ import annotations

from gateway.fanout.outbox import NodeBudget, Outbox
from gateway.net.server import SocketWriter


class Transport:
    """Stands in for an asyncio transport whose kernel buffer is full: it keeps all."""

    def __init__(self) -> None:
        self.held = 0
        self.closing = False

    def get_write_buffer_size(self) -> int:
        return self.held

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.held += len(data)

    def writelines(self, parts: tuple[bytes, ...]) -> None:
        self.held += sum(len(p) for p in parts)

    def drain_all(self) -> None:
        self.held = 0


class Stream:
    def __init__(self, chunked: bool = False) -> None:
        self.transport = Transport()
        self.chunked = chunked

    def writer(self) -> SocketWriter:
        return SocketWriter(self.transport, self.chunked)  # type: ignore[arg-type]


def test_a_connection_never_holds_more_than_its_bound() -> None:
    budget = NodeBudget(10_000_000)
    stream = Stream()
    outbox = Outbox(stream.writer(), 1000, budget)
    assert outbox.try_write(b"x" * 600)
    assert outbox.try_write(b"x" * 400)  # exactly the bound
    assert not outbox.try_write(b"x")  # one byte more is refused, nothing written
    assert stream.transport.held == 1000
    assert budget.total == 1000
    stream.transport.drain_all()
    # An empty connection takes a write even above the bound (it keeps up).
    assert outbox.try_write(b"x" * 1500)
    assert not outbox.try_write(b"x")


def test_the_node_bound_refuses_connections_that_hold_bytes() -> None:
    budget = NodeBudget(1500)
    a, b, c = Stream(), Stream(), Stream()
    oa = Outbox(a.writer(), 1000, budget)
    ob = Outbox(b.writer(), 1000, budget)
    oc = Outbox(c.writer(), 1000, budget)
    assert oa.try_write(b"x" * 900)
    assert ob.try_write(b"x" * 700)  # b held nothing: accepted; the node is now at 1600
    assert budget.total == 1600
    assert not oa.try_write(b"x" * 10)  # a holds bytes and the node is past its bound
    assert oc.try_write(b"x" * 10)  # c holds nothing: a connection that keeps up
    # Buffers drain: the exact recount lets a write again.
    a.transport.drain_all()
    b.transport.drain_all()
    assert ob.try_write(b"x" * 10) is True
    assert budget.total < 1500


def test_released_connections_leave_the_count() -> None:
    budget = NodeBudget(100)
    s = Stream()
    o = Outbox(s.writer(), 1000, budget)
    o.try_write(b"x" * 50)
    o.release()
    assert budget.total == 0


def test_chunked_framing_for_sse() -> None:
    budget = NodeBudget(10_000)
    s = Stream(chunked=True)
    o = Outbox(s.writer(), 1000, budget)
    assert o.try_write(b"hello")
    assert s.transport.held == len(b"5\r\nhello\r\n")


def test_the_slow_consumer_policy_counts_overflows_in_a_window() -> None:
    from gateway.fanout.policy import CATCHUP_WINDOW_SECONDS, MAX_CATCHUPS, Overflows

    policy = Overflows()
    assert not any(policy.too_many(float(t)) for t in range(MAX_CATCHUPS))
    assert policy.too_many(float(MAX_CATCHUPS))  # one more within the window
    later = Overflows()
    times = [i * (CATCHUP_WINDOW_SECONDS / MAX_CATCHUPS + 1) for i in range(10)]
    assert not any(later.too_many(t) for t in times)  # spread out: never too many
