"""The Python cost of the hub's fan-out per event, without sockets.

    uv run python bench/dispatch.py

Builds a hub with live subscriptions whose writers only count writes, and offers
it one-item batches of a real TeamItem payload round the feeds, the way the reader does
when each read brings one event per feed.  What it prints is the Python part of a
delivery (encoding once per batch, the offer loop, the outbox's bounds, metrics): the
kernel's `send`, which the end-to-end benchmark (`bench/run.py`) adds, is not in it.
A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_pub import team_event

from gateway.cursor import Cursor
from gateway.fanout.hub import Audience, Hub
from gateway.fanout.outbox import Outbox
from gateway.fanout.subscription import Subscription, SubState
from gateway.feed import StoredItem, team_feed
from gateway.metrics import Metrics
from gateway.store.interfaces import Batch
from gateway.store.memory import MemoryStore
from gateway.wire.formats import TEAM_WS
from gateway.wire.teamitem import team_payload


class CountingWriter:
    """Takes every write at once (an empty kernel buffer), counting them: the
    :class:`gateway.fanout.outbox.Writer` port."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    @property
    def state(self) -> CountingWriter:
        """Itself: never closing, never holding anything."""
        return self

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


def run(feeds: int, subscribers: int, events: int) -> float:
    """Microseconds of process CPU per event."""
    store = MemoryStore()
    hub = Hub(store, store, Metrics())
    text = '{"fb":"FB1|1|1|0|","pad":"%s"}' % ("x" * 100)
    payload = team_payload({"kind": "team"}, team_event(text, 1))
    audiences = []
    for f in range(feeds):
        key = team_feed("bench", f"00000000-0000-4000-8000-{f:012d}")
        audience = Audience(key, Cursor(1, 0))
        for _ in range(subscribers):
            sub = Subscription(key, TEAM_WS, Cursor(1, 0))
            sub.outbox = Outbox(CountingWriter(), 1 << 20, hub.budget)
            sub.state = SubState.LIVE
            audience.subs.add(sub)
        hub.audiences[key] = audience
        audiences.append(audience)
    started = time.process_time()
    for i in range(events):
        audience = audiences[i % feeds]
        item = StoredItem(1, audience.position.offset + 1, payload, "c")
        hub._dispatch(audience, Batch([item], appended=time.time()))
    return (time.process_time() - started) / events * 1e6


def main() -> int:
    print("| feeds x subscribers | us of Python per event | per delivery |")
    print("|---|---|---|")
    for feeds, subscribers, events in ((100, 10, 20_000), (1000, 5, 20_000), (1, 1000, 500)):
        us = run(feeds, subscribers, events)
        print(f"| {feeds} x {subscribers} | {us:.1f} | {us / subscribers:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
