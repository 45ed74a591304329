"""Runs that always end (docs/contract.md, "Runs end"), over HTTP and WebSocket on real
nodes: a run whose producer stops publishing is ended by the lease sweep with one
``RUN_ERROR`` ``producer_lost``, seen by its viewers on every node; heartbeats keep a
quiet run live; ``GET /v1/runs?state=live`` lists the live runs the token may read.

Leases here are the shortest allowed (5 s): each test that waits for an end takes that
long.  The sweep runs every second on every node.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

from gateway.app import Gateway
from gateway.feed import Cursor, run_feed
from tests.support import events as ev
from tests.support.node import auth, lease_ends, metric, open_ws, start_node, token

pytestmark = pytest.mark.anyio

THREAD = "0190f5a2-7c1e-7b3d-8a4f-000000000002"
LEASE = 5
#: Longest wait for a lease's end: the lease, the sweep's interval and the margin the
#: contract allows (lease + 2 s), plus scheduling slack on a loaded CI machine.
END_WITHIN = LEASE + 2 + 3


def agui_path(run: str, thread: str = THREAD) -> str:
    return f"/v1/threads/{thread}/runs/{run}/ui/ag-ui"


def started(run: str, thread: str = THREAD) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": thread, "runId": run}


def custom(name: str) -> dict[str, Any]:
    return {"type": "CUSTOM", "name": name, "value": 1}


async def start(client: httpx.AsyncClient, run: str, thread: str = THREAD, **params: Any) -> None:
    r = await client.post(
        agui_path(run, thread),
        json=started(run, thread),
        headers=auth(),
        params={"lease_seconds": LEASE, **params},
    )
    assert r.status_code == 200, r.text


async def heartbeat(client: httpx.AsyncClient, run: str, **kw: Any) -> httpx.Response:
    return await client.post(
        f"/v1/threads/{THREAD}/runs/{run}/heartbeat", headers=kw.get("headers") or auth()
    )


async def events_of(node: Gateway, run: str) -> list[dict[str, Any]]:
    feed = run_feed("acme", THREAD, run)
    state = await node.backend.feeds.state(feed)
    assert state is not None
    items = await node.backend.feeds.read(feed, Cursor(state.epoch, 0), 1000)
    return [json.loads(item.data) for item in items]


@pytest.fixture
async def client(node: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as c:
        yield c


async def sse_until_end(client: httpx.AsyncClient, run: str, seen: list[dict[str, Any]]) -> None:
    """Follow the run as AG-UI SSE until the server ends the stream."""
    async with aconnect_sse(client, "GET", agui_path(run), headers=auth()) as source:
        async for sse in source.aiter_sse():
            seen.append(json.loads(sse.data))
            assert len(seen) < 100


async def ws_until_end(node: Gateway, run: str, seen: list[dict[str, Any]]) -> None:
    """Follow the run over gateway.v1 until its RUN_ERROR arrives."""
    async with open_ws(node) as ws:
        await ws.send(json.dumps({"type": "subscribe", "feed": f"run/{THREAD}/{run}"}))
        while True:
            frame = json.loads(await ws.recv())
            if frame["type"] == "event":
                seen.append(frame["data"])
                if frame["data"]["type"] == "RUN_ERROR":
                    return
            assert frame["type"] in ("subscribed", "event"), frame


def lost(seen: list[dict[str, Any]]) -> dict[str, Any]:
    """The one end a lease gives, checked: last, once, RUN_ERROR producer_lost."""
    ends = [e for e in seen if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
    assert len(ends) == 1 and seen[-1] is ends[0], seen
    end = ends[0]
    assert end["type"] == "RUN_ERROR" and end["code"] == "producer_lost", end
    assert isinstance(end["message"], str) and end["message"]
    return end


async def test_a_run_whose_producer_stops_ends_with_producer_lost(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    run = ev.new_id()
    await start(client, run)
    r = await client.post(agui_path(run), json=custom("work"), headers=auth())
    assert r.status_code == 200, r.text
    sse_seen: list[dict[str, Any]] = []
    ws_seen: list[dict[str, Any]] = []
    began = time.monotonic()
    with anyio.fail_after(END_WITHIN):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sse_until_end, client, run, sse_seen)
            tg.start_soon(ws_until_end, node, run, ws_seen)
    elapsed = time.monotonic() - began
    assert elapsed >= LEASE - 1  # not before the lease (less the time since the publish)
    assert sse_seen == ws_seen
    assert [e["type"] for e in sse_seen] == ["RUN_STARTED", "CUSTOM", "RUN_ERROR"]
    lost(sse_seen)
    assert await events_of(node, run) == sse_seen  # the store holds it once
    # Ended like any end: a publish after it is refused; the run is not live.
    r = await client.post(agui_path(run), json=custom("late"), headers=auth())
    assert r.status_code == 409 and r.json()["error"]["code"] == "run_ended", r.text
    assert (await heartbeat(client, run)).status_code == 404
    assert await lease_ends([node], 1) == [1]
    assert metric(node, "gateway_runs_ended_total", by="producer") == 0


async def test_a_heartbeat_keeps_a_quiet_run_live_for_three_leases(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    run = ev.new_id()
    await start(client, run)
    deadline = time.monotonic() + 3 * LEASE
    while time.monotonic() < deadline:
        r = await heartbeat(client, run)
        assert r.status_code == 204 and r.content == b"", r.text
        await anyio.sleep(1.0)  # a producer's heartbeat interval, not synchronisation
    assert [e["type"] for e in await events_of(node, run)] == ["RUN_STARTED"]
    r = await client.post(
        agui_path(run),
        json={"type": "RUN_FINISHED", "threadId": THREAD, "runId": run},
        headers=auth(),
    )
    assert r.status_code == 200, r.text
    assert metric(node, "gateway_runs_ended_total", by="producer") == 1
    assert metric(node, "gateway_runs_ended_total", by="lease") == 0


async def test_a_heartbeat_answers_404_for_a_run_that_is_not_live_and_needs_publish(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    run = ev.new_id()
    assert (await heartbeat(client, run)).status_code == 404  # no such run
    await start(client, run)
    readonly = {"Authorization": f"Bearer {token(scopes=('subscribe',))}"}
    assert (await heartbeat(client, run, headers=readonly)).status_code == 403
    other_thread = {"Authorization": f"Bearer {token(threads=['elsewhere'])}"}
    r = await heartbeat(client, run, headers=other_thread)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    assert (await heartbeat(client, run)).status_code == 204
    r = await client.post(
        agui_path(run),
        json={"type": "RUN_FINISHED", "threadId": THREAD, "runId": run},
        headers=auth(),
    )
    assert r.status_code == 200
    r = await heartbeat(client, run)
    assert r.status_code == 404 and r.json()["error"]["message"] == "no such live run"


@pytest.mark.parametrize(
    "value", ["4.9", "3601", "nan", "soon", "-5", "1_0", " 10", "1e1", "+10", ""]
)
async def test_a_lease_outside_the_bounds_is_refused_and_nothing_appended(
    node: Gateway, client: httpx.AsyncClient, value: str
) -> None:
    run = ev.new_id()
    r = await client.post(
        agui_path(run), json=started(run), headers=auth(), params={"lease_seconds": value}
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", r.text
    assert "lease_seconds" in r.json()["error"]["message"]
    assert await node.backend.feeds.state(run_feed("acme", THREAD, run)) is None


async def test_live_runs_are_listed_by_claims_and_leave_the_list_when_they_end(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    other = f"t-{ev.new_id()}"
    runs = [ev.new_id() for _ in range(3)]
    for run in runs:
        await start(client, run)
    await start(client, "hidden", thread=other)
    before = int(time.time() * 1000)
    r = await client.get("/v1/runs", params={"state": "live", "limit": 2}, headers=auth())
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    first = r.json()
    assert len(first["runs"]) == 2 and first["next"]
    for listed in first["runs"]:
        assert set(listed) == {
            "feed",
            "thread_id",
            "run_id",
            "started_ms",
            "updated_ms",
            "lease_deadline_ms",
        }
        assert listed["feed"] == f"run/{listed['thread_id']}/{listed['run_id']}"
        assert listed["lease_deadline_ms"] - listed["updated_ms"] == LEASE * 1000
        assert before - 60_000 < listed["started_ms"] <= listed["updated_ms"]
    r = await client.get(
        "/v1/runs", params={"state": "live", "limit": 2, "after": first["next"]}, headers=auth()
    )
    rest = r.json()
    listed = [(x["thread_id"], x["run_id"]) for x in first["runs"] + rest["runs"]]
    mine = {(THREAD, run) for run in runs} | {(other, "hidden")}
    assert mine <= set(listed) and len(listed) == len(set(listed))
    # A threads claim hides the other thread's run.
    claimed = {"Authorization": f"Bearer {token(threads=[THREAD])}"}
    r = await client.get("/v1/runs", params={"state": "live", "limit": 100}, headers=claimed)
    seen = {(x["thread_id"], x["run_id"]) for x in r.json()["runs"]}
    assert {(THREAD, run) for run in runs} <= seen and (other, "hidden") not in seen
    # Ended: no longer listed.
    r = await client.post(
        agui_path(runs[0]),
        json={"type": "RUN_FINISHED", "threadId": THREAD, "runId": runs[0]},
        headers=auth(),
    )
    assert r.status_code == 200
    r = await client.get("/v1/runs", params={"state": "live", "limit": 100}, headers=auth())
    left = {(x["thread_id"], x["run_id"]) for x in r.json()["runs"]}
    assert (THREAD, runs[0]) not in left and (THREAD, runs[1]) in left
    # Bad requests.
    for params in (
        {},
        {"state": "ended"},
        {"state": "live", "limit": 0},
        {"state": "live", "after": "x"},
    ):
        r = await client.get("/v1/runs", params=params, headers=auth())
        assert r.status_code == 400, (params, r.text)


async def test_two_nodes_end_an_abandoned_run_once_and_both_viewers_see_it(
    redis_url: str, redis_prefix: str
) -> None:
    async with (
        start_node(redis_url, redis_prefix) as a,
        start_node(redis_url, redis_prefix) as b,
        httpx.AsyncClient(base_url=a.url, timeout=10) as ca,
        httpx.AsyncClient(base_url=b.url, timeout=10) as cb,
    ):
        run = ev.new_id()
        await start(ca, run)
        seen_a: list[dict[str, Any]] = []
        seen_b: list[dict[str, Any]] = []
        with anyio.fail_after(END_WITHIN):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sse_until_end, ca, run, seen_a)
                tg.start_soon(ws_until_end, b, run, seen_b)
        assert seen_a == seen_b
        lost(seen_a)
        assert await events_of(a, run) == seen_a
        assert sorted(await lease_ends([a, b], 1)) == [0, 1]
        r = await cb.post(agui_path(run), json=custom("late"), headers=auth())
        assert r.status_code == 409 and r.json()["error"]["code"] == "run_ended"


async def test_an_abandoned_threads_run_stream_ends_with_a_cancelled_result(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    run = ev.new_id()
    path = f"/v1/threads/{THREAD}/runs/{run}/events"
    committed = [{"kind": "event", "event": ev.message(f"m{i}", seq=i + 1)} for i in range(2)]
    r = await client.post(path, json=committed, headers=auth(), params={"lease_seconds": LEASE})
    assert r.status_code == 200, r.text
    r = await client.get("/v1/runs", params={"state": "live", "limit": 100}, headers=auth())
    listed = [x for x in r.json()["runs"] if x["run_id"] == run]
    assert [x["feed"] for x in listed] == [f"run/{THREAD}/{run}/events"]
    seen: list[dict[str, Any]] = []
    with anyio.fail_after(END_WITHIN):
        async with aconnect_sse(client, "GET", path, headers=auth()) as source:
            async for sse in source.aiter_sse():
                seen.append(json.loads(sse.data))
                assert len(seen) < 10
    assert [m["kind"] for m in seen] == ["event", "event", "result"]
    assert seen[-1] == {
        "kind": "result",
        "run_id": run,
        "result": {
            "status": "cancelled",
            "thread_id": committed[0]["event"]["thread_id"],
            "branch_id": committed[0]["event"]["branch_id"],
        },
    }
    late = [{"kind": "event", "event": ev.message("late", seq=3)}]
    r = await client.post(path, json=late, headers=auth())
    assert r.status_code == 409 and r.json()["error"]["code"] == "run_ended", r.text
    assert await lease_ends([node], 1) == [1]
