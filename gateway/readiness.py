"""Whether a node can serve (``/readyz``, contract D8): the store answers, the readers
make progress, and the node is not draining.

The store is pinged by a task of its own (every :data:`PING_INTERVAL` seconds, each ping
bounded), so ``/readyz`` answers at once from what was last seen, also while Redis
hangs: a ping that has been outstanding for more than :data:`PING_LATE` seconds makes
the node unready.

Every change of the verdict is logged once, with what failed and why (the ping's own
error: a wrong password, a certificate that does not verify); ``/readyz`` answers the
verdict alone, as it answers anyone.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import anyio
import structlog

from gateway.errors import Unavailable
from gateway.metrics import Metrics

log = structlog.get_logger("gateway.readiness")

#: Seconds between pings of the store.
PING_INTERVAL = 0.5
#: A ping outstanding (or the last one failed) for this long: the store does not answer.
PING_LATE = 1.0
#: The verdict then (``/readyz`` says no more: it answers anyone; the log has the cause).
REDIS_DOWN = "redis does not answer"


class Progressing(Protocol):
    """A read loop whose last completed read readiness watches."""

    #: ``time.monotonic()`` when the last read completed (the clock every progress
    #: stamp uses: cheaper than the event loop's, which the reader would ask each read).
    last_progress: float


class Readiness:
    def __init__(
        self,
        *,
        ping: Callable[[], Awaitable[None]] | None,
        is_draining: Callable[[], bool],
        hub: Progressing,
        inboxes: Sequence[tuple[str, Progressing]],
        stalled_after: float,
        ping_bound: float,
        metrics: Metrics,
    ) -> None:
        self._ping = ping
        self._is_draining = is_draining
        self._hub = hub
        self._inboxes = inboxes
        self._stalled_after = stalled_after
        self._ping_bound = ping_bound
        self._metrics = metrics
        #: Monotonic time of the last ping answered (start-up counts as one).
        self.last_answer = time.monotonic()
        #: Why the last ping failed (None: it was answered).
        self.ping_error: str | None = None
        #: The verdict last logged (ready, why, the ping's error), and since when.
        self._verdict: tuple[bool, str, str | None] = (True, "ok", None)
        self._since = time.monotonic()

    async def run(self) -> None:
        """Ping the store (if there is one) and log the verdict's changes, until
        cancelled."""
        while True:
            if self._ping is not None:
                try:
                    with anyio.fail_after(self._ping_bound):
                        await self._ping()
                except Unavailable as exc:
                    self.ping_error = exc.message
                except TimeoutError:
                    self.ping_error = f"no answer within {self._ping_bound:g} s"
                else:
                    self.last_answer = time.monotonic()
                    self.ping_error = None
            self._observe(*self.check())
            await anyio.sleep(PING_INTERVAL)

    def _observe(self, ok: bool, why: str) -> None:
        """Log a change of the verdict or of its cause (once per change): what fails
        and why, at warning (a drain at info: it was asked for); ready again, at info."""
        cause = self.ping_error if why == REDIS_DOWN else None
        before = self._verdict
        if (ok, why, cause) == before:
            return
        now = time.monotonic()
        held = round(now - self._since, 3)
        self._verdict, self._since = (ok, why, cause), now
        if ok:
            log.info("ready again", was=before[1], after_seconds=held)
        elif why == "draining":
            log.info("not ready", reason=why)
        else:
            log.warning("not ready", reason=why, cause=cause)

    def check(self) -> tuple[bool, str]:
        """``(ready, why)``; never waits."""
        if self._is_draining():
            return False, "draining"
        now = time.monotonic()
        if self._ping is not None and now - self.last_answer > PING_INTERVAL + PING_LATE:
            return False, REDIS_DOWN
        if now - self._hub.last_progress > self._stalled_after:
            return False, "feed reader is not making progress"
        for name, inbox in self._inboxes:
            if now - inbox.last_progress > self._stalled_after:
                return False, f"{name} inbox reader is not making progress"
        return True, "ok"

    async def __call__(self) -> tuple[bool, str]:
        ok, why = self.check()
        self._metrics.ready.set(1 if ok else 0)
        return ok, why
