"""A connection's bounded outbound path, and the node-wide bound on buffered bytes.

Fan-out never waits for a client: the hub writes the bytes it encoded once per wire
format straight into the connection's transport (the kernel takes them at once while the
client keeps up).  What the kernel does not take stays in the transport's buffer, and
that buffer *is* the connection's queue: :class:`Outbox` refuses a write that would take
it past ``max_bytes`` (or that would add to a connection already behind while the node's
total is past its bound).  A refused subscription is taken off the live path and its
connection catches up from the store by its own cursor; nobody else waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import anyio


class Transport(Protocol):
    """What an outbox needs of a connection (``http.server.Stream`` provides it)."""

    @property
    def transport(self) -> asyncio.Transport | None: ...

    def raw_writer(self) -> Callable[[bytes], None]: ...


class NodeBudget:
    """The bound on outbound bytes buffered by the whole node.

    Each outbox counts what its transport holds after its last write.  The sum can be
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

    It writes straight to the asyncio transport (the hot path of fan-out: one write per
    connection per batch) with the stream's framing (HTTP/1.1 chunks for SSE).
    """

    __slots__ = ("_budget", "_transport", "_write", "counted", "max_bytes", "wrote")

    def __init__(self, stream: Transport, max_bytes: int, budget: NodeBudget) -> None:
        transport = stream.transport
        if transport is None:
            raise anyio.BrokenResourceError
        self._transport = transport
        self._write = stream.raw_writer()
        self._budget = budget
        self.max_bytes = max_bytes
        self.counted = 0
        #: Set by every write; the keepalive ticker clears it.
        self.wrote = False

    def buffered(self) -> int:
        """Bytes written to this connection that the kernel has not taken yet."""
        return self._transport.get_write_buffer_size()

    def try_write(self, data: bytes) -> bool:
        """Write now, or refuse (False) if that would pass a bound.  Never blocks.

        A connection holding nothing takes any write (the kernel took everything so
        far: it keeps up); writes are at most a quarter of the bound (the hub chunks
        them), so a connection never holds more than ``max_bytes`` plus one item
        larger than that.  ``data`` is never empty: callers hold back what encodes to
        nothing (the framing would drop it, but here it would count as a write).
        """
        transport = self._transport
        buffered = transport.get_write_buffer_size()
        if buffered and (buffered + len(data) > self.max_bytes or self._budget.over()):
            return False
        if transport.is_closing():
            return True  # the connection is going; its task ends with it
        self._write(data)
        self.wrote = True
        if self.counted or transport.get_write_buffer_size():
            self.recount()
        return True

    def recount(self) -> None:
        now = self._transport.get_write_buffer_size()
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
