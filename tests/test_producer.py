"""The Python producer API (D4): validate in-process, append straight to Redis.

Integration tests on real Redis: a :class:`Producer` and a real node share the Redis
and the key prefix; a follower reads the node's SSE route with a real client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from gateway.app import Gateway
from gateway.cursor import Cursor
from gateway.errors import IdempotencyKeyReused, InvalidRequest
from gateway.feed import FeedState, team_feed
from gateway.producer import Producer
from tests.support import events as ev
from tests.support.node import auth, start_node

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
async def node(redis_url: str, redis_prefix: str) -> AsyncIterator[Gateway]:
    async with start_node(redis_url, redis_prefix) as n:
        yield n


def team_item(cursor: Cursor, body: dict[str, Any]) -> str:
    value = {
        "kind": "event",
        "cursor": {"epoch": cursor.epoch, "offset": cursor.offset},
        "source": body["source"],
        "event": body["event"],
    }
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


async def state(node: Gateway, team: str, tenant: str = TENANT) -> FeedState | None:
    return await node.backend.feeds.state(team_feed(tenant, team))


async def test_publishes_one_and_a_batch_to_sse_followers(
    node: Gateway, producer: Producer
) -> None:
    team = ev.team_id()
    one = ev.item(ev.message("one"), ev.member_source(TENANT, team))
    batch = [ev.item() for _ in range(3)]
    live = ev.item(ev.message("live"))

    first = await producer.publish_team(TENANT, team, one["source"], one["event"])
    assert first.offset == 1
    cursors = await producer.publish_team_batch(TENANT, team, batch)
    assert cursors == [Cursor(first.epoch, n) for n in (2, 3, 4)]

    received: list[ServerSentEvent] = []
    later: Cursor | None = None
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        with anyio.fail_after(10):
            async with aconnect_sse(
                client, "GET", f"/v1/teams/{team}/events", headers=auth(TENANT)
            ) as source:
                assert source.response.status_code == 200
                async for sse in source.aiter_sse():
                    received.append(sse)
                    if len(received) == 4:
                        # The node's live reader picks up an append made by another process.
                        later = await producer.publish_team(
                            TENANT, team, live["source"], live["event"]
                        )
                    if len(received) == 5:
                        break
    assert later == Cursor(first.epoch, 5)
    expected = [first, *cursors, later]
    assert [s.id for s in received] == [str(c) for c in expected]
    assert [s.data for s in received] == [
        team_item(c, b) for c, b in zip(expected, [one, *batch, live], strict=True)
    ]


async def test_retry_returns_the_first_cursor(node: Gateway, producer: Producer) -> None:
    team = ev.team_id()
    body = ev.item()
    first = await producer.publish_team(TENANT, team, body["source"], body["event"])
    again = await producer.publish_team(TENANT, team, body["source"], body["event"])
    assert again == first
    new = ev.item()
    mixed = await producer.publish_team_batch(TENANT, team, [body, new])
    assert mixed == [first, Cursor(first.epoch, 2)]
    s = await state(node, team)
    assert s is not None and s.head == 2


def _invalid(team: str) -> list[tuple[str, str, list[dict[str, Any]], str]]:
    """(case, team in the call, batch, text the error message must contain)."""
    return [
        ("unknown envelope field", team, [ev.item({**ev.message(), "bogus": 1})], "bogus"),
        ("wrong type", team, [ev.item({**ev.message(), "seq": "one"})], "event.seq"),
        ("unknown event type", team, [ev.item(ev.event("no_such_type", {}))], "event.type"),
        (
            "source of another tenant",
            team,
            [ev.item(source=ev.member_source("globex", team))],
            "source.member.tenant",
        ),
        (
            "source of another team",
            team,
            [ev.item(source=ev.member_source(TENANT, ev.team_id()))],
            "source.member.team",
        ),
        ("team not a lowercase UUID", team.upper(), [ev.item()], "team"),
        ("empty batch", team, [], "empty"),
        (
            "one bad item in a batch",
            team,
            [ev.item(), ev.item({**ev.message(), "seq": "one"}), ev.item()],
            "item 1",
        ),
    ]


async def test_invalid_input_raises_and_appends_nothing(node: Gateway, producer: Producer) -> None:
    team = ev.team_id()
    for case, where, batch, named in _invalid(team):
        with pytest.raises(InvalidRequest) as info:
            await producer.publish_team_batch(TENANT, where, batch)
        assert named in info.value.message, (case, info.value.message)
        assert str(info.value.code) == "invalid_request"
    with pytest.raises(InvalidRequest):
        bad = ev.item(ev.message())
        bad["event"]["data"]["text"] = 5
        await producer.publish_team(TENANT, team, bad["source"], bad["event"])
    assert await state(node, team) is None
    assert await state(node, team.upper()) is None
    assert await state(node, team, tenant="globex") is None
    # The producer is still usable afterwards.
    ok = ev.item()
    cursor = await producer.publish_team(TENANT, team, ok["source"], ok["event"])
    assert cursor.offset == 1


async def test_reused_event_id_with_a_different_body(node: Gateway, producer: Producer) -> None:
    team = ev.team_id()
    body = ev.item()
    await producer.publish_team(TENANT, team, body["source"], body["event"])
    changed = json.loads(json.dumps(body))
    changed["event"]["data"]["text"] = "something else"
    with pytest.raises(IdempotencyKeyReused):
        await producer.publish_team_batch(TENANT, team, [ev.item(), changed])
    s = await state(node, team)
    assert s is not None and s.head == 1


async def test_publish_run_reaches_ag_ui_followers_and_validates(
    producer: Producer, node: Gateway
) -> None:
    from tests.agui.runs import NESTED, RUN, THREAD

    cursors = await producer.publish_run(TENANT, THREAD, RUN, NESTED[:1])
    cursors += await producer.publish_run(TENANT, THREAD, RUN, NESTED[1:], idempotency_key="k")
    assert (
        await producer.publish_run(TENANT, THREAD, RUN, NESTED[1:], idempotency_key="k")
        == (cursors[1:])
    )
    with pytest.raises(InvalidRequest, match=r"^\[0\]\.toolCallName"):
        await producer.publish_run(
            TENANT, THREAD, RUN, [{"type": "TOOL_CALL_START", "toolCallId": "x"}]
        )
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        got: list[ServerSentEvent] = []
        with anyio.fail_after(10):
            async with aconnect_sse(
                client, "GET", f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui", headers=auth()
            ) as source:
                async for sse in source.aiter_sse():
                    got.append(sse)
    assert [json.loads(s.data) for s in got] == NESTED
    assert [s.id for s in got] == [str(c) for c in cursors]


async def test_publish_team_many_appends_each_team_in_one_call(
    node: Gateway, producer: Producer
) -> None:
    teams = [ev.team_id() for _ in range(3)]
    batches = {team: [ev.item(), ev.item()] for team in teams}
    # The third team already holds the second item's event_id with another body:
    # its append fails alone, the others land.
    reused = batches[teams[2]][1]
    other = json.loads(json.dumps(reused))
    other["event"]["data"]["text"] = "another body"
    await producer.publish_team_batch(TENANT, teams[2], [other])

    results = await producer.publish_team_many(TENANT, batches)

    assert list(results) == teams
    for team in teams[:2]:
        s = await state(node, team)
        assert s is not None
        assert results[team] == [Cursor(s.epoch, 1), Cursor(s.epoch, 2)]
    assert isinstance(results[teams[2]], IdempotencyKeyReused)
    s = await state(node, teams[2])
    assert s is not None and s.head == 1
    # A retry of the whole call returns the same cursors (idempotent per event_id).
    again = await producer.publish_team_many(TENANT, {t: batches[t] for t in teams[:2]})
    assert again == {t: results[t] for t in teams[:2]}
    assert await producer.publish_team_many(TENANT, {}) == {}


async def test_publish_team_many_validates_everything_before_appending(
    node: Gateway, producer: Producer
) -> None:
    good, bad = ev.team_id(), ev.team_id()
    broken = ev.item(ev.message())
    broken["event"]["data"]["text"] = 5
    with pytest.raises(InvalidRequest, match=f"^team {bad}: item 1: event.data.text"):
        await producer.publish_team_many(TENANT, {good: [ev.item()], bad: [ev.item(), broken]})
    assert await state(node, good) is None
    assert await state(node, bad) is None


async def test_publish_team_many_reloads_a_flushed_script(
    node: Gateway, producer: Producer, redis_url: str
) -> None:
    # A Redis that lost its scripts (a restart, SCRIPT FLUSH) ran none of the calls of
    # the pipeline: the producer loads the script and sends them again, once each.
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.script_flush()
    finally:
        await client.aclose()
    teams = [ev.team_id() for _ in range(2)]
    results = await producer.publish_team_many(TENANT, {t: [ev.item()] for t in teams})
    for team in teams:
        s = await state(node, team)
        assert s is not None and s.head == 1
        assert results[team] == [Cursor(s.epoch, 1)]
