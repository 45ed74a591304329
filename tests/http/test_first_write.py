"""The first bytes of a subscription (one write fewer per reconnect).

The SSE response head and WebSocket's ``subscribed`` frame are handed to the driver,
which writes them with its first bytes (the prelude, the join's history page) or, when
it has nothing to send with them, at once before it waits.  These tests check what a
client sees on real sockets: a well-framed head and history, and the head or
``subscribed`` arriving while nothing is published.  Keepalives are off (60 s), so
nothing but the join itself can have sent what arrives before a publish.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import anyio.abc
import httpx
import pytest

from gateway.app import Gateway
from tests.support import events as ev
from tests.support.node import auth, open_ws, start_node, token

pytestmark = pytest.mark.anyio

#: Every wait of these tests is bounded by this (seconds).
WAIT = 10


@pytest.fixture
async def node(node_redis: tuple[str | None, str]) -> AsyncIterator[Gateway]:
    url, prefix = node_redis
    async with start_node(url, prefix, keepalive_seconds=60) as n:
        yield n


async def publish(node: Gateway, team: str, n: int) -> list[str]:
    async with httpx.AsyncClient(base_url=node.url, timeout=WAIT) as http:
        r = await http.post(
            f"/v1/teams/{team}/events", json=[ev.item() for _ in range(n)], headers=auth()
        )
    assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    return cursors


class Sse:
    """A raw HTTP/1.1 SSE client: the head as sent, then the chunks decoded."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.buf = b""
        self.body = b""

    async def _more(self) -> None:
        self.buf += await self.stream.receive()

    async def head(self) -> bytes:
        with anyio.fail_after(WAIT):
            while b"\r\n\r\n" not in self.buf:
                await self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return head

    async def ids(self, n: int) -> list[str]:
        """The ids of the next ``n`` SSE messages (chunked framing checked on the way)."""
        with anyio.fail_after(WAIT):
            while self.body.count(b"\n\n") < n:
                while b"\r\n" not in self.buf:
                    await self._more()
                size_line, rest = self.buf.split(b"\r\n", 1)
                size = int(size_line, 16)
                while len(rest) < size + 2:
                    await self._more()
                    rest = self.buf.split(b"\r\n", 1)[1]
                assert rest[size : size + 2] == b"\r\n", "a chunk ends with CRLF"
                self.body += rest[:size]
                self.buf = rest[size + 2 :]
        messages, _, self.body = self.body.rpartition(b"\n\n")
        found = [line[4:].decode() for line in messages.split(b"\n") if line.startswith(b"id: ")]
        assert len(found) == n, messages
        return found


async def open_sse(node: Gateway, team: str, after: str) -> tuple[anyio.abc.SocketStream, Sse]:
    stream = await anyio.connect_tcp(node.settings.host, node.port)
    await stream.send(
        f"GET /v1/teams/{team}/events HTTP/1.1\r\nHost: gw\r\n"
        f"Authorization: Bearer {token()}\r\nLast-Event-ID: {after}\r\n\r\n".encode()
    )
    return stream, Sse(stream)


async def test_sse_head_and_history_come_well_framed(node: Gateway) -> None:
    team = ev.team_id()
    cursors = await publish(node, team, 5)
    epoch = cursors[0].split(":")[0]
    stream, sse = await open_sse(node, team, f"{epoch}:1")
    async with stream:
        head = await sse.head()
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"transfer-encoding: chunked" in head.lower()
        assert b"text/event-stream" in head
        assert await sse.ids(4) == cursors[1:]
        later = await publish(node, team, 1)
        assert await sse.ids(1) == later


async def test_sse_head_comes_at_once_when_there_is_no_history_to_send(node: Gateway) -> None:
    team = ev.team_id()
    cursors = await publish(node, team, 2)
    stream, sse = await open_sse(node, team, cursors[-1])  # at the head: nothing to replay
    async with stream:
        head = await sse.head()  # nothing is published meanwhile, no keepalive is due
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        later = await publish(node, team, 2)
        assert await sse.ids(2) == later


async def test_ws_subscribed_comes_first_with_history_and_at_once_without(
    node: Gateway,
) -> None:
    behind, at_head = ev.team_id(), ev.team_id()
    old = await publish(node, behind, 3)
    head = await publish(node, at_head, 1)
    async with open_ws(node) as ws:
        with anyio.fail_after(WAIT):
            await ws.send(
                json.dumps({"type": "subscribe", "feed": f"team/{at_head}", "after": head[-1]})
            )
            first = json.loads(await ws.recv())
            assert first == {"type": "subscribed", "feed": f"team/{at_head}", "cursor": head[-1]}
            await ws.send(json.dumps({"type": "subscribe", "feed": f"team/{behind}"}))
            got = [json.loads(await ws.recv()) for _ in range(4)]
    assert got[0] == {"type": "subscribed", "feed": f"team/{behind}", "cursor": old[-1]}
    assert [(m["type"], m["cursor"]) for m in got[1:]] == [("event", c) for c in old]
