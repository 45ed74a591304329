"""A run's end is recorded by the append step that appends it, and nothing new is
appended after it (contract D12): the same suite on the embedded store and on Redis,
then through the publisher's entry paths that do not go through HTTP (the Python
producer, the run inbox).

Exact retries of what the feed holds are still answered with their first cursors: the
append step recognises them before it checks the end.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from gateway.cursor import Cursor
from gateway.errors import HeadMoved, RunEnded
from gateway.feed import FeedState, NewItem, run_feed
from gateway.producer import Producer
from gateway.store.interfaces import Backend
from gateway.store.redis.inbox import dead_letter_key, inbox_key
from tests.support import events as ev
from tests.support.node import metric, start_node

pytestmark = pytest.mark.anyio

TENANT = "acme"


async def eventually(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """``check()``'s first truthy answer, polled; fails after 10 s."""
    with anyio.fail_after(10.0, reason=f"{what} not reached"):
        while not (result := await check()):  # noqa: ASYNC110 - state another process changes
            await anyio.sleep(0.02)
    return result


def item(key: str | None, text: str) -> NewItem:
    return NewItem(key, json.dumps({"type": "CUSTOM", "name": text}).encode())


async def head(store: Backend, feed: Any) -> FeedState | None:
    return await store.feeds.state(feed)


async def test_nothing_new_after_the_end_and_retries_answer_their_first_cursor(
    store: Backend,
) -> None:
    feed = run_feed(TENANT, ev.new_id(), ev.new_id())
    feeds = store.feeds
    first = await feeds.append(feed, [item("a", "a")], retention=100)
    # Not an end: the run goes on.
    await feeds.append(feed, [item(None, "b")], retention=100)
    end = await feeds.append(feed, [item("c", "c"), item("end", "end")], retention=100, ends=True)
    held = await head(store, feed)
    assert held is not None and held.head == 4
    for batch in ([item(None, "late")], [item("late", "late")], [item("a", "a"), item("x", "x")]):
        with pytest.raises(RunEnded) as info:
            await feeds.append(feed, batch, retention=100)
        assert info.value.status == 409 and info.value.code == "run_ended"
        assert await head(store, feed) == held, "nothing of a refused batch is appended"
    # Another end after the end is refused too.
    with pytest.raises(RunEnded):
        await feeds.append(feed, [item("end2", "end2")], retention=100, ends=True)
    # Exact retries, of the end itself too, with or without ``ends``.
    again = await feeds.append(feed, [item("c", "c"), item("end", "end")], retention=100, ends=True)
    assert again.cursors == end.cursors
    assert (await feeds.append(feed, [item("a", "a")], retention=100)).cursors == first.cursors
    retry = await feeds.append(feed, [item("end", "end")], retention=100, expect=Cursor(1, 1))
    assert retry.cursors == end.cursors[1:], "a retry is answered whatever the head"
    assert await head(store, feed) == held
    # Another run of the thread is a run like any other.
    other = run_feed(TENANT, feed.id.split("/")[0], ev.new_id())
    assert (await feeds.append(other, [item(None, "new run")], retention=100)).cursors[
        0
    ].offset == 1


async def test_the_end_is_checked_before_the_head_and_with_it_in_one_step(store: Backend) -> None:
    feed = run_feed(TENANT, ev.new_id(), ev.new_id())
    feeds = store.feeds
    result = await feeds.append(
        feed, [item(None, "only"), item(None, "end")], retention=100, ends=True
    )
    at = result.state.head_cursor
    # A planner that saw the end's head still gets run_ended, not a plan-again.
    with pytest.raises(RunEnded):
        await feeds.append(feed, [item(None, "late")], retention=100, expect=at)
    with pytest.raises(HeadMoved):
        # Not ended: a stale head is a plan-again, as before.
        going = run_feed(TENANT, ev.new_id(), ev.new_id())
        await feeds.append(going, [item(None, "one")], retention=100)
        await feeds.append(going, [item(None, "two")], retention=100, expect=Cursor(1, 0))


async def test_a_batch_of_retries_only_in_end_mode_records_nothing_new(store: Backend) -> None:
    """An end batch whose items are all held already writes nothing (the run is not
    ended by a retry of events that did not end it)."""
    feed = run_feed(TENANT, ev.new_id(), ev.new_id())
    feeds = store.feeds
    await feeds.append(feed, [item("a", "a")], retention=100)
    await feeds.append(feed, [item("a", "a")], retention=100, ends=True)
    after = await feeds.append(feed, [item(None, "more")], retention=100)
    assert after.cursors[0].offset == 2


async def test_the_producer_gets_run_ended_and_retries_answer(
    redis_url: str, redis_prefix: str
) -> None:
    thread, run = ev.new_id(), ev.new_id()
    started = {"type": "RUN_STARTED", "threadId": thread, "runId": run}
    failed = {"type": "RUN_ERROR", "message": "the model went away"}
    producer = Producer.connect(redis_url, prefix=redis_prefix)
    try:
        cursors = await producer.publish_run(
            TENANT, thread, run, [started, failed], idempotency_key="k"
        )
        with pytest.raises(RunEnded):
            await producer.publish_run(
                TENANT, thread, run, {"type": "CUSTOM", "name": "late", "value": 1}
            )
        assert (
            await producer.publish_run(TENANT, thread, run, [started, failed], idempotency_key="k")
            == cursors
        )
        # The next run starts normally.
        other = ev.new_id()
        started_other = {**started, "runId": other}
        assert len(await producer.publish_run(TENANT, thread, other, started_other)) == 1
    finally:
        await producer.aclose()


async def test_the_run_inbox_dead_letters_a_publish_after_the_end(
    redis_url: str, redis_prefix: str
) -> None:
    thread, run = ev.new_id(), ev.new_id()
    done = [
        {"type": "RUN_STARTED", "threadId": thread, "runId": run},
        {"type": "RUN_FINISHED", "threadId": thread, "runId": run},
    ]
    raw: Any = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        async with start_node(redis_url, redis_prefix) as node:
            fields = {"tenant": TENANT, "thread": thread, "run": run}
            await raw.xadd(inbox_key(redis_prefix, "run"), {**fields, "body": json.dumps(done)})
            late = {"type": "CUSTOM", "name": "late", "value": 1}
            await raw.xadd(inbox_key(redis_prefix, "run"), {**fields, "body": json.dumps(late)})
            entries = await eventually(
                lambda: raw.xrange(dead_letter_key(redis_prefix, "run")), "the dead letter"
            )
            [(_, entry)] = entries
            assert entry["reason"] == "run_ended", entry
            state = await node.backend.feeds.state(run_feed(TENANT, thread, run))
            assert state is not None and state.head == 2
            assert metric(node, "gateway_publish_rejections_total", code="run_ended", path="inbox")
    finally:
        await raw.aclose()
