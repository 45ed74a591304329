"""FeedActivity: the feed index hears of each feed at most once per interval (D11)."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from gateway import activity as activity_module
from gateway.activity import TOUCH_BATCH, FeedActivity
from gateway.errors import Unavailable
from gateway.feed import FeedKey, FeedKind, team_feed
from gateway.store.interfaces import FeedIndex, IndexEntry
from tests.support import events as ev

pytestmark = pytest.mark.anyio


class RecordingIndex(FeedIndex):
    """Records every touch; fails while ``failing``; sets ``touched`` on each one."""

    def __init__(self) -> None:
        self.touches: list[list[tuple[FeedKey, int]]] = []
        self.failing = False
        self.touched = anyio.Event()

    async def touch(self, entries: Sequence[tuple[FeedKey, int]]) -> None:
        if self.failing:
            raise Unavailable("redis unavailable during feed index update")
        self.touches.append(list(entries))
        self.touched.set()

    async def page(
        self, tenant: str, kind: FeedKind, *, before: IndexEntry | None, limit: int
    ) -> list[IndexEntry]:
        raise NotImplementedError

    async def forget(self, tenant: str, kind: FeedKind, ids: Sequence[str]) -> None:
        raise NotImplementedError


class Clock:
    def __init__(self) -> None:
        self.wall = 1_800_000_000.0
        self.mono = 100.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def make(index: RecordingIndex, clock: Clock, interval: float = 1.0) -> FeedActivity:
    return FeedActivity(
        index, interval=interval, clock=lambda: clock.wall, monotonic=lambda: clock.mono
    )


def ms(clock: Clock) -> int:
    return int(clock.wall * 1000)


async def test_without_the_loop_each_feed_is_written_at_once_then_not_for_an_interval() -> None:
    index, clock = RecordingIndex(), Clock()
    act = make(index, clock)
    a, b = team_feed("acme", ev.team_id()), team_feed("acme", ev.team_id())
    await act.record(a)
    first = ms(clock)
    clock.advance(0.5)
    await act.record(a)  # within the interval: no write
    await act.record(b)  # another feed: written
    clock.advance(0.6)
    await act.record(a)  # 1.1 s after its write: written again
    assert index.touches == [[(a, first)], [(b, first + 500)], [(a, first + 1100)]]
    assert act.writes == 3


async def test_without_the_loop_a_failed_write_is_retried_by_the_next_append() -> None:
    index, clock = RecordingIndex(), Clock()
    act = make(index, clock)
    a = team_feed("acme", ev.team_id())
    index.failing = True
    await act.record(a)  # never raises
    assert act.failures == 1 and index.touches == []
    index.failing = False
    await act.record(a)
    assert index.touches == [[(a, ms(clock))]]


async def test_with_the_loop_appends_do_no_io_and_a_round_writes_each_feed_once() -> None:
    index, clock = RecordingIndex(), Clock()
    act = make(index, clock, interval=3600)  # the loop's own round never comes here
    a, b = team_feed("acme", ev.team_id()), team_feed("acme", ev.team_id())
    async with anyio.create_task_group() as tg:
        tg.start_soon(act.run)
        await anyio.lowlevel.checkpoint()  # the loop has started
        for _ in range(50):
            await act.record(a)
            clock.advance(0.001)
        await act.record(b)
        assert index.touches == [] and act.pending == 2
        await act.flush()
        # One write for both, each with the time of its latest append.
        assert index.touches == [[(a, ms(clock) - 1), (b, ms(clock))]]
        await act.flush()
        assert len(index.touches) == 1  # nothing new: nothing written
        tg.cancel_scope.cancel()


async def test_the_loop_writes_every_interval() -> None:
    index, clock = RecordingIndex(), Clock()
    act = make(index, clock, interval=0.01)
    a = team_feed("acme", ev.team_id())
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(act.run)
            await anyio.lowlevel.checkpoint()
            await act.record(a)
            assert index.touches == []
            await index.touched.wait()
            tg.cancel_scope.cancel()
    assert index.touches == [[(a, ms(clock))]]


async def test_the_loop_writes_what_is_left_when_it_stops() -> None:
    index, clock = RecordingIndex(), Clock()
    act = make(index, clock, interval=3600)  # no round before the end
    b = team_feed("acme", ev.team_id())
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(act.run)
            await anyio.lowlevel.checkpoint()
            await act.record(b)
            assert index.touches == []
            tg.cancel_scope.cancel()
    assert index.touches == [[(b, ms(clock))]]
    assert act.pending == 0


async def test_with_the_loop_a_failed_round_is_written_by_the_next() -> None:
    index, clock = RecordingIndex(), Clock()
    act = make(index, clock)
    act._background = True  # as while run() runs, without its timer
    a, b = team_feed("acme", ev.team_id()), team_feed("acme", ev.team_id())
    await act.record(a)
    first = ms(clock)
    index.failing = True
    await act.flush()
    assert act.pending == 1 and act.failures == 1
    clock.advance(0.5)
    await act.record(b)
    index.failing = False
    await act.flush()
    assert len(index.touches) == 1
    assert dict(index.touches[0]) == {a: first, b: first + 500}
    # A newer append replaces a failed round's time.
    await act.record(a)
    index.failing = True
    await act.flush()
    clock.advance(1)
    await act.record(a)
    index.failing = False
    await act.flush()
    assert index.touches[-1] == [(a, ms(clock))]


async def test_a_round_writes_in_batches() -> None:
    index, clock = RecordingIndex(), Clock()
    act = make(index, clock)
    act._background = True
    feeds = [team_feed("acme", ev.team_id()) for _ in range(TOUCH_BATCH + 3)]
    for feed in feeds:
        await act.record(feed)
    await act.flush()
    assert [len(t) for t in index.touches] == [TOUCH_BATCH, 3]
    assert [f for touch in index.touches for f, _ in touch] == feeds


async def test_what_is_held_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity_module, "MAX_PENDING", 4)
    index, clock = RecordingIndex(), Clock()
    act = make(index, clock)
    act._background = True
    feeds = [team_feed("acme", ev.team_id()) for _ in range(6)]
    for feed in feeds:
        await act.record(feed)
    assert act.pending == 4
    await act.record(feeds[0])  # a feed already held still gets its newer time
    await act.flush()
    assert [f for f, _ in index.touches[0]] == feeds[:4]
    # Without the loop, the memory of recent writes stays bounded too.
    inline = make(index, clock)
    for feed in feeds:
        await inline.record(feed)
    assert len(inline._written) <= 4
