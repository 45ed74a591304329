"""The HTTP/1.1 listener on real sockets: pipelining, keep-alive, early errors,
``100 Continue``, chunked uploads and HTTP/1.0, byte for byte as a client sees them.

A raw TCP client (no HTTP library that would tidy things up) against a real node, on
the embedded log and on Redis (the ``node`` fixture of ``tests/http/conftest.py``).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.abc
import pytest

from gateway.app import Gateway
from tests.support import events as ev
from tests.support.node import token

pytestmark = pytest.mark.anyio

#: Every wait of these tests is bounded by this (seconds).
WAIT = 10


class Response:
    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<{self.status} {self.reason} {self.headers} {self.body[:200]!r}>"


class RawClient:
    """One TCP connection: send bytes, read responses (``content-length`` framed)."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def _more(self) -> None:
        data = await self.stream.receive()  # EndOfStream when the server closed
        self.buf += data

    async def response(self, *, to_head: bool = False) -> Response:
        """The next response (``to_head``: the answer to a HEAD, which has no body)."""
        with anyio.fail_after(WAIT):
            while b"\r\n\r\n" not in self.buf:
                await self._more()
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            status_line, *lines = head.decode("latin-1").split("\r\n")
            version, status, reason = status_line.split(" ", 2)
            assert version == "HTTP/1.1", status_line
            headers: dict[str, str] = {}
            for line in lines:
                name, _, value = line.partition(":")
                assert name.lower() not in headers, f"{name} twice in {head!r}"
                headers[name.lower()] = value.strip()
            length = 0 if to_head else int(headers.get("content-length", "0"))
            while len(self.buf) < length:
                await self._more()
            body, self.buf = self.buf[:length], self.buf[length:]
        return Response(int(status), reason, headers, body)

    async def closed(self) -> None:
        """The server closes the connection, with nothing more sent."""
        with anyio.fail_after(WAIT):
            try:
                while True:
                    await self._more()
                    assert self.buf == b"", f"more bytes before the close: {self.buf!r}"
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                pass


async def connect(node: Gateway) -> RawClient:
    with anyio.fail_after(WAIT):
        stream = await anyio.connect_tcp(node.settings.host, node.port)
    return RawClient(stream)


def request(
    method: str,
    target: str,
    *headers: str,
    body: bytes = b"",
    version: str = "HTTP/1.1",
    host: bool = True,
) -> bytes:
    lines = [f"{method} {target} {version}", *(["Host: gw.test"] if host else []), *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def publish(team: str, body: bytes, *headers: str, length: bool = True) -> bytes:
    framing = [f"Content-Length: {len(body)}"] if length else []
    return request(
        "POST",
        f"/v1/teams/{team}/events",
        f"Authorization: Bearer {token()}",
        "Content-Type: application/json",
        *framing,
        *headers,
        body=body,
    )


def item_body() -> bytes:
    return json.dumps(ev.item()).encode()


def assert_ok_publish(r: Response, count: int = 1) -> None:
    assert r.status == 200, r
    cursors = r.json()["cursors"]
    assert len(cursors) == count and all(isinstance(c, str) for c in cursors)


def assert_error(r: Response, status: int, code: str) -> None:
    assert r.status == status, r
    assert r.headers["content-type"] == "application/json"
    assert r.headers["connection"] == "close"
    body = r.json()
    assert list(body) == ["error"] and sorted(body["error"]) == ["code", "message"]
    assert body["error"]["code"] == code
    assert body["error"]["message"]


HEALTHZ = request("GET", "/healthz")


async def test_pipelined_requests_are_answered_in_order(node: Gateway) -> None:
    team = ev.team_id()
    client = await connect(node)
    async with client.stream:
        # One write: two GETs, a publish, a HEAD and a GET; all answered, in order.
        await client.send(
            HEALTHZ + HEALTHZ + publish(team, item_body()) + request("HEAD", "/healthz") + HEALTHZ
        )
        for _ in range(2):
            r = await client.response()
            assert (r.status, r.body) == (200, b'{"status":"ok"}'), r
            assert "connection" not in r.headers
        assert_ok_publish(await client.response())
        head = await client.response(to_head=True)  # HEAD: the GET's length, no body
        assert head.status == 200 and head.headers["content-length"] == "15"
        assert head.body == b""
        r = await client.response()
        assert r.body == b'{"status":"ok"}'
        assert client.buf == b""
        # Still open: one more.
        await client.send(HEALTHZ)
        assert (await client.response()).status == 200


async def test_keep_alive_serves_sequential_requests_on_one_connection(node: Gateway) -> None:
    team = ev.team_id()
    client = await connect(node)
    async with client.stream:
        await client.send(HEALTHZ)
        first = await client.response()
        await client.send(publish(team, item_body()))
        second = await client.response()
        await client.send(publish(team, json.dumps([ev.item(), ev.item()]).encode()))
        third = await client.response()
        assert first.status == 200 and "connection" not in first.headers
        assert_ok_publish(second)
        assert_ok_publish(third, 2)
        assert "connection" not in third.headers
        # The cursors follow each other: one feed, one connection.
        epoch = second.json()["cursors"][0].split(":")[0]
        assert third.json()["cursors"] == [f"{epoch}:2", f"{epoch}:3"]
        # Connection: close ends it after the answer.
        await client.send(request("GET", "/healthz", "Connection: close"))
        last = await client.response()
        assert last.status == 200 and last.headers["connection"] == "close"
        await client.closed()


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost : gw.test\r\n\r\n", 400, "invalid_request"),
        (b"GET /healthz HTTP/1.1\r\nHost: gw.test\r\nX: a\r\n b\r\n\r\n", 400, "invalid_request"),
        (b"GET /healthz\r\n\r\n", 400, "invalid_request"),
        (b"GET /healthz HTTP/1.1\r\n\r\n", 400, "invalid_request"),  # no host
        (b"GET /healthz HTTP/1.1\nHost: gw.test\n\n", 400, "invalid_request"),  # bare LF
        (b"GET /healthz HTTP/2.0\r\nHost: gw.test\r\n\r\n", 400, "invalid_request"),
        (
            b"POST /healthz HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 3\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
            "invalid_request",
        ),
        (
            b"POST /healthz HTTP/1.1\r\nHost: gw.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            501,
            "invalid_request",
        ),
        (
            b"POST /healthz HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 99999999\r\n\r\n",
            413,
            "too_large",
        ),
        # str.isdigit takes latin-1 superscripts; int() did not (the parser raised).
        (
            b"POST /healthz HTTP/1.1\r\nHost: gw.test\r\nContent-Length: \xb2\r\n\r\nab",
            400,
            "invalid_request",
        ),
        (b"CONNECT gw.test:443 HTTP/1.1\r\nHost: gw.test\r\n\r\n", 501, "invalid_request"),
        (b"PURGE /healthz HTTP/1.1\r\nHost: gw.test\r\n\r\n", 501, "invalid_request"),
        (
            b"POST /healthz HTTP/1.1\r\nHost: gw.test\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2 ;a\r\nab\r\n0\r\n\r\n",
            400,
            "invalid_request",
        ),
        (
            b"POST /healthz HTTP/1.1\r\nHost: gw.test\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"0\r\nConnection: close\r\n\r\n",
            400,
            "invalid_request",
        ),
    ],
    ids=[
        "space-before-colon",
        "obs-fold",
        "http09",
        "no-host",
        "bare-lf",
        "http2",
        "cl-and-te",
        "gzip",
        "too-large",
        "superscript-length",
        "connect",
        "unknown-method",
        "chunk-ext-bws",
        "connection-trailer",
    ],
)
async def test_a_malformed_request_is_answered_then_closed(
    node: Gateway, data: bytes, status: int, code: str
) -> None:
    client = await connect(node)
    async with client.stream:
        await client.send(data)
        assert_error(await client.response(), status, code)
        await client.closed()


async def test_a_malformed_request_after_a_good_one(node: Gateway) -> None:
    client = await connect(node)
    async with client.stream:
        await client.send(HEALTHZ + b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        assert (await client.response()).status == 200
        assert_error(await client.response(), 400, "invalid_request")
        await client.closed()


async def test_a_20_kib_header_is_431(node: Gateway) -> None:
    client = await connect(node)
    async with client.stream:
        await client.send(request("GET", "/healthz", "X-Big: " + "b" * (20 * 1024)))
        r = await client.response()
        assert r.reason == "Request Header Fields Too Large"
        assert_error(r, 431, "invalid_request")
        await client.closed()


async def test_expect_100_continue_gets_continue_before_the_answer(node: Gateway) -> None:
    team = ev.team_id()
    body = item_body()
    client = await connect(node)
    async with client.stream:
        head = publish(team, b"", "Expect: 100-continue")
        head = head.replace(b"Content-Length: 0", b"Content-Length: %d" % len(body))
        await client.send(head)  # the head only: the client waits, as curl does
        interim = await client.response()
        assert (interim.status, interim.reason, interim.headers) == (100, "Continue", {})
        assert client.buf == b""  # nothing else before the body is sent
        await client.send(body)
        assert_ok_publish(await client.response())
        # The connection goes on; a second expectation gets its own 100.
        await client.send(head)
        assert (await client.response()).status == 100
        await client.send(body)
        assert (await client.response()).status == 200  # the same event again: a retry


async def test_expect_100_continue_with_a_body_too_large_gets_413_not_100(
    node: Gateway,
) -> None:
    client = await connect(node)
    async with client.stream:
        too_large = node.settings.max_body_bytes + 1
        await client.send(
            request(
                "POST", "/v1/teams/t/events", "Expect: 100-continue", f"Content-Length: {too_large}"
            )
        )
        assert_error(await client.response(), 413, "too_large")
        await client.closed()


async def test_a_chunked_publish_is_accepted(node: Gateway) -> None:
    team = ev.team_id()
    body = json.dumps([ev.item(), ev.item()]).encode()
    third = len(body) // 3
    parts = [body[:third], body[third : 2 * third], body[2 * third :]]
    chunks = b"%x\r\n%s\r\n" % (len(parts[0]), parts[0])
    chunks += b"%x;ext=1\r\n%s\r\n" % (len(parts[1]), parts[1])
    chunks += b"%X\r\n%s\r\n" % (len(parts[2]), parts[2])
    client = await connect(node)
    async with client.stream:
        await client.send(publish(team, b"", "Transfer-Encoding: chunked", length=False))
        await client.send(chunks)
        await client.send(b"0\r\nX-Checksum: none\r\n\r\n")
        r = await client.response()
        assert_ok_publish(r, 2)
        # The same events, in one chunk this time, on the same connection: a retry.
        one = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        await client.send(publish(team, one, "Transfer-Encoding: chunked", length=False))
        again = await client.response()
        assert again.json() == r.json()


async def test_a_chunked_body_too_large_is_413(node: Gateway) -> None:
    client = await connect(node)
    async with client.stream:
        size = node.settings.max_body_bytes + 1
        await client.send(publish(ev.team_id(), b"", "Transfer-Encoding: chunked", length=False))
        await client.send(b"%x\r\n" % size)
        assert_error(await client.response(), 413, "too_large")
        await client.closed()


@pytest.mark.parametrize("connection", [None, "keep-alive"])
async def test_an_http10_request_is_answered_and_closed(
    node: Gateway, connection: str | None
) -> None:
    client = await connect(node)
    async with client.stream:
        headers = [] if connection is None else [f"Connection: {connection}"]
        await client.send(request("GET", "/healthz", *headers, version="HTTP/1.0", host=False))
        r = await client.response()
        assert (r.status, r.body) == (200, b'{"status":"ok"}')
        assert r.headers["connection"] == "close"
        await client.closed()


async def test_an_http10_publish(node: Gateway) -> None:
    team = ev.team_id()
    body = item_body()
    client = await connect(node)
    async with client.stream:
        data = publish(team, body).replace(b"HTTP/1.1", b"HTTP/1.0", 1)
        await client.send(data)
        r = await client.response()
        assert_ok_publish(r)
        assert r.headers["connection"] == "close"
        await client.closed()


async def test_a_stream_says_connection_close_and_ends_with_the_connection(
    node: Gateway,
) -> None:
    """A stream's end is the connection's end, so its head says so: a client told
    keep-alive would pool the socket and could send its next request into the close."""
    thread, run = ev.new_id(), ev.new_id()
    path = f"/v1/threads/{thread}/runs/{run}/ui/ag-ui"
    run_events = [
        {"type": "RUN_STARTED", "threadId": thread, "runId": run},
        {"type": "RUN_FINISHED", "threadId": thread, "runId": run},
    ]
    body = json.dumps(run_events).encode()
    auth = f"Authorization: Bearer {token()}"
    client = await connect(node)
    async with client.stream:
        await client.send(
            request(
                "POST",
                path,
                auth,
                "Content-Type: application/json",
                f"Content-Length: {len(body)}",
                body=body,
            )
        )
        assert_ok_publish(await client.response(), 2)
        # The same keep-alive connection, then the run's stream on it (it ends).
        await client.send(request("GET", path, auth, "Accept: text/event-stream"))
        head = await client.response(to_head=True)
        assert head.status == 200, head
        assert head.headers["transfer-encoding"] == "chunked"
        assert head.headers["connection"] == "close"
        with anyio.fail_after(WAIT):
            while not client.buf.endswith(b"\r\n0\r\n\r\n"):
                await client._more()
        assert b"RUN_FINISHED" in client.buf
        client.buf = b""
        await client.closed()


async def first_offset(node: Gateway, team: str) -> int:
    """Publish one item to ``team`` on a new connection: the offset it got (1 when the
    feed held nothing before)."""
    client = await connect(node)
    async with client.stream:
        await client.send(publish(team, item_body(), "Connection: close"))
        r = await client.response()
    assert_ok_publish(r)
    return int(r.json()["cursors"][0].split(":")[1])


async def test_a_request_smuggled_behind_bare_lf_trailers_is_not_run(node: Gateway) -> None:
    """A chunked body whose trailers end in bare LFs, then a request head the trailers
    would swallow, then a publish as its body: 400 and close; nothing is appended."""
    team = ev.team_id()
    smuggled = publish(team, item_body())
    cover = request("POST", "/healthz", f"Content-Length: {len(smuggled)}") + smuggled
    first = request("POST", "/healthz", "Transfer-Encoding: chunked", body=b"0\r\nX-T: 1\n\n")
    client = await connect(node)
    async with client.stream:
        await client.send(first + cover)
        assert_error(await client.response(), 400, "invalid_request")
        await client.closed()
    assert await first_offset(node, team) == 1


@pytest.mark.parametrize(
    "fields",
    [
        ["Upgrade: websocket"],  # no "Connection: upgrade": not an upgrade, refused
        ["Upgrade: websocket", "Connection: upgrade", "Sec-WebSocket-Version: 13"],  # no key
        ["Upgrade: h2c", "Connection: upgrade"],
    ],
    ids=["no-connection-upgrade", "no-key", "h2c"],
)
async def test_a_refused_upgrade_closes_the_connection(node: Gateway, fields: list[str]) -> None:
    """A proxy may open a tunnel on ``Upgrade`` alone: what the client sends after a
    refused upgrade is never read as a request of its own."""
    team = ev.team_id()
    client = await connect(node)
    async with client.stream:
        await client.send(request("GET", "/v1/ws", *fields) + publish(team, item_body()))
        r = await client.response()
        assert r.status in (400, 401, 426), r
        assert r.headers["connection"] == "close"
        await client.closed()
    assert await first_offset(node, team) == 1


async def test_two_authorization_headers_are_refused(node: Gateway) -> None:
    """Tenant A's token then tenant B's (or junk then a valid one): 400, never one of
    them picked; nothing is appended."""
    team = ev.team_id()
    mine, other = token(), token(tenant="someone-else")
    body = item_body()
    for pair in ([mine, other], ["junk", mine], [mine, mine]):
        client = await connect(node)
        async with client.stream:
            await client.send(
                request(
                    "POST",
                    f"/v1/teams/{team}/events",
                    *(f"Authorization: Bearer {t}" for t in pair),
                    "Content-Type: application/json",
                    f"Content-Length: {len(body)}",
                    body=body,
                )
            )
            assert_error(await client.response(), 400, "invalid_request")
            await client.closed()
    assert await first_offset(node, team) == 1


async def test_a_known_method_no_route_takes_is_405_and_keeps_the_connection(
    node: Gateway,
) -> None:
    """QUERY is a method the gateway knows (as llhttp does): a route that does not take it
    answers 405 like any other method it does not take, not 501."""
    client = await connect(node)
    async with client.stream:
        await client.send(request("QUERY", "/v1/feeds?kind=team") + HEALTHZ)
        r = await client.response()
        assert r.status == 405, r
        assert r.json()["error"]["code"] == "method_not_allowed"
        assert (await client.response()).status == 200
