"""Runs of the Python producer that always end (``Producer.run``), run leases renewed
without publishing (``Producer.heartbeat``, the run inbox's heartbeat).

On real Redis: the producer appends, a second connection to the same Redis (or a real
node, for the inbox) reads what the run feed and its lease hold.  A fake producer
stands in where Redis would have to fail on cue.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import anyio
import pytest
import redis.asyncio as aioredis
import structlog

from gateway.app import Gateway
from gateway.cursor import Cursor
from gateway.errors import InvalidRequest, RunEnded, Unavailable
from gateway.feed import FeedKey, run_feed
from gateway.producer import (
    END_KEY,
    PRODUCER_CANCELLED,
    PRODUCER_ERROR,
    Producer,
    ProducerRun,
)
from gateway.store.interfaces import Backend, Lease
from gateway.store.redis.inbox import dead_letter_key, inbox_key
from tests.support import events as ev
from tests.support.backends import open_backend
from tests.support.node import metric, start_node

pytestmark = pytest.mark.anyio

TENANT = "acme"


@pytest.fixture
async def producer(redis_url: str, redis_prefix: str) -> AsyncIterator[Producer]:
    p = Producer.connect(redis_url, prefix=redis_prefix)
    try:
        yield p
    finally:
        await p.aclose()


@pytest.fixture
async def reader(redis_url: str, redis_prefix: str) -> AsyncIterator[Backend]:
    """Another connection to the producer's Redis, to read what it appended."""
    backend = open_backend(redis_url, redis_prefix)
    try:
        yield backend
    finally:
        await backend.aclose()


async def eventually(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """``check()``'s first truthy answer, polled; fails after 10 s."""
    with anyio.fail_after(10.0, reason=f"{what} not reached"):
        while not (result := await check()):  # noqa: ASYNC110 - state another task changes
            await anyio.sleep(0.01)
    return result


async def events(reader: Backend, feed: FeedKey) -> list[dict[str, Any]]:
    """Every AG-UI event the run feed holds, in order."""
    state = await reader.feeds.state(feed)
    if state is None:
        return []
    items = await reader.feeds.read(feed, Cursor(state.epoch, 0), 1000)
    return [json.loads(item.data) for item in items]


def ids() -> tuple[str, str]:
    return ev.new_id(), ev.new_id()


def text(message_id: str, delta: str) -> list[dict[str, Any]]:
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": delta},
        {"type": "TEXT_MESSAGE_END", "messageId": message_id},
    ]


async def test_a_run_publishes_its_start_its_events_and_its_end_in_order(
    producer: Producer, reader: Backend
) -> None:
    thread, run_id = ids()
    feed = run_feed(TENANT, thread, run_id)
    async with producer.run(TENANT, thread, run_id, lease_seconds=30) as run:
        assert run.started is not None and run.started.offset == 1
        lease = await reader.feeds.lease(feed)
        assert lease is not None and lease.deadline_ms - lease.renewed_ms == 30_000
        cursors = await run.publish(text("m1", "Hi"))
        assert [c.offset for c in cursors] == [2, 3, 4]
        assert not run.ended
    assert run.ended
    held = await events(reader, feed)
    assert [e["type"] for e in held] == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert held[0] == {"type": "RUN_STARTED", "threadId": thread, "runId": run_id}
    assert held[-1] == {"type": "RUN_FINISHED", "threadId": thread, "runId": run_id}
    assert await reader.feeds.lease(feed) is None, "an ended run holds no lease"
    assert not await producer.heartbeat(TENANT, thread, run_id)


async def test_an_exception_in_the_block_ends_the_run_with_run_error_and_goes_on(
    producer: Producer, reader: Backend
) -> None:
    thread, run_id = ids()
    feed = run_feed(TENANT, thread, run_id)

    class ModelGone(Exception):
        pass

    with pytest.raises(ModelGone) as info:
        async with producer.run(TENANT, thread, run_id) as run:
            await run.publish(text("m1", "partial"))
            raise ModelGone("the model went away")
    assert str(info.value) == "the model went away", "the block's own exception, unwrapped"
    held = await events(reader, feed)
    assert [e["type"] for e in held][-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert held[-1] == {
        "type": "RUN_ERROR",
        "message": "the model went away",
        "code": PRODUCER_ERROR,
    }
    assert await reader.feeds.lease(feed) is None
    # The run's end is final: the producer gets run_ended.
    with pytest.raises(RunEnded):
        await producer.publish_run(TENANT, thread, run_id, text("m2", "late"))


async def test_a_cancelled_block_ends_the_run_and_the_cancellation_goes_on(
    producer: Producer, reader: Backend
) -> None:
    thread, run_id = ids()
    with anyio.CancelScope() as scope:
        async with producer.run(TENANT, thread, run_id):
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    held = await events(reader, run_feed(TENANT, thread, run_id))
    assert [e["type"] for e in held] == ["RUN_STARTED", "RUN_ERROR"]
    assert held[-1]["code"] == PRODUCER_CANCELLED


async def test_a_block_that_ended_the_run_gets_nothing_more(
    producer: Producer, reader: Backend
) -> None:
    thread, run_id = ids()
    feed = run_feed(TENANT, thread, run_id)
    finished = {"type": "RUN_FINISHED", "threadId": thread, "runId": run_id, "result": 42}
    async with producer.run(TENANT, thread, run_id) as run:
        await run.publish([*text("m1", "done"), finished])
        assert run.ended
    held = await events(reader, feed)
    assert [e["type"] for e in held].count("RUN_FINISHED") == 1
    assert held[-1] == finished

    # An error after the block's own end is the block's: it goes on, nothing is added.
    thread, run_id = ids()
    failed = {"type": "RUN_ERROR", "message": "gave up", "code": "agent_gave_up"}
    with pytest.raises(ValueError, match="after the end"):
        async with producer.run(TENANT, thread, run_id) as run:
            await run.publish(failed)
            raise ValueError("after the end")
    assert (await events(reader, run_feed(TENANT, thread, run_id)))[-1] == failed


async def test_a_body_with_events_after_its_own_end_does_not_end_the_run(
    producer: Producer, reader: Backend
) -> None:
    thread, run_id = ids()
    finished = {"type": "RUN_FINISHED", "threadId": thread, "runId": run_id}
    async with producer.run(TENANT, thread, run_id) as run:
        with pytest.raises(RunEnded):
            await run.publish([finished, *text("m1", "after")])
        assert not run.ended, "the body was refused whole; the run goes on"
    held = await events(reader, run_feed(TENANT, thread, run_id))
    assert [e["type"] for e in held] == ["RUN_STARTED", "RUN_FINISHED"]


async def test_heartbeats_move_the_lease_deadline_and_append_nothing(
    producer: Producer, reader: Backend
) -> None:
    thread, run_id = ids()
    feed = run_feed(TENANT, thread, run_id)
    context = producer.run(TENANT, thread, run_id, lease_seconds=5)
    assert context.heartbeat_interval == pytest.approx(5 / 3), "a third of the lease"
    context.heartbeat_interval = 0.05  # the test's pace; the rule is the same
    async with context:
        first = await reader.feeds.lease(feed)
        assert first is not None and first.deadline_ms - first.renewed_ms == 5_000

        async def renewed_twice() -> Lease | None:
            lease = await reader.feeds.lease(feed)
            assert lease is not None
            return lease if lease.renewed_ms > first.renewed_ms + 50 else None

        later = await eventually(renewed_twice, "a renewal without a publish")
        assert later.started_ms == first.started_ms
        assert later.deadline_ms == later.renewed_ms + 5_000
        assert later.deadline_ms > first.deadline_ms
        state = await reader.feeds.state(feed)
        assert state is not None and state.head == 1, "a heartbeat appends nothing"
    assert [e["type"] for e in await events(reader, feed)] == ["RUN_STARTED", "RUN_FINISHED"]


async def test_heartbeat_answers_whether_the_run_is_live(producer: Producer) -> None:
    thread, run_id = ids()
    assert not await producer.heartbeat(TENANT, thread, run_id), "no such run"
    start = {"type": "RUN_STARTED", "threadId": thread, "runId": run_id}
    await producer.publish_run(TENANT, thread, run_id, start, lease_seconds=10)
    assert await producer.heartbeat(TENANT, thread, run_id)
    await producer.publish_run(TENANT, thread, run_id, {"type": "RUN_ERROR", "message": "x"})
    assert not await producer.heartbeat(TENANT, thread, run_id), "ended"
    with pytest.raises(InvalidRequest):
        await producer.heartbeat(TENANT, "not a thread id", run_id)


async def test_leases_outside_the_bounds_are_refused(
    producer: Producer, redis_url: str, redis_prefix: str
) -> None:
    thread, run_id = ids()
    with pytest.raises(InvalidRequest, match="lease_seconds"):
        producer.run(TENANT, thread, run_id, lease_seconds=4)
    start = {"type": "RUN_STARTED", "threadId": thread, "runId": run_id}
    with pytest.raises(InvalidRequest, match="lease_seconds"):
        await producer.publish_run(TENANT, thread, run_id, start, lease_seconds=3601)
    with pytest.raises(ValueError, match="run_lease_seconds"):
        Producer.connect(redis_url, prefix=redis_prefix, run_lease_seconds=1)


async def test_the_producers_run_lease_is_the_default_of_its_runs(
    redis_url: str, redis_prefix: str, reader: Backend
) -> None:
    thread, run_id = ids()
    producer = Producer.connect(redis_url, prefix=redis_prefix, run_lease_seconds=12)
    try:
        assert producer.run_lease_seconds == 12
        async with producer.run(TENANT, thread, run_id) as run:
            assert run.lease_seconds == 12
            lease = await reader.feeds.lease(run_feed(TENANT, thread, run_id))
            assert lease is not None and lease.deadline_ms - lease.renewed_ms == 12_000
    finally:
        await producer.aclose()


class FlakyProducer:
    """Stands in for a Producer whose Redis fails on cue: ``heartbeat`` raises
    Unavailable while ``failing`` is above 0 (counting down), so does the end's
    publish while ``end_failing`` is."""

    def __init__(self) -> None:
        self.failing = 0
        self.end_failing = 0
        self.heartbeats = 0
        self.published: list[tuple[Any, str | None]] = []
        self.renewed = anyio.Event()

    async def publish_run(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        events: Any,
        *,
        idempotency_key: str | None = None,
        lease_seconds: float | None = None,
    ) -> list[Cursor]:
        if idempotency_key == END_KEY and self.end_failing:
            self.end_failing -= 1
            raise Unavailable("redis went away")
        self.published.append((events, idempotency_key))
        n = len(events) if isinstance(events, list) else 1
        return [Cursor(1, len(self.published) + i) for i in range(n)]

    async def heartbeat(self, tenant: str, thread_id: str, run_id: str) -> bool:
        self.heartbeats += 1
        if self.failing:
            self.failing -= 1
            raise Unavailable("redis went away")
        self.renewed.set()
        return True


async def test_failing_heartbeats_are_logged_once_and_the_block_goes_on() -> None:
    fake = FlakyProducer()
    fake.failing = 3
    context = ProducerRun(cast(Producer, fake), TENANT, "t1", "r1", lease_seconds=5)
    context.heartbeat_interval = 0.01
    with structlog.testing.capture_logs() as logs:
        async with context as run:
            with anyio.fail_after(10):
                await fake.renewed.wait()
            await run.publish(text("m1", "still here"))
    assert fake.heartbeats == 4
    lines = [(line["log_level"], line["event"]) for line in logs]
    assert lines == [
        ("warning", "renewing a run's lease failed"),
        ("info", "renewing a run's lease failed: recovered"),
    ]
    assert logs[1]["failures"] == 3
    assert [e for e, _ in fake.published][-1]["type"] == "RUN_FINISHED"


async def test_the_end_is_retried_while_redis_is_unavailable() -> None:
    fake = FlakyProducer()
    fake.end_failing = 2
    async with ProducerRun(cast(Producer, fake), TENANT, "t1", "r1", lease_seconds=60):
        pass
    start, end = fake.published
    assert start[0]["type"] == "RUN_STARTED"
    assert end == ({"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}, END_KEY)
    assert fake.end_failing == 0


# -- the run inbox's heartbeat -----------------------------------------------------------


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[Any]:
    client: Any = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def test_the_run_inbox_heartbeat_renews_a_live_run_and_skips_others(
    redis_url: str, redis_prefix: str, producer: Producer, raw: Any
) -> None:
    thread, run_id = ids()
    feed = run_feed(TENANT, thread, run_id)
    start = {"type": "RUN_STARTED", "threadId": thread, "runId": run_id}
    inbox, dead = inbox_key(redis_prefix, "run"), dead_letter_key(redis_prefix, "run")
    async with start_node(redis_url, redis_prefix) as node:
        await producer.publish_run(TENANT, thread, run_id, start, lease_seconds=30)
        first = await node.backend.feeds.lease(feed)
        assert first is not None

        async def clock_passed() -> bool:
            seconds, micros = await raw.time()
            return bool(seconds * 1000 + micros // 1000 > first.renewed_ms)

        await eventually(clock_passed, "the store's clock past the start")
        heartbeat = {"tenant": TENANT, "thread": thread, "run": run_id, "heartbeat": "1"}
        await raw.xadd(inbox, heartbeat)
        await eventually(lambda: counted(node, "renewed"), "the heartbeat")
        renewed = await node.backend.feeds.lease(feed)
        assert renewed is not None and renewed.started_ms == first.started_ms
        assert renewed.renewed_ms > first.renewed_ms
        assert renewed.deadline_ms == renewed.renewed_ms + 30_000
        state = await node.backend.feeds.state(feed)
        assert state is not None and state.head == 1, "a heartbeat appends nothing"

        # No live run: acknowledged and counted, not dead-lettered (heartbeats race
        # with the run's end); the run's feed is not created either.
        other = {**heartbeat, "run": ev.new_id()}
        await raw.xadd(inbox, other)
        await eventually(lambda: counted(node, "not_live"), "the heartbeat of no live run")
        assert await node.backend.feeds.state(run_feed(TENANT, thread, other["run"])) is None

        # A heartbeat with a body (or anything but "1") is a mistake: dead-lettered.
        await raw.xadd(inbox, {**heartbeat, "body": json.dumps(start)})
        await raw.xadd(inbox, {**heartbeat, "heartbeat": "yes"})
        # And a message with neither is refused as before.
        await raw.xadd(inbox, {"tenant": TENANT, "thread": thread, "run": run_id})
        letters = await eventually(
            lambda: _at_least(raw.xrange(dead), 3), "the dead letters of bad heartbeats"
        )
        assert [entry["reason"] for _, entry in letters] == ["invalid_request"] * 3
        assert [entry["message"] for _, entry in letters] == [
            "heartbeat: a heartbeat has no body and no idempotency_key",
            "heartbeat: must be 1",
            "message: missing field 'body'",
        ]
        assert metric(node, "gateway_inbox_messages_total", outcome="renewed") == 1
        assert metric(node, "gateway_inbox_messages_total", outcome="not_live") == 1
        state = await node.backend.feeds.state(feed)
        assert state is not None and state.head == 1
        assert await raw.xpending(inbox, "gateway") == {
            "pending": 0,
            "min": None,
            "max": None,
            "consumers": [],
        }


async def counted(node: Gateway, outcome: str) -> float:
    """How many inbox messages the node counted with ``outcome``."""
    return metric(node, "gateway_inbox_messages_total", outcome=outcome)


async def _at_least(entries: Awaitable[list[Any]], n: int) -> list[Any] | None:
    got = await entries
    return got if len(got) >= n else None
