"""Clients that connect, subscribe, and then stop reading: slow consumers on purpose.

A stalled client is a plain TCP socket with a small receive buffer (set before
``connect``, so the kernel does not grow it: loopback would otherwise absorb megabytes
before the gateway notices anything).  It opens a WebSocket (the handshake and the
subscribe frame come from websockets' sans-I/O :class:`ClientProtocol`) or an SSE
stream (a raw ``GET``), reads the response head, and never reads again.  The gateway
sees its socket fill up and must bound what it holds for it (D6: per-connection and
per-node buffers, then the slow-client policy) without slowing its other clients.

    stalled = [await open_stalled_ws(host, port, [feed]) for _ in range(20)]
    ...
    for s in stalled: s.close()

Blocking socket calls run in worker threads with timeouts (:data:`TIMEOUT`).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass

import anyio
from websockets.client import ClientProtocol
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from tests.support.node import token

RECEIVE_BUFFER = 4096
TIMEOUT = 5.0
_HEAD_LIMIT = 16384


@dataclass
class StalledClient:
    sock: socket.socket
    kind: str
    feeds: list[str]
    status: int

    def close(self) -> None:
        self.sock.close()


def _socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.settimeout(TIMEOUT)
    sock.connect((host, port))
    return sock


def _ws(host: str, port: int, feeds: list[str]) -> StalledClient:
    sock = _socket(host, port)
    try:
        protocol = ClientProtocol(
            parse_uri(f"ws://{host}:{port}/v1/ws"), subprotocols=[Subprotocol("gateway.v1")]
        )
        request = protocol.connect()
        request.headers["Authorization"] = f"Bearer {token()}"
        protocol.send_request(request)
        sock.sendall(b"".join(protocol.data_to_send()))
        response: Response | None = None
        while response is None:
            data = sock.recv(4096)
            if not data:
                raise ConnectionError("closed during the WebSocket handshake")
            protocol.receive_data(data)
            for event in protocol.events_received():
                if isinstance(event, Response):
                    response = event
        if response.status_code != 101:
            return StalledClient(sock, "ws", feeds, response.status_code)
        for feed in feeds:
            protocol.send_text(json.dumps({"type": "subscribe", "feed": feed}).encode())
        sock.sendall(b"".join(protocol.data_to_send()))
        return StalledClient(sock, "ws", feeds, 101)
    except BaseException:
        sock.close()
        raise


def _sse(host: str, port: int, feed: str) -> StalledClient:
    sock = _socket(host, port)
    try:
        team = feed.removeprefix("team/")
        sock.sendall(
            (
                f"GET /v1/teams/{team}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {token()}\r\nAccept: text/event-stream\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n" not in head:
            data = sock.recv(1)  # byte by byte: read the status line and nothing more
            if not data or len(head) > _HEAD_LIMIT:
                raise ConnectionError("no status line")
            head += data
        status = int(head.split(b" ", 2)[1])
        return StalledClient(sock, "sse", [feed], status)
    except BaseException:
        sock.close()
        raise


async def open_stalled_ws(host: str, port: int, feeds: list[str]) -> StalledClient:
    """A WebSocket subscribed to ``feeds`` that never reads again."""
    return await anyio.to_thread.run_sync(_ws, host, port, feeds)


async def open_stalled_sse(host: str, port: int, feed: str) -> StalledClient:
    """An SSE stream whose status line was read, and nothing after it."""
    return await anyio.to_thread.run_sync(_sse, host, port, feed)


__all__ = ["StalledClient", "open_stalled_sse", "open_stalled_ws"]
