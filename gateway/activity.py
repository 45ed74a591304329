"""Keeping the feed index (``GET /v1/feeds``) up to date after appends, cheaply.

The publisher calls :meth:`FeedActivity.record` after every append to a team or run
feed.  Publishing at an agent's rate (tens of events per second per run) must not pay a
Redis round trip per event for this, so the index hears of each feed at most once per
``interval`` (one second) per node or producer:

- on a node, :meth:`FeedActivity.run` is running: ``record`` only notes the feed and its
  time in memory (no I/O), and every ``interval`` one :meth:`FeedIndex.touch` writes all
  the feeds noted since, in one round trip.  A feed is listed at most ``interval``
  after its first append, with the time of its latest append before the write;
- without the loop (the Python producer, which has no task group of its own), ``record``
  writes a feed at once the first time it is seen in ``interval``, and not again until
  ``interval`` has passed: one extra round trip per feed per second at most, and the
  entry's time lags the feed's latest append by less than ``interval``.

The index is a convenience for people looking at feeds: a failed write is logged (once
until writes succeed again) and retried with the next round; it never fails a publish.
Both memories are bounded (:data:`MAX_PENDING` feeds).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import structlog

from gateway.errors import GatewayError
from gateway.feed import FeedKey
from gateway.store.interfaces import FeedIndex

log = structlog.get_logger("gateway.activity")

#: Feeds noted and not yet written, and feeds remembered as recently written, at most.
MAX_PENDING = 100_000
#: Entries written per round trip, at most.
TOUCH_BATCH = 1_000


class FeedActivity:
    def __init__(
        self,
        index: FeedIndex,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.index = index
        self.interval = interval
        self._clock = clock
        self._monotonic = monotonic
        #: Noted and not yet written: feed -> time of its latest append (ms).
        self._pending: dict[FeedKey, int] = {}
        #: Without the loop: feed -> when it was last written (monotonic seconds).
        self._written: dict[FeedKey, float] = {}
        self._background = False
        self._failing = False
        #: Index writes done and failed (for tests and the measurements).
        self.writes = 0
        self.failures = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def record(self, feed: FeedKey) -> None:
        """The feed was just appended to.  Never raises a GatewayError."""
        if self._background:
            if feed in self._pending or len(self._pending) < MAX_PENDING:
                self._pending[feed] = int(self._clock() * 1000)
            return
        now = self._monotonic()
        last = self._written.get(feed)
        if last is not None and now - last < self.interval:
            return
        if len(self._written) >= MAX_PENDING:
            self._forget_written(now)
        self._written[feed] = now
        if not await self._touch([(feed, int(self._clock() * 1000))]):
            self._written.pop(feed, None)  # the next append tries again

    def _forget_written(self, now: float) -> None:
        recent = {f: t for f, t in self._written.items() if now - t < self.interval}
        # If even the recent ones are too many, forgetting them only costs extra writes.
        self._written = recent if len(recent) < MAX_PENDING else {}

    async def flush(self) -> None:
        """Write every feed noted so far (a round trip per :data:`TOUCH_BATCH` feeds);
        what is noted meanwhile waits for the next round."""
        noted = list(self._pending.items())
        self._pending = {}
        for start in range(0, len(noted), TOUCH_BATCH):
            if not await self._touch(noted[start : start + TOUCH_BATCH]):
                for feed, ms in noted[start:]:  # again next round, unless a newer time came
                    if feed not in self._pending and len(self._pending) < MAX_PENDING:
                        self._pending[feed] = ms
                return

    async def _touch(self, entries: list[tuple[FeedKey, int]]) -> bool:
        try:
            await self.index.touch(entries)
        except GatewayError as exc:
            self.failures += 1
            if not self._failing:
                log.warning("feed index update failed; retrying", error=exc.message)
            self._failing = True
            return False
        self.writes += 1
        if self._failing:
            log.info("feed index updates succeed again")
        self._failing = False
        return True

    async def run(self) -> None:
        """Write what was noted every ``interval`` until cancelled (on a node)."""
        self._background = True
        try:
            while True:
                await anyio.sleep(self.interval)
                await self.flush()
        finally:
            self._background = False
            # What the last round noted is written before the node stops, if it can be.
            with anyio.move_on_after(1.0, shield=True):
                await self.flush()
