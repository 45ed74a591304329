"""SparkTide and A2UI through the Redis inboxes and the Python producer (D4.6, D4.7).

Integration tests on real Redis with real nodes: ``redis-cli`` is a producer written in
another language, :class:`~gateway.producer.Producer` the Python one; both apply the
HTTP routes' rules, and what they publish reads like any run feed.  Asynchronous effects
are awaited by polling with a deadline.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
import redis.asyncio as aioredis
from httpx_sse import aconnect_sse

from gateway.agui.fold import RunFold
from gateway.app import Gateway
from gateway.dialects import a2ui
from gateway.dialects.sparktide import RunState
from gateway.dialects.sparktide_agui import plan
from gateway.errors import IdempotencyKeyReused, InvalidRequest
from gateway.feed import run_feed
from gateway.producer import Producer
from gateway.store.redis.inbox import dead_letter_key, inbox_key
from tests.dialects.a2ui_runs import SURFACES, create
from tests.dialects.sparktide_runs import CONVERSATION, EVERYTHING, RUN
from tests.store.test_inbox import REDIS_CLI, eventually
from tests.support.node import auth, start_node

pytestmark = pytest.mark.anyio

TENANT = "acme"
Event = dict[str, Any]


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[Any]:
    client: Any = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def producer(redis_url: str, redis_prefix: str) -> AsyncIterator[Producer]:
    p = Producer.connect(redis_url, prefix=redis_prefix)
    try:
        yield p
    finally:
        await p.aclose()


def derived(events: list[Event]) -> list[Event]:
    _, planned = plan(RunState(), events, {})
    return [e for p in planned for e in p.derived]


async def read_run(node: Gateway, thread: str, run: str, n: int) -> list[Event]:
    """The run's first ``n`` AG-UI events."""
    got: list[Event] = []
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        with anyio.fail_after(10):
            path = f"/v1/threads/{thread}/runs/{run}/ui/ag-ui"
            async with aconnect_sse(client, "GET", path, headers=auth()) as source:
                async for sse in source.aiter_sse():
                    got.append(json.loads(sse.data))
                    if len(got) == n:
                        break
    return got


async def head_at_least(node: Gateway, thread: str, run: str, head: int) -> int:
    feed = run_feed(TENANT, thread, run)

    async def check() -> int:
        state = await node.backend.feeds.state(feed)
        return state.head if state is not None and state.head >= head else 0

    return await eventually(check, f"run {thread}/{run} to reach offset {head}")


async def cli_xadd(redis_url: str, stream: str, fields: dict[str, str]) -> str:
    result = await anyio.run_process(
        [
            REDIS_CLI,
            "--no-auth-warning",
            "-u",
            redis_url,
            "XADD",
            stream,
            "*",
            *[part for pair in fields.items() for part in pair],
        ]
    )
    assert result.returncode == 0
    return result.stdout.decode().strip()


# --------------------------------------------------------------------------- the inboxes


async def test_sparktide_inbox(redis_url: str, redis_prefix: str, raw: Any) -> None:
    stream = inbox_key(redis_prefix, "sparktide")
    first = {"tenant": TENANT, "body": json.dumps(EVERYTHING[:10])}
    async with start_node(redis_url, redis_prefix) as node:
        await cli_xadd(redis_url, stream, first)
        # Redelivered (a producer's retry): answered as a retry, nothing appended twice.
        await raw.xadd(stream, first)
        gap = await raw.xadd(stream, {"tenant": TENANT, "body": json.dumps(EVERYTHING[11])})
        unknown = await raw.xadd(stream, {"tenant": TENANT, "team": "x", "body": "{}"})
        await raw.xadd(stream, {"tenant": TENANT, "body": json.dumps(EVERYTHING[10:])})
        expected = derived(EVERYTHING)
        await head_at_least(node, CONVERSATION, RUN, len(expected))
        dead = await eventually(
            lambda: raw.xrange(dead_letter_key(redis_prefix, "sparktide")), "two dead letters"
        )
        assert [(f["id"], f["reason"]) for _, f in dead[:2]] == [
            (gap, "invalid_request"),
            (unknown, "invalid_request"),
        ]
        assert "leaves a gap" in dead[0][1]["message"]
        assert await read_run(node, CONVERSATION, RUN, len(expected)) == expected
        state = await node.backend.feeds.state(run_feed(TENANT, CONVERSATION, RUN))
        assert state is not None and state.head == len(expected)


async def test_a2ui_inbox(redis_url: str, redis_prefix: str, raw: Any) -> None:
    thread, run = "inbox-thread", "inbox-run"
    stream = inbox_key(redis_prefix, "a2ui")
    started = {"type": "RUN_STARTED", "threadId": thread, "runId": run}
    async with start_node(redis_url, redis_prefix) as node:
        async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
            r = await client.post(
                f"/v1/threads/{thread}/runs/{run}/ui/ag-ui", json=started, headers=auth()
            )
            assert r.status_code == 200, r.text
        fields = {"tenant": TENANT, "thread": thread, "run": run}
        body = {**fields, "body": json.dumps(SURFACES[:6]), "idempotency_key": "batch-1"}
        await cli_xadd(redis_url, stream, body)
        await raw.xadd(stream, body)  # the retry: nothing appended twice
        refused = await raw.xadd(stream, {**fields, "body": json.dumps(create("profile"))})
        await raw.xadd(stream, {**fields, "body": json.dumps(SURFACES[6:])})
        await head_at_least(node, thread, run, 1 + len(SURFACES))
        dead = await eventually(
            lambda: raw.xrange(dead_letter_key(redis_prefix, "a2ui")), "the dead letter"
        )
        assert [(f["id"], f["reason"]) for _, f in dead] == [(refused, "invalid_request")]
        assert "already exists" in dead[0][1]["message"]
        got = await read_run(node, thread, run, 1 + len(SURFACES))
        assert got == [started, *a2ui.derive(SURFACES, RunFold())]


# --------------------------------------------------------------------------- the producer


async def test_the_producer_publishes_sparktide_and_a2ui(
    redis_url: str, redis_prefix: str, producer: Producer
) -> None:
    async with start_node(redis_url, redis_prefix) as node:
        cursors = await producer.publish_sparktide(TENANT, EVERYTHING[:12])
        assert len(cursors) == 12
        assert await producer.publish_sparktide(TENANT, EVERYTHING[11]) == cursors[-1:]
        with pytest.raises(IdempotencyKeyReused):
            await producer.publish_sparktide(TENANT, {**EVERYTHING[11], "traceId": "other"})
        with pytest.raises(InvalidRequest, match="leaves a gap"):
            await producer.publish_sparktide(TENANT, EVERYTHING[13])
        # The node continues the run the producer started (it rebuilds the state).
        async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
            r = await client.post("/v1/sparktide/events", json=EVERYTHING[12:20], headers=auth())
            assert r.status_code == 200, r.text
        # And the producer continues after the node.
        more = await producer.publish_sparktide(TENANT, EVERYTHING[20:])
        expected = derived(EVERYTHING)
        assert more[-1].offset == len(expected)
        assert await read_run(node, CONVERSATION, RUN, len(expected)) == expected

        thread, run = "producer-thread", "producer-run"
        with pytest.raises(InvalidRequest, match="has not started"):
            await producer.publish_a2ui(TENANT, thread, run, SURFACES[0])
        started = {"type": "RUN_STARTED", "threadId": thread, "runId": run}
        await producer.publish_run(TENANT, thread, run, started)
        first = await producer.publish_a2ui(TENANT, thread, run, SURFACES[:4], idempotency_key="k")
        assert (
            await producer.publish_a2ui(TENANT, thread, run, SURFACES[:4], idempotency_key="k")
            == first
        )
        rest = await producer.publish_a2ui(TENANT, thread, run, SURFACES[4:])
        assert [c.offset for c in first + rest] == list(range(2, 2 + len(SURFACES)))
        got = await read_run(node, thread, run, 1 + len(SURFACES))
        assert got == [started, *a2ui.derive(SURFACES, RunFold())]
