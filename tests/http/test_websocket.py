"""GET /v1/ws: the ``gateway.v1`` WebSocket protocol over real sockets (contract D2, D6).

A real ``websockets`` client talks to a real node.  Tests that touch feeds run on the
embedded log and on Redis (``node_redis``); handshake, token and keepalive tests run on
the embedded log only (the log plays no part in them).

Ordering across two TCP connections (an HTTP publish and a WebSocket message) is not
guaranteed, so where a test must know that the server has acted on a message it sends
a *barrier*: a subscribe to a malformed team id, answered at once and in order with a
``not_found`` error frame.  Every frame the server wrote before that answer arrives
before it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import httpx
import jwt
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.protocol import State

from gateway.app import Gateway, build_backend
from gateway.auth import TWO_TOKENS, mint
from gateway.feed import FeedKey, FeedKind
from tests.support import events as ev
from tests.support.node import SECRET, auth, metric, open_ws, start_node, token
from tests.support.node import settings as node_settings

pytestmark = pytest.mark.anyio

SUBPROTOCOL = "gateway.v1"
BARRIER = "team/barrier"
Frame = dict[str, Any]
NodeFactory = Callable[..., contextlib.AbstractAsyncContextManager[Gateway]]


# ---------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------


@pytest.fixture
def make_node(node_redis: tuple[str | None, str]) -> NodeFactory:
    """Start a node on the parametrised log with extra settings."""
    url, prefix = node_redis

    def make(**settings: Any) -> contextlib.AbstractAsyncContextManager[Gateway]:
        return start_node(url, prefix, **settings)

    return make


@pytest.fixture
async def node(make_node: NodeFactory) -> AsyncIterator[Gateway]:
    async with make_node(ws_max_bad_messages=100) as n:
        yield n


@pytest.fixture
async def mem_node() -> AsyncIterator[Gateway]:
    async with start_node(ws_max_bad_messages=100) as n:
        yield n


@pytest.fixture
async def http(node: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as c:
        yield c


@pytest.fixture
async def mem_http(mem_node: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=mem_node.url, timeout=10) as c:
        yield c


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


async def send(ws: ClientConnection, message: Frame | str) -> None:
    await ws.send(message if isinstance(message, str) else json.dumps(message))


async def subscribe(ws: ClientConnection, feed: str, after: str | None = None) -> None:
    message: Frame = {"type": "subscribe", "feed": feed}
    if after is not None:
        message["after"] = after
    await send(ws, message)


async def recv_raw(ws: ClientConnection, within: float = 5.0) -> str:
    with anyio.fail_after(within):
        raw = await ws.recv()
    assert isinstance(raw, str), "gateway.v1 uses text frames only"
    return raw


async def recv(ws: ClientConnection, within: float = 5.0) -> Frame:
    frame: Frame = json.loads(await recv_raw(ws, within))
    return frame


async def recv_n(ws: ClientConnection, n: int, within: float = 10.0) -> list[Frame]:
    with anyio.fail_after(within):
        return [await recv(ws) for _ in range(n)]


async def barrier(ws: ClientConnection) -> None:
    """Prove the server has handled everything sent before: the next frame is the answer."""
    await subscribe(ws, BARRIER)
    frame = await recv(ws)
    assert frame == {
        "type": "error",
        "feed": BARRIER,
        "code": "not_found",
        "message": "no such feed",
    }


async def until_closed(
    ws: ClientConnection, within: float = 5.0
) -> tuple[list[Frame], int | None, str]:
    """Read until the server closes; the frames before, the close code and reason."""
    frames: list[Frame] = []
    with anyio.fail_after(within):
        try:
            while True:
                frames.append(json.loads(await ws.recv()))
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            return frames, (rcvd.code if rcvd else None), (rcvd.reason if rcvd else "")


async def eventually(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Poll a server-side condition with a deadline (metrics have no event to wait on)."""
    with anyio.fail_after(within):
        while True:
            if predicate():
                return
            await anyio.sleep(0.01)


class Published:
    def __init__(self, cursors: list[str], bodies: list[dict[str, Any]]) -> None:
        self.cursors = cursors
        self.bodies = bodies


async def publish(
    client: httpx.AsyncClient, team: str, n: int = 1, tenant: str = "acme"
) -> Published:
    bodies = [ev.item() for _ in range(n)]
    r = await client.post(f"/v1/teams/{team}/events", json=bodies, headers=auth(tenant))
    assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    return Published(cursors, bodies)


def event_frame(feed: str, cursor: str, body: dict[str, Any]) -> Frame:
    """The ``event`` frame for one published item: ``data`` is its TeamItem."""
    epoch, offset = (int(x) for x in cursor.split(":"))
    return {
        "type": "event",
        "feed": feed,
        "cursor": cursor,
        "data": {
            "kind": "event",
            "cursor": {"epoch": epoch, "offset": offset},
            "source": body["source"],
            "event": body["event"],
        },
    }


def events_of(feed: str, published: Published) -> list[Frame]:
    pairs = zip(published.cursors, published.bodies, strict=True)
    return [event_frame(feed, c, b) for c, b in pairs]


def subscribed(feed: str, cursor: str) -> Frame:
    return {"type": "subscribed", "feed": feed, "cursor": cursor}


def by_feed(frames: list[Frame]) -> dict[str, list[Frame]]:
    grouped: dict[str, list[Frame]] = {}
    for frame in frames:
        grouped.setdefault(frame["feed"], []).append(frame)
    return grouped


def epoch_of(cursor: str) -> int:
    return int(cursor.split(":")[0])


def ws_metric(node: Gateway, name: str, **labels: str) -> float:
    return metric(node, name, transport="ws", **labels)


# ---------------------------------------------------------------------------
# 1. Handshake
# ---------------------------------------------------------------------------


async def test_handshake_bearer_header_selects_gateway_v1(
    mem_node: Gateway, mem_http: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    pub = await publish(mem_http, team)
    async with open_ws(mem_node, subprotocols=["chat", SUBPROTOCOL]) as ws:
        assert ws.subprotocol == SUBPROTOCOL
        assert ws.response is not None and ws.response.status_code == 101
        assert ws.response.headers.get_all("Sec-WebSocket-Protocol") == [SUBPROTOCOL]
        await subscribe(ws, f"team/{team}")
        assert await recv_n(ws, 2) == [
            subscribed(f"team/{team}", pub.cursors[0]),
            *events_of(f"team/{team}", pub),
        ]
        assert ws_metric(mem_node, "gateway_connections") == 1


@pytest.mark.parametrize("bearer_first", [False, True])
async def test_handshake_bearer_subprotocol(
    mem_node: Gateway, mem_http: httpx.AsyncClient, bearer_first: bool
) -> None:
    team = ev.team_id()
    pub = await publish(mem_http, team)
    protocols = [SUBPROTOCOL, f"bearer.{token()}"]
    if bearer_first:
        protocols.reverse()
    async with open_ws(mem_node, headers={}, subprotocols=protocols) as ws:
        # Only gateway.v1 is answered: the token is never echoed back.
        assert ws.subprotocol == SUBPROTOCOL
        assert ws.response is not None
        assert ws.response.headers.get_all("Sec-WebSocket-Protocol") == [SUBPROTOCOL]
        await subscribe(ws, f"team/{team}")
        assert await recv_n(ws, 2) == [
            subscribed(f"team/{team}", pub.cursors[0]),
            *events_of(f"team/{team}", pub),
        ]


REJECTIONS = {
    "no token": ({}, [SUBPROTOCOL], 401, "unauthenticated"),
    "bad token": (bearer("not-a-jwt"), [SUBPROTOCOL], 401, "unauthenticated"),
    "bad token subprotocol": ({}, [SUBPROTOCOL, "bearer.not-a-jwt"], 401, "unauthenticated"),
    "wrong secret": (
        bearer(mint("another-secret-of-at-least-32-bytes!!", tenant="acme")),
        [SUBPROTOCOL],
        401,
        "unauthenticated",
    ),
    "basic scheme": (
        {"Authorization": "Basic dXNlcjpwYXNz"},
        [SUBPROTOCOL],
        401,
        "unauthenticated",
    ),
    "expired": (auth(ttl=-60), [SUBPROTOCOL], 401, "unauthenticated"),
    "publish scope only": (auth(scopes=["publish"]), [SUBPROTOCOL], 401, "unauthenticated"),
    "no scope in subprotocol token": (
        {},
        [SUBPROTOCOL, f"bearer.{token(scopes=[])}"],
        401,
        "unauthenticated",
    ),
    "gateway.v1 not offered": (auth(), ["chat"], 400, "invalid_request"),
    "no subprotocol": (auth(), [], 400, "invalid_request"),
    "only the bearer subprotocol": ({}, [f"bearer.{token()}"], 400, "invalid_request"),
}


@pytest.mark.parametrize("case", list(REJECTIONS))
async def test_handshake_rejected_before_upgrade(mem_node: Gateway, case: str) -> None:
    headers, protocols, status, code = REJECTIONS[case]
    with anyio.fail_after(5), pytest.raises(InvalidStatus) as info:
        async with open_ws(mem_node, headers=headers, subprotocols=protocols):
            pass
    response = info.value.response
    assert response.status_code == status
    assert response.headers["Content-Type"] == "application/json"
    assert "Upgrade" not in response.headers
    body = json.loads(response.body)
    assert list(body) == ["error"]
    assert sorted(body["error"]) == ["code", "message"]
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert ws_metric(mem_node, "gateway_connections") == 0


async def test_origin_allow_list() -> None:
    async with start_node(ws_origins="https://app.example, https://other.example") as node:
        for origin in ("https://app.example", "https://other.example"):
            async with open_ws(node, origin=origin) as ws:
                assert ws.subprotocol == SUBPROTOCOL
        # Not a browser: no Origin header at all is allowed (tokens authenticate).
        async with open_ws(node) as ws:
            assert ws.request is not None and "Origin" not in ws.request.headers
            assert ws.subprotocol == SUBPROTOCOL
        for origin in ("https://evil.example", "https://app.example.evil.example", "null"):
            with anyio.fail_after(5), pytest.raises(InvalidStatus) as info:
                async with open_ws(node, origin=origin):
                    pass
            assert info.value.response.status_code == 403
            assert json.loads(info.value.response.body)["error"]["code"] == "forbidden"


ONE_CREDENTIAL = {
    # (Authorization token, bearer subprotocol tokens, accepted)
    "header and the same subprotocol": ("acme", ["acme"], True),
    "the same subprotocol twice": (None, ["acme", "acme"], True),
    "header and a subprotocol of another tenant": ("acme", ["globex"], False),
    "header and an invalid subprotocol": ("acme", ["not-a-jwt"], False),
    "two subprotocols of two tenants": (None, ["acme", "globex"], False),
    "an invalid subprotocol before a valid one": (None, ["not-a-jwt", "acme"], False),
}


@pytest.mark.parametrize("case", list(ONE_CREDENTIAL))
@pytest.mark.parametrize("reverse", [False, True], ids=["in-order", "reversed"])
async def test_one_credential_per_handshake(
    mem_node: Gateway, mem_http: httpx.AsyncClient, case: str, reverse: bool
) -> None:
    """A real client offers the header and bearer subprotocols: one token (in as many
    places as it likes) upgrades as its tenant; two different ones are 401 whatever
    their order, and the gateway never picks one of them."""
    header, tenants, accepted = ONE_CREDENTIAL[case]
    tokens = {t: token(t) for t in ("acme", "globex")}
    headers = {} if header is None else bearer(tokens[header])
    protocols = [SUBPROTOCOL, *(f"bearer.{tokens.get(t, t)}" for t in tenants)]
    if reverse:
        protocols.reverse()
    if accepted:
        team = ev.team_id()
        pub = await publish(mem_http, team)  # acme's
        async with open_ws(mem_node, headers=headers, subprotocols=protocols) as ws:
            assert ws.subprotocol == SUBPROTOCOL
            await subscribe(ws, f"team/{team}")
            assert await recv_n(ws, 2) == [
                subscribed(f"team/{team}", pub.cursors[0]),
                *events_of(f"team/{team}", pub),
            ]
        return
    with anyio.fail_after(5), pytest.raises(InvalidStatus) as info:
        async with open_ws(mem_node, headers=headers, subprotocols=protocols):
            pass
    response = info.value.response
    assert response.status_code == 401
    assert json.loads(response.body) == {
        "error": {"code": "unauthenticated", "message": TWO_TOKENS}
    }
    assert ws_metric(mem_node, "gateway_connections") == 0


def handshake_lines(node: Gateway) -> list[tuple[str, str]]:
    """The fields of a valid gateway.v1 upgrade request, in order."""
    return [
        ("Host", f"{node.settings.host}:{node.port}"),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", base64.b64encode(os.urandom(16)).decode()),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Protocol", SUBPROTOCOL),
        ("Authorization", f"Bearer {token()}"),
    ]


def replaced(name: str, value: str | None) -> Callable[[list[tuple[str, str]]], None]:
    """Replace (or with None drop) field ``name``."""

    def change(fields: list[tuple[str, str]]) -> None:
        index = next(i for i, (n, _) in enumerate(fields) if n == name)
        if value is None:
            del fields[index]
        else:
            fields[index] = (name, value)

    return change


def added(name: str, value: str) -> Callable[[list[tuple[str, str]]], None]:
    """Add a line (a second one, for a field the request has)."""
    return lambda fields: fields.append((name, value))


#: Every way the upgrade route refuses: (node settings, the change to a valid
#: request, the request line, the status and code answered).
REFUSALS: dict[
    str, tuple[dict[str, Any], Callable[[list[tuple[str, str]]], None], str, int, str]
] = {
    "no upgrade option": ({}, replaced("Connection", "keep-alive"), "GET", 400, "invalid_request"),
    "no upgrade field": ({}, replaced("Upgrade", None), "GET", 400, "invalid_request"),
    "short key": ({}, replaced("Sec-WebSocket-Key", "c2hvcnQ="), "GET", 400, "invalid_request"),
    "version 8": ({}, replaced("Sec-WebSocket-Version", "8"), "GET", 400, "invalid_request"),
    "gateway.v1 not offered": (
        {},
        replaced("Sec-WebSocket-Protocol", "chat"),
        "GET",
        400,
        "invalid_request",
    ),
    "HTTP/1.0": ({}, lambda fields: None, "GET/1.0", 400, "invalid_request"),
    "key twice": (
        {},
        added("Sec-WebSocket-Key", base64.b64encode(os.urandom(16)).decode()),
        "GET",
        400,
        "invalid_request",
    ),
    "version twice": ({}, added("Sec-WebSocket-Version", "13"), "GET", 400, "invalid_request"),
    "origin twice": (
        {},
        lambda f: f.extend([("Origin", "https://app.example")] * 2),
        "GET",
        400,
        "invalid_request",
    ),
    "authorization twice": (
        {},
        added("Authorization", f"Bearer {token()}"),
        "GET",
        400,
        "invalid_request",
    ),
    "no token": ({}, replaced("Authorization", None), "GET", 401, "unauthenticated"),
    "invalid token": (
        {},
        replaced("Authorization", "Bearer not-a-jwt"),
        "GET",
        401,
        "unauthenticated",
    ),
    "two credentials": (
        {},
        replaced("Sec-WebSocket-Protocol", f"{SUBPROTOCOL}, bearer.{token('globex')}"),
        "GET",
        401,
        "unauthenticated",
    ),
    "no subscribe scope": (
        {},
        replaced("Authorization", f"Bearer {token(scopes=['publish'])}"),
        "GET",
        401,
        "unauthenticated",
    ),
    "origin not allowed": (
        {"ws_origins": "https://app.example"},
        added("Origin", "https://evil.example"),
        "GET",
        403,
        "forbidden",
    ),
    "tenant connection limit": (
        {"max_tenant_connections": 1},
        lambda fields: None,
        "GET",
        429,
        "rate_limited",
    ),
    "draining": ({}, lambda fields: None, "GET", 503, "unavailable"),
    "POST": ({}, lambda fields: None, "POST", 405, "method_not_allowed"),
}


def publish_request(node: Gateway, team: str) -> bytes:
    """A valid publish of one item to acme's team ``team``, written by hand."""
    body = json.dumps([ev.item()]).encode()
    return (
        f"POST /v1/teams/{team}/events HTTP/1.1\r\n"
        f"Host: {node.settings.host}:{node.port}\r\n"
        f"Authorization: Bearer {token()}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def exchange_until_closed(stream: anyio.abc.SocketStream, data: bytes) -> bytes:
    """Send ``data``, then read everything the server sends until it closes."""
    await stream.send(data)
    received = b""
    with anyio.fail_after(5):
        try:
            while True:
                received += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return received


def split_response(data: bytes) -> tuple[int, dict[str, str], bytes, bytes]:
    """The first response in ``data`` (status, headers, body) and what follows it."""
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    length = int(headers.get("content-length", "0"))
    return int(status_line.split(" ")[1]), headers, rest[:length], rest[length:]


async def feed_state(node: Gateway, team: str) -> object:
    """The state of acme's team feed ``team`` in the node's store (None: never written)."""
    return await node.context.feeds.state(FeedKey("acme", FeedKind.TEAM, team))


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_a_refused_upgrade_closes_and_runs_nothing_behind_it(case: str) -> None:
    """Every refusal of the upgrade route is one typed error answer, then the end of the
    connection: a publish pipelined behind the refused upgrade (which a proxy may have
    sent as tunnelled bytes) is never run."""
    settings, change, method, status, code = REFUSALS[case]
    async with start_node(**settings) as node:
        fields = handshake_lines(node)
        change(fields)
        verb, _, version = method.partition("/")
        line = f"{verb} /v1/ws HTTP/{version or '1.1'}\r\n"
        upgrade = line + "".join(f"{n}: {v}\r\n" for n, v in fields) + "\r\n"
        team = ev.team_id()
        async with contextlib.AsyncExitStack() as stack:
            if case == "tenant connection limit":
                await stack.enter_async_context(open_ws(node))  # acme's one connection
            stream = await stack.enter_async_context(
                await anyio.connect_tcp(node.settings.host, node.port)
            )
            if case == "draining":
                with anyio.fail_after(5):
                    await node.drain(0.01)
            received = await exchange_until_closed(
                stream, upgrade.encode() + publish_request(node, team)
            )
        got, headers, body, after = split_response(received)
        assert got == status, received
        assert headers["connection"] == "close"
        assert "upgrade" not in headers
        error = json.loads(body)["error"]
        assert sorted(error) == ["code", "message"] and error["code"] == code
        assert after == b"", "a second response: the pipelined publish was run"
        assert await feed_state(node, team) is None
        # Nothing upgraded but the one socket the limit case holds.
        connects = 1 if case == "tenant connection limit" else 0
        assert ws_metric(node, "gateway_connects_total") == connects


async def test_a_request_pipelined_behind_an_answered_one_runs() -> None:
    """The control of the test above: behind a request that is not an upgrade the same
    pipelined publish is run, and its answer and its item are seen."""
    async with start_node() as node:
        team = ev.team_id()
        health = f"GET /healthz HTTP/1.1\r\nHost: {node.settings.host}\r\n\r\n".encode()
        close = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        async with await anyio.connect_tcp(node.settings.host, node.port) as stream:
            received = await exchange_until_closed(
                stream, health + publish_request(node, team) + close
            )
        first, _, _, rest = split_response(received)
        second, _, body, _ = split_response(rest)
        assert (first, second) == (200, 200), received
        assert json.loads(body)["cursors"]
        assert await feed_state(node, team) is not None


async def test_bytes_pipelined_behind_an_upgrade_are_the_new_protocols(
    mem_node: Gateway,
) -> None:
    """After a 101 the bytes that follow are WebSocket frames, never an HTTP request:
    a publish sent there is a protocol error that ends the socket, and nothing is
    appended."""
    team = ev.team_id()
    fields = handshake_lines(mem_node)
    upgrade = "GET /v1/ws HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields)
    async with await anyio.connect_tcp(mem_node.settings.host, mem_node.port) as stream:
        received = await exchange_until_closed(
            stream, (upgrade + "\r\n").encode() + publish_request(mem_node, team)
        )
    assert received.startswith(b"HTTP/1.1 101 Switching Protocols\r\n"), received
    frames = received.partition(b"\r\n\r\n")[2]
    assert frames[:1] == b"\x88"  # a close frame (1002: protocol error), nothing else
    assert int.from_bytes(frames[2:4], "big") == 1002
    assert b"HTTP/1.1" not in frames
    assert await feed_state(mem_node, team) is None


# ---------------------------------------------------------------------------
# 2. Several feeds on one socket
# ---------------------------------------------------------------------------


async def test_several_feeds_history_then_live(node: Gateway, http: httpx.AsyncClient) -> None:
    a, b = ev.team_id(), ev.team_id()
    fa, fb = f"team/{a}", f"team/{b}"
    hist_a = await publish(http, a, 2)
    hist_b = await publish(http, b, 3)
    async with open_ws(node) as ws:
        await subscribe(ws, fa)
        await subscribe(ws, fb)
        frames = by_feed(await recv_n(ws, 1 + 2 + 1 + 3))
        assert frames == {
            fa: [subscribed(fa, hist_a.cursors[-1]), *events_of(fa, hist_a)],
            fb: [subscribed(fb, hist_b.cursors[-1]), *events_of(fb, hist_b)],
        }
        # Live: both feeds interleaved, each in order, nothing missing or duplicated.
        live_a = Published([], [])
        live_b = Published([], [])
        for _ in range(5):
            for team, acc in ((a, live_a), (b, live_b)):
                p = await publish(http, team)
                acc.cursors += p.cursors
                acc.bodies += p.bodies
        frames = by_feed(await recv_n(ws, 10))
        assert frames == {fa: events_of(fa, live_a), fb: events_of(fb, live_b)}
        await barrier(ws)
    assert [epoch_of(c) for c in hist_a.cursors + live_a.cursors] == [
        epoch_of(hist_a.cursors[0])
    ] * 7


# ---------------------------------------------------------------------------
# 3. Encode once
# ---------------------------------------------------------------------------


async def test_subscribers_of_a_feed_get_byte_identical_event_frames(
    node: Gateway, http: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    hist = await publish(http, team, 2)
    async with open_ws(node) as ws1, open_ws(node) as ws2:
        raws: list[list[str]] = []
        for ws in (ws1, ws2):
            await subscribe(ws, feed)
            assert await recv(ws) == subscribed(feed, hist.cursors[-1])
            raws.append([await recv_raw(ws) for _ in range(2)])
        live = await publish(http, team, 3)
        for i, ws in enumerate((ws1, ws2)):
            with anyio.fail_after(10):
                raws[i] += [await recv_raw(ws) for _ in range(3)]
    assert raws[0] == raws[1]
    all_items = Published(hist.cursors + live.cursors, hist.bodies + live.bodies)
    assert [json.loads(r) for r in raws[0]] == events_of(feed, all_items)
    # The data member is the TeamItem exactly as SSE sends it (RFC 8785, key order).
    first = raws[0][0]
    prefix = f'{{"type":"event","feed":"{feed}","cursor":"{hist.cursors[0]}","data":{{"cursor":{{'
    assert first.startswith(prefix)
    # The three live items were read from the log once for both sockets.
    assert metric(node, "gateway_items_read_total") == 3


# ---------------------------------------------------------------------------
# 4. Resume
# ---------------------------------------------------------------------------


async def test_resume_after_cursor(node: Gateway, http: httpx.AsyncClient) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    pub = await publish(http, team, 5)
    epoch, _ = pub.cursors[1].split(":")
    async with open_ws(node) as ws:
        await subscribe(ws, feed, after=pub.cursors[1])
        tail = Published(pub.cursors[2:], pub.bodies[2:])
        assert await recv_n(ws, 4) == [subscribed(feed, pub.cursors[-1]), *events_of(feed, tail)]
        live = await publish(http, team)
        assert await recv(ws) == events_of(feed, live)[0]
        await barrier(ws)
    async with open_ws(node) as ws:
        # Leading zeros are accepted and normalised; at the head, only new items come.
        await subscribe(ws, feed, after=f"00{epoch}:0006")
        assert await recv(ws) == subscribed(feed, live.cursors[0])
        await barrier(ws)
        later = await publish(http, team)
        assert await recv(ws) == events_of(feed, later)[0]


async def test_reconnect_under_load_gets_every_item_once_in_order(
    node: Gateway, http: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    total = 200
    published: list[str] = []
    progress = anyio.Event()
    received: list[Frame] = []
    # Disconnect after these many items, each time while the publisher goes on.
    cuts = [40, 90, 140]

    async def publisher() -> None:
        nonlocal progress
        for _ in range(total):
            published.extend((await publish(http, team)).cursors)
            progress.set()
            progress = anyio.Event()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(publisher)
            while not published:
                await progress.wait()
            for stop in [*cuts, total]:
                async with open_ws(node) as ws:
                    after = received[-1]["cursor"] if received else None
                    await subscribe(ws, feed, after=after)
                    first = await recv(ws)
                    assert first["type"] == "subscribed" and first["feed"] == feed
                    while len(received) < stop:
                        frame = await recv(ws)
                        assert frame["type"] == "event" and frame["feed"] == feed
                        received.append(frame)
                    if stop < total:
                        # Let the publisher get ahead while nobody is connected.
                        target = len(published) + 10
                        while len(published) < min(target, total):
                            await progress.wait()
    cursors = [f["cursor"] for f in received]
    assert cursors == published
    assert len(set(cursors)) == total
    assert [int(c.split(":")[1]) for c in cursors] == list(range(1, total + 1))
    assert all(f["data"]["cursor"]["offset"] == i + 1 for i, f in enumerate(received))


# ---------------------------------------------------------------------------
# 5. Errors
# ---------------------------------------------------------------------------


MALFORMED = [
    "",
    "abc",
    "1",
    "1:",
    ":1",
    "1:2:3",
    "-1:2",
    "1.0:2",
    " 1:2",
    "1:2 ",
    "9007199254740992:0",
    "0:9007199254740992",
    "\uff11:2",
    "0x1:2",
    "9" * 80,
]


async def test_cursor_errors(node: Gateway, http: httpx.AsyncClient) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    pub = await publish(http, team, 2)
    epoch = epoch_of(pub.cursors[0])
    async with open_ws(node) as ws:
        for bad in MALFORMED:
            await subscribe(ws, feed, after=bad)
            frame = await recv(ws)
            assert sorted(frame) == ["code", "feed", "message", "type"], bad
            assert frame["type"] == "error" and frame["feed"] == feed, bad
            assert frame["code"] == "invalid_cursor", bad
        await subscribe(ws, feed, after=f"{epoch + 1}:0")
        assert await recv(ws) == {
            "type": "error",
            "feed": feed,
            "code": "invalid_cursor",
            "message": "cursor is from a later epoch than the feed's",
        }
        await subscribe(ws, feed, after=f"{epoch}:3")
        assert await recv(ws) == {
            "type": "error",
            "feed": feed,
            "code": "invalid_cursor",
            "message": "cursor is past the feed's head",
        }
        # None of that counted against the socket: it still serves the feed.
        await subscribe(ws, feed, after=pub.cursors[0])
        assert await recv_n(ws, 2) == [
            subscribed(feed, pub.cursors[1]),
            event_frame(feed, pub.cursors[1], pub.bodies[1]),
        ]


async def test_not_found_is_the_same_for_every_reason(
    node: Gateway, http: httpx.AsyncClient
) -> None:
    mine = ev.team_id()
    await publish(http, mine)
    theirs = ev.team_id()
    await publish(http, theirs, tenant="globex")
    unknown = f"team/{ev.team_id()}"
    cases = [
        unknown,
        f"team/{theirs}",  # another tenant's team
        "team/NOT-A-UUID",
        f"team/{mine.upper()}",
        f"team/{mine}x",
        "team/",
        "run/thread-1/run-1",  # a run feed that does not exist
    ]
    answers: list[Frame] = []
    async with open_ws(node) as ws:
        for feed in cases:
            await subscribe(ws, feed)
            answers.append(await recv(ws))
        await barrier(ws)
    async with open_ws(node, headers=auth(teams=[ev.team_id()])) as ws:
        # A team outside the token's teams claim.
        await subscribe(ws, f"team/{mine}")
        answers.append(await recv(ws))
    expected = {"type": "error", "code": "not_found", "message": answers[0]["message"]}
    for feed, frame in zip([*cases, f"team/{mine}"], answers, strict=True):
        assert frame == {**expected, "feed": feed}
    # Nothing tells another tenant's team from one that does not exist.
    assert answers[1]["message"] == answers[0]["message"]


async def test_host_team_is_not_found(node: Gateway, http: httpx.AsyncClient) -> None:
    team = ev.team_id()
    body = [ev.item(ev.opened_host(team, "acme")), ev.item()]
    r = await http.post(f"/v1/teams/{team}/events", json=body, headers=auth())
    assert r.status_code == 200, r.text
    async with open_ws(node) as ws:
        await subscribe(ws, f"team/{team}")
        assert await recv(ws) == {
            "type": "error",
            "feed": f"team/{team}",
            "code": "not_found",
            "message": "no such feed",
        }


INVALID: list[tuple[str, str | None]] = [
    ("not json", None),
    ('{"type": "subscribe", "feed": ', None),
    ("[1, 2]", None),
    ('"subscribe"', None),
    ("null", None),
    ('{"type": "hello"}', None),
    ('{"type": "hello", "feed": "team/x"}', "team/x"),
    ('{"feed": "team/x"}', "team/x"),
    ('{"type": 1, "feed": "team/x"}', "team/x"),
    ('{"type": "subscribe"}', None),
    ('{"type": "unsubscribe"}', None),
    ('{"type": "auth"}', None),
    ('{"type": "subscribe", "feed": "team/x", "extra": 1}', "team/x"),
    ('{"type": "unsubscribe", "feed": "team/x", "after": "1:0"}', "team/x"),
    ('{"type": "auth", "token": "t", "feed": "team/x"}', "team/x"),
    ('{"type": "subscribe", "feed": 5}', None),
    ('{"type": "subscribe", "feed": "team/x", "after": 5}', "team/x"),
    ('{"type": "auth", "token": 5}', None),
    ('{"type": "subscribe", "feed": "foo/bar"}', "foo/bar"),
    ('{"type": "subscribe", "feed": "run/only-thread"}', "run/only-thread"),
    ('{"type": "subscribe", "feed": "run/a b/c"}', "run/a b/c"),
]


async def test_invalid_messages_get_invalid_request(node: Gateway, http: httpx.AsyncClient) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    await publish(http, team)
    async with open_ws(node) as ws:
        await subscribe(ws, feed)
        await recv_n(ws, 2)
        for text, named in INVALID:
            await send(ws, text)
            frame = await recv(ws)
            expected_keys = ["code", "message", "type"] + (["feed"] if named else [])
            assert sorted(frame) == sorted(expected_keys), text
            assert frame["type"] == "error" and frame["code"] == "invalid_request", text
            assert frame.get("feed") == named, text
            assert isinstance(frame["message"], str) and frame["message"], text
        await ws.send(b'{"type": "subscribe", "feed": "team/x"}')
        frame = await recv(ws)
        assert frame["type"] == "error" and frame["code"] == "invalid_request"
        assert "feed" not in frame
        # The feed subscribed before still follows.
        live = await publish(http, team)
        assert await recv(ws) == events_of(feed, live)[0]


async def test_too_many_invalid_messages_close_1008(make_node: NodeFactory) -> None:
    async with make_node(ws_max_bad_messages=3) as node, open_ws(node) as ws:
        for _ in range(3):
            await send(ws, '{"type": "nope"}')
            frame = await recv(ws)
            assert frame["type"] == "error" and frame["code"] == "invalid_request"
        # Errors about feeds that do not exist are not invalid messages.
        await barrier(ws)
        await send(ws, "[]")
        frames, code, _ = await until_closed(ws)
        assert [f["code"] for f in frames] == ["invalid_request"]
        assert code == 1008
        await eventually(lambda: ws_metric(node, "gateway_connections") == 0)


async def test_subscription_limit_is_rate_limited_per_feed(
    make_node: NodeFactory,
) -> None:
    async with (
        make_node(ws_max_subscriptions=2) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as http,
    ):
        a, b, c = ev.team_id(), ev.team_id(), ev.team_id()
        fa, fb, fc = (f"team/{t}" for t in (a, b, c))
        heads = {f: (await publish(http, t)).cursors[0] for f, t in ((fa, a), (fb, b), (fc, c))}
        async with open_ws(node) as ws:
            await subscribe(ws, fa, after=heads[fa])
            await subscribe(ws, fb, after=heads[fb])
            assert by_feed(await recv_n(ws, 2)) == {
                fa: [subscribed(fa, heads[fa])],
                fb: [subscribed(fb, heads[fb])],
            }
            await subscribe(ws, fc, after=heads[fc])
            assert await recv(ws) == {
                "type": "error",
                "feed": fc,
                "code": "rate_limited",
                "message": "at most 2 subscriptions per socket",
            }
            # Subscribing again to a feed already held is not a new subscription.
            await subscribe(ws, fa, after=heads[fa])
            assert await recv(ws) == subscribed(fa, heads[fa])
            # The others go on; the refused feed gets nothing.
            pc = await publish(http, c)
            pa = await publish(http, a)
            pb = await publish(http, b)
            assert by_feed(await recv_n(ws, 2)) == {
                fa: events_of(fa, pa),
                fb: events_of(fb, pb),
            }
            await barrier(ws)
            assert {k.id for k in node.hub.audiences} == {a, b}
            # Room again after an unsubscribe.
            await send(ws, {"type": "unsubscribe", "feed": fa})
            await subscribe(ws, fc, after=heads[fc])
            assert await recv_n(ws, 2) == [subscribed(fc, pc.cursors[0]), *events_of(fc, pc)]


async def test_error_about_one_feed_ends_only_that_subscription(
    node: Gateway, http: httpx.AsyncClient
) -> None:
    a, b = ev.team_id(), ev.team_id()
    fa, fb = f"team/{a}", f"team/{b}"
    head_a = (await publish(http, a)).cursors[0]
    head_b = (await publish(http, b)).cursors[0]
    async with open_ws(node) as ws:
        await subscribe(ws, fa, after=head_a)
        await subscribe(ws, fb, after=head_b)
        await recv_n(ws, 2)
        # An error about another feed leaves both alone.
        await subscribe(ws, f"team/{ev.team_id()}")
        assert (await recv(ws))["code"] == "not_found"
        pa = await publish(http, a)
        pb = await publish(http, b)
        assert by_feed(await recv_n(ws, 2)) == {fa: events_of(fa, pa), fb: events_of(fb, pb)}
        # An error about feed a ends a's subscription only.
        await subscribe(ws, fa, after="garbage")
        assert await recv(ws) == {
            "type": "error",
            "feed": fa,
            "code": "invalid_cursor",
            "message": "cursor must be <epoch>:<offset>, two decimal integers",
        }
        await publish(http, a)
        pb = await publish(http, b)
        assert await recv(ws) == events_of(fb, pb)[0]
        await barrier(ws)


async def test_old_epoch_cursor_gets_epoch_restarted(
    node: Gateway, http: httpx.AsyncClient
) -> None:
    a, b = ev.team_id(), ev.team_id()
    fa, fb = f"team/{a}", f"team/{b}"
    pa = await publish(http, a, 2)
    head_b = (await publish(http, b)).cursors[0]
    epoch = epoch_of(pa.cursors[0])
    async with open_ws(node) as ws:
        await subscribe(ws, fb, after=head_b)
        assert await recv(ws) == subscribed(fb, head_b)
        await subscribe(ws, fa, after=f"{epoch - 1}:7")
        frame = await recv(ws)
        if frame["type"] == "subscribed":  # informational; may come first
            assert frame == subscribed(fa, pa.cursors[-1])
            frame = await recv(ws)
        assert frame == {"type": "epoch_restarted", "feed": fa, "cursor": f"{epoch}:0"}
        # That subscription has ended; the other one goes on.
        await publish(http, a)
        pb = await publish(http, b)
        assert await recv(ws) == events_of(fb, pb)[0]
        await barrier(ws)
        # Subscribing again with the restart cursor resumes in the current epoch.
        await subscribe(ws, fa, after=frame["cursor"])
        frames = await recv_n(ws, 4)
        assert frames[0]["type"] == "subscribed"
        assert [f["cursor"] for f in frames[1:]] == [f"{epoch}:{i}" for i in (1, 2, 3)]
        assert frames[1:3] == events_of(fa, pa)


async def test_trimmed_history_gets_epoch_restarted(make_node: NodeFactory) -> None:
    async with (
        make_node(team_retention=3) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as http,
    ):
        team = ev.team_id()
        feed = f"team/{team}"
        pub = await publish(http, team, 6)
        epoch = epoch_of(pub.cursors[0])
        async with open_ws(node) as ws:
            await subscribe(ws, feed, after=pub.cursors[0])
            frame = await recv(ws)
            if frame["type"] == "subscribed":
                frame = await recv(ws)
            assert frame == {"type": "epoch_restarted", "feed": feed, "cursor": f"{epoch}:3"}
            await subscribe(ws, feed, after=frame["cursor"])
            tail = Published(pub.cursors[3:], pub.bodies[3:])
            expected = [subscribed(feed, pub.cursors[-1]), *events_of(feed, tail)]
            assert await recv_n(ws, 4) == expected


# ---------------------------------------------------------------------------
# 6. Unsubscribe
# ---------------------------------------------------------------------------


async def test_unsubscribe_stops_that_feed(node: Gateway, http: httpx.AsyncClient) -> None:
    a, b = ev.team_id(), ev.team_id()
    fa, fb = f"team/{a}", f"team/{b}"
    head_a = (await publish(http, a)).cursors[0]
    head_b = (await publish(http, b)).cursors[0]
    async with open_ws(node) as ws:
        await subscribe(ws, fa, after=head_a)
        await subscribe(ws, fb, after=head_b)
        await recv_n(ws, 2)
        await send(ws, {"type": "unsubscribe", "feed": fa})
        await barrier(ws)
        await publish(http, a)
        pb = await publish(http, b)
        assert await recv(ws) == events_of(fb, pb)[0]
        await barrier(ws)
        await eventually(lambda: {k.id for k in node.hub.audiences} == {b})
        # Unsubscribing a feed that is not subscribed is harmless and silent.
        await send(ws, {"type": "unsubscribe", "feed": fa})
        await barrier(ws)


async def test_unsubscribe_while_joining_leaves_no_audience(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    backend = build_backend(node_settings(url, prefix))
    entered, release = anyio.Event(), anyio.Event()
    real_wake = backend.live.wake

    async def gated_wake() -> None:
        # Hold the join at the point where the hub has registered the subscription.
        entered.set()
        await release.wait()
        await real_wake()

    backend.live.wake = gated_wake  # type: ignore[method-assign]
    async with (
        start_node(url, prefix, backend=backend) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as http,
    ):
        team = ev.team_id()
        feed = f"team/{team}"
        await publish(http, team)
        async with open_ws(node) as ws:
            await subscribe(ws, feed)
            with anyio.fail_after(5):
                await entered.wait()
            await send(ws, {"type": "unsubscribe", "feed": feed})
            await barrier(ws)
            release.set()
            await barrier(ws)  # nothing for the feed came in between
            await eventually(lambda: not node.hub.audiences, within=1.0)


# ---------------------------------------------------------------------------
# 7. Token expiry and refresh
# ---------------------------------------------------------------------------


def short_token(**kw: Any) -> tuple[str, float]:
    """A token that expires in 1..2 s, and its ``exp``."""
    tok = mint(SECRET, tenant="acme", subject="tester", ttl_seconds=2, **kw)
    exp = float(jwt.decode(tok, options={"verify_signature": False})["exp"])
    return tok, exp


async def test_token_expiry_closes_4001(mem_node: Gateway, mem_http: httpx.AsyncClient) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    pub = await publish(mem_http, team)
    tok, exp = short_token()
    async with open_ws(mem_node, headers=bearer(tok)) as ws:
        await subscribe(ws, feed)
        assert await recv_n(ws, 2) == [subscribed(feed, pub.cursors[0]), *events_of(feed, pub)]
        assert time.time() < exp
        frames, code, reason = await until_closed(ws, within=exp - time.time() + 3)
        closed_at = time.time()
    assert frames == []
    assert code == 4001 and reason == "token expired"
    # At exp itself, not exp + the verification leeway.
    assert exp - 0.05 <= closed_at <= exp + 1.0
    await eventually(lambda: ws_metric(mem_node, "gateway_connections") == 0)


async def test_token_refresh_keeps_the_socket_open(
    mem_node: Gateway, mem_http: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    head = (await publish(mem_http, team)).cursors[0]
    tok, exp = short_token()
    async with open_ws(mem_node, headers=bearer(tok)) as ws:
        await subscribe(ws, feed, after=head)
        assert await recv(ws) == subscribed(feed, head)
        await send(ws, {"type": "auth", "token": token(ttl=3600)})
        await barrier(ws)  # a successful refresh is silent
        assert time.time() < exp
        # Let the first token's expiry (and then some) pass.
        await anyio.sleep(exp - time.time() + 0.5)
        assert ws.state is State.OPEN
        live = await publish(mem_http, team)
        assert await recv(ws) == events_of(feed, live)[0]
    assert ws_metric(mem_node, "gateway_disconnects_total", reason="auth") == 0


async def test_token_refresh_with_another_subject_is_refused(
    mem_node: Gateway, mem_http: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    head = (await publish(mem_http, team)).cursors[0]
    tok, exp = short_token()
    async with open_ws(mem_node, headers=bearer(tok)) as ws:
        await subscribe(ws, feed, after=head)
        assert await recv(ws) == subscribed(feed, head)
        await send(ws, {"type": "auth", "token": token(subject="mallory")})
        assert await recv(ws) == {
            "type": "error",
            "code": "unauthenticated",
            "message": "a refreshed token must have the same iss, tenant and sub",
        }
        await send(ws, {"type": "auth", "token": token(tenant="globex")})
        assert (await recv(ws))["code"] == "unauthenticated"
        await send(ws, {"type": "auth", "token": "not-a-jwt"})
        assert await recv(ws) == {
            "type": "error",
            "code": "unauthenticated",
            "message": "invalid token",
        }
        # The subscription is untouched until the old token expires.
        live = await publish(mem_http, team)
        assert await recv(ws) == events_of(feed, live)[0]
        frames, code, _ = await until_closed(ws, within=exp - time.time() + 3)
        closed_at = time.time()
    assert frames == []
    assert code == 4001
    assert exp - 0.05 <= closed_at <= exp + 1.0


async def test_token_refresh_dropping_a_team_ends_that_subscription(
    node: Gateway, http: httpx.AsyncClient
) -> None:
    a, b = ev.team_id(), ev.team_id()
    fa, fb = f"team/{a}", f"team/{b}"
    head_a = (await publish(http, a)).cursors[0]
    head_b = (await publish(http, b)).cursors[0]
    async with open_ws(node, headers=auth(teams=[a, b])) as ws:
        await subscribe(ws, fa, after=head_a)
        await subscribe(ws, fb, after=head_b)
        await recv_n(ws, 2)
        await send(ws, {"type": "auth", "token": token(teams=[b])})
        assert await recv(ws) == {
            "type": "error",
            "feed": fa,
            "code": "not_found",
            "message": "no such feed",
        }
        await publish(http, a)
        pb = await publish(http, b)
        assert await recv(ws) == events_of(fb, pb)[0]
        await barrier(ws)
        # The new claims apply to new subscriptions too.
        await subscribe(ws, fa)
        assert await recv(ws) == {
            "type": "error",
            "feed": fa,
            "code": "not_found",
            "message": "no such feed",
        }


# ---------------------------------------------------------------------------
# 8. Keepalive
# ---------------------------------------------------------------------------


async def test_client_that_answers_pings_stays_connected() -> None:
    async with (
        start_node(ws_ping_interval=0.3, ws_ping_timeout=0.3) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as http,
    ):
        team = ev.team_id()
        feed = f"team/{team}"
        head = (await publish(http, team)).cursors[0]
        # The websockets client answers pings on its own, even when nobody reads.
        async with open_ws(node) as ws:
            await subscribe(ws, feed, after=head)
            assert await recv(ws) == subscribed(feed, head)
            await anyio.sleep(5 * 0.3)  # several ping intervals (and timeouts) pass
            assert ws.state is State.OPEN
            assert ws_metric(node, "gateway_connections") == 1
            live = await publish(http, team)
            assert await recv(ws) == events_of(feed, live)[0]
        await eventually(lambda: ws_metric(node, "gateway_connections") == 0)
        # A close the client starts is counted as such.
        assert ws_metric(node, "gateway_disconnects_total", reason="client") == 1
        assert ws_metric(node, "gateway_disconnects_total", reason="reset") == 0


def upgrade_request(node: Gateway, key: str) -> str:
    """A valid gateway.v1 upgrade request for ``/v1/ws``, written by hand."""
    return (
        "GET /v1/ws HTTP/1.1\r\n"
        f"Host: {node.settings.host}:{node.port}\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: {SUBPROTOCOL}\r\n"
        f"Authorization: Bearer {token()}\r\n"
        "\r\n"
    )


async def raw_upgrade(node: Gateway) -> anyio.abc.SocketStream:
    """Open a WebSocket by hand; the caller then neither reads nor answers anything."""
    stream = await anyio.connect_tcp(node.settings.host, node.port)
    key = base64.b64encode(os.urandom(16)).decode()
    await stream.send(upgrade_request(node, key).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += await stream.receive()
    status, *lines = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert status.startswith("HTTP/1.1 101"), head
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    accept = base64.b64encode(
        hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
    ).decode()
    assert headers["sec-websocket-accept"] == accept
    assert headers["sec-websocket-protocol"] == SUBPROTOCOL
    return stream


@pytest.mark.parametrize(
    ("key", "change", "named"),
    [
        (None, ("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8"), "Sec-WebSocket-Version"),
        ("c2hvcnQ=", None, "Sec-WebSocket-Key"),
        (None, ("Connection: Upgrade", "Connection: keep-alive"), "Connection"),
        (None, ("Upgrade: websocket", "Upgrade: websocket, h2c"), "Upgrade"),
    ],
    ids=["version-8", "short-key", "no-upgrade-option", "two-protocols"],
)
async def test_a_malformed_upgrade_is_a_typed_400_naming_the_header(
    mem_node: Gateway, key: str | None, change: tuple[str, str] | None, named: str
) -> None:
    request = upgrade_request(mem_node, key or base64.b64encode(os.urandom(16)).decode())
    if change is not None:
        old, new = change
        assert old in request
        request = request.replace(old, new)
    with anyio.fail_after(5):
        async with await anyio.connect_tcp(mem_node.settings.host, mem_node.port) as stream:
            await stream.send(request.encode())
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            head, _, body = data.partition(b"\r\n\r\n")
            lengths = [
                line.split(b":", 1)[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ]
            while len(body) < int(lengths[0]):
                body += await stream.receive()
    assert head.startswith(b"HTTP/1.1 400 "), data
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith("not a valid WebSocket upgrade request: ")
    assert named in error["message"], error
    assert ws_metric(mem_node, "gateway_connections") == 0


async def test_peer_that_does_not_answer_pings_is_dropped() -> None:
    interval = timeout = 0.3
    async with start_node(ws_ping_interval=interval, ws_ping_timeout=timeout) as node:
        with anyio.fail_after(10):
            stream = await raw_upgrade(node)
            try:
                started = anyio.current_time()
                assert ws_metric(node, "gateway_connections") == 1
                await eventually(lambda: ws_metric(node, "gateway_connections") == 0)
                elapsed = anyio.current_time() - started
            finally:
                await stream.aclose()
    assert interval + timeout - 0.1 <= elapsed <= interval + timeout + 0.5
    # The disconnect reason ("client") is checked in test_disconnect_reasons_are_counted.


# ---------------------------------------------------------------------------
# 9. Limits
# ---------------------------------------------------------------------------


async def test_message_too_big_closes_1009_and_others_go_on(make_node: NodeFactory) -> None:
    limit = 1024
    async with (
        make_node(ws_max_message_bytes=limit) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as http,
    ):
        team = ev.team_id()
        feed = f"team/{team}"
        head = (await publish(http, team)).cursors[0]
        async with open_ws(node) as watcher, open_ws(node) as big:
            await subscribe(watcher, feed, after=head)
            assert await recv(watcher) == subscribed(feed, head)
            # Exactly at the limit is still a message (answered, not closed).
            at_limit = json.dumps({"type": "subscribe", "feed": BARRIER})
            at_limit = at_limit[:-1] + " " * (limit - len(at_limit)) + "}"
            assert len(at_limit.encode()) == limit
            await send(big, at_limit)
            assert (await recv(big))["code"] == "not_found"
            await send(big, at_limit[:-1] + " }")
            frames, code, _ = await until_closed(big)
            assert frames == []
            assert code == 1009
            live = await publish(http, team)
            assert await recv(watcher) == events_of(feed, live)[0]
            await eventually(lambda: ws_metric(node, "gateway_connections") == 1)


# ---------------------------------------------------------------------------
# 10. Drain
# ---------------------------------------------------------------------------


async def test_drain_closes_sockets_with_1012(node: Gateway, http: httpx.AsyncClient) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    head = (await publish(http, team)).cursors[0]
    async with open_ws(node) as subscriber, open_ws(node) as idle:
        await subscribe(subscriber, feed, after=head)
        assert await recv(subscriber) == subscribed(feed, head)
        with anyio.fail_after(5):
            await node.drain(0.2)
        for ws in (subscriber, idle):
            frames, code, reason = await until_closed(ws)
            assert frames == []
            assert code == 1012
            assert reason == "service restart: reconnect and resume"
    await eventually(lambda: ws_metric(node, "gateway_connections") == 0)
    assert not node.hub.audiences


# ---------------------------------------------------------------------------
# Disconnect reasons (gateway_disconnects_total{transport="ws"})
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["ping", "shutdown", "error-1008", "error-1009", "auth"])
async def test_disconnect_reasons_are_counted(case: str) -> None:
    async with start_node(
        ws_ping_interval=0.3 if case == "ping" else 20.0,
        ws_ping_timeout=0.3 if case == "ping" else 20.0,
        ws_max_bad_messages=1,
        ws_max_message_bytes=1024,
    ) as node:
        with anyio.fail_after(10):
            if case == "ping":
                stream = await raw_upgrade(node)
                await eventually(lambda: ws_metric(node, "gateway_connections") == 0)
                await stream.aclose()
            else:
                headers = bearer(short_token()[0]) if case == "auth" else auth()
                async with open_ws(node, headers=headers) as ws:
                    if case == "shutdown":
                        await node.drain(0.1)
                    elif case == "error-1008":
                        await send(ws, "[]")
                        await send(ws, "[]")
                    elif case == "error-1009":
                        await send(ws, "x" * 2048)
                    _, code, _ = await until_closed(ws, within=5)
                    assert (
                        code
                        == {
                            "shutdown": 1012,
                            "error-1008": 1008,
                            "error-1009": 1009,
                            "auth": 4001,
                        }[case]
                    )
                await eventually(lambda: ws_metric(node, "gateway_connections") == 0)
        # A peer that stops answering pings is gone: "client" ("reset" is for streams
        # a feed reset ends; a socket outlives its subscriptions' resets).
        reason = "client" if case == "ping" else case.split("-")[0]
        assert ws_metric(node, "gateway_connects_total") == 1
        assert ws_metric(node, "gateway_disconnects_total", reason=reason) == 1
        for other in ("client", "slow", "shutdown", "auth", "error", "reset"):
            if other != reason:
                assert ws_metric(node, "gateway_disconnects_total", reason=other) == 0
