"""Draining a node under load (contract D2, D6, D8).

Two real ``gateway serve`` processes share one Redis behind a round-robin load balancer
(tests/support/balancer.py).  WebSocket clients and SSE clients follow three team feeds
through the balancer while a publisher keeps publishing through it.  SIGTERM to the
first node must: turn its readiness to 503 and stop it taking connections, close its
WebSockets with 1012 and end its SSE streams cleanly, let every one of its clients
resume with its last cursor on the other node, and exit with code 0 within a bounded
time.  At the end every client holds every published item of every feed exactly once,
in order, with the cursor and ``event_id`` the publisher got back; the clients of the
other node were never disconnected.

The clients here are deliberately plain (they record every frame and never drop a
duplicate) so that a duplicate or a gap shows; the gateway's own auto-resuming
``FeedClient`` follows the same feeds alongside them.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from httpx_sse import aconnect_sse
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from gateway.client import Event, FeedClient
from tests.support import events as ev
from tests.support.balancer import Balancer
from tests.support.env import without_settings
from tests.support.node import SECRET, auth, token
from tests.support.redis_server import free_port
from tests.support.wait import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1"]
DRAIN_SECONDS = 2.0
#: From SIGTERM to the process's exit: the drain window, the idle wait, the shutdown.
EXIT_DEADLINE = DRAIN_SECONDS + 15.0
START_DEADLINE = 30.0
TEAMS = 3
WS_CLIENTS = 4
SSE_CLIENTS = 3
#: Items every client must have per feed before the drain, and items published after
#: the drained node's clients are all back, before the publisher stops.
BEFORE = 20
AFTER = 20

#: (cursor, event_id) of one item.
Item = tuple[str, str]


# --------------------------------------------------------------------------- nodes


def _sigint_default() -> None:
    # A child of a non-interactive shell's background job inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Node:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.log} ---\n" + "\n".join(text)


def _env(redis_url: str, prefix: str) -> dict[str, str]:
    env = without_settings()
    env.update(
        GATEWAY_REDIS_URL=redis_url,
        GATEWAY_REDIS_PREFIX=prefix,
        GATEWAY_JWT_SECRET=SECRET,
        GATEWAY_DRAIN_SECONDS=str(DRAIN_SECONDS),
        GATEWAY_LOG_FORMAT="json",
    )
    return env


@contextlib.contextmanager
def _spawn(tmp_path: Path, name: str, env: dict[str, str]) -> Iterator[Node]:
    """``gateway serve`` on a free port; killed at the end if it is still running."""
    port = free_port()
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*CLI, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            preexec_fn=_sigint_default,
        )
    try:
        yield Node(proc, port, log)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


async def _wait_ready(node: Node) -> None:
    async with httpx.AsyncClient(base_url=node.url, timeout=2) as client:
        with anyio.fail_after(START_DEADLINE):
            while True:
                if node.proc.poll() is not None:
                    pytest.fail(f"gateway serve exited {node.proc.returncode}\n{node.log_tail()}")
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/readyz")).status_code == 200:
                        return
                await anyio.sleep(0.05)  # polling, bounded by the deadline above


# --------------------------------------------------------------------------- clients


@dataclass
class Connection:
    """One connection of a client: the node that served it and how it ended."""

    node: int
    #: "1012" etc. for a WebSocket close code, "end" for an SSE stream that ended
    #: cleanly, "error: ..." for anything else; None while open.
    ended: str | None = None


@dataclass
class Follower:
    name: str
    #: What the client received per feed, every frame, duplicates included.
    got: dict[str, list[Item]] = field(default_factory=dict)
    #: Per feed for SSE (one stream each), under "ws" for the WebSocket's one socket.
    connections: dict[str, list[Connection]] = field(default_factory=dict)
    #: Anything the client did not expect (error frames, epoch_restarted, bad status).
    problems: list[str] = field(default_factory=list)

    def last(self, feed: str) -> str | None:
        items = self.got.get(feed)
        return items[-1][0] if items else None


def _record(follower: Follower, feed: str, cursor: str, team_item: dict[str, Any]) -> None:
    c = team_item["cursor"]
    if f"{c['epoch']}:{c['offset']}" != cursor:
        follower.problems.append(f"{feed}: frame cursor {cursor} != item cursor {c}")
    follower.got.setdefault(feed, []).append((cursor, team_item["event"]["event_id"]))


async def follow_ws(
    follower: Follower,
    lb: Balancer,
    feeds: list[str],
    ready: anyio.Event,
) -> None:
    """Follow ``feeds`` on one socket; on a close, reconnect and resume every feed."""
    connections = follower.connections.setdefault("ws", [])
    while True:
        async with connect(
            f"ws://127.0.0.1:{lb.port}/v1/ws",
            subprotocols=[Subprotocol("gateway.v1")],
            additional_headers=auth(),
            max_size=None,
        ) as ws:
            node = lb.upstream_of(ws.local_address[1])
            assert node is not None
            conn = Connection(node)
            connections.append(conn)
            conn.ended = await _ws_session(follower, ws, feeds, ready)


async def _ws_session(
    follower: Follower, ws: ClientConnection, feeds: list[str], ready: anyio.Event
) -> str:
    pending = set(feeds)
    for feed in feeds:
        message: dict[str, Any] = {"type": "subscribe", "feed": feed}
        if (after := follower.last(feed)) is not None:
            message["after"] = after
        await ws.send(json.dumps(message))
    try:
        while True:
            frame = json.loads(await ws.recv())
            kind, feed = frame.get("type"), frame.get("feed")
            if kind == "event":
                _record(follower, feed, frame["cursor"], frame["data"])
            elif kind == "subscribed":
                pending.discard(feed)
                if not pending:
                    ready.set()
            else:
                follower.problems.append(f"unexpected frame {frame}")
    except ConnectionClosed as exc:
        return str(exc.rcvd.code) if exc.rcvd is not None else "error: no close frame"


async def follow_sse(follower: Follower, lb: Balancer, feed: str, ready: anyio.Event) -> None:
    """Follow one team feed; when the stream ends, reconnect with Last-Event-ID."""
    team = feed.removeprefix("team/")
    connections = follower.connections.setdefault(feed, [])
    timeout = httpx.Timeout(10, read=None)
    limits = httpx.Limits(max_keepalive_connections=0)  # a fresh connection every time
    async with httpx.AsyncClient(base_url=lb.url, timeout=timeout, limits=limits) as client:
        while True:
            headers = auth()
            if (after := follower.last(feed)) is not None:
                headers["Last-Event-ID"] = after
            conn: Connection | None = None
            try:
                async with aconnect_sse(
                    client, "GET", f"/v1/teams/{team}/events", headers=headers
                ) as source:
                    stream = source.response.extensions["network_stream"]
                    node = lb.upstream_of(stream.get_extra_info("client_addr")[1])
                    assert node is not None
                    conn = Connection(node)
                    connections.append(conn)
                    status = source.response.status_code
                    if status == 200:
                        ready.set()
                        async for sse in source.aiter_sse():
                            data = json.loads(sse.data)
                            if data.get("kind") != "event":
                                follower.problems.append(f"{feed}: unexpected item {data}")
                            _record(follower, feed, sse.id, data)
                        conn.ended = "end"
                    else:
                        body = await source.response.aread()
                        follower.problems.append(f"{feed}: {status} {body!r}")
                        conn.ended = f"error: {status}"
            except httpx.HTTPError as exc:
                follower.problems.append(f"{feed}: {exc!r}")
                if conn is not None:
                    conn.ended = f"error: {exc!r}"
            if follower.problems:
                await anyio.sleep(0.1)  # no hot loop on a failure (the test fails anyway)


async def follow_with_feed_client(
    client: FeedClient, feeds: list[str], got: dict[str, list[Item]]
) -> None:
    async for item in client.follow(feeds):
        assert isinstance(item, Event), item
        got.setdefault(item.feed, []).append((item.cursor, item.data["event"]["event_id"]))


# --------------------------------------------------------------------------- publisher


class Publisher:
    """Publishes through the balancer, retrying a failed request with the same body.

    A retry is safe (D4): an ``event_id`` the feed retains answers its first cursor.
    """

    def __init__(self, lb: Balancer, teams: list[str]) -> None:
        self.teams = teams
        self.published: dict[str, list[Item]] = {f"team/{t}": [] for t in teams}
        self.retries = 0
        self._lb = lb
        self._client = httpx.AsyncClient(base_url=lb.url, timeout=10)

    async def aclose(self) -> None:
        await self._client.aclose()

    def count(self) -> int:
        return min(len(items) for items in self.published.values())

    async def publish(self, team: str, n: int) -> None:
        items = [ev.item() for _ in range(n)]
        with anyio.fail_after(15, reason=f"publishing to {team} did not succeed"):
            while True:
                try:
                    r = await self._client.post(
                        f"/v1/teams/{team}/events", json=items, headers=auth()
                    )
                except httpx.TransportError:
                    r = None  # the node went away mid-request: appended or not, retry
                if r is not None and r.status_code == 200:
                    break
                assert r is None or r.status_code in (429, 503), r.text
                self.retries += 1
                await anyio.sleep(0.05)  # retry backoff
        cursors: list[str] = r.json()["cursors"]
        assert len(cursors) == n
        ids = [item["event"]["event_id"] for item in items]
        self.published[f"team/{team}"] += list(zip(cursors, ids, strict=True))

    async def run(self, stop: anyio.Event, done: anyio.Event) -> None:
        """Publish batches of 1-3 items round the teams, paced, until ``stop`` is set."""
        try:
            i = 0
            while not stop.is_set():
                for team in self.teams:
                    await self.publish(team, 1 + i % 3)
                    i += 1
                await anyio.sleep(0.005)  # pacing (a steady stream, not a flood)
        finally:
            done.set()


# --------------------------------------------------------------------------- the test


@pytest.fixture
async def balanced(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> AsyncIterator[tuple[Node, Node, Balancer]]:
    env = _env(redis_url, redis_prefix)
    with _spawn(tmp_path, "a", env) as a, _spawn(tmp_path, "b", env) as b:
        await _wait_ready(a)
        await _wait_ready(b)
        async with Balancer([a.port, b.port]) as lb:
            yield a, b, lb


async def test_sigterm_moves_every_client_to_the_other_node_losing_nothing(
    balanced: tuple[Node, Node, Balancer],
) -> None:
    a, b, lb = balanced
    teams = [ev.team_id() for _ in range(TEAMS)]
    feeds = [f"team/{t}" for t in teams]
    publisher = Publisher(lb, teams)
    ws_followers = [Follower(f"ws{i}") for i in range(WS_CLIENTS)]
    sse_followers = [Follower(f"sse{i}") for i in range(SSE_CLIENTS)]
    followers = ws_followers + sse_followers
    feed_clients = [
        FeedClient(lb.url, token, transport=transport, min_backoff=0.05)
        for transport in ("ws", "sse")
    ]
    feed_client_got: list[dict[str, list[Item]]] = [{}, {}]
    stop_publishing, publisher_done = anyio.Event(), anyio.Event()

    def everyone_has(n: int) -> bool:
        return all(len(f.got.get(feed, [])) >= n for f in followers for feed in feeds)

    def up_to_date() -> bool:
        last = {feed: items[-1] for feed, items in publisher.published.items()}
        return all(f.last(feed) == last[feed][0] for f in followers for feed in feeds) and all(
            got.get(feed, [])[-1:] == [last[feed]] for got in feed_client_got for feed in feeds
        )

    def diagnostics() -> str:
        lines = [f"{lb!r}; forwarded {lb.forwarded}, refused {lb.refused}"]
        for f in followers:
            counts = {feed[-4:]: len(f.got.get(feed, [])) for feed in feeds}
            lines.append(f"{f.name}: {counts} {f.connections} {f.problems[:3]}")
        lines.append(f"published {[len(v) for v in publisher.published.values()]}")
        return "\n".join(lines) + "\n" + a.log_tail() + "\n" + b.log_tail()

    try:
        async with contextlib.AsyncExitStack() as stack:
            for fc in feed_clients:
                await stack.enter_async_context(fc)
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)  # runs first: stops every client
            with anyio.fail_after(120, reason="the drain scenario did not finish"):
                # Every feed exists (a feed with nothing published is not_found).
                for team in teams:
                    await publisher.publish(team, 1)
                # One client connection at a time, so round-robin spreads them over
                # both nodes; each is subscribed before the next connects.
                for f in ws_followers:
                    ready = anyio.Event()
                    tg.start_soon(follow_ws, f, lb, feeds, ready)
                    await ready.wait()
                for f in sse_followers:
                    for feed in feeds:
                        ready = anyio.Event()
                        tg.start_soon(follow_sse, f, lb, feed, ready)
                        await ready.wait()
                on_a = [
                    (f.name, key)
                    for f in followers
                    for key, conns in f.connections.items()
                    if conns[0].node == a.port
                ]
                assert any(name.startswith("ws") for name, _ in on_a), diagnostics()
                assert any(name.startswith("sse") for name, _ in on_a), diagnostics()
                assert len(on_a) < sum(len(f.connections) for f in followers), diagnostics()
                for fc, got in zip(feed_clients, feed_client_got, strict=True):
                    tg.start_soon(follow_with_feed_client, fc, feeds, got)

                tg.start_soon(publisher.run, stop_publishing, publisher_done)
                await until(lambda: everyone_has(BEFORE), 20, "live items before the drain")

                # A health checker's keep-alive connection, opened before the drain:
                # the drained node stops listening, but still answers on it.
                async with httpx.AsyncClient(
                    base_url=a.url, timeout=5, limits=httpx.Limits(max_connections=1)
                ) as health:
                    assert (await health.get("/readyz")).status_code == 200
                    a.proc.send_signal(signal.SIGTERM)
                    # Polls another process, bounded by the fail_after above.
                    while (r := await health.get("/readyz")).status_code == 200:  # noqa: ASYNC110
                        await anyio.sleep(0.005)
                    assert r.status_code == 503, r.text
                    body = r.json()
                    assert (body["status"], body["reason"]) == ("not_ready", "draining")
                lb.mark_down(a.port)  # what the load balancer does on a failed check
                with pytest.raises(OSError):  # no new connections (D8)
                    await anyio.connect_tcp("127.0.0.1", a.port)

                # The drained node exits by itself, with code 0, in bounded time.
                await until(lambda: a.proc.poll() is not None, EXIT_DEADLINE, "exit")
                assert a.proc.returncode == 0, a.log_tail()

                def moved() -> bool:
                    return all(
                        len(conns) >= 2 and conns[-1].ended is None
                        for f in followers
                        for key, conns in f.connections.items()
                        if (f.name, key) in on_a
                    )

                await until(moved, 20, "every client of the drained node back")
                target = publisher.count() + AFTER
                await until(lambda: publisher.count() >= target, 20, "items after the drain")
                stop_publishing.set()
                await publisher_done.wait()
                await until(up_to_date, 20, "every client up to date")
    except BaseException:
        print(diagnostics())
        raise
    finally:
        await publisher.aclose()

    # Exactly once, in order, for every client and feed.
    for f in followers:
        assert not f.problems, (f.name, f.problems)
        for feed in feeds:
            assert f.got[feed] == publisher.published[feed], (f.name, feed)
    for got in feed_client_got:
        for feed in feeds:
            assert got[feed] == publisher.published[feed], feed
    # The drained node's connections ended the drain's way and resumed on the other;
    # the other node's were never disconnected.
    for f in followers:
        for key, conns in f.connections.items():
            if (f.name, key) in on_a:
                assert [c.node for c in conns] == [a.port, b.port], (f.name, key, conns)
                assert conns[0].ended == ("1012" if key == "ws" else "end"), (f.name, conns)
                assert conns[1].ended is None, (f.name, key, conns)
            else:
                assert [c.node for c in conns] == [b.port], (f.name, key, conns)
                assert conns[0].ended is None, (f.name, key, conns)
    assert b.proc.poll() is None, b.log_tail()
    assert "Traceback" not in a.log.read_text(), a.log_tail()
