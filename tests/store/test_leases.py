"""A live run's lease, kept by the append step, and its end when the lease runs out
(docs/contract.md, "Runs end"): the same suite on the embedded store and on Redis.

The lease is the feed's own (the append step keeps it with the items); the lapse checks
it and appends the end in one step, so callers that race append one end between them.
The live-run index only finds runs that may be due; its entries are checked against the
feed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from gateway.errors import RunEnded
from gateway.feed import NewItem, run_feed, team_feed
from gateway.store.interfaces import RENEWS, Backend, Lapse, LiveRun, RunLease
from tests.support import events as ev
from tests.support.backends import open_backend

pytestmark = pytest.mark.anyio

TENANT = "acme"
TEAM = "5f0c6c39-38a5-4a3b-9f2e-0d6a4c1b2a11"


def item(text: str, key: str | None = None) -> NewItem:
    return NewItem(key, json.dumps({"type": "CUSTOM", "name": text}).encode())


END = NewItem(None, b'{"type":"RUN_ERROR","message":"lost","code":"producer_lost"}')


def now_ms() -> int:
    return int(time.time() * 1000)


async def eventually(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """``check()``'s first truthy answer, polled; fails after 10 s."""
    with anyio.fail_after(10.0, reason=f"{what} not reached"):
        while not (result := await check()):  # noqa: ASYNC110 - waiting on the clock
            await anyio.sleep(0.005)
    return result


async def test_a_run_holds_its_lease_from_its_start_and_each_append_renews_it(
    store: Backend,
) -> None:
    feeds = store.feeds
    feed = run_feed(TENANT, ev.new_id(), ev.new_id())
    # Items before the start: no lease (the run has not started).
    await feeds.append(feed, [item("early")], retention=100, lease=RENEWS)
    assert await feeds.lease(feed) is None
    before = now_ms()
    await feeds.append(feed, [item("start")], retention=100, lease=RunLease(True, 60_000))
    first = await feeds.lease(feed)
    assert first is not None
    assert before - 1000 <= first.started_ms <= now_ms() + 1000  # the store's clock
    assert first.deadline_ms - first.renewed_ms == 60_000
    assert first.renewed_ms == first.started_ms
    # An append renews it from the store's clock now; the start stays.
    await eventually(lambda: _later(first.renewed_ms), "a later millisecond")
    await feeds.append(feed, [item("more")], retention=100, lease=RENEWS)
    renewed = await feeds.lease(feed)
    assert renewed is not None and renewed.started_ms == first.started_ms
    assert renewed.renewed_ms > first.renewed_ms
    assert renewed.deadline_ms - renewed.renewed_ms == 60_000
    # A retry only (nothing new) renews nothing.
    await feeds.append(feed, [item("early")], retention=100)
    keyed = await feeds.append(feed, [item("k", "k")], retention=100, lease=RENEWS)
    held = await feeds.lease(feed)
    again = await feeds.append(feed, [item("k", "k")], retention=100, lease=RENEWS)
    assert again.cursors == keyed.cursors
    assert await feeds.lease(feed) == held


async def _later(ms: int) -> bool:
    """Whether the wall clock is past ``ms`` (by more than a millisecond)."""
    return now_ms() > ms + 1


async def test_a_heartbeat_renews_a_live_run_only(store: Backend) -> None:
    feeds = store.feeds
    feed = run_feed(TENANT, ev.new_id(), ev.new_id())
    assert await feeds.renew(feed) is None  # no such feed
    await feeds.append(feed, [item("a")], retention=100)
    assert await feeds.renew(feed) is None  # not started
    await feeds.append(feed, [item("start")], retention=100, lease=RunLease(True, 30_000))
    started = await feeds.lease(feed)
    assert started is not None
    await eventually(lambda: _later(started.renewed_ms), "a later millisecond")
    renewed = await feeds.renew(feed)
    assert renewed is not None and renewed.started_ms == started.started_ms
    assert renewed.renewed_ms > started.renewed_ms
    assert renewed.deadline_ms == renewed.renewed_ms + 30_000
    assert await feeds.lease(feed) == renewed
    head = await feeds.state(feed)
    assert head is not None and head.head == 2  # a heartbeat appends nothing
    await feeds.append(feed, [item("done")], retention=100, ends=True)
    assert await feeds.lease(feed) is None
    assert await feeds.renew(feed) is None
    # A team feed never holds a lease.
    team = team_feed(TENANT, TEAM)
    await feeds.append(team, [item("t")], retention=100)
    assert await feeds.renew(team) is None and await feeds.lease(team) is None


async def test_a_run_that_starts_and_ends_in_one_batch_is_never_live(store: Backend) -> None:
    feeds = store.feeds
    feed = run_feed(TENANT, ev.new_id(), ev.new_id())
    await feeds.append(feed, [item("start"), item("end")], retention=100, ends=True)
    assert await feeds.lease(feed) is None
    assert await feeds.lapse(feed, END, retention=100) == Lapse()


async def test_a_lapse_ends_a_run_once_its_lease_ran_out_and_never_before(
    store: Backend,
) -> None:
    feeds = store.feeds
    feed = run_feed(TENANT, ev.new_id(), ev.new_id())
    await feeds.append(feed, [item("start")], retention=100, lease=RunLease(True, 60_000))
    early = await feeds.lapse(feed, END, retention=100)
    assert early.ended is None and early.live is not None
    assert early.live == await feeds.lease(feed)
    held = await feeds.state(feed)
    assert held is not None and held.head == 1  # nothing appended
    # A short lease (the store takes any; the publisher keeps to the bounds).
    short = run_feed(TENANT, ev.new_id(), ev.new_id())
    await feeds.append(short, [item("start")], retention=100, lease=RunLease(True, 30))

    async def ended() -> Lapse | None:
        outcome = await feeds.lapse(short, END, retention=100)
        return outcome if outcome.ended is not None else None

    outcome = await eventually(ended, "the short lease's end")
    assert outcome.ended is not None
    [cursor] = outcome.ended.cursors
    assert cursor.offset == 2
    [stored] = await feeds.read(short, cursor._replace(offset=1), 10)
    assert stored.data == END.data
    # Ended like any end: no live run, nothing new accepted, no second end.
    assert await feeds.lease(short) is None
    assert await feeds.lapse(short, END, retention=100) == Lapse()
    with pytest.raises(RunEnded):
        await feeds.append(short, [item("late")], retention=100, lease=RENEWS)
    final = await feeds.state(short)
    assert final is not None and final.head == 2


async def test_racing_lapses_append_one_end(store: Backend, node_redis: Any) -> None:
    # Three "nodes" (on Redis: backends of their own, each with its own view of the
    # feed) lapse the same run at once, several times each.
    url, prefix = node_redis
    others = [open_backend(url, prefix) for _ in range(2)] if url else []
    try:
        stores = [store, *others]
        feed = run_feed(TENANT, ev.new_id(), ev.new_id())
        await store.feeds.append(feed, [item("start")], retention=100, lease=RunLease(True, 1))
        lease = await store.feeds.lease(feed)
        assert lease is not None
        await eventually(lambda: _later(lease.deadline_ms), "the lease's millisecond to pass")
        outcomes: list[Lapse] = []

        async def lapse(backend: Backend) -> None:
            for _ in range(3):
                outcomes.append(await backend.feeds.lapse(feed, END, retention=100))

        async with anyio.create_task_group() as tg:
            for backend in stores:
                tg.start_soon(lapse, backend)
        assert sum(o.ended is not None for o in outcomes) == 1, outcomes
        assert all(o.ended is not None or o == Lapse() for o in outcomes)
        state = await store.feeds.state(feed)
        assert state is not None and state.head == 2
    finally:
        for backend in others:
            await backend.aclose()


async def test_the_live_run_index_finds_due_runs_and_pages_a_tenants_live_runs(
    store: Backend,
) -> None:
    runs = store.runs
    assert runs is not None
    tenant = f"t-{ev.new_id()}/x"  # a tenant that needs encoding
    thread = ev.new_id()
    a, b, c = (run_feed(tenant, thread, f"r{i}") for i in range(3))
    other = run_feed(f"u-{ev.new_id()}", thread, "r0")
    base = 10**12  # far in the past: every entry due at "now" below is this test's
    await runs.track(a, base + 1, base + 30)
    await runs.track(b, base + 2, base + 10)
    await runs.track(c, base + 2, base + 20)
    await runs.track(other, base + 5, base + 40)
    count = await runs.live_count()
    assert count >= 4
    # Due, earliest first, bounded; later entries are not due yet.
    assert await runs.due(base + 20, 10) == [b, c]
    assert await runs.due(base + 20, 1) == [b]
    await runs.postpone(b, base + 35)
    assert await runs.due(base + 30, 10) == [c, a]
    # A tenant's live runs, latest started first, ties by id descending; paged.
    page = await runs.live_page(tenant, before=None, limit=2)
    assert page == [LiveRun(c, base + 2), LiveRun(b, base + 2)]
    rest = await runs.live_page(tenant, before=page[-1], limit=2)
    assert rest == [LiveRun(a, base + 1)]
    assert await runs.live_page(tenant, before=rest[-1], limit=2) == []
    # Dropped: gone from both; dropping again drops nothing; postponing does not add.
    assert await runs.untrack([b, a]) == 2
    assert await runs.untrack([b]) == 0
    await runs.postpone(b, base + 1)
    assert await runs.due(base + 40, 10) == [c, other]
    assert await runs.live_page(tenant, before=None, limit=10) == [LiveRun(c, base + 2)]
    assert await runs.live_count() == count - 2
    await runs.untrack([c, other])
