"""A2UI for a run over real HTTP and WebSocket (D4.9, D6.7, docs/dialects/a2ui.md).

``POST /v1/threads/{thread_id}/runs/{run_id}/a2ui`` carries A2UI messages as AG-UI
activities on the run feed; AG-UI clients read them with every other event, and
WebSocket clients that render A2UI subscribe with ``"format": "a2ui"`` and get the
messages as they were published.  A late joiner gets each live surface folded.  Every
test runs on the embedded log and on Redis (``log_kind``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse
from websockets.asyncio.client import ClientConnection

from gateway.agui.fold import RunFold
from gateway.app import Gateway
from gateway.dialects import a2ui
from gateway.feed import run_feed
from tests.dialects.a2ui_runs import SURFACES, components, create, data, delete, text
from tests.support.node import auth, metric, open_ws, start_node

pytestmark = pytest.mark.anyio

THREAD, RUN = "ui-thread", "ui-run"
PUBLISH = f"/v1/threads/{THREAD}/runs/{RUN}/a2ui"
AGUI = f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui"
FEED = f"run/{THREAD}/{RUN}"
STARTED = {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN}
Event = dict[str, Any]
Message = dict[str, Any]


@pytest.fixture
async def node(node_redis: tuple[str | None, str]) -> AsyncIterator[Gateway]:
    url, prefix = node_redis
    async with start_node(url, prefix, keepalive_seconds=0.2, max_body_bytes=64 * 1024) as n:
        yield n


def error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert list(body) == ["error"] and sorted(body["error"]) == ["code", "message"]
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    return message


async def post(client: httpx.AsyncClient, path: str, body: Any, **headers: str) -> list[str]:
    r = await client.post(path, json=body, headers={**auth(), **headers})
    assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    return cursors


async def start(client: httpx.AsyncClient) -> str:
    [cursor] = await post(client, AGUI, STARTED)
    return cursor


async def head(node: Gateway) -> int:
    state = await node.backend.feeds.state(run_feed("acme", THREAD, RUN))
    return 0 if state is None else state.head


async def read_agui(
    client: httpx.AsyncClient, n: int, cursor: str | None = None
) -> list[ServerSentEvent]:
    """The first ``n`` SSE events of the run (after ``cursor``, prelude included)."""
    headers = auth() if cursor is None else {**auth(), "Last-Event-ID": cursor}
    got: list[ServerSentEvent] = []
    with anyio.fail_after(10):
        async with aconnect_sse(client, "GET", AGUI, headers=headers) as source:
            async for sse in source.aiter_sse():
                got.append(sse)
                if len(got) == n:
                    break
    return got


def fold_of(events: list[Event]) -> RunFold:
    fold = RunFold()
    for event in events:
        fold.apply(event)
    return fold


# --------------------------------------------------------------------------- publishing


async def test_messages_become_activities_with_one_cursor_per_message(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    await start(client)
    cursors: list[str] = []
    for body in (SURFACES[0], SURFACES[1:6], SURFACES[6:]):
        cursors += await post(client, PUBLISH, body)
    assert len(cursors) == len(SURFACES)
    got = await read_agui(client, 1 + len(SURFACES))
    assert [json.loads(s.data) for s in got] == [STARTED, *a2ui.derive(SURFACES, RunFold())]
    assert [s.id for s in got[1:]] == cursors
    published = metric(node, "gateway_published_items_total", kind="run", path="http")
    assert published == 1 + len(SURFACES)


async def test_a_surface_that_outgrows_its_list_is_rebuilt(client: httpx.AsyncClient) -> None:
    await start(client)
    messages = [create("s"), components("s", text("root", {"path": "/n"}))]
    messages += [data("s", "/n", i) for i in range(a2ui.MAX_OPERATIONS + 6)]
    for at in range(0, len(messages), 10):
        await post(client, PUBLISH, messages[at : at + 10])
    got = [json.loads(s.data) for s in await read_agui(client, 1 + len(messages))]
    assert got[1:] == a2ui.derive(messages, RunFold())
    rebuilt = [e for e in got if "metadata" in e]
    assert [e["metadata"] for e in rebuilt] == [{"a2ui": {"rebuilt": "s"}}]
    # Every AG-UI client holds a bounded list, and the same surface.
    fold = fold_of(got)
    [activity] = fold.messages
    operations = activity["content"]["a2ui_operations"]
    assert len(operations) <= a2ui.MAX_OPERATIONS
    assert a2ui.view(operations) == a2ui.view(messages)


async def test_a2ui_and_other_events_share_the_run(client: httpx.AsyncClient) -> None:
    await start(client)
    await post(client, PUBLISH, [create("s"), data("s", "/a", 1)])
    text_events: list[Event] = [
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
    ]
    await post(client, AGUI, text_events)
    await post(client, PUBLISH, data("s", "/a", 2))
    got = [json.loads(s.data) for s in await read_agui(client, 7)]
    assert got[4:6] == text_events[1:]
    assert got[6] == a2ui.to_agui(data("s", "/a", 2))


BAD: list[tuple[str, Any, str]] = [
    (
        "an update before the surface exists",
        components("nope", text("root", "x")),
        "message.updateComponents.surfaceId: no surface 'nope': createSurface must come "
        "before any update or delete of a surface",
    ),
    (
        "a second createSurface",
        [create("s"), create("s")],
        "[1].createSurface.surfaceId: the surface 's' already exists (deleteSurface it first)",
    ),
    (
        "a delete of a surface already deleted",
        [create("s"), delete("s"), delete("s")],
        "[2].deleteSurface.surfaceId: no surface 's'",
    ),
    (
        "replace without a value",
        [create("s"), {"updateDataModel": {"surfaceId": "s", "path": "/a"}}],
        '[1].updateDataModel.value: required by op "replace"',
    ),
    (
        "remove with a value",
        [create("s"), {"updateDataModel": {"surfaceId": "s", "op": "remove", "value": 1}}],
        '[1].updateDataModel.value: not allowed with op "remove"',
    ),
    (
        "two operations in one message",
        {**create("s"), **delete("s")},
        "message: exactly one of createSurface, updateComponents, updateDataModel, "
        "deleteSurface must be present (found createSurface, deleteSurface)",
    ),
    ("an unknown key", {**create("s"), "version": "v0.9"}, "message.version: unknown field"),
    ("a seed field missing", {"createSurface": {"surfaceId": "s"}}, "message.createSurface"),
    (
        "a component without an id",
        [create("s"), components("s", {"component": "Text"})],
        "[1].updateComponents.components[0]",
    ),
    ("not an object", [create("s"), "hello"], "[1]: an A2UI message is an object, not string"),
    ("an empty array", [], "body: the array is empty; send at least one message"),
]


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
async def test_a_bad_body_is_400_and_appends_nothing(
    node: Gateway, client: httpx.AsyncClient, body: Any, message: str
) -> None:
    await start(client)
    r = await client.post(PUBLISH, json=body, headers=auth())
    assert error(r, 400, "invalid_request").startswith(message)
    assert await head(node) == 1


async def test_the_run_must_be_going(node: Gateway, client: httpx.AsyncClient) -> None:
    not_started = "run: the run has not started: publish its RUN_STARTED first"
    r = await client.post(PUBLISH, json=create("s"), headers=auth())
    assert error(r, 400, "invalid_request").startswith(not_started)
    # A run feed with events but no RUN_STARTED: AG-UI clients would refuse activities.
    await post(client, AGUI, {"type": "CUSTOM", "name": "hello", "value": 1})
    r = await client.post(PUBLISH, json=create("s"), headers=auth())
    assert error(r, 400, "invalid_request").startswith(not_started)
    await post(client, AGUI, [STARTED, {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN}])
    r = await client.post(PUBLISH, json=create("s"), headers=auth())
    assert error(r, 409, "run_ended") == (
        "run: the run has ended (RUN_FINISHED); nothing more can be published to it"
    )
    assert await head(node) == 3


async def test_an_idempotency_key_makes_a_retry_safe(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    await start(client)
    body = [create("s"), data("s", "/a", 1)]
    first = await post(client, PUBLISH, body, **{"Idempotency-Key": "req-1"})
    await post(client, PUBLISH, data("s", "/a", 2))
    held = await head(node)
    # The surface exists now, so the body would be refused were it not a retry.
    assert await post(client, PUBLISH, body, **{"Idempotency-Key": "req-1"}) == first
    assert await head(node) == held
    for other in ([create("s"), data("s", "/a", 9)], body[:1], [*body, data("s", "/b", 1)]):
        r = await client.post(PUBLISH, json=other, headers={**auth(), "Idempotency-Key": "req-1"})
        assert error(r, 409, "idempotency_key_reused").startswith("Idempotency-Key was already")
    assert await head(node) == held
    r = await client.post(PUBLISH, json=body, headers={**auth(), "Idempotency-Key": "k" * 201})
    assert error(r, 400, "invalid_request") == "Idempotency-Key: 1 to 200 characters"
    # Without a key, the same body is just another publish (and here a second create).
    r = await client.post(PUBLISH, json=body, headers=auth())
    assert "already exists" in error(r, 400, "invalid_request")


async def test_the_checks_of_every_publish_route(client: httpx.AsyncClient) -> None:
    await start(client)
    r = await client.post(PUBLISH, json=create("s"), headers=auth(scopes=("subscribe",)))
    error(r, 403, "forbidden")
    r = await client.post(PUBLISH, json=create("s"))
    error(r, 401, "unauthenticated")
    r = await client.post(PUBLISH, json=create("s"), headers=auth(threads=["other"]))
    assert error(r, 404, "not_found") == "no such run"
    r = await client.post("/v1/threads/a%20b/runs/r/a2ui", json=create("s"), headers=auth())
    assert error(r, 404, "not_found") == "no such run"
    r = await client.post(
        PUBLISH, content=json.dumps(create("s")), headers={**auth(), "Content-Type": "text/plain"}
    )
    error(r, 415, "unsupported_media_type")
    big = [create("s"), data("s", "/a", "x" * (64 * 1024))]
    r = await client.post(PUBLISH, json=big, headers=auth())
    error(r, 413, "too_large")
    r = await client.put(PUBLISH, json=create("s"), headers=auth())
    error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "POST"


async def test_the_publish_rate_counts_messages() -> None:
    async with (
        start_node(publish_rate=5, publish_burst=5) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        node.context.publish_rate.clock = lambda: 1000.0  # a frozen clock: no refill
        await start(client)
        body = [create("s"), *[data("s", "/a", i) for i in range(4)]]
        r = await client.post(PUBLISH, json=body, headers=auth())
        assert error(r, 429, "rate_limited")
        assert await head(node) == 1
        assert len(await post(client, PUBLISH, body[:4])) == 4


# --------------------------------------------------------------------------- late joiners


async def test_an_agui_late_joiner_gets_each_surface_compacted(client: httpx.AsyncClient) -> None:
    await start(client)
    cursors = await post(client, PUBLISH, SURFACES)
    events = [STARTED, *a2ui.derive(SURFACES, RunFold())]
    for k in (3, 8, len(SURFACES)):
        fold = fold_of(events[: k + 1])
        prelude = fold.prelude(THREAD, RUN, compactors=a2ui.PRELUDE_COMPACTORS)
        got = await read_agui(client, len(prelude), cursor=cursors[k - 1])
        assert [json.loads(s.data) for s in got] == prelude
        snapshot = prelude[2]["messages"]
        operations = [m for a in snapshot for m in a["content"]["a2ui_operations"]]
        assert operations == a2ui.late_joiner_messages(fold)


async def ws_messages(ws: ClientConnection, n: int) -> list[Event]:
    """The next ``n`` event frames (each checked to be one)."""
    frames: list[Event] = []
    with anyio.fail_after(10):
        while len(frames) < n:
            frame = json.loads(await ws.recv())
            assert frame["type"] == "event", frame
            frames.append(frame)
    return frames


async def test_websocket_a2ui_format_from_the_start_and_joined_late(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    await start(client)
    cursors = await post(client, PUBLISH, SURFACES)
    events = [STARTED, *a2ui.derive(SURFACES, RunFold())]
    async with open_ws(node) as ws:
        # From the start: each message as published, with its item's cursor; the run's
        # other events give nothing.
        await ws.send(json.dumps({"type": "subscribe", "feed": FEED, "format": "a2ui"}))
        subscribed = json.loads(await ws.recv())
        assert subscribed == {"type": "subscribed", "feed": FEED, "cursor": cursors[-1]}
        frames = await ws_messages(ws, len(SURFACES))
        assert [f["data"] for f in frames] == SURFACES
        assert [f["cursor"] for f in frames] == cursors
        assert {f["feed"] for f in frames} == {FEED}
        # Live: the next message as soon as it is published.
        [live] = await post(client, PUBLISH, data("banner", "/seen", 2))
        [frame] = await ws_messages(ws, 1)
        assert frame == {
            "type": "event",
            "feed": FEED,
            "cursor": live,
            "data": data("banner", "/seen", 2),
        }
        await ws.send(json.dumps({"type": "unsubscribe", "feed": FEED}))
    published = [*SURFACES, data("banner", "/seen", 2)]
    events.append(a2ui.to_agui(published[-1]))
    cursors.append(live)
    for k in (2, 9, len(SURFACES)):
        async with open_ws(node) as ws:
            message = {"type": "subscribe", "feed": FEED, "format": "a2ui", "after": cursors[k]}
            await ws.send(json.dumps(message))
            assert json.loads(await ws.recv())["type"] == "subscribed"
            prelude = a2ui.rejoin_messages(fold_of(events[: k + 2]))
            rest = published[k + 1 :]
            frames = await ws_messages(ws, len(prelude) + len(rest))
            # The prelude carries the cursor joined at; the items after it their own.
            assert [f["data"] for f in frames] == prelude + rest
            assert [f["cursor"] for f in frames] == [cursors[k]] * len(prelude) + cursors[k + 1 :]
            # Nothing else came: the next frame is the next message published.
            [sentinel] = await post(client, PUBLISH, create(f"sentinel-{k}"))
            [frame] = await ws_messages(ws, 1)
            assert (frame["cursor"], frame["data"]) == (sentinel, create(f"sentinel-{k}"))
            published.append(create(f"sentinel-{k}"))
            events.append(a2ui.to_agui(published[-1]))
            cursors.append(sentinel)


async def test_websocket_formats_are_per_feed_kind(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    await start(client)
    [cursor] = await post(client, PUBLISH, create("s"))
    team = "0190f5a2-7c1e-7b3d-8a4f-000000000001"
    async with open_ws(node) as ws:
        for feed, fmt, known in (
            (FEED, "ai-sdk-v9", '"ag-ui", "ai-sdk", "a2ui"'),
            (f"team/{team}", "a2ui", '"team"'),
            (FEED, 3, None),
        ):
            await ws.send(json.dumps({"type": "subscribe", "feed": feed, "format": fmt}))
            frame = json.loads(await ws.recv())
            assert (frame["type"], frame["feed"], frame["code"]) == (
                "error",
                feed,
                "invalid_request",
            )
            assert frame["message"].startswith("format: ")
            if known is not None:
                assert known in frame["message"]
        # The default and "ag-ui" are the AG-UI events; an explicit null is the default.
        for fmt in ("ag-ui", None):
            await ws.send(json.dumps({"type": "subscribe", "feed": FEED, "format": fmt}))
            assert json.loads(await ws.recv())["type"] == "subscribed"
            frames = await ws_messages(ws, 2)
            assert [f["data"] for f in frames] == [STARTED, a2ui.to_agui(create("s"))]
            assert frames[1]["cursor"] == cursor
