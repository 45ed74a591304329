"""The threads run stream (D7b; seed rules 25-30) over real HTTP, on both logs.

Committed events carry their seq as SSE id; delta and status messages reach whoever is
connected and are never stored or replayed; the stream ends after the result message.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from tests.support import events as ev
from tests.support.node import auth, start_node

pytestmark = pytest.mark.anyio

THREAD = "0190f5a2-7c1e-7b3d-8a4f-000000000002"
RUN = "0190f5a2-7c1e-7b3d-8a4f-0000000000aa"
PATH = f"/v1/threads/{THREAD}/runs/{RUN}/events"
REQUEST = "0190f5a2-7c1e-7b3d-8a4f-0000000000bb"
RESULT = {
    "kind": "result",
    "run_id": RUN,
    "result": {
        "status": "completed",
        "thread_id": THREAD,
        "branch_id": "0190f5a2-7c1e-7b3d-8a4f-000000000003",
        "output": "done",
    },
}


_COMMITTED: dict[int, dict[str, Any]] = {}


def committed(seq: int) -> dict[str, Any]:
    """The committed message of ``seq`` (the same body each time it is asked for)."""
    if seq not in _COMMITTED:
        _COMMITTED[seq] = {"kind": "event", "event": ev.message(f"event {seq}", seq=seq)}
    return _COMMITTED[seq]


def delta(text: str) -> dict[str, Any]:
    return {"kind": "delta", "request_event_id": REQUEST, "text": text}


STATUS = {"kind": "status", "status": "retry_wait", "until": 1_760_000_000_000}


async def publish(client: httpx.AsyncClient, body: Any) -> list[str | None]:
    r = await client.post(PATH, json=body, headers=auth())
    assert r.status_code == 200, r.text
    cursors: list[str | None] = r.json()["cursors"]
    return cursors


async def read(client: httpx.AsyncClient, n: int | None = None, **kw: Any) -> list[ServerSentEvent]:
    """Read n messages, or until the server ends the stream (bounded)."""
    got: list[ServerSentEvent] = []
    with anyio.fail_after(10):
        async with aconnect_sse(client, "GET", PATH, **{"headers": auth(), **kw}) as source:
            async for sse in source.aiter_sse():
                got.append(sse)
                if len(got) == n:
                    break
    return got


async def test_committed_events_carry_their_seq_and_transients_are_not_stored(
    client: httpx.AsyncClient,
) -> None:
    cursors = await publish(client, [committed(5), delta("Hel"), committed(6), STATUS])
    assert cursors[1] is None and cursors[3] is None
    assert cursors[0] is not None and cursors[2] is not None
    got = await read(client, 2)
    assert [s.id for s in got] == ["5", "6"]
    assert [json.loads(s.data) for s in got] == [committed(5), committed(6)]


async def test_live_followers_get_deltas_in_order_and_the_stream_ends_after_the_result(
    client: httpx.AsyncClient,
) -> None:
    await publish(client, [committed(1)])
    got: list[ServerSentEvent] = []
    with anyio.fail_after(10):
        async with aconnect_sse(client, "GET", PATH, headers=auth()) as source:
            async for sse in source.aiter_sse():
                got.append(sse)
                if len(got) == 1:
                    await publish(client, [delta("a"), delta("b"), committed(2), STATUS])
                if len(got) == 5:
                    await publish(client, RESULT)
    assert [json.loads(s.data) for s in got] == [
        committed(1),
        delta("a"),
        delta("b"),
        committed(2),
        STATUS,
        RESULT,
    ]
    # Transients and the result carry no id: the client's last event id stays the last
    # committed seq (SSE keeps the last id it saw).
    assert [s.id for s in got] == ["1", "1", "1", "2", "2", "2"]
    # A follower arriving later gets the committed events and the result, no transients.
    later = await read(client)
    assert [json.loads(s.data)["kind"] for s in later] == ["event", "event", "result"]


async def test_resume_with_after_seq_or_last_event_id(client: httpx.AsyncClient) -> None:
    await publish(client, [committed(s) for s in range(10, 15)])
    after = await read(client, 2, params={"after_seq": "11"})
    assert [s.id for s in after] == ["12", "13"]
    header_wins = await read(
        client, 1, params={"after_seq": "11"}, headers={**auth(), "Last-Event-ID": "13"}
    )
    assert [s.id for s in header_wins] == ["14"]
    before_all = await read(client, 1, params={"after_seq": "3"})
    assert [s.id for s in before_all] == ["10"]
    bad = await client.get(PATH, params={"after_seq": "x"}, headers=auth())
    assert bad.status_code == 400


async def test_seq_order_retries_gaps_and_regressions(client: httpx.AsyncClient) -> None:
    first = await publish(client, [committed(1), committed(2)])
    again = await publish(client, [committed(1), committed(2)])
    assert again == first  # a safe retry
    changed = {"kind": "event", "event": {**committed(2)["event"], "time": 5}}
    r = await client.post(PATH, json=changed, headers=auth())
    assert r.status_code == 409
    for body, field in (
        (committed(4), "event.seq"),  # a gap
        ([committed(3), committed(5)], "[1].event.seq"),  # a gap inside the body
    ):
        r = await client.post(PATH, json=body, headers=auth())
        assert r.status_code == 400, body
        assert r.json()["error"]["message"].startswith(field)
    assert [s.id for s in await read(client, 2)] == ["1", "2"]


async def test_bad_messages_are_refused_naming_the_field(client: httpx.AsyncClient) -> None:
    cases = [
        (
            {"kind": "delta", "request_event_id": "NOT-A-UUID", "text": "x"},
            "message.request_event_id",
        ),
        ({**STATUS, "status": "waiting"}, "message.status"),
        ({**delta("x"), "extra": 1}, "message.extra"),
        ({**RESULT, "run_id": THREAD}, "message.run_id"),
        ({**RESULT, "result": {"status": "completed"}}, "message.result"),
        (
            {"kind": "event", "event": {**ev.message(seq=1), "thread_id": RUN}},
            "message.event.thread_id",
        ),
        ({"kind": "event", "event": {"type": "team_message"}}, "message.event"),
        ({"kind": "other"}, "message.kind"),
    ]
    for body, field in cases:
        r = await client.post(PATH, json=body, headers=auth())
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["message"].startswith(field), (field, r.json())
    assert (await client.get(PATH, headers=auth())).status_code == 404  # nothing stored


async def test_missing_runs_and_other_tenants_are_404(client: httpx.AsyncClient) -> None:
    await publish(client, committed(1))
    other = await client.get(PATH, headers=auth("globex"))
    missing = await client.get(PATH.replace(RUN, "nope"), headers=auth())
    assert other.status_code == missing.status_code == 404
    assert other.content == missing.content


async def test_each_message_counts_against_the_publish_rate(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    async with (
        start_node(url, prefix, publish_rate=1.0, publish_burst=3) as n,
        httpx.AsyncClient(base_url=n.url, timeout=10) as c,
    ):
        r = await c.post(PATH, json=[committed(1), delta("a"), delta("b"), STATUS], headers=auth())
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "rate_limited"
        ok = await c.post(PATH, json=[committed(1), delta("a")], headers=auth())
        assert ok.status_code == 200
