"""The WebSocket opening handshake (pure): RFC 6455's example, the same verdict as
python-websockets' own server handshake on every request of a table (generated ones:
test_ws_handshake_differential.py), the ``gateway.v1`` offer, and the one-credential
rule of :func:`ws_handshake.negotiate` with the WebSocket route's terms (no token is
verified here); generic networking names no protocol of the gateway."""

from __future__ import annotations

from pathlib import Path

import pytest
from websockets.datastructures import Headers
from websockets.http11 import Request as WsRequest
from websockets.server import ServerProtocol
from websockets.streams import StreamReader
from websockets.typing import Subprotocol

from gateway.auth import TWO_TOKENS
from gateway.errors import Forbidden, GatewayError, InvalidRequest, Unauthenticated
from gateway.http.websocket import TERMS
from gateway.net import ws_handshake
from gateway.net.h1 import HttpError, RequestParser

KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 §1.3
GOOD = {
    "host": "gw.test",
    "upgrade": "websocket",
    "connection": "Upgrade",
    "sec-websocket-key": KEY,
    "sec-websocket-version": "13",
}


def test_the_rfc_example_key() -> None:
    assert ws_handshake.accept_key(KEY) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert ws_handshake.check(GOOD, http11=True) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_the_101_answer() -> None:
    head = ws_handshake.response("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "gateway.v1")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 101 Switching Protocols"
    assert head.endswith(b"\r\n\r\n")
    fields = {k.lower(): v for k, _, v in (line.partition(b": ") for line in lines[1:-2])}
    assert fields == {
        b"upgrade": b"websocket",
        b"connection": b"Upgrade",
        b"sec-websocket-accept": b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
        b"sec-websocket-protocol": b"gateway.v1",
    }


def changed(**fields: str | None) -> dict[str, str]:
    headers = dict(GOOD)
    for name, value in fields.items():
        name = name.replace("_", "-")
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return headers


CASES = {
    "good": GOOD,
    "upgrade-case": changed(upgrade="WebSocket"),
    "connection-list": changed(connection="keep-alive, Upgrade"),
    "connection-lower": changed(connection="upgrade"),
    "no-connection": changed(connection=None),
    "connection-close": changed(connection="close"),
    "no-upgrade": changed(upgrade=None),
    "upgrade-h2c": changed(upgrade="h2c"),
    "two-upgrades": changed(upgrade="websocket, h2c"),
    "no-key": changed(sec_websocket_key=None),
    "short-key": changed(sec_websocket_key="c2hvcnQ="),
    "not-base64": changed(sec_websocket_key="not base64 at all!!!"),
    "two-keys": changed(sec_websocket_key=f"{KEY}, {KEY}"),
    "no-version": changed(sec_websocket_version=None),
    "version-8": changed(sec_websocket_version="8"),
    "two-versions": changed(sec_websocket_version="13, 13"),
    "connection-not-a-token": changed(connection="Upgrade, keep alive"),
    "connection-slash": changed(connection="Upgrade, a/b"),
    "upgrade-with-version": changed(upgrade="websocket/13"),
    "body-length": changed(content_length="5"),
    "zero-length": changed(content_length="0"),
    "chunked": changed(transfer_encoding="chunked"),
}


def websockets_accept(headers: dict[str, str]) -> str | None:
    """websockets' verdict on a request with these fields: its ``Sec-WebSocket-Accept``,
    or None when its HTTP parser or its handshake refuses the request."""
    head = "GET /v1/ws HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    reader = StreamReader()
    reader.feed_data(head.encode("latin-1") + b"\r\n")
    reader.feed_eof()
    parse = WsRequest.parse(reader.read_line)
    try:
        next(parse)
    except StopIteration as done:
        parsed: WsRequest = done.value
    except Exception:
        return None  # the parser refused it (a body, a transfer coding)
    else:
        raise AssertionError("websockets' parser wants more than a whole request")
    response = ServerProtocol().accept(parsed)
    return response.headers["Sec-WebSocket-Accept"] if response.status_code == 101 else None


@pytest.mark.parametrize("headers", list(CASES.values()), ids=list(CASES))
def test_the_same_verdict_as_websockets(headers: dict[str, str]) -> None:
    theirs = websockets_accept(headers)
    try:
        ours: str | None = ws_handshake.check(headers, http11=True)
    except ws_handshake.HandshakeError as exc:
        assert str(exc)
        ours = None
    assert ours == theirs


def test_http10_is_refused() -> None:
    with pytest.raises(ws_handshake.HandshakeError, match=r"HTTP/1\.1"):
        ws_handshake.check(GOOD, http11=False)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("connection", ", Upgrade"),
        ("connection", "Upgrade, "),
        ("connection", "keep-alive, , Upgrade"),
        ("upgrade", "websocket, "),
        ("sec-websocket-protocol", "gateway.v1, "),
        ("sec-websocket-protocol", ", gateway.v1"),
        ("sec-websocket-protocol", "gateway.v1, , chat"),
    ],
)
def test_an_empty_list_element_is_refused(field: str, value: str) -> None:
    """Stricter than websockets, which skips them: after the parser joins repeated
    lines, an empty element may have been an empty line, which websockets refuses."""
    headers = dict(GOOD, **{"sec-websocket-protocol": "gateway.v1", "authorization": "Bearer A"})
    headers[field] = value
    with pytest.raises(InvalidRequest, match=r"empty list element|Upgrade header"):
        ws_handshake.negotiate(headers, True, (), TERMS)
    # Without the empty element websockets accepts; with it as a line of its own (what
    # the join may have come from), it refuses.
    lines = Headers((k, v) for k, v in headers.items() if k != field)
    elements = ", ".join(e.strip() for e in value.split(",") if e.strip())
    lines[field] = elements
    theirs = ServerProtocol(subprotocols=[Subprotocol("gateway.v1")])
    assert theirs.accept(WsRequest("/v1/ws", lines)).status_code == 101
    lines[field] = ""
    theirs = ServerProtocol(subprotocols=[Subprotocol("gateway.v1")])
    assert theirs.accept(WsRequest("/v1/ws", lines)).status_code == 400


def parsed(*fields: str) -> dict[str, str]:
    """The headers of a request with these field lines, as the gateway's parser hands
    them to the route (HttpError if it refuses the request)."""
    head = "GET /v1/ws HTTP/1.1\r\nHost: gw.test\r\n" + "".join(f"{f}\r\n" for f in fields)
    parser = RequestParser(max_head=16384, max_body=1024)
    parser.receive(head.encode() + b"\r\n")
    request = parser.next_request()
    assert request is not None
    return request.headers


UPGRADE = (
    "Upgrade: websocket",
    "Connection: Upgrade",
    f"Sec-WebSocket-Key: {KEY}",
    "Sec-WebSocket-Version: 13",
)


@pytest.mark.parametrize(
    "field",
    [
        f"Sec-WebSocket-Key: {KEY}",
        "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==",
        "Sec-WebSocket-Version: 13",
        "Origin: https://app.example",
        "Authorization: Bearer a.b.c",
    ],
)
def test_a_repeated_single_value_field_is_refused_by_the_parser(field: str) -> None:
    """The field once is fine; twice (equal values or not) is 400 before any check."""
    once = parsed(*UPGRADE, "Origin: https://app.example", "Authorization: Bearer a.b.c")
    assert ws_handshake.check(once, http11=True)
    name = field.partition(":")[0]
    with pytest.raises(HttpError) as info:
        parsed(*UPGRADE, "Origin: https://app.example", "Authorization: Bearer a.b.c", field)
    assert info.value.status == 400
    assert name.lower() in info.value.message


def test_repeated_list_fields_are_one_list() -> None:
    headers = parsed(
        "Upgrade: websocket",
        "Connection: keep-alive",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {KEY}",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: chat",
        "Sec-WebSocket-Protocol: gateway.v1, bearer.t",
    )
    assert ws_handshake.check(headers, http11=True) == ws_handshake.accept_key(KEY)
    assert ws_handshake.subprotocols(headers) == ["chat", "gateway.v1", "bearer.t"]
    assert ws_handshake.negotiate(headers, True, (), TERMS).token == "t"
    # Two Upgrade lines are two protocols: refused, as websockets does.
    twice = parsed(*UPGRADE, "Upgrade: websocket")
    with pytest.raises(ws_handshake.HandshakeError, match="Upgrade"):
        ws_handshake.check(twice, http11=True)


# -- the gateway.v1 offer and the credential -------------------------------------------


def request(
    protocols: str | None = "gateway.v1", authorization: str | None = None, **fields: str
) -> dict[str, str]:
    headers = dict(GOOD)
    if protocols is not None:
        headers["sec-websocket-protocol"] = protocols
    if authorization is not None:
        headers["authorization"] = authorization
    headers.update({k.replace("_", "-"): v for k, v in fields.items()})
    return headers


def outcome(headers: dict[str, str], origins: tuple[str, ...] = ()) -> str | GatewayError:
    """The token the route would verify, or the error it answers with."""
    try:
        handshake = ws_handshake.negotiate(headers, True, origins, TERMS)
    except GatewayError as exc:
        return exc
    assert handshake.accept == ws_handshake.accept_key(KEY)
    return handshake.token


OFFERS: dict[str, tuple[str | None, str | type[GatewayError]]] = {
    # The offer must name gateway.v1, exactly: subprotocol names are case-sensitive.
    "header only": ("gateway.v1", "A"),
    "gateway.v1 among others": ("chat, gateway.v1, other", "A"),
    "gateway.v1 twice": ("gateway.v1, gateway.v1", "A"),
    "no offer": (None, InvalidRequest),
    "other case": ("Gateway.V1", InvalidRequest),
    "other subprotocol": ("chat", InvalidRequest),
    "only a bearer element": ("bearer.A", InvalidRequest),
    "not a token": ("gateway.v1, a b", InvalidRequest),
    "quoted": ('"gateway.v1"', InvalidRequest),
    "empty element": ("gateway.v1,,", InvalidRequest),
}


@pytest.mark.parametrize("case", list(OFFERS))
def test_the_gateway_v1_offer(case: str) -> None:
    protocols, expected = OFFERS[case]
    got = outcome(request(protocols, "Bearer A"))
    if isinstance(expected, str):
        assert got == expected
    else:
        assert isinstance(got, expected), got
        assert got.status == 400


CREDENTIALS: dict[str, tuple[str | None, list[str], str | None]] = {
    # (Authorization, bearer elements, the token or None for 401)
    "header": ("Bearer tok-a", [], "tok-a"),
    "header scheme in another case": ("bEARER tok-a", [], "tok-a"),
    "subprotocol": (None, ["tok-a"], "tok-a"),
    "header and the same subprotocol": ("Bearer tok-a", ["tok-a"], "tok-a"),
    "the same subprotocol twice": (None, ["tok-a", "tok-a"], "tok-a"),
    "header and another subprotocol": ("Bearer tok-a", ["tok-b"], None),
    "header and a bad subprotocol": ("Bearer tok-a", ["not-a-jwt"], None),
    "two subprotocols": (None, ["tok-a", "tok-b"], None),
    "header, same and another subprotocol": ("Bearer tok-a", ["tok-a", "tok-b"], None),
    "header and an empty subprotocol token": ("Bearer tok-a", [""], None),
    "an empty subprotocol token": (None, [""], None),
    "none": (None, [], None),
    "basic scheme": ("Basic dXNlcjpwYXNz", [], None),
    "basic scheme and a subprotocol": ("Basic dXNlcjpwYXNz", ["tok-a"], None),
    "empty bearer header": ("Bearer ", [], None),
}


@pytest.mark.parametrize("case", list(CREDENTIALS))
@pytest.mark.parametrize("reverse", [False, True], ids=["in-order", "reversed"])
def test_one_credential(case: str, reverse: bool) -> None:
    """The header and every bearer element must be one token: two different ones are
    401 whichever comes first, before anything is verified (the tokens here are not
    even JWTs)."""
    authorization, tokens, expected = CREDENTIALS[case]
    elements = ["gateway.v1", *(f"bearer.{t}" for t in tokens)]
    if reverse:
        elements.reverse()
    got = outcome(request(", ".join(elements), authorization))
    if expected is not None:
        assert got == expected
        return
    assert isinstance(got, Unauthenticated), got
    assert got.status == 401
    other = outcome(request(", ".join(elements[::-1]), authorization))
    assert isinstance(other, Unauthenticated) and other.body() == got.body()
    offered = set(tokens)
    if authorization is not None and authorization.startswith("Bearer "):
        offered.add(authorization.removeprefix("Bearer "))
    if len(offered) > 1:
        assert got.message == TWO_TOKENS
    for token in offered - {""}:
        assert token not in got.message


def test_a_bearer_element_in_another_case_is_refused() -> None:
    """Not passed over: with a header beside it, it would be a second credential
    nobody checks."""
    for element in ("Bearer.A", "BEARER.A", "bearer.A".title()):
        got = outcome(request(f"gateway.v1, {element}", "Bearer A"))
        assert isinstance(got, Unauthenticated)
        assert "bearer.<token>" in got.message
    # bearer without the dot is just another subprotocol (not a credential).
    assert outcome(request("gateway.v1, bearer", "Bearer A")) == "A"


def test_origin_allow_list() -> None:
    origins = ("https://app.example", "https://other.example")
    assert outcome(request(authorization="Bearer A", origin="https://app.example"), origins) == "A"
    # No Origin: not a browser (the token authenticates).
    assert outcome(request(authorization="Bearer A"), origins) == "A"
    for origin in ("https://evil.example", "https://APP.example", "null", ""):
        got = outcome(request(authorization="Bearer A", origin=origin), origins)
        assert isinstance(got, Forbidden) and got.status == 403
    # Without an allow-list any Origin is accepted.
    assert outcome(request(authorization="Bearer A", origin="https://evil.example")) == "A"


def test_a_malformed_handshake_is_refused_before_the_credential() -> None:
    """A request that is no upgrade is 400 whatever its credentials (two different
    ones included): the cheap checks come first, no token is looked at."""
    headers = request("gateway.v1, bearer.B", "Bearer A", sec_websocket_version="8")
    got = outcome(headers)
    assert isinstance(got, InvalidRequest)
    assert got.message == (
        "not a valid WebSocket upgrade request: Sec-WebSocket-Version must be 13"
    )


def test_the_terms_are_the_routes() -> None:
    """Another route's subprotocols and credential: the first of its subprotocols the
    client offers is chosen, in the route's order; a request offering none is 400."""
    terms = ws_handshake.Terms(("chat.v2", "chat.v1"), lambda header, offered: "anyone")
    headers = request("chat.v1, gateway.v1, chat.v2")
    handshake = ws_handshake.negotiate(headers, True, (), terms)
    assert (handshake.subprotocol, handshake.token) == ("chat.v2", "anyone")
    with pytest.raises(InvalidRequest, match=r"offer the chat\.v2 or chat\.v1 subprotocol"):
        ws_handshake.negotiate(request("gateway.v1"), True, (), terms)
    gateway = ws_handshake.negotiate(request(authorization="Bearer A"), True, (), TERMS)
    assert gateway.subprotocol == "gateway.v1"


def test_generic_networking_names_no_protocol_of_the_gateway() -> None:
    """gateway.net knows HTTP/1.1 and RFC 6455: the gateway's own subprotocol and its
    credential elements are the WebSocket route's (the import contract keeps the wire
    and auth modules out; this keeps their strings out)."""
    net = Path(ws_handshake.__file__).parent
    for path in sorted(net.rglob("*.py")):
        text = path.read_text()
        for word in ("gateway.v1", "bearer."):
            assert word not in text, f"{path.name} names {word}"
