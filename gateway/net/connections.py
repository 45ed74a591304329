"""The node's open client connections (SSE streams and WebSocket sockets), for draining,
and the one timer task that drives every socket's pings and token expiry.

Timers are kept on a wheel of slots (a quarter of :meth:`Ticker.tick_seconds`): each
timed connection sits in the slot of its next due time, and the :class:`Ticker` visits
only the slots that came due.  An idle socket is visited when its ping is due (or at
least every :data:`LONGEST_WAIT` seconds), not on every wake-up: the ticker's work
follows what is due, not how many sockets are open.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Protocol, cast

import anyio

#: The longest a timed connection goes unvisited whatever it says: a step of the wall
#: clock (token expiry is wall-clock time) is noticed within it.
LONGEST_WAIT = 10.0


class Connection(Protocol):
    def shutdown(self) -> None:
        """End the connection because the node drains (the client resumes elsewhere)."""
        ...


class TimedConnection(Connection, Protocol):
    def tick(self, now: float, wall: float) -> float:
        """Run due timers (``now`` monotonic, ``wall`` the clock, seconds); return the
        monotonic time the next one is due.  A connection whose timers move earlier
        between ticks says so with :meth:`Connections.schedule`."""
        ...


class Connections:
    """Open connections; a connection registers while it streams and leaves when done."""

    def __init__(self, slot_seconds: float = 0.25) -> None:
        #: The wheel's resolution: a timer runs at most two of these late (see Ticker).
        self.slot_seconds = slot_seconds
        self._open: set[Connection] = set()
        self._timed: set[Connection] = set()
        #: The wheel: slot number -> connections due in it; and each one's slot.
        self._slots: dict[int, set[TimedConnection]] = {}
        self._slot_of: dict[TimedConnection, int] = {}
        #: The first slot not yet handed out by :meth:`due` (None: none handed out yet).
        self._next_slot: int | None = None

    def add(self, conn: Connection) -> None:
        self._open.add(conn)

    def add_timed(self, conn: TimedConnection, due: float) -> None:
        """Register ``conn``; its first tick comes at ``due`` (monotonic)."""
        self._open.add(conn)
        self._timed.add(conn)
        self.schedule(conn, due)

    def discard(self, conn: Connection) -> None:
        self._open.discard(conn)
        if conn in self._timed:
            self._timed.discard(conn)
            timed = cast(TimedConnection, conn)
            slot = self._slot_of.pop(timed, None)
            if slot is not None:
                self._slots[slot].discard(timed)

    def schedule(self, conn: TimedConnection, due: float) -> None:
        """Tick ``conn`` at ``due`` (monotonic) unless it is due sooner already."""
        if conn not in self._timed:
            return  # gone (a tick may end a connection)
        slot = math.ceil(due / self.slot_seconds)
        if self._next_slot is not None:
            slot = max(slot, self._next_slot)  # overdue: the next tick
        old = self._slot_of.get(conn)
        if old is not None:
            if old <= slot:
                return
            self._slots[old].discard(conn)
        self._slots.setdefault(slot, set()).add(conn)
        self._slot_of[conn] = slot

    def due(self, now: float) -> list[TimedConnection]:
        """Take the connections whose slot came due by ``now`` (off the wheel: the
        caller ticks each and schedules it again)."""
        last = math.floor(now / self.slot_seconds)
        first = self._next_slot
        if first is None:
            first = min(min(self._slots, default=last), last)
        out: list[TimedConnection] = []
        if self._slots:
            for slot in range(first, last + 1):
                conns = self._slots.pop(slot, None)
                if conns:
                    for conn in conns:
                        del self._slot_of[conn]
                    out.extend(conns)
        self._next_slot = max(first, last + 1)
        return out

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._open))

    def __len__(self) -> int:
        return len(self._open)

    def timed(self) -> list[TimedConnection]:
        return [cast(TimedConnection, conn) for conn in self._timed]


class Ticker:
    """One task per node for every socket's timers (a task per socket costs memory).

    It wakes every slot of the wheel (a quarter of :meth:`tick_seconds`, so at most a
    quarter second) and runs the timers whose slot came due: a timer is rounded up to
    its slot's end and visited within a slot after it, so pings go out within two slots
    of their interval, a missing pong is noticed within two slots of its timeout, and
    an expired token closes the socket within two slots of ``exp`` (within
    :data:`LONGEST_WAIT` if the wall clock steps).  A wake-up with nothing due costs one
    empty slot lookup.
    """

    def __init__(self, connections: Connections) -> None:
        self.connections = connections

    @staticmethod
    def tick_seconds(interval: float, timeout: float) -> float:
        """The tick for a ping ``interval`` and pong ``timeout``: at most one second
        (the wheel's slots are a quarter of it)."""
        return min(1.0, interval / 4, timeout / 4)

    async def run(self) -> None:
        connections = self.connections
        while True:
            await anyio.sleep(connections.slot_seconds)
            now, wall = anyio.current_time(), time.time()
            for conn in connections.due(now):
                due = conn.tick(now, wall)
                connections.schedule(conn, min(due, now + LONGEST_WAIT))
