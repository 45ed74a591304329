"""OwnedTasks: plain asyncio tasks that their owner ends and waits for (no sockets)."""

from __future__ import annotations

import anyio
import pytest
import structlog

from gateway.net.tasks import OwnedTasks

pytestmark = pytest.mark.anyio


def _one_task_held_until_released() -> tuple[OwnedTasks, anyio.Event, list[str]]:
    """Tasks with one task that ends (appending "task" to the list) once the event is set."""
    tasks = OwnedTasks()
    release = anyio.Event()
    finished: list[str] = []

    async def slow_exit() -> None:
        await release.wait()
        finished.append("task")

    tasks.start(slow_exit())
    return tasks, release, finished


async def test_failures_reach_the_owner_and_the_first_is_kept() -> None:
    seen: list[BaseException] = []
    tasks = OwnedTasks(on_failure=seen.append)
    release = anyio.Event()

    async def fails(message: str) -> None:
        await release.wait()
        raise ValueError(message)

    async def ends() -> None:
        await release.wait()

    tasks.start(fails("first"))
    tasks.start(ends())
    assert len(tasks) == 2
    release.set()
    assert await tasks.wait(5)
    assert len(tasks) == 0
    assert [str(exc) for exc in seen] == ["first"]
    assert isinstance(tasks.failure, ValueError) and str(tasks.failure) == "first"
    tasks.start(fails("second"))
    assert await tasks.wait(5)
    assert [str(exc) for exc in seen] == ["first", "second"]
    assert str(tasks.failure) == "first"


async def test_a_cancelled_task_is_no_failure() -> None:
    seen: list[BaseException] = []
    tasks = OwnedTasks(on_failure=seen.append)
    tasks.start(anyio.sleep_forever())
    await anyio.lowlevel.checkpoint()  # let it start
    tasks.cancel()
    assert await tasks.wait(5)
    assert seen == [] and tasks.failure is None


async def test_the_wait_is_bounded_and_cancel_ends_what_outlives_it() -> None:
    tasks = OwnedTasks()
    tasks.start(anyio.sleep_forever())
    assert not await tasks.wait(0.05)  # still running after the bound
    assert len(tasks) == 1
    tasks.cancel()
    assert await tasks.wait(5)
    assert len(tasks) == 0


async def test_the_wait_outlasts_its_callers_cancellation() -> None:
    tasks, release, finished = _one_task_held_until_released()
    waiter_done = anyio.Event()

    async def owner(scope_ready: anyio.Event, scopes: list[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            scope_ready.set()
            try:
                await anyio.sleep_forever()
            finally:
                # The owner's exit path, while its own scope is cancelled.
                await tasks.wait(5)
                finished.append("owner")
                waiter_done.set()

    scope_ready = anyio.Event()
    scopes: list[anyio.CancelScope] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(owner, scope_ready, scopes)
        await scope_ready.wait()
        scopes[0].cancel()
        await anyio.lowlevel.checkpoint()
        assert finished == []  # the owner still waits for its task
        release.set()
        with anyio.fail_after(5):
            await waiter_done.wait()
    assert finished == ["task", "owner"]


async def test_a_failure_without_an_owner_callback_is_logged() -> None:
    tasks = OwnedTasks()

    async def fails() -> None:
        raise RuntimeError("boom")

    with structlog.testing.capture_logs() as logs:
        tasks.start(fails())
        assert await tasks.wait(5)
    assert [line["event"] for line in logs] == ["task failed"]
    assert isinstance(tasks.failure, RuntimeError)


async def test_a_cancellation_that_comes_during_the_wait_is_held_until_the_tasks_end() -> None:
    tasks, release, finished = _one_task_held_until_released()
    waiting = anyio.Event()
    scopes: list[anyio.CancelScope] = []

    async def owner() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            waiting.set()
            await tasks.wait(5)  # not cancelled yet: the plain wait
            finished.append("after the wait")  # not reached: the cancellation is raised
        finished.append("owner")

    async with anyio.create_task_group() as tg:
        tg.start_soon(owner)
        await waiting.wait()
        await anyio.lowlevel.checkpoint()  # the owner is in its wait
        scopes[0].cancel()
        await anyio.lowlevel.checkpoint()
        assert finished == []  # still waiting for its task
        release.set()
    assert finished == ["task", "owner"]
    assert scopes[0].cancelled_caught
