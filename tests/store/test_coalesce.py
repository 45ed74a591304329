"""``gateway.store.redis.client.batching``: calls of one loop iteration in one flush (no Redis:
the flush is a function of the test's)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from gateway.errors import Unavailable
from gateway.store.redis.client.batching import CallBatcher

pytestmark = pytest.mark.anyio


class Recorder:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.flushes: list[list[int]] = []
        self.fail = fail
        self.release = anyio.Event()
        self.block = False

    async def flush(self, calls: list[int]) -> list[int]:
        self.flushes.append(list(calls))
        if self.block:
            await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return [c * 10 for c in calls]


async def test_calls_of_one_iteration_share_a_flush_and_get_their_own_answers() -> None:
    rec = Recorder()
    co: CallBatcher[int, int] = CallBatcher(rec.flush)
    answers: dict[int, int] = {}

    async def one(i: int) -> None:
        answers[i] = await co.submit(i)

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(one, i)
    assert rec.flushes == [[0, 1, 2, 3, 4]]
    assert answers == {i: i * 10 for i in range(5)}
    assert (co.batches, co.calls) == (1, 5)


async def test_a_lone_call_is_flushed_alone_and_later_calls_start_a_new_batch() -> None:
    rec = Recorder()
    co: CallBatcher[int, int] = CallBatcher(rec.flush)
    assert await co.submit(1) == 10
    assert await co.submit(2) == 20
    assert rec.flushes == [[1], [2]]


async def test_a_full_batch_is_sent_and_the_rest_start_another() -> None:
    rec = Recorder()
    co: CallBatcher[int, int] = CallBatcher(rec.flush, max_batch=3)
    async with anyio.create_task_group() as tg:
        for i in range(7):
            tg.start_soon(co.submit, i)
    assert sorted(len(f) for f in rec.flushes) == [1, 3, 3]
    assert sorted(c for f in rec.flushes for c in f) == list(range(7))


async def test_a_failed_flush_reaches_every_caller_of_its_batch() -> None:
    rec = Recorder(fail=Unavailable("redis unavailable during append step"))
    co: CallBatcher[int, int] = CallBatcher(rec.flush)
    failures: list[str] = []

    async def one(i: int) -> None:
        try:
            await co.submit(i)
        except Unavailable as exc:
            failures.append(exc.message)

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(one, i)
    assert failures == ["redis unavailable during append step"] * 3
    rec.fail = None
    assert await co.submit(9) == 90, "the next batch is a new one"


async def test_the_sender_being_cancelled_still_sends_for_the_others() -> None:
    rec = Recorder()
    rec.block = True
    co: CallBatcher[int, int] = CallBatcher(rec.flush)
    got: list[int] = []
    scope = anyio.CancelScope()

    async def sender() -> None:
        with scope:
            await co.submit(1)

    async def follower() -> None:
        got.append(await co.submit(2))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sender)
            tg.start_soon(follower)  # the same iteration: it joins the sender's batch
            while not rec.flushes:
                await anyio.lowlevel.checkpoint()
            scope.cancel()  # while the batch is out
            await anyio.lowlevel.checkpoint()
            rec.release.set()
    assert rec.flushes == [[1, 2]]
    assert got == [20]
