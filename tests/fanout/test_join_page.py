"""The page a join reads with its state serves that join's first catch-up round only.

No sockets and no reader task: the embedded store, and the hub driven by hand, so that
the audience's position lags the store exactly as a busy reader's would.
"""

from __future__ import annotations

import pytest

from gateway.cursor import Cursor
from gateway.fanout.hub import Hub
from gateway.fanout.subscription import SubState
from gateway.feed import NewItem, team_feed
from gateway.metrics import Metrics
from gateway.store.memory import MemoryStore
from gateway.wire.formats import TEAM_SSE
from tests.support import events as ev

pytestmark = pytest.mark.anyio


def new(n: int) -> list[NewItem]:
    return [NewItem(ev.new_id(), b'"event":%d,"kind":"event","source":{}' % i) for i in range(n)]


async def test_a_join_live_at_once_leaves_its_page_out_of_a_later_catch_up() -> None:
    store = MemoryStore()
    hub = Hub(store, store, Metrics())
    feed = team_feed("acme", ev.team_id())
    epoch = (await store.append(feed, new(1), retention=100)).state.epoch
    written: list[bytes] = []

    async def write(data: bytes) -> None:
        written.append(data)

    first = await hub.open(feed, None, TEAM_SSE)  # creates the audience at E:1
    await hub.catch_up(first, write)
    await store.append(feed, new(2), retention=100)  # the store at E:3, the audience at E:1
    sub = await hub.open(feed, Cursor(epoch, 1), TEAM_SSE)
    assert sub.prefetched is not None and [i.offset for i in sub.prefetched[1]] == [2, 3]
    await hub.catch_up(sub, write)  # at the audience's position: live at once
    assert sub.state is SubState.LIVE
    # Later the subscription is at E:3 (delivered live), falls behind and catches up
    # from the store: it gets what follows E:3, not the join's old page again.
    sub.position = Cursor(epoch, 3)
    later = await store.append(feed, new(2), retention=100)
    hub.audiences[feed].position = later.cursors[-1]
    sub.state = SubState.CATCHING_UP
    written.clear()
    await hub.catch_up(sub, write)
    assert sub.state is SubState.LIVE and sub.restart_at is None
    ids = [line for line in b"".join(written).split(b"\n") if line.startswith(b"id: ")]
    assert ids == [b"id: %d:4" % epoch, b"id: %d:5" % epoch]
    for s in (first, sub):
        hub.close(s)
