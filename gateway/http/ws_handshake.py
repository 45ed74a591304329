"""The server side of the WebSocket opening handshake (RFC 6455 §4.2), sans I/O.

The HTTP request is already parsed (:mod:`gateway.http.h1`); what is left is checking
the upgrade headers and writing the ``101`` answer.  python-websockets' handshake
object does the same with general-purpose machinery (a connection id, a logger, its
own header parsing, the ``Date`` header) that costs a reconnect storm more than the
check itself; the frames after the handshake are still websockets' protocol.

The rules are websockets' own (``ServerProtocol.process_request``): HTTP/1.1; a
``Connection`` header with the ``upgrade`` option; exactly one ``Upgrade`` protocol,
``websocket`` in any case; one ``Sec-WebSocket-Key`` that is base64 of 16 bytes; one
``Sec-WebSocket-Version``, ``13``.  No extensions are negotiated (no compression).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping

#: RFC 6455 §1.3: appended to the client's key before hashing.
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class HandshakeError(ValueError):
    """Not a valid WebSocket upgrade request; the message says why."""


def options(value: str) -> list[str]:
    """The items of a comma-separated header value, trimmed, empty ones dropped."""
    return [part.strip() for part in value.split(",") if part.strip()]


def subprotocols(headers: Mapping[str, str]) -> list[str]:
    """The subprotocols the client offers (``Sec-WebSocket-Protocol``), in order."""
    return options(headers.get("sec-websocket-protocol", ""))


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for the client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + GUID).digest()).decode()


def check(headers: Mapping[str, str], http11: bool) -> str:
    """Check an upgrade request's headers (lower-case names, repeated headers joined
    with ``", "``); return the ``Sec-WebSocket-Accept`` value or raise
    :class:`HandshakeError`."""
    if not http11:
        raise HandshakeError("a WebSocket upgrade needs HTTP/1.1")
    connection = options(headers.get("connection", ""))
    if not any(option.lower() == "upgrade" for option in connection):
        raise HandshakeError("the Connection header does not say upgrade")
    upgrade = options(headers.get("upgrade", ""))
    if not (len(upgrade) == 1 and upgrade[0].lower() == "websocket"):
        raise HandshakeError("the Upgrade header must be websocket")
    key = headers.get("sec-websocket-key")
    if key is None:
        raise HandshakeError("no Sec-WebSocket-Key")
    try:
        raw = base64.b64decode(key.encode("latin-1"), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16:
        # Two keys, joined by the parser, are not base64 of 16 bytes either.
        raise HandshakeError("Sec-WebSocket-Key is not base64 of 16 bytes")
    version = headers.get("sec-websocket-version")
    if version is None:
        raise HandshakeError("no Sec-WebSocket-Version")
    if version != "13":
        raise HandshakeError("Sec-WebSocket-Version must be 13")
    return accept_key(key)


def response(accept: str, subprotocol: str) -> bytes:
    """The ``101 Switching Protocols`` answer."""
    return (
        b"HTTP/1.1 101 Switching Protocols\r\n"
        b"Upgrade: websocket\r\n"
        b"Connection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: %s\r\n"
        b"Sec-WebSocket-Protocol: %s\r\n\r\n" % (accept.encode(), subprotocol.encode())
    )
