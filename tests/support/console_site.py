"""A stand-in for the gateway's console routes, in front of a real node (tests only).

Until a node serves ``/console/`` and ``GET /v1/feeds`` itself, the browser test puts
this in front of it, on one origin, the way the page will be served:

- ``GET /console/<file>`` answers the files of ``gateway/console/`` (only those);
- ``GET /v1/feeds?kind=&limit=&after=`` (when ``feeds`` is given) answers the listing
  contract the console uses, ``{"feeds": [{"feed", "kind", "head", "updated_ms"}],
  "next"}``, newest first, from ``feeds()``, for the bearer ``token`` only;
- every other connection (the ``/v1/ws`` upgrade) is forwarded as raw TCP to the node's
  port, so a node that restarts on the same port is reached again.

Local answers close their connection (``Connection: close``); the request head is
bounded (``MAX_HEAD``) and so are forwarded buffers (:class:`Forwarder`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.abc

from tests.support.tcp_proxy import CHUNK_BYTES, Forwarder

CONSOLE_DIR = Path(__file__).parent.parent.parent / "gateway" / "console"
MAX_HEAD = 64 * 1024
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".ts": "text/plain; charset=utf-8",
}
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)

FeedEntry = dict[str, Any]


class ConsoleSite(Forwarder):
    """See the module docstring.  ``upstream`` is the node's port."""

    _name = "console site"

    def __init__(
        self,
        upstream: int,
        *,
        feeds: Callable[[], list[FeedEntry]] | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(CHUNK_BYTES)
        self.upstream = upstream
        self._feeds = feeds
        self._token = token
        #: Paths answered here, and connections forwarded (for assertions).
        self.served: list[str] = []
        self.forwarded = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        async with client:
            head = b""
            with contextlib.suppress(*_GONE):
                while b"\r\n\r\n" not in head:
                    if len(head) > MAX_HEAD:
                        return
                    head += await client.receive(CHUNK_BYTES)
            if b"\r\n\r\n" not in head:
                return
            request_line, _, rest = head.partition(b"\r\n")
            method, target, _ = request_line.decode("latin-1").split(" ", 2)
            headers = _headers(rest.partition(b"\r\n\r\n")[0])
            path = urlsplit(target).path
            if path.startswith("/console/") or (path == "/v1/feeds" and self._feeds):
                self.served.append(path)
                status, content_type, body = self._answer(method, target, headers)
                await _respond(client, status, content_type, body)
                return
            self.forwarded += 1
            try:
                upstream = await anyio.connect_tcp("127.0.0.1", self.upstream)
            except OSError:
                return  # the node is down: the client sees its connection closed
            with contextlib.suppress(*_GONE):
                await upstream.send(head)
                await self._forward(client, upstream)

    def _answer(self, method: str, target: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
        if method != "GET":
            return _error(405, "method_not_allowed", "GET only")
        parts = urlsplit(target)
        if parts.path == "/v1/feeds":
            return self._list(parse_qs(parts.query), headers)
        name = parts.path.removeprefix("/console/") or "index.html"
        files = {p.name: p for p in CONSOLE_DIR.iterdir() if p.suffix in _TYPES}
        if name not in files:
            return _error(404, "not_found", "no such file")
        return 200, _TYPES[files[name].suffix], files[name].read_bytes()

    def _list(self, query: dict[str, list[str]], headers: dict[str, str]) -> tuple[int, str, bytes]:
        assert self._feeds is not None
        if headers.get("authorization") != f"Bearer {self._token}":
            return _error(401, "unauthenticated", "a bearer token with the subscribe scope")
        kind = query.get("kind", [None])[0]
        limit = min(int(query.get("limit", ["50"])[0]), 200)
        start = int(query.get("after", ["0"])[0])
        rows = sorted(self._feeds(), key=lambda f: -int(f["updated_ms"]))
        rows = [r for r in rows if kind is None or r["kind"] == kind]
        page = rows[start : start + limit]
        more = start + limit < len(rows)
        body = {"feeds": page, "next": str(start + limit) if more else None}
        return 200, "application/json", json.dumps(body).encode()


def _headers(block: bytes) -> dict[str, str]:
    out = {}
    for line in block.decode("latin-1").split("\r\n"):
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


def _error(status: int, code: str, message: str) -> tuple[int, str, bytes]:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return status, "application/json", body


async def _respond(
    client: anyio.abc.SocketStream, status: int, content_type: str, body: bytes
) -> None:
    head = (
        f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
        f"content-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
        "cache-control: no-store\r\nconnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(*_GONE):
        await client.send(head + body)


__all__ = ["CONSOLE_DIR", "ConsoleSite"]
