"""The lease sweep: every node ends the live runs whose lease ran out.

Each node, every :data:`INTERVAL` seconds, asks the live-run index for the runs due now
(a bounded batch, earliest first, up to :data:`MAX_BATCHES` batches while they come
full) and has the publisher end each with ``producer_lost`` (``Publisher.lapse``).
The check and the end are one atomic step in the store, so nodes that sweep at once
append one end between them; a run renewed meanwhile is only due again later.  An
expired run is ended within its lease plus :data:`INTERVAL` and the batch's time
(docs/contract.md, "Runs end"), given node clocks that agree within a second (NTP).
"""

from __future__ import annotations

import time
from typing import Final

import anyio
import structlog

from gateway.errors import GatewayError
from gateway.metrics import Metrics
from gateway.outage import Outage
from gateway.publisher import Publisher
from gateway.store.interfaces import RunIndex

log = structlog.get_logger("gateway.lease_sweep")

#: Seconds between two sweeps of a node.
INTERVAL: Final = 1.0
#: Runs ended per batch, and batches per sweep at most (a sweep stops early when a
#: batch comes back short).
BATCH: Final = 100
MAX_BATCHES: Final = 10


class LeaseSweep:
    """One node's sweep over the live-run index (run it in the node's task group)."""

    def __init__(
        self,
        publisher: Publisher,
        runs: RunIndex,
        metrics: Metrics,
        *,
        interval: float = INTERVAL,
        batch: int = BATCH,
    ) -> None:
        self.publisher = publisher
        self.runs = runs
        self.metrics = metrics
        self.interval = interval
        self.batch = batch
        #: A failure is logged when it starts and when it ends, not on every sweep.
        self.outage = Outage(log, "sweeping run leases failed")

    async def sweep(self, now_ms: int | None = None) -> int:
        """One sweep at ``now_ms`` (wall clock, ms; now by default): end every due run
        whose lease ran out.  Returns how many runs it ended.  Raises Unavailable
        when the index cannot be read; a run that cannot be ended now is tried again
        by the next sweep (it stays due)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        ended = 0
        failed: GatewayError | None = None
        for _ in range(MAX_BATCHES):
            due = await self.runs.due(now, self.batch)
            for feed in due:
                # One run that cannot be ended does not hold up the others.
                try:
                    outcome = await self.publisher.lapse(feed)
                except GatewayError as exc:
                    failed = failed or exc
                    continue
                ended += outcome.ended is not None
            if len(due) < self.batch or failed is not None:
                break
        if failed is not None:
            raise failed
        return ended

    async def run(self) -> None:
        """Sweep every ``interval`` seconds until cancelled; count the live runs."""
        while True:
            try:
                await self.sweep()
                self.metrics.live_runs.set(await self.runs.live_count())
            except GatewayError as exc:
                self.outage.failed(exc.message)
            else:
                self.outage.recovered()
            await anyio.sleep(self.interval)
