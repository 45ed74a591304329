"""A client that stops reading is bounded, dealt with alone, and can resume.

The slow client is a real TCP socket with a tiny receive buffer that simply stops
reading; enough is published that the kernel's buffers (its receive buffer and the
server's send buffer) fill long before the gateway's own bound, so the bound really
fires.  Meanwhile a normal client receives everything.
"""

from __future__ import annotations

import socket
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
from httpx_sse import aconnect_sse

from gateway.app import Gateway
from gateway.fanout.subscription import SubState
from tests.support import events as ev
from tests.support.node import auth, metric, start_node, token
from tests.support.wait import until

pytestmark = pytest.mark.anyio

MAX_QUEUE = 64 * 1024
PAGE = 20
TEXT = "x" * 4000  # ~4 KiB events
EVENTS = 1000  # ~4 MiB in all, far beyond the socket buffers


def raw_sse_request(port: int, team: str, last_id: str | None = None) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    headers = f"Authorization: Bearer {token()}\r\n"
    if last_id:
        headers += f"Last-Event-ID: {last_id}\r\n"
    sock.sendall(f"GET /v1/teams/{team}/events HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
    return sock


def read_all(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def sse_ids(raw: bytes) -> tuple[list[str], bool]:
    """Ids of complete SSE messages in a chunked response; and whether it ended cleanly."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    text = b""
    ended = False
    rest = body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            ended = True
            break
        text += rest[:size]
        rest = rest[size + 2 :]
    ids = [
        line[4:].decode()
        for message in text.split(b"\n\n")
        if message.endswith(b"}") or b"data:" in message
        for line in message.split(b"\n")
        if line.startswith(b"id: ")
    ]
    return ids, ended


def slow_sub_buffered(node: Gateway) -> int:
    """Bytes the gateway holds for the subscriptions that are not live (the slow one)."""
    total = 0
    for audience in node.hub.audiences.values():
        for sub in audience.subs:
            if sub.state is not SubState.LIVE and sub.outbox is not None:
                total = max(total, sub.outbox.buffered())
    return total


async def test_a_reader_that_stops_is_bounded_and_others_do_not_wait(
    redis_url: str, redis_prefix: str
) -> None:
    async with start_node(
        redis_url,
        redis_prefix,
        max_queue_bytes=MAX_QUEUE,
        history_page=PAGE,
        slow_client_timeout=2.0,
        keepalive_seconds=3600,
    ) as node:
        team = ev.team_id()
        async with httpx.AsyncClient(base_url=node.url, timeout=20) as client:
            r = await client.post(f"/v1/teams/{team}/events", json=ev.item(), headers=auth())
            first = r.json()["cursors"][0]
            published = [first]
            fast: list[str] = []
            peak = 0
            done = anyio.Event()

            async def follow_fast() -> None:
                async with aconnect_sse(
                    client, "GET", f"/v1/teams/{team}/events", headers=auth()
                ) as source:
                    async for sse in source.aiter_sse():
                        fast.append(sse.id)
                        if len(fast) == EVENTS + 1:
                            done.set()
                            return

            async def watch_memory() -> None:
                nonlocal peak
                while not done.is_set():
                    peak = max(peak, slow_sub_buffered(node), int(node.hub.budget.total))
                    await anyio.sleep(0.002)

            slow = await anyio.to_thread.run_sync(raw_sse_request, node.port, team)
            try:
                with anyio.fail_after(20):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(follow_fast)
                        # Both subscriptions live before publishing (bounded wait).
                        await until(
                            lambda: sum(len(c.subs) for c in node.hub.audiences.values()) >= 2,
                            10,
                            "both subscriptions",
                        )
                        tg.start_soon(watch_memory)
                        for _ in range(EVENTS // 50):
                            body = [ev.item(ev.message(TEXT)) for _ in range(50)]
                            r = await client.post(
                                f"/v1/teams/{team}/events", json=body, headers=auth()
                            )
                            assert r.status_code == 200
                            published += r.json()["cursors"]
                        await done.wait()
                # The fast client got everything while the slow one read nothing.
                assert fast == published
                assert metric(node, "gateway_slow_consumer_actions_total", action="catch_up") >= 1
                # The slow one never held more than its bound plus one history page.
                assert peak <= MAX_QUEUE + PAGE * 5000 + 65536, peak
                # Stopped for longer than slow_client_timeout: disconnected as slow.
                await until(
                    lambda: metric(
                        node, "gateway_slow_consumer_actions_total", action="disconnect"
                    ),
                    15,
                    "the slow client's disconnect",
                )
                slow_ends = metric(
                    node, "gateway_disconnects_total", transport="sse", reason="slow"
                )
                assert slow_ends == 1
                # It reads again: a clean prefix of the feed, then the end of the stream.
                raw = await anyio.to_thread.run_sync(read_all, slow)
            except BaseException:
                print("fast", len(fast), "published", len(published), "peak", peak)
                for c in node.hub.audiences.values():
                    print("audience", c.position, [(s.state, s.position) for s in c.subs])
                raise
            finally:
                slow.close()
            ids, ended = sse_ids(raw)
            assert ended
            assert ids == published[: len(ids)]
            assert len(ids) < len(published)
            # And it resumes from its last cursor: the rest, exactly once.
            rest = await anyio.to_thread.run_sync(_resume, node.port, team, ids[-1])
            assert ids + rest == published


def _resume(port: int, team: str, last_id: str) -> list[str]:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
        got: list[str] = []
        headers: dict[str, Any] = {**auth(), "Last-Event-ID": last_id}
        with client.stream("GET", f"/v1/teams/{team}/events", headers=headers) as response:
            for line in response.iter_lines():
                if line.startswith("id: "):
                    got.append(line[4:])
                    if got[-1].endswith(f":{EVENTS + 1}"):
                        return got
    return got
