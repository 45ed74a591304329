"""The Redis inbox (D4): producers in any language XADD; gateway nodes validate and append.

Integration tests on real Redis (``redis_url``, ``redis_prefix``) with real nodes
(``start_node``) and real clients: the ``redis-cli`` binary as a producer written in
another language, redis-py for raw stream commands, httpx + httpx_sse for followers.
Asynchronous effects are awaited by polling with a deadline, never by sleeping.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx
import pytest
import redis.asyncio as aioredis
from httpx_sse import ServerSentEvent, aconnect_sse

from gateway.app import Gateway
from gateway.feed import FeedState, team_feed
from gateway.store.redis.inbox import GROUP, dead_letter_key, inbox_key
from tests.support import events as ev
from tests.support.node import auth, metric, start_node

pytestmark = pytest.mark.anyio

REDIS_CLI = "/usr/bin/redis-cli"
TENANT = "acme"
DEADLINE = 10.0

T = TypeVar("T")


# --------------------------------------------------------------------------- helpers


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[Any]:
    """A plain redis-py client (decoded replies) for the test's own stream commands."""
    client: Any = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def eventually(check: Callable[[], Awaitable[T]], what: str, within: float = DEADLINE) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``within`` seconds."""
    try:
        with anyio.fail_after(within):
            while True:
                result = await check()
                if result:
                    return result
                await anyio.sleep(0.02)
    except TimeoutError:
        pytest.fail(f"timed out after {within}s waiting for {what}")


async def cli_xadd(redis_url: str, prefix: str, *fields: str) -> str:
    """XADD through the real redis-cli binary (a producer in another language)."""
    result = await anyio.run_process(
        [
            REDIS_CLI,
            "--no-auth-warning",
            "-u",
            redis_url,
            "XADD",
            inbox_key(prefix, "team"),
            "*",
            *fields,
        ],
        check=False,
    )
    out = result.stdout.decode().strip()
    assert result.returncode == 0, result.stderr.decode() + out
    assert out.count("-") == 1 and out.replace("-", "").isdigit(), out  # a stream id
    return out


async def xadd(raw: Any, prefix: str, fields: dict[str, str]) -> str:
    msg_id: str = await raw.xadd(inbox_key(prefix, "team"), fields)
    return msg_id


def message(team: str, body: Any, tenant: str = TENANT) -> dict[str, str]:
    return {"tenant": tenant, "team": team, "body": json.dumps(body)}


async def feed_state(node: Gateway, team: str, tenant: str = TENANT) -> FeedState | None:
    return await node.backend.feeds.state(team_feed(tenant, team))


async def wait_for_head(node: Gateway, team: str, head: int) -> FeedState:
    async def check() -> FeedState | None:
        state = await feed_state(node, team)
        return state if state is not None and state.head >= head else None

    return await eventually(check, f"team {team} to reach offset {head}")


async def group_info(raw: Any, prefix: str) -> dict[str, Any]:
    [info] = [
        g for g in await raw.xinfo_groups(inbox_key(prefix, "team")) if g["name"] == GROUP.decode()
    ]
    return dict(info)


async def wait_drained(raw: Any, prefix: str, last_id: str) -> None:
    """Wait until the group has read up to ``last_id`` and nothing is pending.

    The node counts a message in its metrics and dead-letters it before it acknowledges,
    so once nothing is pending every message up to ``last_id`` is fully processed.
    """

    async def check() -> bool:
        groups = await raw.xinfo_groups(inbox_key(prefix, "team"))
        info = next((g for g in groups if g["name"] == GROUP.decode()), None)
        return info is not None and info["last-delivered-id"] == last_id and info["pending"] == 0

    await eventually(check, f"the inbox group to process and ack up to {last_id}")


async def follow(node: Gateway, team: str, n: int) -> list[ServerSentEvent]:
    """Read the first n SSE messages of a team feed from the start."""
    got: list[ServerSentEvent] = []
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        with anyio.fail_after(DEADLINE):
            async with aconnect_sse(
                client, "GET", f"/v1/teams/{team}/events", headers=auth(TENANT)
            ) as source:
                assert source.response.status_code == 200
                async for sse in source.aiter_sse():
                    got.append(sse)
                    if len(got) == n:
                        break
    return got


def team_item(epoch: int, offset: int, body: dict[str, Any]) -> str:
    """The RFC 8785 TeamItem the feed must serve for ``body`` at ``epoch:offset``."""
    value = {
        "kind": "event",
        "cursor": {"epoch": epoch, "offset": offset},
        "source": body["source"],
        "event": body["event"],
    }
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- tests


async def test_redis_cli_producer_item_is_served_as_team_item(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    team = ev.team_id()
    body = ev.item(ev.message('from redis-cli: caf\u00e9 "quoted"'), ev.member_source(TENANT, team))
    async with start_node(redis_url, redis_prefix) as node:
        msg_id = await cli_xadd(
            redis_url, redis_prefix, "tenant", TENANT, "team", team, "body", json.dumps(body)
        )
        state = await wait_for_head(node, team, 1)
        [sse] = await follow(node, team, 1)
        assert sse.id == f"{state.epoch}:1"
        assert sse.data == team_item(state.epoch, 1, body)
        await wait_drained(raw, redis_prefix, msg_id)
        assert await raw.xlen(dead_letter_key(redis_prefix, "team")) == 0
        assert (await feed_state(node, team)) == state  # appended exactly once


async def test_redis_cli_array_body_appends_all_in_order_then_live(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    team = ev.team_id()
    batch = [ev.item() for _ in range(3)]
    later = ev.item(ev.message("live"))
    async with start_node(redis_url, redis_prefix) as node:
        await cli_xadd(
            redis_url, redis_prefix, "tenant", TENANT, "team", team, "body", json.dumps(batch)
        )
        state = await wait_for_head(node, team, 3)
        assert state.head == 3  # one message, three items, all at once
        received: list[ServerSentEvent] = []
        async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
            with anyio.fail_after(DEADLINE):
                async with aconnect_sse(
                    client, "GET", f"/v1/teams/{team}/events", headers=auth(TENANT)
                ) as source:
                    async for sse in source.aiter_sse():
                        received.append(sse)
                        if len(received) == 3:
                            # A follower that has caught up gets the next message live.
                            await cli_xadd(
                                redis_url,
                                redis_prefix,
                                "tenant",
                                TENANT,
                                "team",
                                team,
                                "body",
                                json.dumps(later),
                            )
                        if len(received) == 4:
                            break
        epoch = state.epoch
        assert [s.id for s in received] == [f"{epoch}:{i}" for i in (1, 2, 3, 4)]
        assert [s.data for s in received] == [
            team_item(epoch, i + 1, b) for i, b in enumerate([*batch, later])
        ]


def _rejections(team: str, original: dict[str, Any]) -> list[tuple[str, dict[str, str], str, str]]:
    """(case, message fields, expected reason, text the dead-letter message must contain)."""
    bad_text = ev.item(
        ev.event("team_message", {"message_id": "m-1", "from": "lead", "to": "*", "text": 5})
    )
    reused = json.loads(json.dumps(original))
    reused["event"]["data"]["text"] = "a different body under the same event_id"
    return [
        (
            "bad JSON",
            {"tenant": TENANT, "team": team, "body": "{not json"},
            "invalid_request",
            "JSON",
        ),
        ("schema violation", message(team, bad_text), "invalid_request", "event.data.text"),
        (
            "source of another tenant",
            message(team, ev.item(source=ev.member_source("globex", team))),
            "invalid_request",
            "source.member.tenant",
        ),
        ("missing field", {"tenant": TENANT, "team": team}, "invalid_request", "body"),
        (
            "unknown field",
            {**message(team, ev.item()), "colour": "red"},
            "invalid_request",
            "colour",
        ),
        ("empty tenant", message(team, ev.item(), tenant=""), "invalid_request", "tenant"),
        ("team not a lowercase UUID", message(team.upper(), ev.item()), "invalid_request", "team"),
        ("team not a UUID", message("not-a-team", ev.item()), "invalid_request", "team"),
        ("reused event_id", message(team, reused), "idempotency_key_reused", "event_id"),
    ]


async def test_rejected_messages_are_dead_lettered_acked_and_append_nothing(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    team = ev.team_id()
    original = ev.item()
    cases = _rejections(team, original)
    good = ev.item(ev.message("after the rejects"))
    async with start_node(redis_url, redis_prefix) as node:
        await xadd(raw, redis_prefix, message(team, original))
        state = await wait_for_head(node, team, 1)
        ids = [await xadd(raw, redis_prefix, fields) for _, fields, _, _ in cases]
        await wait_drained(raw, redis_prefix, ids[-1])

        dead = await raw.xrange(dead_letter_key(redis_prefix, "team"))
        assert len(dead) == len(cases)
        by_id = {fields["id"]: fields for _, fields in dead}
        for msg_id, (case, fields, reason, named) in zip(ids, cases, strict=True):
            entry = by_id[msg_id]
            assert entry["reason"] == reason, (case, entry)
            assert named in entry["message"], (case, entry)
            # The original fields travel with the dead letter, for inspection and replay.
            assert {k: entry[k] for k in fields} == fields, case
        # Nothing of any rejected message was appended anywhere.
        assert await feed_state(node, team) == state
        assert await feed_state(node, team, tenant="globex") is None
        assert await feed_state(node, team.upper()) is None
        assert await feed_state(node, "not-a-team") is None
        assert (await group_info(raw, redis_prefix))["pending"] == 0

        # The node keeps going: a good message after the rejects is appended.
        last = await xadd(raw, redis_prefix, message(team, good))
        after = await wait_for_head(node, team, 2)
        assert after.epoch == state.epoch and after.head == 2
        got = await follow(node, team, 2)
        assert [s.data for s in got] == [
            team_item(state.epoch, 1, original),
            team_item(state.epoch, 2, good),
        ]
        await wait_drained(raw, redis_prefix, last)
        assert metric(node, "gateway_inbox_messages_total", outcome="appended") == 2
        assert metric(node, "gateway_inbox_messages_total", outcome="dead_lettered") == len(cases)


async def test_array_with_one_bad_item_appends_nothing(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    team = ev.team_id()
    bad = ev.item({**ev.message(), "bogus": 1})
    async with start_node(redis_url, redis_prefix) as node:
        msg_id = await xadd(raw, redis_prefix, message(team, [ev.item(), bad, ev.item()]))
        await wait_drained(raw, redis_prefix, msg_id)
        [(_, entry)] = await raw.xrange(dead_letter_key(redis_prefix, "team"))
        assert entry["reason"] == "invalid_request"
        assert entry["message"].startswith("item 1"), entry
        assert "bogus" in entry["message"]
        assert await feed_state(node, team) is None


async def test_the_same_message_twice_appends_one_item(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    team = ev.team_id()
    body = [ev.item(), ev.item()]
    async with start_node(redis_url, redis_prefix) as node:
        await xadd(raw, redis_prefix, message(team, body))
        second = await xadd(raw, redis_prefix, message(team, body))
        await wait_drained(raw, redis_prefix, second)
        state = await feed_state(node, team)
        assert state is not None and state.head == 2
        assert await raw.xlen(dead_letter_key(redis_prefix, "team")) == 0
        # Both deliveries were accepted: the second repeated the first one's cursors.
        assert metric(node, "gateway_inbox_messages_total", outcome="appended") == 2
        assert metric(node, "gateway_inbox_messages_total", outcome="dead_lettered") == 0
        got = await follow(node, team, 2)
        expected = [team_item(state.epoch, i + 1, b) for i, b in enumerate(body)]
        assert [s.data for s in got] == expected


async def test_pending_messages_of_a_dead_consumer_are_claimed(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    team = ev.team_id()
    body = ev.item()
    stream = inbox_key(redis_prefix, "team")
    await raw.xgroup_create(stream, GROUP.decode(), id="0", mkstream=True)
    msg_id = await xadd(raw, redis_prefix, message(team, body))
    # A node read the message and died before acknowledging it.
    reply = await raw.xreadgroup(GROUP.decode(), "dead-node", {stream: ">"}, count=10)
    assert [m for m, _ in reply[0][1]] == [msg_id]
    assert (await raw.xpending(stream, GROUP.decode()))["pending"] == 1

    async with start_node(redis_url, redis_prefix, inbox_claim_ms=100) as node:
        state = await wait_for_head(node, team, 1)
        [sse] = await follow(node, team, 1)
        assert sse.data == team_item(state.epoch, 1, body)
        await wait_drained(raw, redis_prefix, msg_id)
        consumers = {c["name"]: c for c in await raw.xinfo_consumers(stream, GROUP.decode())}
        assert consumers["dead-node"]["pending"] == 0
        assert metric(node, "gateway_inbox_messages_total", outcome="appended") == 1


async def test_a_restarted_node_processes_its_own_pending_messages_first(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    team = ev.team_id()
    body = ev.item()
    stream = inbox_key(redis_prefix, "team")
    await raw.xgroup_create(stream, GROUP.decode(), id="0", mkstream=True)
    msg_id = await xadd(raw, redis_prefix, message(team, body))
    await raw.xreadgroup(GROUP.decode(), "node-a", {stream: ">"}, count=10)
    # Same consumer name, and a claim time no test would wait for: only the node's own
    # pending-first read can pick the message up.
    async with start_node(
        redis_url, redis_prefix, node_id="node-a", inbox_claim_ms=3_600_000
    ) as node:
        state = await wait_for_head(node, team, 1)
        assert state.head == 1
        await wait_drained(raw, redis_prefix, msg_id)


async def test_an_inbox_whose_group_was_lost_is_read_again(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    """The group is made once; when it is lost (a Redis restarted empty loses the
    stream and its group) the node makes it again and reads on."""
    team = ev.team_id()
    first, second = ev.item(), ev.item()
    stream = inbox_key(redis_prefix, "team")
    async with start_node(redis_url, redis_prefix) as node:
        await wait_drained(raw, redis_prefix, await xadd(raw, redis_prefix, message(team, first)))
        await raw.delete(stream)  # the stream and its consumer group are gone
        await xadd(raw, redis_prefix, message(team, second))  # a stream with no group
        state = await wait_for_head(node, team, 2)
        assert state.head == 2
        got = await follow(node, team, 2)
        assert [s.data for s in got] == [
            team_item(state.epoch, 1, first),
            team_item(state.epoch, 2, second),
        ]


async def test_metrics_count_outcomes(redis_url: str, redis_prefix: str, raw: Any) -> None:
    team = ev.team_id()
    async with start_node(redis_url, redis_prefix) as node:
        assert metric(node, "gateway_inbox_messages_total", outcome="appended") == 0
        for body in (ev.item(), [ev.item(), ev.item()], ev.item()):
            await xadd(raw, redis_prefix, message(team, body))
        await xadd(raw, redis_prefix, {"tenant": TENANT, "team": team, "body": "[]"})
        last = await xadd(raw, redis_prefix, {"tenant": TENANT, "team": team})
        await wait_drained(raw, redis_prefix, last)
        # Messages, not items: the array of two counts once.
        assert metric(node, "gateway_inbox_messages_total", outcome="appended") == 3
        assert metric(node, "gateway_inbox_messages_total", outcome="dead_lettered") == 2
        assert metric(node, "gateway_published_items_total", kind="team", path="inbox") == 4
        state = await feed_state(node, team)
        assert state is not None and state.head == 4


async def test_oversized_body_is_dead_lettered_as_too_large(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    team = ev.team_id()
    body = ev.item(ev.message("x" * 70_000))
    async with start_node(redis_url, redis_prefix, max_body_bytes=64 * 1024) as node:
        msg_id = await xadd(raw, redis_prefix, message(team, body))
        await wait_drained(raw, redis_prefix, msg_id)
        [(_, entry)] = await raw.xrange(dead_letter_key(redis_prefix, "team"))
        assert await feed_state(node, team) is None
        assert "65536" in entry["message"]
        assert entry["reason"] == "too_large"


async def test_deeply_nested_body_is_dead_lettered_and_the_node_keeps_going(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    team = ev.team_id()
    depth = 100_000
    poison = {"tenant": TENANT, "team": team, "body": "[" * depth + "]" * depth}
    good = ev.item()
    async with start_node(redis_url, redis_prefix) as node:
        await xadd(raw, redis_prefix, poison)
        last = await xadd(raw, redis_prefix, message(team, good))
        await wait_drained(raw, redis_prefix, last)
        [(_, entry)] = await raw.xrange(dead_letter_key(redis_prefix, "team"))
        assert entry["reason"] == "invalid_request"
        assert "body" in entry["message"]
        state = await feed_state(node, team)
        assert state is not None and state.head == 1


# --------------------------------------------------------------------------- run feeds


async def test_run_inbox_appends_ag_ui_events_and_dead_letters_bad_ones(
    redis_url: str, redis_prefix: str, raw: Any
) -> None:
    from gateway.feed import run_feed
    from tests.agui.runs import NESTED, RUN, THREAD

    stream = inbox_key(redis_prefix, "run")
    first = {"tenant": TENANT, "thread": THREAD, "run": RUN, "body": json.dumps(NESTED[:5])}
    async with start_node(redis_url, redis_prefix) as node:
        # A producer in another language: the redis-cli binary.
        result = await anyio.run_process(
            [
                REDIS_CLI,
                "--no-auth-warning",
                "-u",
                redis_url,
                "XADD",
                stream,
                "*",
                *[part for pair in first.items() for part in pair],
                "idempotency_key",
                "batch-1",
            ],
        )
        assert result.returncode == 0
        # The same message again (a producer's retry) appends nothing new.
        await raw.xadd(stream, {**first, "idempotency_key": "batch-1"})
        bad = await raw.xadd(
            stream,
            {
                "tenant": TENANT,
                "thread": THREAD,
                "run": RUN,
                "body": json.dumps({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m"}),
            },
        )
        rest = await raw.xadd(
            stream, {"tenant": TENANT, "thread": THREAD, "run": RUN, "body": json.dumps(NESTED[5:])}
        )
        feed = run_feed(TENANT, THREAD, RUN)

        async def complete() -> bool:
            state = await node.backend.feeds.state(feed)
            return state is not None and state.head == len(NESTED)

        await eventually(complete, "the run's events")
        dead = await eventually(
            lambda: raw.xrange(dead_letter_key(redis_prefix, "run")), "the dead letter"
        )
        assert [(f["id"], f["reason"]) for _, f in dead] == [(bad, "invalid_request")]
        assert "delta" in dead[0][1]["message"]
        async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
            got: list[Any] = []
            with anyio.fail_after(10):
                async with aconnect_sse(
                    client, "GET", f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui", headers=auth()
                ) as source:
                    async for sse in source.aiter_sse():
                        got.append(json.loads(sse.data))
        assert got == NESTED
        assert rest
