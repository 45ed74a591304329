"""Hostile or broken clients: resets, floods, silence, and history trimmed mid-join."""

from __future__ import annotations

import socket
import struct

import anyio
import anyio.to_thread
import httpx
import pytest
from httpx_sse import aconnect_sse
from websockets.client import ClientProtocol
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from gateway.fanout.hub import Hooks
from gateway.fanout.subscription import Subscription
from gateway.feed import NewItem
from gateway.net import server as http_server
from gateway.wire.teamitem import team_payload
from tests.support import events as ev
from tests.support.node import auth, start_node, token
from tests.support.wait import until

pytestmark = pytest.mark.anyio


def ws_handshake(port: int, feed: str | None) -> tuple[socket.socket, ClientProtocol]:
    """A raw WebSocket client: upgrade, optionally subscribe, then do nothing."""
    url = f"ws://127.0.0.1:{port}/v1/ws"
    sock = socket.socket()
    # A tiny receive buffer, so the kernel cannot hide a client that does not read.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    proto = ClientProtocol(
        parse_uri(url), subprotocols=[Subprotocol("gateway.v1"), Subprotocol("bearer." + token())]
    )
    proto.send_request(proto.connect())
    sock.sendall(b"".join(proto.data_to_send()))
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101")
    proto.receive_data(head)
    if feed is not None:
        proto.send_text(b'{"type":"subscribe","feed":"' + feed.encode() + b'"}')
        sock.sendall(b"".join(proto.data_to_send()))
    return sock, proto


async def test_a_reset_websocket_releases_its_subscriptions(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    async with start_node(url, prefix) as node:
        team = ev.team_id()
        async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
            r = await client.post(f"/v1/teams/{team}/events", json=ev.item(), headers=auth())
            assert r.status_code == 200
            for _ in range(3):
                sock, _ = await anyio.to_thread.run_sync(ws_handshake, node.port, f"team/{team}")
                await until(lambda: node.hub.audiences, 5, "the subscription")
                # Close with unread data and SO_LINGER 0: the peer sees a reset.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
                await until(lambda: not node.hub.audiences, 5, "the subscription's release")
            assert not node.context.connections
            # The node still serves: publish and follow.
            r = await client.post(f"/v1/teams/{team}/events", json=ev.item(), headers=auth())
            assert r.status_code == 200


async def test_a_client_that_sends_but_never_reads_is_cut_off() -> None:
    async with start_node(None, max_queue_bytes=64 * 1024) as node:
        sock, proto = await anyio.to_thread.run_sync(ws_handshake, node.port, None)
        sock.settimeout(10)

        def flood() -> bool:
            # Pings with big payloads: every pong goes back unread.
            try:
                for _ in range(40_000):
                    proto.send_ping(b"x" * 120)
                    sock.sendall(b"".join(proto.data_to_send()))
            except OSError:
                return True  # the server dropped us
            return False

        try:
            await anyio.to_thread.run_sync(flood)
            await until(lambda: not node.context.connections, 10, "the flooding socket's end")
            assert node.hub.budget.total == 0
        finally:
            sock.close()


async def test_a_silent_connection_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_server, "REQUEST_HEAD_SECONDS", 0.2)
    async with start_node(None) as node:
        sock = socket.create_connection(("127.0.0.1", node.port))
        sock.settimeout(5)
        try:
            data = await anyio.to_thread.run_sync(sock.recv, 10)
            assert data == b""  # closed by the server, not timed out here
        finally:
            sock.close()


async def test_a_keep_alive_connection_silent_after_its_requests_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The head timer is kept across requests (re-armed when it fires early): a
    connection served twice, then silent, is closed once the next head's bound passed."""
    monkeypatch.setattr(http_server, "REQUEST_HEAD_SECONDS", 0.3)
    healthz = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
    async with start_node(None) as node:
        with socket.create_connection(("127.0.0.1", node.port)) as sock:
            sock.settimeout(5)
            received = b""
            for n in (1, 2):
                sock.sendall(healthz)
                while received.count(b'{"status":"ok"}') < n:
                    chunk = await anyio.to_thread.run_sync(sock.recv, 4096)
                    assert chunk, "closed while requests were being served"
                    received += chunk
            data = await anyio.to_thread.run_sync(sock.recv, 10)
            assert data == b""  # closed by the server, not timed out here


async def test_a_slow_body_is_bound_by_the_body_timer_not_the_head_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_server, "REQUEST_HEAD_SECONDS", 0.2)
    head = b"POST /v1/teams/x/events HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n"
    async with start_node(None) as node:
        with socket.create_connection(("127.0.0.1", node.port)) as sock:
            sock.settimeout(5)
            sock.sendall(head)
            # Time must pass here, beyond the head's bound: that is the scenario.
            await anyio.sleep(0.6)
            sock.sendall(b"{}")
            answer = await anyio.to_thread.run_sync(sock.recv, 100)
            assert answer.startswith(b"HTTP/1.1 401 ")  # answered, not cut off
        monkeypatch.setattr(http_server, "REQUEST_BODY_SECONDS", 0.2)
        with socket.create_connection(("127.0.0.1", node.port)) as sock:
            sock.settimeout(5)
            sock.sendall(head + b"{")  # one byte of two, then nothing
            data = await anyio.to_thread.run_sync(sock.recv, 10)
            assert data == b""  # closed by the server once the body's bound passed


async def test_history_trimmed_during_a_join_restarts_the_subscription(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    node_ref: list[object] = []
    calls = 0

    async def after_page(sub: Subscription) -> None:
        # After the first history page, publish enough to trim past the joiner.
        nonlocal calls
        calls += 1
        if calls == 1:
            node = node_ref[0]
            items = []
            for _ in range(10):
                body = ev.item()
                items.append(
                    NewItem(body["event"]["event_id"], team_payload(body["source"], body["event"]))
                )
            await node.backend.feeds.append(sub.feed, items, retention=5)  # type: ignore[attr-defined]

    async with start_node(
        url, prefix, team_retention=5, history_page=2, hooks=Hooks(after_history_page=after_page)
    ) as node:
        node_ref.append(node)
        team = ev.team_id()
        async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
            r = await client.post(
                f"/v1/teams/{team}/events", json=[ev.item() for _ in range(5)], headers=auth()
            )
            epoch = r.json()["cursors"][0].split(":")[0]
            with anyio.fail_after(10):
                async with aconnect_sse(
                    client, "GET", f"/v1/teams/{team}/events", headers=auth()
                ) as source:
                    got = [(s.id, s.data) for s in [x async for x in source.aiter_sse()]]
    # Items 1 and 2, then (items 3..10 were trimmed meanwhile) epoch_restarted at the
    # oldest complete position: never item 11 right after item 2.
    assert [i for i, _ in got] == [f"{epoch}:1", f"{epoch}:2", f"{epoch}:10"]
    assert '"kind":"epoch_restarted"' in got[-1][1]
