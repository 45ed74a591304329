"""Every wire format on every transport, followed live by the real clients, through events
that encode to nothing, to one frame and to several.

An item may encode to nothing in a format (an AI SDK stream has no chunk for AG-UI's
``REASONING_START``, an A2UI socket nothing for an event without A2UI); no write may then
reach the connection, since an empty HTTP/1.1 chunk ends the body.  Each test publishes
a run step by step, each step only once the node has delivered the last one (so each is
a batch of its own), while the client follows from the start; then reads the run again
(a replay from the store; for the AI SDK also a resume after the chunk before the first
step with no chunk).  It asserts that the client saw the whole run, in order, and that
the stream ended the way the format ends it: ``data: [DONE]`` (``readUIMessageStream``
from npm ``ai``), RUN_FINISHED and the end of the body (``@ag-ui/client``'s HttpAgent,
npm ``eventsource``), the result message (the threads run stream), the last frame on a
socket that stays open (npm ``ws``); and that the node counted each SSE end as its own
(``gateway_disconnects_total{reason="finished"}``), not as the client's.

The clients are ``tests/js/live_follow.mjs``; the node runs on the embedded log and on
Redis (``log_kind``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from gateway.agui.fold import RunFold
from gateway.app import Gateway
from gateway.cursor import parse_cursor
from gateway.dialects import a2ui
from gateway.dialects.ai_sdk.translator import AiSdkTranslator, compact, message_id
from gateway.fanout.subscription import SubState
from gateway.feed import FeedKey, run_events_feed, run_feed, team_feed
from tests.dialects.a2ui_runs import components, create, text
from tests.http.test_run_stream import PATH as STREAM_PATH
from tests.http.test_run_stream import RESULT, STATUS, committed, delta
from tests.http.test_run_stream import RUN as STREAM_RUN
from tests.http.test_run_stream import THREAD as STREAM_THREAD
from tests.support import events as ev
from tests.support.jsprocess import Duplex, duplex, js_packages, node_executable
from tests.support.node import auth, metric, token, ws_url
from tests.support.wait import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Json = dict[str, Any]
TENANT = "acme"
THREAD, RUN = "live-thread", "live-run"
RUN_PATH = f"/v1/threads/{THREAD}/runs/{RUN}"
RUN_FEED = f"run/{THREAD}/{RUN}"
#: Bound on each test, and on each wait inside one.
TEST_TIMEOUT = 30
WAIT = 10

# A run, as the steps a producer publishes: (the publish route, its body).  Per step, what
# it encodes to in the formats that can encode an item to nothing: AI SDK chunks / A2UI
# messages.
STEPS: list[tuple[str, list[Json]]] = [
    # one chunk / nothing
    ("ag-ui", [{"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN}]),
    # nothing / nothing
    ("ag-ui", [{"type": "REASONING_START", "messageId": "rs1"}]),
    # three items, a chunk each / nothing
    (
        "ag-ui",
        [
            {"type": "REASONING_MESSAGE_START", "messageId": "rm1", "role": "reasoning"},
            {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm1", "delta": "think"},
            {"type": "REASONING_MESSAGE_END", "messageId": "rm1"},
        ],
    ),
    # nothing / nothing
    ("ag-ui", [{"type": "REASONING_END", "messageId": "rs1"}]),
    # two items, a chunk each / a message each
    ("a2ui", [create("s1"), components("s1", text("root", "Hello"))]),
    # one item, two chunks (text-start, text-delta) / nothing
    (
        "ag-ui",
        [{"type": "TEXT_MESSAGE_CHUNK", "messageId": "c1", "role": "assistant", "delta": "Hi"}],
    ),
    # nothing (an empty delta) / nothing
    ("ag-ui", [{"type": "TEXT_MESSAGE_CHUNK", "delta": ""}]),
    # one item, one chunk / two messages of one item
    (
        "ag-ui",
        [
            {
                "type": "ACTIVITY_SNAPSHOT",
                "messageId": a2ui.activity_id("s2"),
                "activityType": a2ui.ACTIVITY_TYPE,
                "content": {
                    a2ui.OPERATIONS_KEY: [create("s2"), components("s2", text("root", "Bye"))]
                },
            }
        ],
    ),
    # the end: two chunks (text-end, finish; over SSE then [DONE]) / nothing
    ("ag-ui", [{"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN}]),
]


@pytest.fixture(scope="module")
def node_exe() -> str:
    exe = node_executable()
    js_packages()
    return exe


# --------------------------------------------------------------------------- helpers


async def post(client: httpx.AsyncClient, path: str, body: Any) -> list[str | None]:
    r = await client.post(path, json=body, headers=auth())
    assert r.status_code == 200, r.text
    cursors: list[str | None] = r.json()["cursors"]
    return cursors


def delivered(node: Gateway, feed: FeedKey, cursor: str) -> Callable[[], bool]:
    """The node's reader has handed the item at ``cursor`` to the feed's subscribers, or
    the feed has none left (a stream that ended early: the assertions then say how)."""
    at = parse_cursor(cursor)

    def check() -> bool:
        audience = node.hub.audiences.get(feed)
        return audience is None or audience.position >= at

    return check


async def live(node: Gateway, feed: FeedKey, subscribers: int = 1) -> None:
    """Wait until ``subscribers`` subscriptions of ``feed`` follow it live."""

    def check() -> bool:
        audience = node.hub.audiences.get(feed)
        subs = audience.subs if audience is not None else set()
        return sum(s.state is SubState.LIVE for s in subs) >= subscribers

    await until(check, WAIT, "the subscription going live")


async def publish_steps(
    node: Gateway,
    client: httpx.AsyncClient,
    feed: FeedKey,
    steps: list[tuple[str, Any]],
    first: int = 1,
    on_transient: Callable[[list[Json]], Awaitable[None]] | None = None,
) -> list[str]:
    """Publish ``steps[first:]`` one at a time, each once the node delivered the one
    before (a step of transient messages only: once ``on_transient(body)`` returned);
    returns the cursors of the items of those steps."""
    cursors: list[str] = []
    for index, (path, body) in enumerate(steps):
        if index < first:
            continue
        got = await post(client, path, body)
        stored = [c for c in got if c is not None]
        cursors += stored
        if stored:
            await until(delivered(node, feed, stored[-1]), WAIT, f"step {index} delivered")
        elif on_transient is not None:
            await on_transient(body)
    return cursors


def run_route(route: str) -> str:
    return f"{RUN_PATH}/ui/ag-ui" if route == "ag-ui" else f"{RUN_PATH}/a2ui"


def run_steps() -> list[tuple[str, Any]]:
    return [(run_route(route), body) for route, body in STEPS]


def run_events() -> list[Json]:
    """The run feed's AG-UI events, in order (A2UI messages as the events carrying them)."""
    fold = RunFold()
    events: list[Json] = []
    for route, body in STEPS:
        derived = body if route == "ag-ui" else a2ui.derive(body, fold)
        for event in derived:
            fold.apply(event)
        events += derived
    return events


def ai_sdk_chunks(events: list[Json]) -> list[list[Json]]:
    """Each event's AI SDK chunks, as the pure translation gives them."""
    t = AiSdkTranslator(THREAD, RUN)
    # Each as JSON at once: a chunk may share its data with the translator's fold.
    translated: list[list[Json]] = [json.loads(json.dumps(t.translate(e))) for e in events]
    return translated


def test_the_run_encodes_to_nothing_to_one_and_to_several_frames() -> None:
    # The premise of every test below, checked on the pure encodings.
    per_event = ai_sdk_chunks(run_events())
    assert {len(chunks) for chunks in per_event} >= {0, 1, 2}
    nothing = [i for i, chunks in enumerate(per_event) if not chunks]
    assert nothing and nothing[0] == 1, "REASONING_START encodes to no chunk"
    messages = [len(a2ui.messages_of(e)) for e in run_events()]
    assert {0, 1, 2} <= set(messages)


async def start_run(node: Gateway, client: httpx.AsyncClient) -> str:
    """Publish the run's first step; returns its cursor."""
    [cursor] = await post(client, run_route(STEPS[0][0]), STEPS[0][1])
    assert cursor is not None
    return cursor


def assert_sse_ends(node: Gateway, finished: int) -> None:
    """The node counted ``finished`` SSE streams as ended by their format, none as left by
    the client.  (Counted before the stream's end is written: a client that read to the
    end has been counted.)"""
    labels = {"transport": "sse"}
    assert metric(node, "gateway_disconnects_total", **labels, reason="finished") == finished
    assert metric(node, "gateway_disconnects_total", **labels, reason="client") == 0


# --------------------------------------------------------------------------- AI SDK SSE


async def follow_ai_sdk(js: Duplex, name: str, url: str) -> None:
    opened = await js.call("ai_sdk", name=name, url=url, token=token())
    assert opened == {
        "status": 200,
        "header": "v1",
        "contentType": "text/event-stream; charset=utf-8",
        "stream": True,
    }


@pytest.mark.parametrize("route", ["run", "reconnect"])
async def test_ai_sdk_sse_live_replayed_and_resumed(
    node: Gateway, node_exe: str, route: str
) -> None:
    feed = run_feed(TENANT, THREAD, RUN)
    events = run_events()
    per_event = ai_sdk_chunks(events)
    every = [c for chunks in per_event for c in chunks]
    follow_url = f"{node.url}{RUN_PATH}/ui/ai-sdk"
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        duplex(node_exe, "live_follow.mjs", {"timeout_ms": TEST_TIMEOUT * 1000}) as js,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            first = await start_run(node, client)
            url = (
                follow_url
                if route == "run"
                else f"{node.url}/v1/ui/ai-sdk/any-agent/{THREAD}/stream"
            )
            await follow_ai_sdk(js, "live", url)
            await live(node, feed)
            cursors = [first, *await publish_steps(node, client, feed, run_steps())]
            assert len(cursors) == len(events)
            got = await js.call("finish", name="live")
            # A replay of the finished run from the store, and a resume after the chunk
            # before REASONING_START (its page starts with an item that has no chunk).
            await follow_ai_sdk(js, "replay", follow_url)
            replayed = await js.call("finish", name="replay")
            after = f"{cursors[0]}:{len(per_event[0]) - 1}"
            await follow_ai_sdk(js, "resumed", f"{follow_url}?after={after}")
            resumed = await js.call("finish", name="resumed")
    for result in (got, replayed, resumed):
        assert result["errors"] == []
        assert result["raw"].endswith("data: [DONE]\n\n"), result["raw"][-200:]
    assert got["message"]["id"] == message_id(THREAD, RUN)
    # Live on the run route every chunk comes as the run made it; the reconnect route
    # starts with the compact replay of the run as it was (its first step).
    start = per_event[0]
    if route == "reconnect":
        fold = RunFold()
        fold.apply(events[0])
        start = json.loads(json.dumps(compact(fold, THREAD, RUN)))
    assert got["chunks"] == start + every[len(per_event[0]) :]
    assert replayed["chunks"] == every
    assert resumed["chunks"] == every[len(per_event[0]) :]
    assert replayed["message"] == got["message"]
    assert resumed["message"]["parts"] == got["message"]["parts"]
    parts = got["message"]["parts"]
    assert [p["type"] for p in parts][:2] == ["reasoning", "data-a2ui-surface"]
    assert {"type": "text", "text": "Hi", "state": "done"} in parts
    assert_sse_ends(node, 3)


# --------------------------------------------------------------------------- AG-UI SSE


async def test_ag_ui_sse_live_replayed_and_resumed_with_event_source(
    node: Gateway, node_exe: str
) -> None:
    feed = run_feed(TENANT, THREAD, RUN)
    events = run_events()
    url = f"{node.url}{RUN_PATH}/ui/ag-ui"
    stop = {"type": "RUN_FINISHED"}
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        duplex(node_exe, "live_follow.mjs", {"timeout_ms": TEST_TIMEOUT * 1000}) as js,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            first = await start_run(node, client)
            await js.call("sse", name="live", url=url, token=token(), stop=stop)
            await live(node, feed)
            cursors = [first, *await publish_steps(node, client, feed, run_steps())]
            got = await js.call("finish", name="live")
            await js.call("sse", name="replay", url=url, token=token(), stop=stop)
            replayed = await js.call("finish", name="replay")
            resume = f"{url}?after={cursors[0]}"
            await js.call("sse", name="resumed", url=resume, token=token(), stop=stop)
            resumed = await js.call("finish", name="resumed")
    expected = [{"id": c, "data": e} for c, e in zip(cursors, events, strict=True)]
    for result in (got, replayed, resumed):
        assert (result["errors"], result["ended"], result["opens"]) == ([], "server", 1)
    assert got["messages"] == expected
    assert replayed["messages"] == expected
    # Joined past the start: the prelude (the run so far, no ids, D7), then the rest.
    prelude = resumed["messages"][: -len(expected[1:])]
    assert resumed["messages"][len(prelude) :] == expected[1:]
    assert prelude and prelude[0]["data"]["type"] == "RUN_STARTED"
    assert all(m["id"] == "" for m in prelude)
    assert_sse_ends(node, 3)


async def test_ag_ui_http_agent_live_and_replayed(node: Gateway, node_exe: str) -> None:
    feed = run_feed(TENANT, THREAD, RUN)
    events = run_events()
    url = f"{node.url}/v1/ui/ag-ui/any-agent"
    fold = RunFold()
    for event in events:
        fold.apply(event)
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        duplex(node_exe, "live_follow.mjs", {"timeout_ms": TEST_TIMEOUT * 1000}) as js,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            await start_run(node, client)
            agent = {"url": url, "token": token(), "threadId": THREAD, "runId": RUN}
            await js.call("agui", name="live", **agent)
            await live(node, feed)
            await publish_steps(node, client, feed, run_steps())
            got = await js.call("finish", name="live")
            await js.call("agui", name="replay", **agent)
            replayed = await js.call("finish", name="replay")
    for result in (got, replayed):
        assert result["ok"], result
        assert result["events"][0] == "RUN_STARTED" and result["events"][-1] == "RUN_FINISHED"
        assert result["messages"] == fold.messages
    assert replayed["events"] == got["events"]
    assert_sse_ends(node, 2)


# --------------------------------------------------------------------------- the threads run stream


async def test_run_stream_live_with_transients_and_replayed(node: Gateway, node_exe: str) -> None:
    feed = run_events_feed(TENANT, STREAM_THREAD, STREAM_RUN)
    url = f"{node.url}{STREAM_PATH}"
    stop = {"type": "result"}
    steps: list[tuple[str, Any]] = [
        (STREAM_PATH, [committed(1)]),
        (STREAM_PATH, [delta("Hel")]),  # transient only: no item
        (STREAM_PATH, [committed(2), delta("lo"), committed(3)]),
        (STREAM_PATH, [STATUS]),
        (STREAM_PATH, [RESULT]),
    ]
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        duplex(node_exe, "live_follow.mjs", {"timeout_ms": TEST_TIMEOUT * 1000}) as js,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            await post(client, STREAM_PATH, steps[0][1])
            await js.call("sse", name="live", url=url, token=token(), stop=stop)
            await live(node, feed)

            async def transient_seen(body: list[Json]) -> None:
                # A transient message has no cursor to wait on: the client reports it.
                await js.until(lambda m: m.get("kind") == "message" and m["data"] == body[-1])

            await publish_steps(node, client, feed, steps, on_transient=transient_seen)
            got = await js.call("finish", name="live")
            await js.call("sse", name="replay", url=url, token=token(), stop=stop)
            replayed = await js.call("finish", name="replay")
    steps_data = [m for _, body in steps for m in body]
    stored = [m for m in steps_data if m["kind"] in ("event", "result")]
    for result in (got, replayed):
        assert (result["errors"], result["ended"], result["opens"]) == ([], "server", 1)
    assert [m["data"] for m in got["messages"]] == steps_data
    assert [m["data"] for m in replayed["messages"]] == stored
    # Committed events carry their seq as id; the result none.
    assert [m["id"] for m in replayed["messages"]] == ["1", "2", "3", ""]
    assert_sse_ends(node, 2)


# --------------------------------------------------------------------------- team SSE


def team_steps(team: str) -> list[tuple[str, Any]]:
    """One item, then three in one body, then one (a team item is always one frame)."""
    path = f"/v1/teams/{team}/events"
    return [(path, [ev.item()]), (path, [ev.item() for _ in range(3)]), (path, [ev.item()])]


def team_data(cursor: str, item: Json) -> Json:
    epoch, offset = (int(x) for x in cursor.split(":"))
    cursor_of = {"epoch": epoch, "offset": offset}
    return {"cursor": cursor_of, "kind": "event", "source": item["source"], "event": item["event"]}


async def start_team(client: httpx.AsyncClient, steps: list[tuple[str, Any]]) -> list[str]:
    cursors = await post(client, steps[0][0], steps[0][1])
    assert all(c is not None for c in cursors)
    return [c for c in cursors if c is not None]


async def test_team_sse_live_and_replayed_with_event_source(node: Gateway, node_exe: str) -> None:
    team = ev.team_id()
    feed = team_feed(TENANT, team)
    steps = team_steps(team)
    items = [item for _, body in steps for item in body]
    url = f"{node.url}/v1/teams/{team}/events"
    stop = {"count": len(items)}
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        duplex(node_exe, "live_follow.mjs", {"timeout_ms": TEST_TIMEOUT * 1000}) as js,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            cursors = await start_team(client, steps)
            await js.call("sse", name="live", url=url, token=token(), stop=stop)
            await live(node, feed)
            cursors += await publish_steps(node, client, feed, steps)
            got = await js.call("finish", name="live")
            await js.call("sse", name="replay", url=url, token=token(), stop=stop)
            replayed = await js.call("finish", name="replay")
    expected = [
        {"id": c, "data": team_data(c, item)} for c, item in zip(cursors, items, strict=True)
    ]
    for result in (got, replayed):
        # The team feed never ends: the client leaves after the last item.
        assert (result["errors"], result["ended"], result["opens"]) == ([], "client", 1)
        assert result["messages"] == expected


# --------------------------------------------------------------------------- WebSocket


def ws_expected(fmt: str, feed: str, cursors: list[str], payloads: list[Json]) -> list[Json]:
    """The event frames a ``gateway.v1`` subscription in ``fmt`` gets for these items."""
    frames: list[Json] = []

    def event(cursor: str, data: Any) -> None:
        frames.append({"type": "event", "feed": feed, "cursor": cursor, "data": data})

    pairs = list(zip(cursors, payloads, strict=True))
    if fmt == "team":
        for cursor, item in pairs:
            event(cursor, team_data(cursor, item))
    elif fmt == "ag-ui":
        for cursor, e in pairs:
            event(cursor, e)
    elif fmt == "ai-sdk":
        for (cursor, _), chunks in zip(pairs, ai_sdk_chunks(payloads), strict=True):
            for k, chunk in enumerate(chunks):
                event(f"{cursor}:{k}", chunk)
    else:
        for cursor, e in pairs:
            for message in a2ui.messages_of(e):
                event(cursor, message)
    return frames


def ws_event_count(fmt: str, payloads: list[Json]) -> int:
    """How many event frames those items make in ``fmt``."""
    if fmt in ("team", "ag-ui"):
        return len(payloads)
    if fmt == "ai-sdk":
        return sum(len(chunks) for chunks in ai_sdk_chunks(payloads))
    return sum(len(a2ui.messages_of(e)) for e in payloads)


@pytest.mark.parametrize("fmt", ["team", "ag-ui", "ai-sdk", "a2ui"])
async def test_ws_formats_live_and_replayed(node: Gateway, node_exe: str, fmt: str) -> None:
    async with (
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        duplex(node_exe, "live_follow.mjs", {"timeout_ms": TEST_TIMEOUT * 1000}) as js,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            if fmt == "team":
                team = ev.team_id()
                feed, name = team_feed(TENANT, team), f"team/{team}"
                steps = team_steps(team)
                payloads = [item for _, body in steps for item in body]
                cursors = await start_team(client, steps)
            else:
                feed, name = run_feed(TENANT, THREAD, RUN), RUN_FEED
                steps, payloads = run_steps(), run_events()
                cursors = [await start_run(node, client)]
            count = ws_event_count(fmt, payloads)
            socket = {"url": ws_url(node), "token": token()}
            subscribe = {"feed": name, "format": fmt}
            stop = {"count": count}
            await js.call("ws", name="live", subscribe=subscribe, stop=stop, **socket)
            await live(node, feed)
            cursors += await publish_steps(node, client, feed, steps)
            got = await js.call("finish", name="live")
            await js.call("ws", name="replay", subscribe=subscribe, stop=stop, **socket)
            replayed = await js.call("finish", name="replay")
            resumed = None
            if fmt == "ai-sdk":  # after the first chunk: the next page starts with no chunk
                after = {**subscribe, "after": f"{cursors[0]}:0"}
                rest = {"count": count - 1}
                await js.call("ws", name="resumed", subscribe=after, stop=rest, **socket)
                resumed = await js.call("finish", name="resumed")
    expected = ws_expected(fmt, name, cursors, payloads)
    for result in (got, replayed, resumed):
        if result is None:
            continue
        assert result["close"] == {"code": 1000, "reason": "done", "by": "client"}, result
        assert result["frames"][0]["type"] == "subscribed"
    assert got["frames"][1:] == expected
    assert replayed["frames"][1:] == expected
    if resumed is not None:
        assert resumed["frames"][1:] == expected[1:]
