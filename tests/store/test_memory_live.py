"""The embedded store's live reads push into the sink and give the event loop a turn:
a read that found something at once (a deleted feed is found again on every read until
its followers have left) must not let the node's reader starve their tasks."""

from __future__ import annotations

import anyio
import pytest

from gateway.cursor import Cursor
from gateway.feed import NewItem, team_feed
from gateway.store.memory import MemoryStore
from tests.support import events as ev
from tests.support.live import Collected

pytestmark = pytest.mark.anyio


async def test_a_read_that_finds_something_at_once_lets_other_tasks_run() -> None:
    store = MemoryStore(linger=0)
    feed = team_feed("acme", ev.team_id())
    r = await store.append(feed, [NewItem("k", b'"a"')], retention=10)
    positions = {feed: Cursor(r.state.epoch, 0)}
    turns: list[int] = []

    async def other() -> None:
        turns.append(1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        sink = Collected(positions)
        await store.read_new(positions, sink, count=10, block_ms=30_000)
        # Pushed without waiting, and the other task had its turn meanwhile.
        assert [i.offset for i in sink.batches()[feed].items] == [1]
        assert turns == [1]


async def test_a_deleted_feed_is_pushed_as_a_gap_and_its_followers_get_a_turn() -> None:
    store = MemoryStore(linger=0, tombstone_seconds=60)
    feed = team_feed("acme", ev.team_id())
    r = await store.append(feed, [NewItem("k", b'"a"')], retention=10)
    await store.expire(feed, 0)
    positions = {feed: r.state.head_cursor}
    turns: list[int] = []

    async def other() -> None:
        turns.append(1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        sink = Collected(positions)
        await store.read_new(positions, sink, count=10, block_ms=30_000)
        assert sink.batches()[feed].gone
        assert turns == [1]
