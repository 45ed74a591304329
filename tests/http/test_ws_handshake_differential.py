"""The gateway's WebSocket opening handshake against python-websockets' on the same bytes.

Hypothesis generates upgrade requests for ``/v1/ws`` and mutates them: every handshake
field present, absent or repeated, in any case and order; ``Connection`` and ``Upgrade``
lists; keys of every length and alphabet, with and without padding; versions;
subprotocol lists with ``gateway.v1``, other names, bearer elements of one token or of
several, in any case; origins; ``Authorization`` headers; bodies.  The same bytes go

- through websockets' own HTTP parser (``websockets.http11.Request.parse``) and
  ``ServerProtocol(subprotocols=["gateway.v1"]).accept`` (its ``process_request``),
  with ``origins`` set to the gateway's allow-list plus "no Origin" when it has one;
- through the gateway's parser (:class:`gateway.net.h1.RequestParser`), the route's
  method check and :func:`gateway.net.ws_handshake.negotiate` with the route's terms
  (:data:`gateway.http.websocket.TERMS`; sans I/O);
- for a smaller sample, over a socket to a real node (``GATEWAY_WS_ORIGINS`` set),
  which must answer what the sans-I/O pipeline decided (and verify the token).

Where websockets refuses, the gateway refuses with a 4xx.  Where both accept, the
``Sec-WebSocket-Accept`` values are identical and the subprotocol chosen is the same
(``gateway.v1``).  Where websockets accepts and the gateway refuses, the reason must be
one of the deliberate differences, each stricter than websockets:

1. ``Host``: HTTP/1.1 needs exactly one (the parser: 400); websockets leaves the
   ``Host`` check to the HTTP stack in front of it.
2. A repeated single-value field (:data:`gateway.net.h1.SINGLE`: ``Authorization``,
   ``Origin``, ``Sec-WebSocket-Key``, ``Sec-WebSocket-Version``, ...) is 400 at the
   parser, also when websockets would not read it (``Authorization``).
3. An empty element in ``Connection``, ``Upgrade`` or ``Sec-WebSocket-Protocol`` is 400:
   the parser joins repeated lines with ``", "``, so an empty element may be an empty
   line, which websockets refuses, and the two cannot be told apart.
4. Credentials, which websockets does not look at: the ``Authorization: Bearer``
   header and every ``bearer.<token>`` subprotocol element must be one and the same
   token (401 otherwise, also for no token, an empty one, another scheme, or a bearer
   element spelled ``Bearer.`` in another case).  The test checks this against a model
   of the rule, both ways: 401 exactly when the model says so.
5. Status codes: the gateway answers its refusals with its own codes (400 for HTTP/1.0,
   where websockets says 505; 405 for another method, as websockets does), always a
   4xx with the documented JSON error body.

Bounded for CI: a few hundred examples sans I/O, a few dozen over the socket; a failure
prints the example and the blob that reproduces it (``print_blob``).  Longer runs:
``WS_FUZZ_EXAMPLES=4000 uv run --no-sync pytest tests/http/test_ws_handshake_differential.py``
(sans-I/O examples per property, default 400; the socket properties run 3/20 of it).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import anyio
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from websockets.datastructures import Headers
from websockets.http11 import Request as WsRequest
from websockets.server import ServerProtocol
from websockets.streams import StreamReader
from websockets.typing import Origin, Subprotocol

from gateway.app import Gateway
from gateway.errors import GatewayError, Unauthenticated
from gateway.http.websocket import TERMS
from gateway.net import ws_handshake
from gateway.net.h1 import HttpError, RequestParser
from gateway.net.server import MAX_HEAD_BYTES
from tests.support.node import start_node, token

pytestmark = pytest.mark.anyio

SUBPROTOCOL = "gateway.v1"
ALLOWED = "https://app.example"
#: Tokens: two valid ones of two tenants (the node verifies them), one that is not a JWT.
TOKEN_A = token("acme")
TOKEN_B = token("globex")
NOT_A_JWT = "not.a-jwt"
VALID = {TOKEN_A, TOKEN_B}

EXAMPLES = int(os.environ.get("WS_FUZZ_EXAMPLES", "400"))
SANS_IO = settings(
    max_examples=EXAMPLES,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
OVER_SOCKETS = settings(
    max_examples=max(1, EXAMPLES * 3 // 20),
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------


@dataclass
class Spec:
    """A generated request: its lines in order, and what the credential model reads."""

    method: str
    version: str
    fields: list[tuple[str, str]]
    body: bytes = b""
    origins: tuple[str, ...] = ()

    def data(self) -> bytes:
        head = f"{self.method} /v1/ws {self.version}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in self.fields)
        return head.encode("latin-1") + b"\r\n" + self.body

    def values(self, name: str) -> list[str]:
        return [v.strip(" \t") for n, v in self.fields if n.lower() == name]


def a_list(elements: Sequence[str]) -> st.SearchStrategy[str]:
    """One field line's value: a list of elements, sometimes with empty ones."""
    return st.builds(
        lambda items, sep, lead, trail: (
            ("," if lead else "") + sep.join(items) + (sep if trail else "")
        ),
        st.lists(st.sampled_from(elements), min_size=1, max_size=4),
        st.sampled_from([", ", ",", " , ", ",\t"]),
        st.sampled_from([False, False, False, True]),
        st.sampled_from([False, False, False, True]),
    )


def cased(name: str) -> st.SearchStrategy[str]:
    """A field name in some case (names are case-insensitive)."""
    mixed = "".join(c.upper() if i % 2 else c.lower() for i, c in enumerate(name))
    return st.sampled_from([name, name, name.lower(), name.upper(), name.swapcase(), mixed])


def lines(
    draw: st.DrawFn, name: str, values: st.SearchStrategy[str], counts: Sequence[int]
) -> list[tuple[str, str]]:
    """``name`` on as many lines as one of ``counts`` says, each with one of ``values``."""
    return [(draw(cased(name)), draw(values)) for _ in range(draw(st.sampled_from(counts)))]


def mutated(
    draw: st.DrawFn,
    name: str,
    good: st.SearchStrategy[str],
    bad: st.SearchStrategy[str],
    counts: Sequence[int] = (0, 1, 1, 2),
) -> list[tuple[str, str]]:
    """The field once with a good value, or (one time in six) absent, repeated or bad,
    or with a second line (empty, blank or good) before or after it: most requests
    differ from a valid one in a field or two, so every rule is reached."""
    choice = draw(st.sampled_from(["good"] * 10 + ["bad", "second line"]))
    if choice == "good":
        return lines(draw, name, good, (1,))
    if choice == "bad":
        return lines(draw, name, good | bad, counts)
    found = lines(draw, name, good, (1,)) + lines(
        draw, name, st.sampled_from(["", " "]) | good, (1,)
    )
    return found if draw(st.booleans()) else found[::-1]


@st.composite
def keys(draw: st.DrawFn) -> str:
    """A Sec-WebSocket-Key that is not base64 of 16 bytes, or only just."""
    raw = draw(st.binary(min_size=16, max_size=16))
    good = base64.b64encode(raw).decode()
    mutation = draw(
        st.sampled_from(["length", "unpadded", "urlsafe", "space", "latin1", "pad", "lower"])
    )
    if mutation == "length":
        n = draw(st.sampled_from([0, 1, 8, 15, 17, 18, 24]))
        return base64.b64encode(draw(st.binary(min_size=n, max_size=n))).decode()
    if mutation == "unpadded":
        return good.rstrip("=")
    if mutation == "urlsafe":
        return base64.urlsafe_b64encode(raw).decode()
    if mutation == "space":
        return good[:8] + " " + good[8:]
    if mutation == "latin1":
        return good[:-3] + "\xe9=="
    if mutation == "pad":
        return good + "="
    return good.lower()  # still base64, of other (16) bytes when its padding survives


GOOD_KEYS = st.binary(min_size=16, max_size=16).map(lambda b: base64.b64encode(b).decode())
CONNECTION = ["Upgrade", "upgrade", "keep-alive", "close", "HTTP2-Settings", "up;grade", "a b"]
UPGRADE = ["websocket", "WebSocket", "websocket/13", "h2c", "web socket"]
VERSIONS = ["8", "14", "013", "13, 13", "13,8", "", "+13", "13.0"]
#: Subprotocol elements beside gateway.v1: credentials, in every spelling, and others.
OFFER = [
    "chat",
    f"bearer.{TOKEN_A}",
    f"bearer.{TOKEN_A}",
    f"bearer.{TOKEN_B}",
    f"bearer.{NOT_A_JWT}",
    "bearer.",
    f"Bearer.{TOKEN_A}",
    "bearer",
]
#: ... and what no offer should hold: an empty line, a blank one, list syntax that is
#: not a token, gateway.v1 in another case.
ODD = ["", " ", ",", '"q"', "a b", "a/b", "Gateway.V1", "gateway.v1;q=1"]
AUTHORIZATION = [
    f"Bearer {TOKEN_A}",
    f"Bearer {TOKEN_B}",
    f"bearer {TOKEN_A}",
    f"BEARER  {TOKEN_A}",
    f"Bearer {NOT_A_JWT}",
    "Basic dXNlcjpwYXNz",
    "Bearer",
]
ORIGINS = [ALLOWED, "https://evil.example", "null", "", ALLOWED + "/", "HTTPS://APP.EXAMPLE"]
EXTRA = [
    ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits"),
    ("User-Agent", "hypothesis"),
    ("X-Forwarded-For", "10.0.0.1"),
]
#: (field, value, body) framing a body; None: no body (most requests).
BODIES: list[tuple[str, str, bytes] | None] = [
    ("Content-Length", "0", b""),
    ("Content-Length", "00", b""),
    ("Content-Length", "3", b"abc"),
    ("Transfer-Encoding", "chunked", b"0\r\n\r\n"),
]


@st.composite
def credentials(draw: st.DrawFn) -> list[tuple[str, str]]:
    """The subprotocol offer and Authorization lines: one credential where it may be
    (the header, a bearer element, both with the same token), or any mix; the offer on
    one line, one element a line, sometimes with an empty line among them."""
    where = draw(st.sampled_from(["header", "subprotocol", "both", "any", "any"]))
    authorization: list[tuple[str, str]] = []
    if where == "any":
        elements = draw(st.lists(st.sampled_from(OFFER), max_size=3))
        if draw(st.sampled_from([True, True, True, False])):
            elements.insert(draw(st.integers(0, len(elements))), SUBPROTOCOL)
        authorization = lines(draw, "Authorization", st.sampled_from(AUTHORIZATION), (0, 1, 1, 2))
    else:
        tok = draw(st.sampled_from([TOKEN_A, TOKEN_B]))
        elements = [SUBPROTOCOL, *draw(st.lists(st.sampled_from(["chat", "x.y"]), max_size=2))]
        if where != "header":
            elements.append(f"bearer.{tok}")
        elements = list(draw(st.permutations(elements)))
        if where != "subprotocol":
            authorization = lines(draw, "Authorization", st.just(f"Bearer {tok}"), (1,))
    if draw(st.sampled_from([False] * 5 + [True])):
        elements.insert(draw(st.integers(0, len(elements))), draw(st.sampled_from(ODD)))
    offer: list[tuple[str, str]] = []
    if draw(st.booleans()):
        for element in elements:
            offer += lines(draw, "Sec-WebSocket-Protocol", st.just(element), (1,))
    elif elements:
        offer += lines(draw, "Sec-WebSocket-Protocol", st.just(", ".join(elements)), (1,))
    return offer + authorization


@st.composite
def requests(
    draw: st.DrawFn, origins: st.SearchStrategy[tuple[str, ...]], head: bool = True
) -> Spec:
    """An upgrade request for /v1/ws, valid or a field or two away from it (a HEAD
    request only with ``head``)."""
    fields: list[tuple[str, str]] = []
    fields += mutated(draw, "Host", st.just("gw.test"), st.just("gw.test"), (0, 2))
    fields += mutated(
        draw,
        "Upgrade",
        st.sampled_from(["websocket", "WebSocket", "WEBSOCKET"]),
        a_list(UPGRADE) | st.just(""),
    )
    fields += mutated(
        draw,
        "Connection",
        st.sampled_from(["Upgrade", "upgrade", "keep-alive, Upgrade"]),
        a_list(CONNECTION) | st.just(""),
    )
    fields += mutated(draw, "Sec-WebSocket-Key", GOOD_KEYS, keys())
    fields += mutated(draw, "Sec-WebSocket-Version", st.just("13"), st.sampled_from(VERSIONS))
    fields += draw(credentials())
    if draw(st.booleans()):
        fields += mutated(draw, "Origin", st.just(ALLOWED), st.sampled_from(ORIGINS))
    fields += draw(st.lists(st.sampled_from(EXTRA), max_size=2, unique=True))
    body = b""
    framing = draw(st.sampled_from([None] * 12 + BODIES))
    if framing is not None:
        fields.append((framing[0], framing[1]))
        body = framing[2]
    if draw(st.booleans()):
        fields = list(draw(st.permutations(fields)))
    method = draw(st.sampled_from(["GET"] * 15 + ["POST"] + (["HEAD"] if head else [])))
    version = draw(st.sampled_from(["HTTP/1.1"] * 15 + ["HTTP/1.0"]))
    return Spec(method, version, fields, body, draw(origins))


# ---------------------------------------------------------------------------
# The two verdicts
# ---------------------------------------------------------------------------


@dataclass
class Verdict:
    status: int
    accept: str | None = None
    subprotocol: str | None = None
    #: The gateway's: the token it would verify (101), or the refusal's message.
    token: str | None = None
    message: str = ""
    #: The gateway's: whether the connection may carry another request after the answer.
    keep_alive: bool = False


def websockets_verdict(spec: Spec) -> Verdict:
    """What python-websockets' server answers to these bytes."""
    reader = StreamReader()
    reader.feed_data(spec.data())
    reader.feed_eof()
    parse = WsRequest.parse(reader.read_line)
    try:
        next(parse)
    except StopIteration as done:
        request: WsRequest = done.value
    except Exception as exc:  # its parser refuses the request (e.g. a body)
        return Verdict(400, message=f"parser: {exc!r}")
    else:
        raise AssertionError("websockets' parser wants more than a whole request")
    origins: list[Origin | None] | None = None
    if spec.origins:
        origins = [*(Origin(o) for o in spec.origins), None]
    protocol = ServerProtocol(subprotocols=[Subprotocol(SUBPROTOCOL)], origins=origins)
    response = protocol.accept(request)
    if response.status_code != 101:
        return Verdict(response.status_code, message=response.body.decode())
    headers: Headers = response.headers
    return Verdict(101, headers["Sec-WebSocket-Accept"], headers.get("Sec-WebSocket-Protocol"))


def gateway_verdict(spec: Spec) -> Verdict:
    """What the gateway decides before verifying a token: its parser, the route's
    method check (the router's 405), then :func:`ws_handshake.negotiate`."""
    parser = RequestParser(max_head=MAX_HEAD_BYTES, max_body=1024)
    parser.receive(spec.data())
    try:
        parsed = parser.next_request()
    except HttpError as exc:
        return Verdict(exc.status, message=exc.message)
    assert parsed is not None, "the parser wants more than a whole request"
    if "upgrade" in parsed.headers:
        # Not switched, it closes: a proxy may already treat what follows as a tunnel.
        assert not parsed.keep_alive
    if parsed.method != "GET":
        message = "the WebSocket route takes GET upgrades only"
        return Verdict(405, message=message, keep_alive=parsed.keep_alive)
    try:
        handshake = ws_handshake.negotiate(parsed.headers, parsed.http11, spec.origins, TERMS)
    except GatewayError as exc:
        return Verdict(exc.status, message=exc.message, keep_alive=parsed.keep_alive)
    # Accepted: the parser handed the request out as an upgrade (the bytes after it are
    # the new protocol's) and the connection never carries another HTTP request.
    assert parsed.upgrade and not parsed.keep_alive
    return Verdict(101, handshake.accept, handshake.subprotocol, handshake.token)


def credential(spec: Spec) -> str | None:
    """The model of the one-credential rule: the token, or None for 401."""
    tokens: list[str] = []
    for value in spec.values("authorization"):
        scheme, _, rest = value.partition(" ")
        if scheme.lower() != "bearer" or not rest.strip():
            return None
        tokens.append(rest.strip())
    for line in spec.values("sec-websocket-protocol"):
        for element in (e.strip(" \t") for e in line.split(",")):
            if element.startswith("bearer."):
                tokens.append(element.removeprefix("bearer."))
            elif element.lower().startswith("bearer."):
                return None
    if len(set(tokens)) != 1 or not tokens[0]:
        return None
    return tokens[0]


#: The messages of refusals stricter than websockets' (module docstring, 1 to 3).
STRICTER = (
    "a request needs exactly one host header",
    "header field is repeated",
    "empty list element",
)


def compare(spec: Spec) -> Verdict:
    theirs = websockets_verdict(spec)
    ours = gateway_verdict(spec)
    note = f"websockets: {theirs}\ngateway: {ours}\nrequest: {spec.data()!r}"
    assert 400 <= ours.status < 500 or ours.status == 101, note
    if theirs.status != 101:
        assert ours.status != 101, note
    elif ours.status == 101:
        assert ours.accept == theirs.accept, note
        assert ours.subprotocol == theirs.subprotocol == SUBPROTOCOL, note
    elif ours.status == 400:
        assert any(reason in ours.message for reason in STRICTER), note
    else:
        assert ours.status == 401, note
    # The credential rule, both ways, wherever the gateway got that far.
    if ours.status == 101:
        assert ours.token == credential(spec), note
    elif ours.status == 401:
        assert credential(spec) is None, note
    return ours


@SANS_IO
@given(requests(st.sampled_from([(), (ALLOWED,), (ALLOWED, "https://other.example")])))
def test_the_gateway_refuses_what_websockets_refuses(spec: Spec) -> None:
    ours = compare(spec)
    event(f"websockets {websockets_verdict(spec).status}, gateway {ours.status}")


# ---------------------------------------------------------------------------
# The same over a socket, to a real node
# ---------------------------------------------------------------------------


@pytest.fixture
async def node() -> AsyncIterator[Gateway]:
    """A node on the embedded log (the log plays no part in a handshake) with an
    Origin allow-list; refused requests cost it nothing, accepted sockets are closed at
    once, so one node serves every example."""
    async with start_node(ws_origins=ALLOWED, max_tenant_connections=10_000) as n:
        yield n


async def exchange(
    node: Gateway, data: bytes, close_expected: bool
) -> tuple[int, dict[str, str], bytes]:
    """Send one request; the status, headers and body of the answer.  When the server
    is to close after it, check that nothing follows but the end of the stream."""
    with anyio.fail_after(10):
        async with await anyio.connect_tcp(node.settings.host, node.port) as stream:
            await stream.send(data)
            buffer = b""
            while b"\r\n\r\n" not in buffer:
                buffer += await stream.receive()
            head, _, rest = buffer.partition(b"\r\n\r\n")
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            status = int(status_line.split(" ")[1])
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)
            }
            if status == 101:
                return status, headers, b""
            length = int(headers["content-length"])
            while len(rest) < length:
                rest += await stream.receive()
            body, extra = rest[:length], rest[length:]
            if close_expected:
                assert headers.get("connection") == "close"
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    while True:
                        extra += await stream.receive()
                assert extra == b""
            return status, headers, body


@OVER_SOCKETS
@given(spec=requests(st.just((ALLOWED,)), head=False))
async def test_a_real_node_answers_the_same(node: Gateway, spec: Spec) -> None:
    ours = compare(spec)
    event(f"gateway {ours.status}")
    expected = ours.status
    if expected == 101 and ours.token not in VALID:
        expected = 401  # the node verifies the token; the sans-I/O pipeline does not
    status, headers, body = await exchange(node, spec.data(), not ours.keep_alive)
    assert status == expected, (status, body, spec.data())
    if status == 101:
        assert headers["sec-websocket-accept"] == ours.accept
        assert headers["sec-websocket-protocol"] == SUBPROTOCOL
        assert headers["upgrade"].lower() == "websocket"
        return
    error = json.loads(body)["error"]
    assert sorted(error) == ["code", "message"] and error["message"]
    if status == 401:
        assert error["code"] == "unauthenticated"
    for secret in VALID | {NOT_A_JWT}:
        assert secret not in body.decode()


def test_the_model_is_not_trivial() -> None:
    """The credential model and the comparison see both answers on fixed requests."""
    base = [
        ("Host", "gw.test"),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
    ]
    one = Spec(
        "GET", "HTTP/1.1", [*base, ("Sec-WebSocket-Protocol", f"gateway.v1, bearer.{TOKEN_A}")]
    )
    assert compare(one).status == 101 and credential(one) == TOKEN_A
    two = Spec(
        "GET",
        "HTTP/1.1",
        [
            *base,
            ("Authorization", f"Bearer {TOKEN_B}"),
            ("Sec-WebSocket-Protocol", f"gateway.v1, bearer.{TOKEN_A}"),
        ],
    )
    ours = compare(two)
    assert ours.status == 401 and credential(two) is None
    assert websockets_verdict(two).status == 101
    # Unauthenticated is what the route raises for it.
    with pytest.raises(Unauthenticated):
        ws_handshake.negotiate({k.lower(): v for k, v in two.fields}, True, (), TERMS)
