"""The WebSocket opening handshake (pure): RFC 6455's example, and the same verdict as
python-websockets' own server handshake on every request of a table."""

from __future__ import annotations

import pytest
from websockets.datastructures import Headers
from websockets.http11 import Request as WsRequest
from websockets.server import ServerProtocol

from gateway.http import ws_handshake

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
}


@pytest.mark.parametrize("headers", list(CASES.values()), ids=list(CASES))
def test_the_same_verdict_as_websockets(headers: dict[str, str]) -> None:
    theirs = ServerProtocol().accept(WsRequest("/v1/ws", Headers(headers)))
    try:
        ours: str | None = ws_handshake.check(headers, http11=True)
    except ws_handshake.HandshakeError as exc:
        assert str(exc)
        ours = None
    if theirs.status_code == 101:
        assert ours == theirs.headers["Sec-WebSocket-Accept"]
    else:
        assert ours is None


def test_http10_is_refused() -> None:
    with pytest.raises(ws_handshake.HandshakeError, match=r"HTTP/1\.1"):
        ws_handshake.check(GOOD, http11=False)
