"""The node's open client connections (SSE streams and WebSocket sockets), for draining,
and the one timer task that drives every socket's pings and token expiry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Protocol, cast

import anyio


class Connection(Protocol):
    def shutdown(self) -> None:
        """End the connection because the node drains (the client resumes elsewhere)."""
        ...


class TimedConnection(Connection, Protocol):
    def tick(self, now: float, wall: float) -> None:
        """Run due timers (``now`` monotonic, ``wall`` the clock, seconds)."""
        ...


class Connections:
    """Open connections; a connection registers while it streams and leaves when done."""

    def __init__(self) -> None:
        self._open: set[Connection] = set()
        self._timed: set[Connection] = set()

    def add(self, conn: Connection) -> None:
        self._open.add(conn)

    def add_timed(self, conn: TimedConnection) -> None:
        self._open.add(conn)
        self._timed.add(conn)

    def discard(self, conn: Connection) -> None:
        self._open.discard(conn)
        self._timed.discard(conn)

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._open))

    def __len__(self) -> int:
        return len(self._open)

    def timed(self) -> list[TimedConnection]:
        return [cast(TimedConnection, conn) for conn in self._timed]


class Ticker:
    """One task per node for every socket's timers (a task per socket costs memory).

    It ticks every ``tick`` seconds (at most one second), so pings go out within a
    tick of their interval, a missing pong is noticed within a tick of its timeout,
    and an expired token closes the socket within a tick of ``exp``.
    """

    def __init__(self, connections: Connections, interval: float, timeout: float) -> None:
        self.connections = connections
        self.tick = min(1.0, interval / 4, timeout / 4)

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.tick)
            now, wall = anyio.current_time(), time.time()
            for conn in self.connections.timed():
                conn.tick(now, wall)
