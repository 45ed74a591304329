"""AG-UI run feeds over real HTTP (D4, D7): publish, follow, the prelude, the end of a run.

Every test runs on the embedded log and on Redis (``log_kind``).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from gateway.agui.fold import RunFold
from gateway.app import Gateway
from tests.agui.runs import NESTED, RUN, THREAD
from tests.support.node import auth, metric, open_ws, start_node, token

pytestmark = pytest.mark.anyio

PATH = f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui"


async def publish(
    client: httpx.AsyncClient, body: Any, path: str = PATH, **headers: str
) -> list[str]:
    r = await client.post(path, json=body, headers={**auth(), **headers})
    assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    return cursors


async def read_all(
    client: httpx.AsyncClient, *, headers: dict[str, str] | None = None, limit: int = 500
) -> list[ServerSentEvent]:
    """Read the stream until the server ends it (bounded by a timeout and a count)."""
    got: list[ServerSentEvent] = []
    with anyio.fail_after(10):
        async with aconnect_sse(client, "GET", PATH, headers={**auth(), **(headers or {})}) as s:
            async for sse in s.aiter_sse():
                got.append(sse)
                assert len(got) <= limit
    return got


async def test_publish_then_follow_from_the_start_ends_after_run_finished(
    client: httpx.AsyncClient,
) -> None:
    cursors = await publish(client, NESTED)
    assert len(cursors) == len(NESTED)
    got = await read_all(client)
    # Every event as published (compact JSON, exact integers), each with its cursor as id;
    # the stream ended by itself after RUN_FINISHED.
    assert [json.loads(s.data) for s in got] == NESTED
    assert [s.id for s in got] == cursors
    assert (
        '"n":9007199254740991'
        in got[NESTED.index(next(e for e in NESTED if e["type"] == "RAW"))].data
    )


async def test_a_late_joiner_gets_the_prelude_then_the_rest(client: httpx.AsyncClient) -> None:
    cursors = await publish(client, NESTED)
    for k in (1, 5, 14, 20, len(NESTED) - 1):
        got = await read_all(client, headers={"Last-Event-ID": cursors[k - 1]})
        fold = RunFold()
        for event in NESTED[:k]:
            fold.apply(event)
        prelude = fold.prelude(THREAD, RUN)
        # Prelude events carry no id; the first event after them carries its own.
        assert [s.id for s in got[: len(prelude)]] == [""] * len(prelude)
        assert [json.loads(s.data) for s in got[: len(prelude)]] == prelude
        assert [json.loads(s.data) for s in got[len(prelude) :]] == NESTED[k:]
        assert [s.id for s in got[len(prelude) :]] == cursors[k:]


async def test_joining_after_the_end_gets_the_snapshot_and_the_end(
    client: httpx.AsyncClient,
) -> None:
    cursors = await publish(client, NESTED)
    got = await read_all(client, headers={"Last-Event-ID": cursors[-1]})
    types = [json.loads(s.data)["type"] for s in got]
    assert types == ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]


async def test_live_events_reach_a_follower_and_the_stream_ends(
    client: httpx.AsyncClient,
) -> None:
    await publish(client, NESTED[:3])
    got: list[dict[str, Any]] = []
    with anyio.fail_after(10):
        async with aconnect_sse(client, "GET", PATH, headers=auth()) as source:
            async for sse in source.aiter_sse():
                got.append(json.loads(sse.data))
                if len(got) == 3:
                    await publish(client, NESTED[3:])
    assert got == NESTED


async def test_attach_with_a_run_agent_input(client: httpx.AsyncClient) -> None:
    cursors = await publish(client, NESTED)
    body = {"threadId": THREAD, "runId": RUN, "messages": [], "state": {}, "tools": []}
    got: list[ServerSentEvent] = []
    with anyio.fail_after(10):
        async with aconnect_sse(
            client,
            "POST",
            "/v1/ui/ag-ui/any-agent",
            json=body,
            headers={**auth(), "Last-Event-ID": cursors[9]},
        ) as source:
            async for sse in source.aiter_sse():
                got.append(sse)
    assert json.loads(got[0].data)["type"] == "RUN_STARTED"
    assert got[-1].id == cursors[-1]
    missing = {**body, "runId": "no-such-run"}
    r = await client.post("/v1/ui/ag-ui/any-agent", json=missing, headers=auth())
    assert r.status_code == 404
    assert r.json() == {"error": {"code": "not_found", "message": "no such run"}}


async def test_bad_events_are_refused_naming_the_field_and_nothing_is_appended(
    client: httpx.AsyncClient, node: Gateway
) -> None:
    cases = [
        ({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m"}, "event.delta"),
        (
            [
                {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN},
                {"type": "TOOL_CALL_START", "toolCallId": 1, "toolCallName": "x"},
            ],
            "[1].toolCallId",
        ),
        ({"type": "RUN_STARTED", "threadId": "other", "runId": RUN}, "event.threadId"),
        (
            {"type": "TEXT_MESSAGE_START", "messageId": "m", "subagentRunId": None},
            "event.subagentRunId",
        ),
        ({"messageId": "m"}, "event.type"),
        ([], "body"),
    ]
    for body, field in cases:
        r = await client.post(PATH, json=body, headers=auth())
        assert r.status_code == 400, (body, r.text)
        error = r.json()["error"]
        assert error["code"] == "invalid_request"
        assert error["message"].startswith(field), (field, error)
    r = await client.get(PATH, headers=auth())
    assert r.status_code == 404  # nothing was appended: the run does not exist
    assert metric(
        node, "gateway_publish_rejections_total", code="invalid_request", path="http"
    ) == len(cases)


async def test_empty_deltas_unknown_fields_and_types_pass_untouched(
    client: httpx.AsyncClient,
) -> None:
    events = [
        {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN, "future": [1, {"x": None}]},
        {"type": "TEXT_MESSAGE_START", "messageId": "m"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": ""},
        {"type": "SOMETHING_NEW", "value": 12345678901234567},
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
        {
            "type": "RUN_FINISHED",
            "threadId": THREAD,
            "runId": RUN,
            "outcome": {"type": "some_future_outcome"},
        },
    ]
    await publish(client, events)
    got = await read_all(client)
    assert [json.loads(s.data) for s in got] == events


async def test_idempotency_key_makes_retries_safe(client: httpx.AsyncClient) -> None:
    first = await publish(client, NESTED[:4], **{"Idempotency-Key": "req-1"})
    again = await publish(client, NESTED[:4], **{"Idempotency-Key": "req-1"})
    assert again == first
    r = await client.post(PATH, json=NESTED[4:8], headers={**auth(), "Idempotency-Key": "req-1"})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "idempotency_key_reused"
    # The same key with more or fewer events is a different request too.
    for body in (NESTED[:5], NESTED[:3]):
        r = await client.post(PATH, json=body, headers={**auth(), "Idempotency-Key": "req-1"})
        assert r.status_code == 409, len(body)
    got = await client.post(PATH, json=NESTED[4:5], headers={**auth(), "Idempotency-Key": "r2"})
    assert got.status_code == 200  # nothing of the refused requests was appended
    assert got.json()["cursors"][0].endswith(":5")


async def test_threads_claim_and_tenants_answer_like_a_missing_run(
    client: httpx.AsyncClient,
) -> None:
    await publish(client, NESTED[:2])
    missing = await client.get(f"/v1/threads/{THREAD}/runs/nope/ui/ag-ui", headers=auth())
    other_tenant = await client.get(PATH, headers=auth("globex"))
    outside = await client.get(
        PATH, headers={"Authorization": f"Bearer {token(threads=['another-thread'])}"}
    )
    bad_id = await client.get("/v1/threads/bad%20id/runs/x/ui/ag-ui", headers=auth())
    for r in (missing, other_tenant, outside, bad_id):
        assert r.status_code == 404
        assert r.content == missing.content
    allowed = await client.get(
        PATH, headers={"Authorization": f"Bearer {token(threads=[THREAD])}", "Last-Event-ID": "x"}
    )
    assert allowed.status_code == 400  # past the claim check: the cursor is malformed


async def test_websocket_run_feed_gets_the_prelude_at_its_join_cursor(
    client: httpx.AsyncClient, node: Gateway
) -> None:
    cursors = await publish(client, NESTED[:14])
    name = f"run/{THREAD}/{RUN}"
    join = cursors[9]
    fold = RunFold()
    for event in NESTED[:10]:
        fold.apply(event)
    prelude = fold.prelude(THREAD, RUN)
    async with open_ws(node) as ws:
        await ws.send(json.dumps({"type": "subscribe", "feed": name, "after": join}))
        frames: list[dict[str, Any]] = []
        with anyio.fail_after(10):
            while len(frames) < 1 + len(prelude) + 4 + (len(NESTED) - 14):
                frames.append(json.loads(await ws.recv()))
                if len(frames) == 1 + len(prelude) + 4:
                    later = await publish(client, NESTED[14:])
    assert frames[0] == {"type": "subscribed", "feed": name, "cursor": cursors[13]}
    body = frames[1:]
    assert [f["data"] for f in body[: len(prelude)]] == prelude
    assert {f["cursor"] for f in body[: len(prelude)]} == {join}
    rest = body[len(prelude) :]
    assert [f["data"] for f in rest] == NESTED[10:]
    assert [f["cursor"] for f in rest] == cursors[10:] + later
    # A WebSocket subscription does not end with the run: it stays subscribed.
    assert all(f["type"] == "event" for f in body)


async def test_finished_runs_are_deleted_after_their_grace_period(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    async with (
        start_node(url, prefix, run_finished_ttl_seconds=3) as n,
        httpx.AsyncClient(base_url=n.url, timeout=10) as c,
    ):
        await publish(c, NESTED)
        # Served during the grace period...
        got = await read_all(c)
        assert len(got) == len(NESTED)
        # ...then gone: 404 like a run that never existed (polled, bounded).
        with anyio.fail_after(10):
            while (await c.get(PATH, headers=auth())).status_code != 404:  # noqa: ASYNC110 - waits on Redis key expiry
                await anyio.sleep(0.05)


async def test_publishing_outside_the_threads_claim_is_404(client: httpx.AsyncClient) -> None:
    limited = {"Authorization": f"Bearer {token(threads=['another-thread'])}"}
    r = await client.post(PATH, json=NESTED[:1], headers=limited)
    assert r.status_code == 404
    assert r.json() == {"error": {"code": "not_found", "message": "no such run"}}
    allowed = {"Authorization": f"Bearer {token(threads=[THREAD])}"}
    assert (await client.post(PATH, json=NESTED[:1], headers=allowed)).status_code == 200


async def test_websocket_threads_claim_is_checked_on_subscribe_and_on_refresh(
    client: httpx.AsyncClient, node: Gateway
) -> None:
    await publish(client, NESTED[:3])
    name = f"run/{THREAD}/{RUN}"
    async with open_ws(node, headers={"Authorization": f"Bearer {token(threads=[THREAD])}"}) as ws:
        with anyio.fail_after(10):
            await ws.send(json.dumps({"type": "subscribe", "feed": name}))
            assert json.loads(await ws.recv())["type"] == "subscribed"
            for _ in range(3):
                assert json.loads(await ws.recv())["type"] == "event"
            # A refreshed token whose claim no longer lists the thread ends the subscription.
            await ws.send(json.dumps({"type": "auth", "token": token(threads=["other"])}))
            assert json.loads(await ws.recv()) == {
                "type": "error",
                "feed": name,
                "code": "not_found",
                "message": "no such feed",
            }
            # Subscribing again with it is refused the same way.
            await ws.send(json.dumps({"type": "subscribe", "feed": name}))
            error = json.loads(await ws.recv())
            assert (error["type"], error["code"]) == ("error", "not_found")


async def test_an_older_epoch_gets_the_custom_epoch_restarted_event_then_the_end(
    client: httpx.AsyncClient,
) -> None:
    cursors = await publish(client, NESTED[:4])
    epoch = cursors[0].split(":")[0]
    got = await read_all(client, headers={"Last-Event-ID": "1:3"})
    assert len(got) == 1
    assert json.loads(got[0].data) == {
        "type": "CUSTOM",
        "name": "gateway.epoch_restarted",
        "value": {"cursor": f"{epoch}:0"},
    }
    assert got[0].id == f"{epoch}:0"
