"""``POST /v1/sparktide/events`` over real HTTP (D4.8, docs/dialects/sparktide.md).

SparkTide events become AG-UI events on the run feed ``run/<conversationId>/<runId>``,
which then reads like any other run.  Every test runs on the embedded log and on Redis
(``log_kind``).  Where the answer depends on the per-run state a node keeps, the test
runs once with it and once after the node forgot it (what a node that did not publish
the run's earlier events sees), which must answer the same.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from gateway.app import Gateway
from gateway.dialects.sparktide import RunState
from gateway.dialects.sparktide_agui import plan
from gateway.feed import run_feed
from gateway.store.memory import memory_backend
from tests.dialects.sparktide_runs import (
    CONVERSATION,
    EVERYTHING,
    FAILED,
    MESSAGE,
    RUN,
    VALID,
    event,
)
from tests.support.node import auth, metric, start_node

pytestmark = pytest.mark.anyio

PUBLISH = "/v1/sparktide/events"
FEED = f"/v1/threads/{CONVERSATION}/runs/{RUN}/ui/ag-ui"
Event = dict[str, Any]


@pytest.fixture
async def node(node_redis: tuple[str | None, str]) -> AsyncIterator[Gateway]:
    url, prefix = node_redis
    async with start_node(url, prefix, keepalive_seconds=0.2) as n:
        yield n


def derived(events: list[Event]) -> list[list[Event]]:
    """The AG-UI events each SparkTide event derives, from a new run (the pure plan)."""
    _, planned = plan(RunState(), events, {})
    return [p.derived for p in planned]


def error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert list(body) == ["error"] and sorted(body["error"]) == ["code", "message"]
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    return message


async def publish(client: httpx.AsyncClient, body: Any, **headers: str) -> list[str]:
    r = await client.post(PUBLISH, json=body, headers={**auth(), **headers})
    assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    return cursors


async def head(node: Gateway, thread: str = CONVERSATION, run: str = RUN) -> int:
    state = await node.backend.feeds.state(run_feed("acme", thread, run))
    return 0 if state is None else state.head


def forget(node: Gateway) -> None:
    """Drop the SparkTide states the node keeps: it rebuilds them from the feed."""
    node.publisher.dialects._states.clear()


async def read_run(client: httpx.AsyncClient, path: str = FEED) -> list[ServerSentEvent]:
    """The run from its start until the stream ends by itself (after its terminal event)."""
    got: list[ServerSentEvent] = []
    with anyio.fail_after(10):
        async with aconnect_sse(client, "GET", path, headers=auth()) as source:
            assert source.response.status_code == 200
            async for sse in source.aiter_sse():
                got.append(sse)
                assert len(got) <= 1000
    return got


async def read_first(client: httpx.AsyncClient, n: int) -> list[ServerSentEvent]:
    """The run's first ``n`` events (the run goes on)."""
    got: list[ServerSentEvent] = []
    with anyio.fail_after(10):
        async with aconnect_sse(client, "GET", FEED, headers=auth()) as source:
            async for sse in source.aiter_sse():
                got.append(sse)
                if len(got) == n:
                    break
    return got


# --------------------------------------------------------------------------- the feed


@pytest.mark.parametrize("forgetting", [False, True], ids=["kept", "rebuilt"])
async def test_events_become_the_run_feed_with_one_cursor_per_event(
    node: Gateway, client: httpx.AsyncClient, forgetting: bool
) -> None:
    cursors: list[str] = []
    for body in (EVERYTHING[0], EVERYTHING[1:10], EVERYTHING[10:20], EVERYTHING[20:]):
        if forgetting:
            forget(node)
        cursors += await publish(client, body)
    got = await read_run(client)
    per_event = derived(EVERYTHING)
    # The feed holds exactly the derived events, in order; the stream ended after
    # RUN_FINISHED, which the last event derived.
    assert [json.loads(s.data) for s in got] == [e for d in per_event for e in d]
    assert json.loads(got[-1].data)["type"] == "RUN_FINISHED"
    # Each event's cursor is that of the last AG-UI event derived from it.
    ends = [sum(len(d) for d in per_event[: i + 1]) for i in range(len(per_event))]
    assert cursors == [got[end - 1].id for end in ends]
    assert len(set(cursors)) == len(EVERYTHING)
    assert metric(node, "gateway_published_items_total", kind="run", path="http") == len(got)


async def test_a_late_joiner_of_a_sparktide_run_gets_the_prelude(
    client: httpx.AsyncClient,
) -> None:
    cursors = await publish(client, EVERYTHING[:12])
    with anyio.fail_after(10):
        async with aconnect_sse(
            client, "GET", FEED, headers={**auth(), "Last-Event-ID": cursors[-1]}
        ) as source:
            first: list[Event] = []
            async for sse in source.aiter_sse():
                first.append(json.loads(sse.data))
                if len(first) == 3:
                    break
    assert [e["type"] for e in first] == ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]
    assert first[0]["rawEvent"] == EVERYTHING[0]
    text = next(m for m in first[2]["messages"] if m["id"] == MESSAGE)
    assert text["content"] == "Hello"


@pytest.mark.parametrize("forgetting", [False, True], ids=["kept", "rebuilt"])
async def test_a_retried_event_answers_its_first_cursor(
    node: Gateway, client: httpx.AsyncClient, forgetting: bool
) -> None:
    first = await publish(client, EVERYTHING[:5])
    held = await head(node)
    if forgetting:
        forget(node)
    assert await publish(client, EVERYTHING[:5]) == first
    assert await publish(client, EVERYTHING[2]) == [first[2]]
    assert await head(node) == held
    # Retries and new events in one body; an event repeated in the body is a retry of
    # its first occurrence.
    if forgetting:
        forget(node)
    body = [*EVERYTHING[3:5], EVERYTHING[5], EVERYTHING[5], EVERYTHING[6]]
    more = await publish(client, body)
    assert more[:2] == first[3:5]
    assert more[2] == more[3] != more[4]
    per_event = derived(EVERYTHING[:7])
    assert await head(node) == held + len(per_event[5]) + len(per_event[6])
    if forgetting:
        forget(node)
    assert await publish(client, EVERYTHING[:7]) == [*first, more[2], more[4]]
    assert await head(node) == held + len(per_event[5]) + len(per_event[6])


@pytest.mark.parametrize("forgetting", [False, True], ids=["kept", "rebuilt"])
async def test_the_sequence_rule(
    node: Gateway, client: httpx.AsyncClient, forgetting: bool
) -> None:
    await publish(client, EVERYTHING[:4])
    held = await head(node)
    cases: list[tuple[Any, int, str, str]] = [
        (
            {**EVERYTHING[3], "data": {"text": "another text"}},
            409,
            "idempotency_key_reused",
            "event.sequence: message 'msg-1' already has a different event at sequence 4",
        ),
        (
            EVERYTHING[5],
            400,
            "invalid_request",
            "event.sequence: 6 leaves a gap: the message's next sequence is 5",
        ),
        (
            [EVERYTHING[4], EVERYTHING[6]],
            400,
            "invalid_request",
            "[1].sequence: 7 leaves a gap: the message's next sequence is 6",
        ),
        (
            event("text.delta", 5, messageId="msg-2"),
            400,
            "invalid_request",
            "event.messageId: the run already carries the message 'msg-1'; a run carries "
            "one message",
        ),
    ]
    for body, status, code, message in cases:
        if forgetting:
            forget(node)
        r = await client.post(PUBLISH, json=body, headers=auth())
        assert error(r, status, code) == message
        assert await head(node) == held, "nothing of a refused body is appended"
    assert (
        metric(node, "gateway_publish_rejections_total", code="invalid_request", path="http") == 3
    )


@pytest.mark.parametrize("forgetting", [False, True], ids=["kept", "rebuilt"])
async def test_nothing_more_after_the_run_ended(
    node: Gateway, client: httpx.AsyncClient, forgetting: bool
) -> None:
    await publish(client, FAILED)
    if forgetting:
        forget(node)
    r = await client.post(PUBLISH, json=event("text.delta", len(FAILED) + 1), headers=auth())
    assert "the run has ended" in error(r, 409, "run_ended")
    # The retry of the last event is still answered.
    assert len(await publish(client, FAILED[-1])) == 1


async def test_a_run_not_started_by_sparktide_is_refused(client: httpx.AsyncClient) -> None:
    r = await client.post(
        f"/v1/threads/{CONVERSATION}/runs/{RUN}/ui/ag-ui",
        json={"type": "RUN_STARTED", "threadId": CONVERSATION, "runId": RUN},
        headers=auth(),
    )
    assert r.status_code == 200, r.text
    r = await client.post(PUBLISH, json=EVERYTHING[0], headers=auth())
    assert error(r, 400, "invalid_request") == (
        "event.runId: the run feed already holds events that SparkTide did not start (its "
        "RUN_STARTED carries no SparkTide rawEvent)"
    )


# --------------------------------------------------------------------------- the body


def _with(**envelope: Any) -> Event:
    return {**EVERYTHING[0], **envelope}


BAD_BODIES: list[tuple[str, Any, str]] = [
    ("empty array", [], "body: the array is empty; send at least one event"),
    ("not an object", 3, "event: a SparkTide event is an object, not integer"),
    (
        "unknown envelope field",
        _with(timestamp=1),
        "event.timestamp: unknown field (the envelope has exactly protocolVersion, event, "
        "runId, traceId, conversationId, messageId, sequence, data)",
    ),
    (
        "missing envelope field",
        {k: v for k, v in EVERYTHING[0].items() if k != "traceId"},
        "event.traceId: required",
    ),
    (
        "unknown event name",
        _with(event="message.deleted"),
        "event.event: 'message.deleted' is not one of the 19 SparkTide event names",
    ),
    (
        "data lacks a required field",
        [EVERYTHING[0], {**EVERYTHING[1], "data": {"depth": 0}}],
        "[1].data: ",
    ),
    ("sequence below 1", _with(sequence=0), "event.sequence: "),
    (
        "a conversationId that cannot name a thread",
        _with(conversationId="a b"),
        "event.conversationId: names the run feed's thread, so it must match "
        "^[A-Za-z0-9_.-]{1,128}$",
    ),
    (
        "two runs in one body",
        [EVERYTHING[0], {**EVERYTHING[1], "runId": "run-2"}],
        "[1].runId: differs from item 0's; one request publishes to one run",
    ),
    (
        "more than 1000 events",
        [EVERYTHING[0]] * 1001,
        "body: at most 1000 events per request",
    ),
]


@pytest.mark.parametrize(
    ("body", "message"), [c[1:] for c in BAD_BODIES], ids=[c[0] for c in BAD_BODIES]
)
async def test_a_bad_body_is_400_naming_the_item_and_field(
    node: Gateway, client: httpx.AsyncClient, body: Any, message: str
) -> None:
    r = await client.post(PUBLISH, json=body, headers=auth())
    assert error(r, 400, "invalid_request").startswith(message)
    assert await head(node) == 0


async def test_malformed_json_is_400(client: httpx.AsyncClient) -> None:
    r = await client.post(
        PUBLISH, content=b"{", headers={**auth(), "Content-Type": "application/json"}
    )
    assert error(r, 400, "invalid_request").startswith("body: malformed JSON")


async def test_every_valid_event_name_opens_a_run(client: httpx.AsyncClient) -> None:
    # Each event name is accepted as a run's first event (one run per name).
    for i, name in enumerate(VALID):
        body = event(name, 1, conversationId=f"conv-{i}")
        [cursor] = await publish(client, body)
        assert cursor.endswith(f":{sum(len(d) for d in derived([body]))}")


# --------------------------------------------------------------------------- the checks of D4.5


async def test_publishing_needs_the_publish_scope_and_the_thread(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post(PUBLISH, json=EVERYTHING[0], headers=auth(scopes=("subscribe",)))
    error(r, 403, "forbidden")
    r = await client.post(PUBLISH, json=EVERYTHING[0])
    error(r, 401, "unauthenticated")
    # A thread outside the token's threads claim: like a run it may not read.
    r = await client.post(PUBLISH, json=EVERYTHING[0], headers=auth(threads=["other"]))
    assert error(r, 404, "not_found") == "no such run"
    assert await publish(client, EVERYTHING[0], **auth(threads=[CONVERSATION]))


async def test_media_type_and_size(client: httpx.AsyncClient) -> None:
    r = await client.post(
        PUBLISH, content=json.dumps(EVERYTHING[0]), headers={**auth(), "Content-Type": "text/plain"}
    )
    error(r, 415, "unsupported_media_type")
    big = event("text.delta", 1, {"text": "x" * (1024 * 1024)})
    r = await client.post(PUBLISH, json=big, headers=auth())
    assert "1048576" in error(r, 413, "too_large")


async def test_the_publish_rate_counts_sparktide_events() -> None:
    async with (
        start_node(publish_rate=5, publish_burst=5) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        node.context.publish_rate.clock = lambda: 1000.0  # a frozen clock: no refill
        r = await client.post(PUBLISH, json=EVERYTHING[:6], headers=auth())
        assert error(r, 429, "rate_limited")
        assert r.headers["retry-after"].isdigit()
        assert await head(node) == 0
        assert len(await publish(client, EVERYTHING[:5])) == 5
        r = await client.post(PUBLISH, json=EVERYTHING[5], headers=auth())
        error(r, 429, "rate_limited")


# --------------------------------------------------------------------------- long runs


async def test_a_sequence_the_run_no_longer_holds_is_a_regression(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    deltas = [event("text.delta", i, {"text": f"{i} "}) for i in range(2, 2001)]
    async with (
        start_node(url, prefix, run_retention=10) as node,
        httpx.AsyncClient(base_url=node.url, timeout=30) as client,
    ):
        await publish(client, [EVERYTHING[0], *deltas[:999]])
        last = await publish(client, deltas[999:])
        state = await node.backend.feeds.state(run_feed("acme", CONVERSATION, RUN))
        assert state is not None and state.first > 1000, "the run's start was trimmed"
        for forgetting in (False, True):
            if forgetting:
                forget(node)
            r = await client.post(PUBLISH, json=EVERYTHING[0], headers=auth())
            assert "the run no longer holds it" in error(r, 400, "invalid_request")
            # What is still held is still a retry; the next sequence is appended.
            assert await publish(client, deltas[-1]) == [last[-1]]
        [cursor] = await publish(client, event("text.delta", 2001, {"text": "end"}))
        assert cursor.split(":")[1] == str(state.head + 1)


# --------------------------------------------------------------------------- two nodes


@contextlib.asynccontextmanager
async def two_nodes(
    node_redis: tuple[str | None, str],
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Clients of two nodes on one log (for the embedded one, one shared store)."""
    url, prefix = node_redis
    shared = memory_backend() if url is None else None
    async with (
        start_node(url, prefix, backend=shared) as a,
        start_node(url, prefix, backend=shared) as b,
        httpx.AsyncClient(base_url=a.url, timeout=10) as ca,
        httpx.AsyncClient(base_url=b.url, timeout=10) as cb,
    ):
        yield ca, cb


async def test_two_nodes_continue_each_others_run(node_redis: tuple[str | None, str]) -> None:
    async with two_nodes(node_redis) as (a, b):
        cursors: list[str] = []
        bodies = [EVERYTHING[:3], EVERYTHING[3:9], EVERYTHING[9:10], EVERYTHING[10:20]]
        for i, body in enumerate([*bodies, EVERYTHING[20:]]):
            cursors += await publish(a if i % 2 == 0 else b, body)
        # Each node answers the other's retries with the first cursors.
        assert await publish(b, EVERYTHING[:3]) == cursors[:3]
        assert await publish(a, EVERYTHING[3:9]) == cursors[3:9]
        got = await read_run(b)
    assert [json.loads(s.data) for s in got] == [e for d in derived(EVERYTHING) for e in d]


async def test_two_nodes_racing_on_one_sequence(node_redis: tuple[str | None, str]) -> None:
    """Whatever the interleaving, one sequence gets one event: the same body from both
    nodes is appended once, and of two bodies one wins and the other is 409."""
    async with two_nodes(node_redis) as (a, b):
        await publish(a, EVERYTHING[:2])
        won: dict[int, Event] = {}
        for at in range(2, 12):
            mine = EVERYTHING[at]
            theirs = {**mine, "traceId": "another trace"}
            answers: dict[str, httpx.Response] = {}

            async def post(
                name: str,
                client: httpx.AsyncClient,
                body: Event,
                answers: dict[str, httpx.Response] = answers,
            ) -> None:
                answers[name] = await client.post(PUBLISH, json=body, headers=auth())

            same = at % 2 == 0
            async with anyio.create_task_group() as tg:
                tg.start_soon(post, "a", a, mine)
                tg.start_soon(post, "b", b, mine if same else theirs)
            statuses = sorted(r.status_code for r in answers.values())
            if same:
                assert statuses == [200, 200]
                assert answers["a"].json() == answers["b"].json()
            else:
                assert statuses == [200, 409], [r.text for r in answers.values()]
                if answers["a"].status_code == 409:
                    # The other body won: continue the run with it.
                    won[at] = theirs
        expected = [
            e for d in derived([won.get(i, e) for i, e in enumerate(EVERYTHING[:12])]) for e in d
        ]
        got = await read_first(b, len(expected))
    assert [json.loads(s.data) for s in got] == expected
