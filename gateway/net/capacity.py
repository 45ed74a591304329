"""How many client connections a node takes, and what it says when it refuses one.

Three bounds refuse connections: the stream limits (``GATEWAY_MAX_CONNECTIONS`` and
``GATEWAY_MAX_TENANT_CONNECTIONS``, :mod:`gateway.limits`: 429), the node's share of
the process's open-files limit (:func:`socket_limit`: a connection past it is answered
503 and closed by :class:`gateway.net.server.HttpServer`), and the kernel itself
(``accept()`` fails with EMFILE or ENFILE once files run out anyway).  Every refusal
goes through one :class:`Refusals`, which counts it in
``gateway_connections_refused_total{reason}`` and says so in the log: at most one
warning per reason per :data:`WARN_EVERY` seconds, with the count since the last one.

The open-files limit: ``gateway serve`` raises its soft limit to the hard one at
start-up (:func:`raise_file_limit`); each client connection is one file, and the node
keeps :func:`reserved_files` for itself (Redis connections, listeners, the event loop,
logs, metrics scrapes reading ``/proc``).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import anyio
import structlog

from gateway.config import Settings
from gateway.limits import ConnectionLimits
from gateway.loopmetrics import LoopCounter

log = structlog.get_logger("gateway.http")

#: Seconds between two warnings of one refusal reason (the second says how many since).
WARN_EVERY = 10.0
#: Files a node keeps beside its client connections and Redis connections: listeners,
#: the event loop, signal pipes, logs, ``/proc`` reads of a metrics scrape.
RESERVED_FILES = 64
#: Connections the internal port takes at once (probes and scrapers: a few).
INTERNAL_MAX_SOCKETS = 64
#: Seconds a count of open files (``/readyz``) is reused: counting 20,000 descriptors
#: takes ~15 ms, and the route needs no token.
OPEN_FILES_TTL = 1.0

#: What each refusal reason's warning says (``gateway.metrics.REFUSAL_REASONS``).
_WHY = {
    "connections": "this node holds GATEWAY_MAX_CONNECTIONS streams: new ones get 429",
    "tenant_connections": (
        "a tenant holds GATEWAY_MAX_TENANT_CONNECTIONS streams on this node: its new ones get 429"
    ),
    "files": (
        "this node holds as many connections as its open-files limit allows: new ones "
        "get 503 and are closed (raise the hard limit: ulimit -n, LimitNOFILE, the "
        "container runtime's nofile)"
    ),
    "internal": "the internal port holds its most connections: new ones get 503",
    "accept": (
        "accept() failed: the process is out of files (or the kernel out of memory); "
        "accepting pauses and new connections wait in the listen backlog"
    ),
}


class FileLimit(NamedTuple):
    """The process's ``RLIMIT_NOFILE`` (``hard`` may be ``resource.RLIM_INFINITY``)."""

    soft: int
    hard: int


def file_limit() -> FileLimit:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return FileLimit(soft, hard)


def _ceiling(hard: int) -> int:
    """The most the soft limit can be raised to: ``hard``, or the kernel's ``nr_open``
    when ``hard`` is unlimited (a soft limit cannot be infinite)."""
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1_048_576


def raise_file_limit() -> tuple[FileLimit, FileLimit, str | None]:
    """Raise the soft open-files limit to the hard one: ``(before, after, error)``,
    ``error`` saying why it could not be raised (``after == before`` then)."""
    before = file_limit()
    target = _ceiling(before.hard)
    if before.soft != resource.RLIM_INFINITY and before.soft >= target:
        return before, before, None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, before.hard))
    except (OSError, ValueError) as exc:
        return before, before, str(exc)
    return before, file_limit(), None


def reserved_files(settings: Settings) -> int:
    """Files a node keeps for itself: :data:`RESERVED_FILES`, two per Redis connection
    it may open (the pool and its listeners and readers), and the internal port's."""
    internal = INTERNAL_MAX_SOCKETS if settings.internal_port is not None else 0
    return RESERVED_FILES + 2 * settings.redis_max_connections + internal


def socket_limit(soft: int, reserved: int) -> int:
    """Client connections a node accepts with ``soft`` open files: all but ``reserved``,
    and never fewer than half of them (a tiny limit still serves)."""
    if soft == resource.RLIM_INFINITY:
        soft = _ceiling(soft)
    return max(soft // 2, soft - reserved, 1)


def open_files() -> int | None:
    """Files this process has open now (None where ``/proc`` is not there)."""
    try:
        # The listing's own descriptor is in it.
        return len(os.listdir("/proc/self/fd")) - 1
    except OSError:
        return None


class Refusals:
    """Counts refused connections by reason and warns of them, rate-limited.

    Calling it with a reason counts one refusal in ``counter`` (labelled by reason).
    The first refusal of a reason is logged at once; the next ones within
    :data:`WARN_EVERY` seconds of that line are only counted, and one line says how
    many when the window ends (:meth:`run` writes it; :meth:`flush` is its step).
    Only the node's event loop calls it.  ``clock`` is monotonic seconds (tests
    inject one).
    """

    def __init__(
        self,
        counter: LoopCounter,
        *,
        every: float = WARN_EVERY,
        clock: Callable[[], float] = time.monotonic,
        details: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        self._counter = counter
        self.every = every
        self._clock = clock
        #: Extra fields of a reason's warning (the limit's numbers), built when logged.
        self._details = details
        #: When each reason was last logged, and refusals not logged since.
        self._logged_at: dict[str, float] = {}
        self._pending: dict[str, int] = {}
        self._wake: anyio.Event | None = None

    def __call__(self, reason: str) -> None:
        self._counter.labels(reason).inc()
        now = self._clock()
        pending = self._pending.get(reason, 0) + 1
        last = self._logged_at.get(reason)
        if last is None or now - last >= self.every:
            self._warn(reason, pending, now)
            return
        self._pending[reason] = pending
        if self._wake is not None:
            self._wake.set()

    def _warn(self, reason: str, count: int, now: float) -> None:
        self._pending.pop(reason, None)
        last = self._logged_at.get(reason)
        self._logged_at[reason] = now
        fields = self._details(reason) if self._details is not None else {}
        log.warning(
            "connections refused: " + _WHY.get(reason, reason),
            reason=reason,
            refused=count,
            # None: the first line of this reason in this process (or in a long while).
            since_seconds=None if last is None else round(now - last, 1),
            **fields,
        )

    def next_due(self) -> float | None:
        """When the earliest pending count may be logged (monotonic); None: none pending."""
        due = [self._logged_at[r] + self.every for r in self._pending]
        return min(due) if due else None

    def flush(self) -> None:
        """Log every pending count whose reason's window has ended."""
        now = self._clock()
        for reason, count in list(self._pending.items()):
            if now - self._logged_at[reason] >= self.every:
                self._warn(reason, count, now)

    async def run(self) -> None:
        """Write the pending counts as their windows end, until cancelled."""
        while True:
            due = self.next_due()
            if due is None:
                self._wake = anyio.Event()
                await self._wake.wait()
                self._wake = None
                continue
            await anyio.sleep(max(0.0, due - self._clock()))
            self.flush()


class Capacity:
    """What ``/readyz`` says of the node's connections (:meth:`snapshot`)."""

    def __init__(
        self,
        limits: ConnectionLimits,
        *,
        socket_limit: int,
        sockets: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.socket_limit = socket_limit
        #: Open client TCP connections now (the client listener's count).
        self.sockets = sockets
        self._clock = clock
        self._open_files: tuple[float, int | None] | None = None

    async def open_files(self) -> int | None:
        """:func:`open_files`, counted in a worker thread at most once per
        :data:`OPEN_FILES_TTL` seconds."""
        now = self._clock()
        cached = self._open_files
        if cached is not None and now - cached[0] < OPEN_FILES_TTL:
            return cached[1]
        count = await anyio.to_thread.run_sync(open_files)
        self._open_files = (self._clock(), count)
        return count

    async def snapshot(self) -> dict[str, Any]:
        """``{"open", "limit", "sockets", "socket_limit", "files": {"soft", "hard",
        "open"}}``: streams (SSE and WebSocket) and their limit, client TCP connections
        and theirs, and the process's open-files limit and use (a hard limit of
        "unlimited" is null)."""
        files = file_limit()
        return {
            "open": self.limits.total,
            "limit": self.limits.max_connections,
            "sockets": self.sockets(),
            "socket_limit": self.socket_limit,
            "files": {
                "soft": files.soft,
                "hard": None if files.hard == resource.RLIM_INFINITY else files.hard,
                "open": await self.open_files(),
            },
        }


__all__ = [
    "INTERNAL_MAX_SOCKETS",
    "RESERVED_FILES",
    "WARN_EVERY",
    "Capacity",
    "FileLimit",
    "Refusals",
    "file_limit",
    "open_files",
    "raise_file_limit",
    "reserved_files",
    "socket_limit",
]
