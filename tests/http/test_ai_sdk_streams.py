"""The AI SDK UI message stream routes over real HTTP (contract D10).

``GET /v1/threads/{thread_id}/runs/{run_id}/ui/ai-sdk`` (the seed's uiRunFrames, protocol
ai-sdk) and ``GET /v1/ui/ai-sdk/{agent}/{chat_id}/stream`` (uiAiSdkReconnect), on the
embedded log and on Redis.  Every stream is compared message by message (SSE id and
chunk) with the pure translation (``gateway.dialects.ai_sdk.translator``): from the start, live,
resumed after every chunk id, resynced at event cursors; the cursors the run never
issued are 400 ``invalid_cursor``; an older epoch (a flush, and a redis-server of the
test's own that restarts empty, with a follower connected) and a trimmed position get
the restart chunk in band; a store failure after the stream started is an ``error``
chunk.  A custom client reading one chunk per connection resumes by Last-Event-ID at
every chunk boundary, across a node restart on the same Redis.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from gateway.agui.events import TERMINAL
from gateway.agui.fold import RunFold
from gateway.app import Gateway
from gateway.cursor import Cursor, parse_cursor
from gateway.dialects.ai_sdk.translator import AiSdkTranslator, compact
from gateway.errors import Unavailable
from gateway.feed import NewItem, StoredItem, run_feed
from gateway.store.memory import MemoryStore, memory_backend
from tests.agui.runs import NESTED, RUN, THREAD
from tests.dialects.runs import RUNS, long_run
from tests.support.backends import lose
from tests.support.node import auth, start_node
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.anyio

Json = dict[str, Any]
#: One SSE message: its id (None: no id field) and its data.
Message = tuple[str | None, Any]

AG_UI = f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui"
AI_SDK = f"/v1/threads/{THREAD}/runs/{RUN}/ui/ai-sdk"
DONE: Message = (None, "[DONE]")


def reconnect_path(chat: str = THREAD, agent: str = "any-agent") -> str:
    return f"/v1/ui/ai-sdk/{agent}/{chat}/stream"


def parse(body: bytes) -> list[Message]:
    """SSE messages as written (comment lines skipped; LF framing only)."""
    assert b"\r" not in body
    out: list[Message] = []
    for block in body.decode().split("\n\n"):
        event_id, data = None, []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            if field == "id":
                event_id = value
            else:
                assert field == "data", line
                data.append(value)
        if data:
            text = "\n".join(data)
            out.append((event_id, text if text == "[DONE]" else json.loads(text)))
        else:
            assert event_id is None, block
    return out


def plain(chunks: list[Any]) -> list[Json]:
    return [json.loads(json.dumps(c)) for c in chunks]


def translated(
    events: list[Json], cursors: list[str], translator: AiSdkTranslator | None = None
) -> list[Message]:
    """The pure translation as SSE messages: chunk K of the event at E:O is ``E:O:K``;
    the stream ends with ``[DONE]`` after the run's first end."""
    t = translator or AiSdkTranslator(THREAD, RUN)
    out: list[Message] = []
    for event, cursor in zip(events, cursors, strict=True):
        out += [(f"{cursor}:{k}", c) for k, c in enumerate(plain(t.translate(event)))]
        if event["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            out.append(DONE)
            break
    return out


def fold_of(events: list[Json]) -> RunFold:
    fold = RunFold()
    for event in events:
        fold.apply(event)
    return fold


def resynced(events: list[Json], cursors: list[str], k: int) -> list[Message]:
    """What a resync at the k-th event gives: compact(fold at k) without ids, then the
    chunks of the events after it."""
    fold = fold_of(events[:k])
    head: list[Message] = [(None, c) for c in plain(compact(fold, THREAD, RUN))]
    if fold.terminal is not None:
        return [*head, DONE]
    rest = AiSdkTranslator.from_fold(fold, THREAD, RUN)
    return head + translated(events[k:], cursors[k:], rest)


async def publish(client: httpx.AsyncClient, events: list[Json], path: str = AG_UI) -> list[str]:
    cursors: list[str] = []
    for start in range(0, len(events), 1000):
        r = await client.post(path, json=events[start : start + 1000], headers=auth())
        assert r.status_code == 200, r.text
        cursors += r.json()["cursors"]
    return cursors


async def read(
    client: httpx.AsyncClient, path: str = AI_SDK, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[Message]]:
    """The whole response (the stream ends by itself), bounded."""
    with anyio.fail_after(10):
        async with client.stream("GET", path, headers={**auth(), **(headers or {})}) as r:
            body = await r.aread()
    return r, parse(body) if r.status_code == 200 else []


async def read_until(chunks: AsyncIterator[bytes], messages: int) -> bytes:
    """A stream's bytes up to the end of its first ``messages`` messages (the caller
    bounds the wait; a stream that ends sooner fails)."""
    body = b""
    while len(parse(body[: body.rfind(b"\n\n") + 1])) < messages:
        body += await anext(chunks)
    end = body.rfind(b"\n\n") + 2
    assert len(parse(body[:end])) == messages, "more came at once than asked for"
    return body


async def get(
    client: httpx.AsyncClient,
    path: str,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> httpx.Response:
    """A GET expected to be answered at once (an error or 204): bounded, so that a
    stream answered by mistake fails the test instead of hanging it."""
    with anyio.fail_after(10):
        async with client.stream("GET", path, headers=headers, params=params) as r:
            await r.aread()
    return r


def assert_ai_sdk_headers(r: httpx.Response) -> None:
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert r.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-accel-buffering"] == "no"


# -- the committed route ------------------------------------------------------------------


async def test_the_run_from_the_start_is_the_translation_then_done(
    client: httpx.AsyncClient,
) -> None:
    cursors = await publish(client, NESTED)
    r, got = await read(client)
    assert_ai_sdk_headers(r)
    assert got == translated(NESTED, cursors)
    assert got[-1] == DONE and got[-2][1] == {"type": "finish", "finishReason": "stop"}


async def test_a_stream_follows_the_run_live(client: httpx.AsyncClient) -> None:
    first = await publish(client, NESTED[:9])
    with anyio.fail_after(10):
        async with client.stream("GET", AI_SDK, headers=auth()) as r:
            assert_ai_sdk_headers(r)
            # The subscription is registered before the headers are sent: what is
            # published now arrives live.
            rest = await publish(client, NESTED[9:])
            body = await r.aread()
    assert parse(body) == translated(NESTED, first + rest)


async def held(node: Gateway, events: list[Json]) -> list[str]:
    """Put ``events`` in the run feed as the store holds them, without the publish rules:
    a run feed with content after its end (written before a run's end was final, which
    publishing now refuses) is still read."""
    feed = run_feed("acme", THREAD, RUN)
    items = [NewItem(None, json.dumps(e).encode()) for e in events]
    result = await node.backend.feeds.append(feed, items, retention=100_000)
    return [str(c) for c in result.cursors]


@pytest.mark.parametrize("name", ["chunks", "approval", "reorder", "history"])
async def test_resuming_after_every_chunk_id_gives_the_next_chunk(
    node: Gateway, client: httpx.AsyncClient, name: str
) -> None:
    events = RUNS[name]
    ends = [e["type"] in TERMINAL for e in events]
    after_end = any(ends[:-1])
    cursors = await (held(node, events) if after_end else publish(client, events))
    whole = translated(events, cursors)
    assert any(i is not None and not i.endswith(":0") for i, _ in whole)  # mid-event ids
    for n, (chunk_id, _) in enumerate(whole[:-1]):
        assert chunk_id is not None
        # Last-Event-ID as an EventSource sends it, and ?after= for every other one.
        if n % 2:
            _, got = await read(client, f"{AI_SDK}?after={chunk_id}")
        else:
            _, got = await read(client, headers={"Last-Event-ID": chunk_id})
        assert got == whole[n + 1 :], chunk_id


async def test_an_event_cursor_resyncs_with_a_compact_replay(client: httpx.AsyncClient) -> None:
    cursors = await publish(client, NESTED)
    epoch = parse_cursor(cursors[0]).epoch
    for k in (0, 1, 5, 13, 20, len(NESTED) - 1, len(NESTED)):
        _, got = await read(client, headers={"Last-Event-ID": f"{epoch}:{k}"})
        expected = translated(NESTED, cursors) if k == 0 else resynced(NESTED, cursors, k)
        assert got == expected, k
        if k:
            assert got[0] == (None, {"type": "start", "messageId": f"run:{THREAD}:{RUN}"})
            assert got[1] == (None, {"type": "reset-step"})


async def test_cursors_the_run_never_issued_are_invalid_cursor(
    client: httpx.AsyncClient,
) -> None:
    cursors = await publish(client, NESTED)
    epoch, head = parse_cursor(cursors[0]).epoch, len(NESTED)
    chunks = translated(NESTED, cursors)
    last_of_event_2 = max(int(i.split(":")[2]) for i, _ in chunks if i and i.startswith(cursors[1]))
    bad = [
        "x",
        "",
        "1:2:3:4",
        "1:-2",
        "1:2:a",
        "1:2:",
        ":1:0",
        f"{epoch}:1:{2**53}",
        f"{2**53}:1",
        "1" * 70,
        f"{epoch + 1}:0",  # a later epoch
        f"{epoch + 1}:1:0",
        f"{epoch}:{head + 1}",  # past the head
        f"{epoch}:{head + 1}:0",
        f"{epoch}:2:{last_of_event_2 + 1}",  # a chunk the event does not have
        f"{epoch}:0:0",  # there is no item at offset 0
    ]
    for cursor in bad:
        for how in ("header", "query"):
            if how == "header":
                r = await get(client, AI_SDK, headers={**auth(), "Last-Event-ID": cursor})
            else:
                r = await get(client, AI_SDK, params={"after": cursor}, headers=auth())
            assert r.status_code == 400, (cursor, how, r.text)
            assert r.headers["content-type"] == "application/json"
            body = r.json()
            assert list(body) == ["error"] and list(body["error"]) == ["code", "message"]
            assert body["error"]["code"] == "invalid_cursor", (cursor, how)
    # The header wins over ?after=, both ways.
    good = f"{cursors[1]}:{last_of_event_2}"
    _, got = await read(client, f"{AI_SDK}?after=nonsense", headers={"Last-Event-ID": good})
    assert got[0][0] == f"{cursors[2]}:0"
    r = await get(client, AI_SDK, params={"after": good}, headers={**auth(), "Last-Event-ID": "x"})
    assert r.status_code == 400


async def test_an_older_epoch_gets_the_restart_chunk_then_done(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    old = await publish(client, NESTED)
    # The store loses the run (a flush); it is published again, in a new epoch.
    await lose(node.backend, run_feed("acme", THREAD, RUN))
    new = await publish(client, NESTED)
    new_epoch = parse_cursor(new[0]).epoch
    assert new_epoch > parse_cursor(old[0]).epoch
    restart: Message = (
        f"{new_epoch}:0",
        {
            "type": "data-gateway-epoch-restarted",
            "data": {"cursor": f"{new_epoch}:0"},
            "transient": True,
        },
    )
    for cursor in (f"{old[3]}:0", old[3], old[-1]):
        r, got = await read(client, headers={"Last-Event-ID": cursor})
        assert_ai_sdk_headers(r)
        assert got == [restart, DONE], cursor
    # Reconnecting with the cursor it carries replays the run of the new epoch.
    _, got = await read(client, headers={"Last-Event-ID": f"{new_epoch}:0"})
    assert got == translated(NESTED, new)


async def test_the_protocol_must_be_ai_sdk_or_ag_ui(client: httpx.AsyncClient) -> None:
    await publish(client, NESTED[:2])
    for protocol in ("nope", "AI-SDK", "ai_sdk", "a2ui"):
        path = f"/v1/threads/{THREAD}/runs/{RUN}/ui/{protocol}"
        assert (await get(client, path)).status_code == 401  # every /v1 route authenticates
        r = await get(client, path, headers=auth())
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", protocol
    r = await client.post(AI_SDK, json=NESTED[:1], headers=auth())
    assert r.status_code == 405 and r.headers["allow"] == "GET"


async def test_a_run_the_caller_may_not_read_is_the_same_404(client: httpx.AsyncClient) -> None:
    await publish(client, NESTED[:2])
    missing = await get(client, f"/v1/threads/{THREAD}/runs/no-such-run/ui/ai-sdk", headers=auth())
    assert missing.status_code == 404
    for headers in (auth("other"), auth(threads=["another-thread"])):
        r = await get(client, AI_SDK, headers=headers)
        assert (r.status_code, r.content) == (404, missing.content)
    r = await get(client, AI_SDK, headers=auth(scopes=["publish"]))
    assert r.status_code == 401


# -- the reconnect route (useChat resume) -------------------------------------------------


async def test_reconnect_while_the_run_goes_is_the_compact_replay_then_live(
    client: httpx.AsyncClient,
) -> None:
    k = 14
    first = await publish(client, NESTED[:k])
    with anyio.fail_after(10):
        async with client.stream("GET", reconnect_path(), headers=auth()) as r:
            assert_ai_sdk_headers(r)
            rest = await publish(client, NESTED[k:])
            body = await r.aread()
    assert parse(body) == resynced(NESTED, first + rest, k)


async def test_reconnect_answers_204_when_there_is_nothing_to_resume(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    def nothing(r: httpx.Response) -> None:
        assert r.status_code == 204, r.text
        assert r.content == b"" and "content-type" not in r.headers

    nothing(await get(client, reconnect_path(), headers=auth()))  # no run on the chat yet
    await publish(client, NESTED[:3])
    async with client.stream("GET", reconnect_path(), headers=auth()) as r:
        assert r.status_code == 200  # (the stream is cut here, the run goes on)
    # Another tenant's chat, and a thread outside the token's threads claim, answer
    # exactly like a chat without a run.
    nothing(await get(client, reconnect_path(), headers=auth("other")))
    nothing(await get(client, reconnect_path(), headers=auth(threads=["another-thread"])))
    async with client.stream("GET", reconnect_path(), headers=auth(threads=[THREAD])) as r:
        assert r.status_code == 200
    # The run ended: nothing to resume.
    await publish(client, NESTED[3:])
    nothing(await get(client, reconnect_path(), headers=auth()))
    # A run whose feed is gone (lost, or deleted after its grace period).
    second = f"/v1/threads/{THREAD}/runs/run-2/ui/ag-ui"
    await publish(client, [dict(NESTED[0], runId="run-2")], second)
    async with client.stream("GET", reconnect_path(), headers=auth()) as r:
        assert r.status_code == 200
    await lose(node.backend, run_feed("acme", THREAD, "run-2"))
    nothing(await get(client, reconnect_path(), headers=auth()))


async def test_reconnect_streams_the_latest_run_of_the_thread(client: httpx.AsyncClient) -> None:
    await publish(client, NESTED[:3])  # run-1 goes on
    second = f"/v1/threads/{THREAD}/runs/run-2/ui/ag-ui"
    await publish(client, [dict(NESTED[0], runId="run-2")], second)
    with anyio.fail_after(10):
        async with client.stream("GET", reconnect_path(), headers=auth()) as r:
            assert r.status_code == 200
            finished = dict(NESTED[-1], runId="run-2")
            await publish(client, [finished], second)
            got = parse(await r.aread())
    assert got[0] == (None, {"type": "start", "messageId": f"run:{THREAD}:run-2"})
    assert got[-2][1] == {"type": "finish", "finishReason": "stop"} and got[-1] == DONE
    # run-2 ended; run-1 still goes, but it is not the thread's latest run.
    r = await get(client, reconnect_path(), headers=auth())
    assert r.status_code == 204


async def test_reconnect_checks_the_chat_id_and_the_token(client: httpx.AsyncClient) -> None:
    for chat in ("a%20b", "a%2Fb", "x" * 129, "ü", "a:b"):
        r = await get(client, reconnect_path(chat), headers=auth())
        assert r.status_code == 400, chat
        assert r.json()["error"] == {
            "code": "invalid_request",
            "message": "chat_id: must match ^[A-Za-z0-9_.-]{1,128}$",
        }
    assert (await get(client, reconnect_path("x" * 128), headers=auth())).status_code == 204
    assert (await get(client, reconnect_path())).status_code == 401
    r = await get(client, reconnect_path(), headers=auth(scopes=["publish"]))
    assert r.status_code == 401
    r = await client.post(reconnect_path(), headers=auth())
    assert r.status_code == 405 and r.headers["allow"] == "GET"


# -- retention and failures ---------------------------------------------------------------


@pytest.fixture
async def trimming(node_redis: tuple[str | None, str]) -> AsyncIterator[Gateway]:
    """A node whose run feeds trim their first block of 1000 as soon as they can."""
    url, prefix = node_redis
    async with start_node(url, prefix, run_retention=1) as n:
        yield n


async def test_a_trimmed_position_gets_the_restart_chunk(trimming: Gateway) -> None:
    events = long_run(21, 21)
    assert len(events) > 1001
    async with httpx.AsyncClient(base_url=trimming.url, timeout=10) as client:
        cursors = await publish(client, events)
        state = await trimming.backend.feeds.state(run_feed("acme", THREAD, RUN))
        assert state is not None and state.first == 1001  # the first block is gone
        epoch = state.epoch
        restart: Message = (
            f"{epoch}:1000",
            {
                "type": "data-gateway-epoch-restarted",
                "data": {"cursor": f"{epoch}:1000"},
                "transient": True,
            },
        )
        # Inside the trimmed block, and mid-way through its last event (whose rest is
        # gone), the client must resync.
        for cursor in (f"{epoch}:5", f"{epoch}:5:0", f"{epoch}:999", f"{epoch}:1000:0"):
            _, got = await read(client, headers={"Last-Event-ID": cursor})
            assert got == [restart, DONE], cursor
        # The resync at that cursor, and a stream without a cursor, start with the
        # compact replay of the fold kept where retention begins.
        expected = resynced(events, cursors, 1000)
        assert (await read(client, headers={"Last-Event-ID": f"{epoch}:1000"}))[1] == expected
        assert (await read(client))[1] == expected
        # A chunk id past the trim point still continues exactly.
        after = f"{cursors[1010]}:0"
        _, got = await read(client, headers={"Last-Event-ID": after})
        assert got == translated(events[1011:], cursors[1011:], from_event(events, 1011))


def restart_chunk(cursor: str) -> Message:
    data = {"cursor": cursor}
    return (cursor, {"type": "data-gateway-epoch-restarted", "data": data, "transient": True})


async def retrying(call: Any) -> httpx.Response:
    """A request to a node whose Redis just restarted: a 503 is retried (bounded; the
    pool may hand out a connection to the old process once)."""
    for _ in range(30):
        r: httpx.Response = await call()
        if r.status_code != 503:
            return r
    raise AssertionError(f"still 503: {r.text}")


@pytest.mark.redis_admin
async def test_after_redis_lost_its_data_the_stream_restarts_in_band() -> None:
    with RedisServer(persistence=False) as server:
        async with (
            start_node(server.url, "gwtest:ai_sdk", read_block_ms=200) as node,
            httpx.AsyncClient(base_url=node.url, timeout=10) as client,
        ):
            old = await publish(client, NESTED[:10])
            with anyio.fail_after(30):
                async with client.stream("GET", AI_SDK, headers=auth()) as follower:
                    assert_ai_sdk_headers(follower)
                    # The lost epoch's chunks reach the follower before Redis goes.
                    chunks = follower.aiter_raw()
                    body = await read_until(chunks, len(translated(NESTED[:10], old)))
                    await anyio.to_thread.run_sync(server.stop)
                    await anyio.to_thread.run_sync(server.start)  # same port, empty
                    # The index went with the data: nothing to resume yet.
                    r = await retrying(lambda: get(client, reconnect_path(), auth()))
                    assert r.status_code == 204
                    r = await retrying(lambda: client.post(AG_UI, json=NESTED[:3], headers=auth()))
                    assert r.status_code == 200, r.text
                    new: list[str] = r.json()["cursors"]
                    got = parse(body + b"".join([chunk async for chunk in chunks]))
            new_epoch = parse_cursor(new[0]).epoch
            assert new_epoch > parse_cursor(old[0]).epoch
            # The follower got every chunk of the lost epoch once, then the restart.
            assert got == [*translated(NESTED[:10], old), restart_chunk(f"{new_epoch}:0"), DONE]
            # A client holding an id of the lost epoch is told the same.
            _, got = await read(client, headers={"Last-Event-ID": f"{old[4]}:0"})
            assert got == [restart_chunk(f"{new_epoch}:0"), DONE]
            # The run started again: it is the chat's latest run once more.
            async with client.stream("GET", reconnect_path(), headers=auth()) as r:
                assert_ai_sdk_headers(r)


def from_event(events: list[Json], k: int) -> AiSdkTranslator:
    return AiSdkTranslator.from_fold(fold_of(events[:k]), THREAD, RUN)


class FailingReads(MemoryStore):
    """The embedded store, whose history reads fail on demand (a store outage)."""

    failing = False

    async def read(self, feed: Any, after: Cursor, limit: int) -> list[StoredItem]:
        if self.failing:
            raise Unavailable("redis unavailable during read")
        return await super().read(feed, after, limit)


async def test_a_failure_after_the_stream_started_is_an_error_chunk() -> None:
    store = FailingReads()
    async with (
        start_node(backend=memory_backend(store)) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        await publish(client, NESTED)
        store.failing = True  # the join plans and opens; its history read fails
        r, got = await read(client)
        assert_ai_sdk_headers(r)
        error = {"type": "error", "errorText": "unavailable: redis unavailable during read"}
        assert got == [(None, error), DONE]
        # The AG-UI stream has no such frame: it just ends (contract D7).
        r, got = await read(client, AG_UI)
        assert r.status_code == 200 and got == []


# -- a custom client resuming by Last-Event-ID, through a node restart --------------------


async def next_message(client: httpx.AsyncClient, last: str | None) -> Message:
    """One connection of a client that reads a single message and hangs up: it sends
    the id of the last message it got as Last-Event-ID."""
    headers = auth() if last is None else {**auth(), "Last-Event-ID": last}
    with anyio.fail_after(10):
        async with client.stream("GET", AI_SDK, headers=headers) as r:
            assert_ai_sdk_headers(r)
            received = b""
            async for data in r.aiter_bytes():
                received += data
                if b"\n\n" in received:
                    break
    [first] = parse(received.split(b"\n\n")[0] + b"\n\n")
    return first


async def test_a_client_resumes_at_every_chunk_boundary_through_a_node_restart(
    redis_url: str, redis_prefix: str
) -> None:
    events = RUNS["chunks"]
    cut = 8  # events[7] is a TOOL_CALL_CHUNK of eight chunks: the node stops inside it
    got: list[Message] = []

    def last_id() -> str | None:
        return got[-1][0] if got else None

    async with (
        start_node(redis_url, redis_prefix) as a,
        httpx.AsyncClient(base_url=a.url, timeout=10) as client,
    ):
        first = await publish(client, events[:cut])
        seen_on_a = translated(events[:cut], first)
        assert seen_on_a[-8][0] == f"{first[7]}:0" and seen_on_a[-1][0] == f"{first[7]}:7"
        for _ in range(len(seen_on_a) - 5):
            got.append(await next_message(client, last_id()))
        assert last_id() == f"{first[7]}:2"
    # Another node on the same Redis (a new port): the cursors live in the store.
    async with (
        start_node(redis_url, redis_prefix) as b,
        httpx.AsyncClient(base_url=b.url, timeout=10) as client,
    ):
        for _ in range(5):
            got.append(await next_message(client, last_id()))
        assert last_id() == f"{first[7]}:7"
        # At the head: this connection waits for the next chunk, which comes live.
        headers = {**auth(), "Last-Event-ID": str(last_id())}
        with anyio.fail_after(10):
            async with client.stream("GET", AI_SDK, headers=headers) as r:
                assert_ai_sdk_headers(r)
                rest = await publish(client, events[cut:])
                received = b""
                async for data in r.aiter_bytes():
                    received += data
                    if b"\n\n" in received:
                        break
        got.append(parse(received.split(b"\n\n")[0] + b"\n\n")[0])
        while got[-1] != DONE:
            assert len(got) < 200
            got.append(await next_message(client, last_id()))
    expected = translated(events, first + rest)
    assert got == expected
    ids = [i for i, _ in got if i is not None]
    assert len(ids) == len(set(ids)) == len(expected) - 1  # each chunk exactly once
