"""``listener.Waker``: the reader's one wait over every listener (pure asyncio, no
Redis): woken at once, bounded by its timer when nobody wakes it, a wake-up before the
wait not lost, and a cancelled wait leaves nothing behind."""

from __future__ import annotations

import anyio
import pytest

from gateway.store.redis.client.subscriber import Waker

pytestmark = pytest.mark.anyio


async def test_a_wake_ends_the_wait_and_is_used_once() -> None:
    waker = Waker()
    async with anyio.create_task_group() as tg:
        done = anyio.Event()

        async def waiting() -> None:
            await waker.wait(60)
            done.set()

        tg.start_soon(waiting)
        await anyio.wait_all_tasks_blocked()
        assert not done.is_set()
        waker.wake()
        with anyio.fail_after(5):
            await done.wait()
    # A wake-up before the wait: the wait returns at once, and only that one.
    waker.wake()
    with anyio.fail_after(5):
        await waker.wait(60)
    with anyio.move_on_after(0.05) as scope:
        await waker.wait(60)
    assert scope.cancelled_caught  # not woken again: still waiting when cancelled


async def test_the_bound_ends_an_unwoken_wait() -> None:
    waker = Waker()
    with anyio.fail_after(5):
        started = anyio.current_time()
        await waker.wait(0.05)
    assert anyio.current_time() - started >= 0.04  # its own timer, not an early return


async def test_a_cancelled_wait_leaves_no_waiter_for_the_next_wake() -> None:
    waker = Waker()
    with anyio.move_on_after(0.01):
        await waker.wait(60)
    waker.wake()  # nobody waits: remembered for the next wait
    with anyio.fail_after(5):
        await waker.wait(60)
