"""What the raw connections (pub/sub, pipelined) share: RESP2 commands
packed by hand, refused replies recognised, and a connection opened to an address as
the node's :class:`Dial` says (TLS, and the handshake sent first)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

import anyio
import hiredis

P = TypeVar("P", bound=asyncio.Protocol)


class Address(Protocol):
    """Where a raw connection goes (``connection.ListenerAddress``)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def path(self) -> str | None: ...


class Dial:
    """How every raw connection of a node opens and greets, made once from its Redis
    settings (``RedisConnection.dial``): TLS with ``tls`` (None: none), the packed
    ``handshake`` commands sent first (``AUTH``, ``CLIENT SETNAME``, ``SELECT``), each
    to be answered without an error, and all of it within ``within`` seconds."""

    def __init__(self, tls: ssl.SSLContext | None, handshake: list[bytes], within: float) -> None:
        self.tls = tls
        self.handshake = handshake
        self.within = within


#: A plain connection with no handshake (a Redis without a password, database 0).
PLAIN = Dial(None, [], 5.0)


def pack(args: Sequence[bytes | str | int]) -> bytes:
    """One command in RESP2: an array of bulk strings (``str`` as UTF-8, ``int`` in
    decimal)."""
    try:
        # hiredis packs in C: ~1.8 us for an append step's ~20 arguments against ~4.5
        # in Python, on every publish.
        # (Its stubs type the argument as a one-item tuple.)
        return cast(bytes, hiredis.pack_command(cast(Any, tuple(args))))
    except TypeError:  # a type hiredis does not take (a bool): the same bytes by hand
        return _pack(args)


def _pack(args: Sequence[bytes | str | int]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        else:
            data = b"%d" % arg
        out.append(b"$%d\r\n" % len(data))
        out.append(data)
        out.append(b"\r\n")
    return b"".join(out)


def describe(exc: BaseException) -> str:
    """An error as a log or a message names its cause: its class and its text
    (``AuthenticationError: WRONGPASS invalid username-password pair ...``), with the
    error code Redis gave (redis-py keeps it apart from the text)."""
    text = str(exc)
    code = getattr(exc, "status_code", None)
    if isinstance(code, str) and code and not text.startswith(code):
        text = f"{code} {text}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def refused(reply: Any, code: str | None = None) -> bool:
    """A reply that is Redis refusing the command (with error ``code``, if named)."""
    return isinstance(reply, hiredis.ReplyError) and (code is None or str(reply).startswith(code))


async def open_raw(
    address: Address, dial: Dial, protocol: Callable[[], P]
) -> tuple[asyncio.Transport, P]:
    """A connection to ``address`` (its socket path, or TCP, with TLS if ``dial`` has
    it: the certificate is checked against ``address.host``), made within
    ``dial.within`` seconds.  The caller sends the handshake."""
    loop = asyncio.get_running_loop()
    with anyio.fail_after(dial.within):
        if address.path is not None:
            return await loop.create_unix_connection(protocol, address.path)
        return await loop.create_connection(protocol, address.host, address.port, ssl=dial.tls)
