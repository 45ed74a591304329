"""A connection's bounded outbound path, and the node-wide bound on buffered bytes.

Fan-out never waits for a client: the hub writes the bytes it encoded once per wire
format straight into the connection's :class:`Writer` (the kernel takes them at once
while the client keeps up).  What the kernel does not take stays in the writer's buffer,
and that buffer *is* the connection's queue: :class:`Outbox` refuses a write that would
take it past ``max_bytes`` (or that would add to a connection already behind while the
node's total is past its bound).  A refused subscription is taken off the live path and
its connection catches up from the store by its own cursor; nobody else waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class WriterState(Protocol):
    """What the fan-out reads of the connection a :class:`Writer` writes to (an asyncio
    transport provides it)."""

    def is_closing(self) -> bool:
        """The connection is closed or closing: writes are dropped."""
        ...

    def get_write_buffer_size(self) -> int:
        """Bytes written but not yet taken by the connection (the kernel)."""
        ...


class Writer(Protocol):
    """The port through which fan-out writes to one connection (the connection's stream,
    ``gateway.net.server.Stream.writer``, provides it).

    A write never blocks: what the connection cannot send at once is buffered, and
    ``state.get_write_buffer_size()`` says how much is.  The writer frames the bytes as
    its connection's body needs (HTTP/1.1 chunks for SSE); writing nothing writes nothing.
    """

    @property
    def write(self) -> Callable[[bytes], None]:
        """Send ``data`` (buffered if the connection cannot take it yet)."""
        ...

    @property
    def state(self) -> WriterState:
        """The connection's closing flag and buffer count."""
        ...


class NodeBudget:
    """The bound on outbound bytes buffered by the whole node.

    Each outbox counts what its connection holds unsent after its last write.  The sum can be
    stale high (a buffer may have drained since); it is recomputed exactly only when it
    looks exceeded, which costs one pass over the outboxes that hold anything.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._holding: set[Outbox] = set()

    def over(self) -> bool:
        if self.total <= self.limit:
            return False
        total = 0
        for outbox in list(self._holding):
            outbox.recount()
            total += outbox.counted
        self.total = total
        return total > self.limit


class Outbox:
    """One connection's outbound byte bound; shared by the connection's subscriptions.

    It writes straight through the connection's :class:`Writer` (the hot path of
    fan-out: one write per connection per batch): its write is held as the writer gives
    it, its closing flag and buffer count are asked of the connection's state, one call
    each.  Nothing else is bound per connection: outboxes are one per open connection.
    """

    __slots__ = ("_budget", "_state", "_write", "counted", "max_bytes", "wrote")

    def __init__(self, writer: Writer, max_bytes: int, budget: NodeBudget) -> None:
        self._write = writer.write
        self._state = writer.state
        self._budget = budget
        self.max_bytes = max_bytes
        self.counted = 0
        #: Set by every write; the keepalive ticker clears it.
        self.wrote = False

    def buffered(self) -> int:
        """Bytes written to this connection that the kernel has not taken yet."""
        return self._state.get_write_buffer_size()

    def try_write(self, data: bytes) -> bool:
        """Write now, or refuse (False) if that would pass a bound.  Never blocks.

        A connection holding nothing takes any write (the kernel took everything so
        far: it keeps up); writes are at most a quarter of the bound (the hub chunks
        them), so a connection never holds more than ``max_bytes`` plus one item
        larger than that.  ``data`` is never empty: callers hold back what encodes to
        nothing (the framing would drop it, but here it would count as a write).
        """
        buffered = self._state.get_write_buffer_size()
        if buffered and (buffered + len(data) > self.max_bytes or self._budget.over()):
            return False
        if self._state.is_closing():
            return True  # the connection is going; its task ends with it
        self._write(data)
        self.wrote = True
        if self.counted or self._state.get_write_buffer_size():
            self.recount()
        return True

    def recount(self) -> None:
        now = self._state.get_write_buffer_size()
        budget = self._budget
        budget.total += now - self.counted
        self.counted = now
        if now:
            budget._holding.add(self)
        else:
            budget._holding.discard(self)

    def release(self) -> None:
        """The connection is gone: stop counting its bytes."""
        self._budget.total -= self.counted
        self.counted = 0
        self._budget._holding.discard(self)
