"""The live path's direct hand-over on Redis (``read_new(direct=...)``) and its hold.

While the node's reader waits with nothing else to do, a listener hands the items that
continue their feed's position straight to ``direct`` from its own callback; everything
else (a gap, a transient message, anything while a reset or a server change is pending)
still comes back from ``read_new``, in order.  ``linger`` holds the listeners: messages
wait in the kernel until the hold ends.  All against a real ``redis-server``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import pytest
import redis.asyncio as aioredis

from gateway.cursor import Cursor
from gateway.feed import FeedKey, NewItem, team_feed
from gateway.store.base import Backend, Batch
from gateway.store.redis.connection import ListenerAddress
from gateway.store.redis.listener import Waker, connect
from gateway.store.redis.live import RedisLive
from tests.support import events as ev
from tests.support.backends import open_backend, redis_feeds

pytestmark = pytest.mark.anyio


@pytest.fixture
async def backend(redis_url: str, redis_prefix: str) -> AsyncIterator[Backend]:
    b = open_backend(redis_url, redis_prefix)
    try:
        yield b
    finally:
        await b.aclose()


def live_of(backend: Backend) -> RedisLive:
    live = backend.live
    assert isinstance(live, RedisLive)
    return live


def feed() -> FeedKey:
    return team_feed("acme", ev.team_id())


def items(n: int) -> list[NewItem]:
    return [NewItem(f"k-{ev.new_id()}", f'"{i}"'.encode()) for i in range(n)]


class Direct:
    """A ``direct`` taker that moves the positions on as the hub's dispatch does, and
    logs what it took."""

    def __init__(self, positions: dict[FeedKey, Cursor], hold: float = 0.0) -> None:
        self.positions = positions
        self.hold = hold
        self.log: list[tuple[str, list[int]]] = []
        self.at: list[float] = []
        self._arrived = anyio.Event()

    def __call__(self, feed: FeedKey, batch: Batch) -> float:
        self.positions[feed] = batch.items[-1].cursor
        self.log.append(("direct", [i.offset for i in batch.items]))
        self.at.append(time.monotonic())
        self._arrived.set()
        return self.hold

    def offsets(self) -> list[int]:
        return [o for how, got in self.log if how == "direct" for o in got]

    async def until(self, count: int) -> None:
        """Until ``count`` items were taken directly (bounded)."""
        with anyio.fail_after(10):
            while len(self.offsets()) < count:
                self._arrived = anyio.Event()
                await self._arrived.wait()


async def followed(backend: Backend, f: FeedKey, n: int = 1) -> dict[FeedKey, Cursor]:
    """``f`` with ``n`` items, followed by the live reader (subscribed and swept)."""
    r = await backend.feeds.append(f, items(n), retention=100)
    positions = {f: r.state.head_cursor}
    assert await backend.live.read_new(positions, count=100, block_ms=100) == {}
    return positions


async def waiting_read(
    backend: Backend, positions: dict[FeedKey, Cursor], direct: Direct, tg: anyio.abc.TaskGroup
) -> list[dict[FeedKey, Batch]]:
    """Start one ``read_new`` with ``direct`` in ``tg``; returns once it waits."""
    returned: list[dict[FeedKey, Batch]] = []

    async def read() -> None:
        returned.append(
            await backend.live.read_new(positions, count=100, block_ms=30_000, direct=direct)
        )

    tg.start_soon(read)
    await anyio.wait_all_tasks_blocked()
    return returned


async def test_items_that_continue_the_position_go_to_direct_while_the_read_waits(
    backend: Backend,
) -> None:
    f = feed()
    positions = await followed(backend, f)
    direct = Direct(positions)
    async with anyio.create_task_group() as tg:
        returned = await waiting_read(backend, positions, direct, tg)
        await backend.feeds.append(f, items(2), retention=100)
        await backend.feeds.append(f, items(1), retention=100)
        await direct.until(3)
        assert direct.offsets() == [2, 3, 4]
        assert returned == []  # the read still waits: nothing was left to it
        assert live_of(backend).taken_directly >= 1
        await backend.live.wake()
    assert returned == [{}]


async def test_a_gap_is_left_to_the_read_which_reads_the_stream(backend: Backend) -> None:
    f = feed()
    positions = await followed(backend, f, 2)
    epoch = positions[f].epoch
    # The node missed item 2's notification: its position is still 1.
    positions[f] = Cursor(epoch, 1)
    direct = Direct(positions)
    async with anyio.create_task_group() as tg:
        returned = await waiting_read(backend, positions, direct, tg)
        await backend.feeds.append(f, items(1), retention=100)
        with anyio.fail_after(10):
            while not returned:
                await anyio.wait_all_tasks_blocked()
    # Item 3's message does not continue position 1: the read took it and read the
    # stream, which also had item 2.
    assert [i.offset for i in returned[0][f].items] == [2, 3]
    assert direct.log == []


async def test_a_transient_message_and_the_items_after_it_keep_their_order(
    backend: Backend,
) -> None:
    f = feed()
    positions = await followed(backend, f)
    direct = Direct(positions)
    async with anyio.create_task_group() as tg:
        returned = await waiting_read(backend, positions, direct, tg)
        await backend.live.broadcast(f, b"typing")
        await backend.feeds.append(f, items(1), retention=100)
        with anyio.fail_after(10):
            while not returned:
                await anyio.wait_all_tasks_blocked()
    got = returned[0][f]
    # The transient message came back from the read, before any item ...
    assert got.transient == [(0, b"typing")]
    # ... and the item after it was not handed over ahead of it.
    assert direct.log == []
    offsets = [i.offset for i in got.items]
    if not offsets:  # its message came after the read returned: the next read has it
        with anyio.fail_after(10):
            later = await backend.live.read_new(positions, count=100, block_ms=5_000)
        offsets = [i.offset for i in later[f].items]
    assert offsets == [2]


@pytest.mark.parametrize("pending", ["server change", "reset", "wake-up"])
async def test_while_the_reader_has_something_pending_messages_go_to_it(
    backend: Backend, pending: str
) -> None:
    f = feed()
    positions = await followed(backend, f)
    direct = Direct(positions)
    conn = redis_feeds(backend).conn
    async with anyio.create_task_group() as tg:
        returned = await waiting_read(backend, positions, direct, tg)
        # Set without waking the reader (what a publish does between the two), so
        # only the refusal below sends the message its way.
        if pending == "server change":
            conn.suspect = True
        elif pending == "reset":
            state = await backend.feeds.state(f)
            assert state is not None
            conn.pending_resets[team_feed("acme", ev.team_id())] = state
        else:
            conn.woken = True
        await backend.feeds.append(f, items(1), retention=100)
        with anyio.fail_after(10):
            while not returned:
                await anyio.wait_all_tasks_blocked()
    assert [i.offset for i in returned[0][f].items] == [2]
    assert direct.log == []


async def test_a_hold_keeps_the_listeners_from_reading_until_it_ends(backend: Backend) -> None:
    f = feed()
    positions = await followed(backend, f)
    live = live_of(backend)
    live.HOLD_GATHERS = 0  # hold whatever the rate (the policy is tested below)
    direct = Direct(positions, hold=0.3)
    async with anyio.create_task_group() as tg:
        await waiting_read(backend, positions, direct, tg)
        await backend.feeds.append(f, items(1), retention=100)
        await direct.until(1)
        # The first taker asked for a hold: nothing is read until it ends ...
        held_from = direct.at[0]
        assert not live.reading()
        await backend.feeds.append(f, items(2), retention=100)
        await direct.until(3)
        # ... then what waited in the kernel is read in one go, as one batch.
        assert direct.log[1] == ("direct", [3, 4])
        assert direct.at[1] - held_from >= 0.25
        await backend.live.wake()
    # A linger the reader asks for itself (after a read) holds the same way.
    await live.linger(0.2)
    assert not live.reading()
    with anyio.fail_after(10):
        while not live.reading():
            await anyio.wait_all_tasks_blocked()


async def test_a_taker_that_fails_leaves_the_messages_to_the_reader(
    redis_url: str, redis_prefix: str
) -> None:
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    address = ListenerAddress("127.0.0.1", port, None, False, None, None)
    waker = Waker()
    listener = await connect(address, waker=waker)
    client = aioredis.Redis.from_url(redis_url)
    channel = f"{redis_prefix}:ch".encode()
    calls: list[int] = []

    def failing(messages: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        calls.append(len(messages))
        raise RuntimeError("a bug in the taker")

    try:
        listener.subscribe([channel])
        with anyio.fail_after(5):
            await listener.confirmed()
        async with anyio.create_task_group() as tg:
            woken = anyio.Event()

            async def wait() -> None:
                await waker.wait(30, failing)
                woken.set()

            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            await client.publish(channel, b"payload")
            with anyio.fail_after(5):
                await woken.wait()
        assert calls == [1]
        assert listener.take() == [(channel, b"payload")]
        assert listener.failed is None  # the connection stays up
    finally:
        listener.close()
        await client.aclose()


async def test_a_hold_is_taken_only_when_messages_come_often_enough(
    backend: Backend,
) -> None:
    live = live_of(backend)
    hold = 0.002
    # Sparse: one message every 20 ms; a 2 ms hold would gather nothing.
    assert not any(live._worth_holding(1, hold, 100 + 0.020 * k) for k in range(20))
    # One every 0.4 ms: a hold gathers about five; held from the second take on.
    dense = [live._worth_holding(1, hold, 200 + 0.0004 * k) for k in range(20)]
    assert not dense[0] and all(dense[1:])
    # Held steadily: each release takes the three that came during the 2 ms hold.
    assert all(live._worth_holding(3, hold, 200.01 + 0.0021 * k) for k in range(20))
    # The rate falls to one every 10 ms: holding stops within a few takes.
    falling = [live._worth_holding(1, hold, 201 + 0.010 * k) for k in range(20)]
    assert not any(falling[3:])
    # The taker asked for no hold: none, whatever the rate.
    assert not any(live._worth_holding(5, 0.0, 300 + 0.0001 * k) for k in range(5))
