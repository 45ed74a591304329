"""Stalled subscribers for the benchmark: connect, subscribe, then never read.

    python bench/stalled.py --url ws://127.0.0.1:8080/v1/ws --token JWT --feed team/ID -n 20

Each connection has a tiny receive buffer, so the kernel cannot hide the stall for
long. Prints ``ready`` once every connection is subscribed, then holds them open
until it is terminated.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time
from urllib.parse import urlsplit

from websockets.client import ClientProtocol
from websockets.typing import Subprotocol
from websockets.uri import parse_uri


def open_stalled(url: str, token: str, feed: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    proto = ClientProtocol(
        parse_uri(url), subprotocols=[Subprotocol("gateway.v1"), Subprotocol("bearer." + token)]
    )
    proto.send_request(proto.connect())
    sock.sendall(b"".join(proto.data_to_send()))
    # Read only the handshake answer, then stop reading for good.
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        response += chunk
    if not response.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(response.decode(errors="replace"))
    proto.receive_data(response)
    proto.send_text(json.dumps({"type": "subscribe", "feed": feed}).encode())
    sock.sendall(b"".join(proto.data_to_send()))
    return sock


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--feed", required=True)
    parser.add_argument("-n", type=int, default=20)
    ns = parser.parse_args()
    socks = [open_stalled(ns.url, ns.token, ns.feed) for _ in range(ns.n)]
    print("ready", flush=True)
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    deadline = time.monotonic() + 600  # never outlive a benchmark run
    while not stop and time.monotonic() < deadline:
        time.sleep(0.2)
    for sock in socks:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
