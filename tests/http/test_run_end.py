"""A run's end is final over HTTP (contract D12), on both logs: after its RUN_FINISHED or
RUN_ERROR (the AG-UI route) or its result (the threads run stream), a new event is
409 run_ended with nothing appended; exact retries still answer their first cursors; a
body with anything after its own end is refused whole; the next run starts normally.
SparkTide and A2UI after the end: tests/http/test_sparktide.py, tests/http/test_a2ui.py.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.app import Gateway
from gateway.feed import FeedState, run_events_feed, run_feed
from tests.support import events as ev
from tests.support.node import auth, metric

pytestmark = pytest.mark.anyio

# The thread tests.support.events puts in committed events.
THREAD = "0190f5a2-7c1e-7b3d-8a4f-000000000002"


def agui_path(run: str) -> str:
    return f"/v1/threads/{THREAD}/runs/{run}/ui/ag-ui"


def stream_path(run: str) -> str:
    return f"/v1/threads/{THREAD}/runs/{run}/events"


def started(run: str) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": THREAD, "runId": run}


def end(kind: str, run: str) -> dict[str, Any]:
    if kind == "RUN_FINISHED":
        return {"type": "RUN_FINISHED", "threadId": THREAD, "runId": run}
    return {"type": "RUN_ERROR", "message": "the model went away", "code": "model_error"}


def custom(name: str) -> dict[str, Any]:
    return {"type": "CUSTOM", "name": name, "value": 1}


async def post(
    client: httpx.AsyncClient, path: str, body: Any, key: str | None = None
) -> httpx.Response:
    headers = auth()
    if key is not None:
        headers["Idempotency-Key"] = key
    return await client.post(path, json=body, headers=headers)


def ok(r: httpx.Response) -> list[str | None]:
    assert r.status_code == 200, r.text
    cursors: list[str | None] = r.json()["cursors"]
    return cursors


def run_ended(r: httpx.Response) -> str:
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "run_ended", error
    assert set(r.json()) == {"error"} and set(error) == {"code", "message"}
    message: str = error["message"]
    return message


async def state(node: Gateway, run: str, stream: bool = False) -> FeedState | None:
    feed = (run_events_feed if stream else run_feed)("acme", THREAD, run)
    return await node.backend.feeds.state(feed)


@pytest.mark.parametrize("kind", ["RUN_FINISHED", "RUN_ERROR"])
async def test_after_the_runs_end_a_new_event_is_409_and_retries_answer(
    node: Gateway, client: httpx.AsyncClient, kind: str
) -> None:
    run = ev.new_id()
    path = agui_path(run)
    first = ok(await post(client, path, [started(run), custom("work")], key="start"))
    last = ok(await post(client, path, end(kind, run), key="end"))
    held = await state(node, run)
    assert held is not None and held.head == 3
    for body, key in [
        (custom("late"), None),
        (custom("late"), "late"),
        ([custom("late"), custom("later")], "late-batch"),
        (end("RUN_FINISHED", run), None),  # a second end is new too
    ]:
        assert "the run has ended" in run_ended(await post(client, path, body, key=key))
        assert await state(node, run) == held, "nothing of a refused body is appended"
    # Exact retries, of the end too, answer their first cursors.
    assert ok(await post(client, path, end(kind, run), key="end")) == last
    assert ok(await post(client, path, [started(run), custom("work")], key="start")) == first
    assert await state(node, run) == held
    assert metric(node, "gateway_publish_rejections_total", code="run_ended", path="http") == 4
    # The producer's next run starts normally.
    other = ev.new_id()
    assert len(ok(await post(client, agui_path(other), [started(other), end(kind, other)]))) == 2


async def test_a_body_with_events_after_its_end_is_refused_whole(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    run = ev.new_id()
    path = agui_path(run)
    body = [started(run), end("RUN_FINISHED", run), custom("after")]
    assert run_ended(await post(client, path, body)).startswith("[2]: follows the run's end at [1]")
    assert await state(node, run) is None, "nothing appended"
    # Without the trailing event the same run is published normally.
    assert len(ok(await post(client, path, body[:2]))) == 2


RESULT_BODY = {
    "status": "completed",
    "thread_id": THREAD,
    "branch_id": "0190f5a2-7c1e-7b3d-8a4f-000000000003",
    "output": "done",
}


def committed(seq: int) -> dict[str, Any]:
    return {"kind": "event", "event": ev.message(f"event {seq}", seq=seq)}


async def test_the_threads_run_stream_takes_nothing_new_after_its_result(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    run = ev.new_id()
    path = stream_path(run)
    result = {"kind": "result", "run_id": run, "result": RESULT_BODY}
    one, two = committed(1), committed(2)
    cursors = ok(await post(client, path, [one, two, result]))
    held = await state(node, run, stream=True)
    assert held is not None and held.head == 3
    assert "the run has ended" in run_ended(await post(client, path, committed(3)))
    other_result = {**result, "result": {**RESULT_BODY, "output": "again"}}
    # Another result is the reused key (the result is stored under one key) ...
    r = await post(client, path, other_result)
    assert r.status_code == 409 and r.json()["error"]["code"] == "idempotency_key_reused"
    assert await state(node, run, stream=True) == held
    # ... and the same messages again are a safe retry.
    assert ok(await post(client, path, [one, two, result])) == cursors
    assert ok(await post(client, path, result)) == cursors[2:]
    assert await state(node, run, stream=True) == held


async def test_a_threads_stream_body_with_anything_after_its_result_is_refused_whole(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    run = ev.new_id()
    path = stream_path(run)
    result = {"kind": "result", "run_id": run, "result": RESULT_BODY}
    body = [committed(1), result, committed(2)]
    assert run_ended(await post(client, path, body)).startswith("[2]: follows the run's end")
    assert await state(node, run, stream=True) is None
