"""The server side of the WebSocket opening handshake (RFC 6455 §4.2), sans I/O.

The HTTP request is already parsed (:mod:`gateway.net.h1`); what is left is checking
the upgrade headers, the subprotocol offer and the credential, and writing the ``101``
answer.  This module knows RFC 6455 only: the route that upgrades says which
subprotocols it speaks and how a request carries its credential (:class:`Terms`).
python-websockets' handshake object does the same with general-purpose machinery (a
connection id, a logger, its own header parsing, the ``Date`` header) that costs a
reconnect storm more than the check itself; the frames after the handshake are still
websockets' protocol.

The rules are websockets' own (``ServerProtocol.process_request``), checked against it
on generated requests (tests/http/test_ws_handshake_differential.py):

- HTTP/1.1; no body (no ``Transfer-Encoding``; ``Content-Length`` absent or ``0``);
- ``Connection``: a list of tokens with the ``upgrade`` option (any case);
- ``Upgrade``: exactly one protocol, ``websocket`` in any case;
- one ``Sec-WebSocket-Key``, base64 of 16 bytes; one ``Sec-WebSocket-Version``, ``13``;
- ``Sec-WebSocket-Protocol``: a list of tokens that offers one of the route's
  subprotocols (exactly: subprotocol names are case-sensitive); the answer names that
  one and nothing else.

The parser refuses a repeated single-value field (``Sec-WebSocket-Key``,
``Sec-WebSocket-Version``, ``Origin``, ``Authorization``: :data:`gateway.net.h1.SINGLE`)
with 400 before this module sees the request, and joins the lines of a repeated list
field (``Connection``, ``Upgrade``, ``Sec-WebSocket-Protocol``) with ``", "``.  Stricter
than websockets, then: an empty list element is refused here (websockets skips them),
since after the join it may have been an empty field line, which websockets refuses and
nothing here could tell apart; and the credential (:func:`negotiate`), which websockets
does not look at.

No extensions are negotiated (no compression).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from gateway.errors import Forbidden, InvalidRequest

#: RFC 6455 §1.3: appended to the client's key before hashing.
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: RFC 9110 §5.6.2 ``token``: what a list element of the handshake's fields may be.
_TOKEN: Final = r"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
#: A list of tokens without empty elements (one match per field, not one per element).
_TOKENS: Final = re.compile(rf"[ \t]*{_TOKEN}(?:[ \t]*,[ \t]*{_TOKEN})*[ \t]*")


class HandshakeError(ValueError):
    """Not a valid WebSocket upgrade request; the message says why."""


#: How a request carries its credential: given the ``Authorization`` field (None when
#: absent) and the offered subprotocols, the one credential, not verified; raises a
#: :class:`~gateway.errors.GatewayError` (Unauthenticated) when there is none or more.
Credential = Callable[[str | None, Sequence[str]], str]


class Terms:
    """What an upgrade route speaks: the subprotocols it answers with, in its order of
    preference (the client must offer one of them), and how a request carries its
    credential."""

    __slots__ = ("credential", "subprotocols")

    def __init__(self, subprotocols: Sequence[str], credential: Credential) -> None:
        if not subprotocols:
            raise ValueError("a route speaks at least one subprotocol")
        self.subprotocols = tuple(subprotocols)
        self.credential = credential


class Handshake:
    """A valid upgrade request: the ``Sec-WebSocket-Accept`` value to answer with, the
    subprotocol chosen and the credential it carries (not verified yet)."""

    __slots__ = ("accept", "subprotocol", "token")

    def __init__(self, accept: str, subprotocol: str, token: str) -> None:
        self.accept = accept
        self.subprotocol = subprotocol
        self.token = token


def options(value: str, name: str) -> list[str]:
    """The elements of the comma-separated list field ``name``, trimmed.

    Raises HandshakeError for an empty element (see the module docstring) or one that
    is not a token.
    """
    if _TOKENS.fullmatch(value) is None:
        if any(not part.strip(" \t") for part in value.split(",")):
            raise HandshakeError(f"{name} has an empty list element")
        raise HandshakeError(f"{name} has an element that is not a token")
    return [part.strip(" \t") for part in value.split(",")]


def subprotocols(headers: Mapping[str, str]) -> list[str]:
    """The subprotocols the client offers (``Sec-WebSocket-Protocol``), in order; none
    when the field is absent.  Raises HandshakeError (see :func:`options`)."""
    value = headers.get("sec-websocket-protocol")
    return [] if value is None else options(value, "Sec-WebSocket-Protocol")


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for the client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + GUID).digest()).decode()


def check(headers: Mapping[str, str], http11: bool) -> str:
    """Check an upgrade request's headers (lower-case names, as :mod:`gateway.net.h1`
    hands them: single-value fields once, list fields joined); return the
    ``Sec-WebSocket-Accept`` value or raise :class:`HandshakeError` naming the field."""
    if not http11:
        raise HandshakeError("a WebSocket upgrade needs HTTP/1.1")
    if "transfer-encoding" in headers or headers.get("content-length", "0") != "0":
        raise HandshakeError("a WebSocket upgrade has no body (Content-Length, Transfer-Encoding)")
    connection = headers.get("connection")
    if connection is None or not any(
        option.lower() == "upgrade" for option in options(connection, "Connection")
    ):
        raise HandshakeError("the Connection header does not say upgrade")
    upgrade = [part.strip(" \t") for part in headers.get("upgrade", "").split(",")]
    if len(upgrade) > 1 and "" in upgrade:
        raise HandshakeError("Upgrade has an empty list element")
    if len(upgrade) != 1 or upgrade[0].lower() != "websocket":
        raise HandshakeError("the Upgrade header must be websocket")
    key = headers.get("sec-websocket-key")
    if key is None:
        raise HandshakeError("no Sec-WebSocket-Key")
    try:
        raw = base64.b64decode(key.encode("latin-1"), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16:
        raise HandshakeError("Sec-WebSocket-Key is not base64 of 16 bytes")
    version = headers.get("sec-websocket-version")
    if version is None:
        raise HandshakeError("no Sec-WebSocket-Version")
    if version != "13":
        raise HandshakeError("Sec-WebSocket-Version must be 13")
    return accept_key(key)


def negotiate(
    headers: Mapping[str, str], http11: bool, origins: Sequence[str], terms: Terms
) -> Handshake:
    """Everything the upgrade route decides before verifying the credential, in this order:

    - :func:`check` and an offer of one of ``terms.subprotocols``: InvalidRequest (400);
    - ``Origin``, when ``origins`` (the allow-list) is not empty: a request that sends
      an Origin not in it is Forbidden (403); one without Origin is not a browser's;
    - the credential, ``terms.credential`` of the ``Authorization`` field and the
      offer (Unauthenticated, 401, from it).

    Pure: no credential is verified here (a refused request costs no signature check).
    """
    try:
        accept = check(headers, http11)
        offered = subprotocols(headers)
    except HandshakeError as exc:
        raise InvalidRequest(f"not a valid WebSocket upgrade request: {exc}") from None
    for subprotocol in terms.subprotocols:
        if subprotocol in offered:
            break
    else:
        raise InvalidRequest(f"offer the {' or '.join(terms.subprotocols)} subprotocol")
    if origins:
        origin = headers.get("origin")
        if origin is not None and origin not in origins:
            raise Forbidden("origin not allowed")
    token = terms.credential(headers.get("authorization"), offered)
    return Handshake(accept, subprotocol, token)


def response(accept: str, subprotocol: str) -> bytes:
    """The ``101 Switching Protocols`` answer."""
    return (
        b"HTTP/1.1 101 Switching Protocols\r\n"
        b"Upgrade: websocket\r\n"
        b"Connection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: %s\r\n"
        b"Sec-WebSocket-Protocol: %s\r\n\r\n" % (accept.encode(), subprotocol.encode())
    )
