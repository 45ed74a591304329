"""The ``gateway.v1`` WebSocket messages (contract D6), pure.

Client messages are decoded and checked here into typed structs; server messages are
encoded here.  Event frames are built once per item per node: the payload names the
feed, not a per-client id, so every subscriber of the feed gets the same bytes.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.cursor import Cursor
from gateway.errors import InvalidRequest

SUBPROTOCOL = "gateway.v1"
BEARER_PREFIX = "bearer."
#: Longest feed name accepted ("run/<128>/<128>").
MAX_FEED_NAME = 300


class Subscribe(msgspec.Struct, frozen=True):
    feed: str
    after: str | None = None
    #: The wire format of the feed's events (docs/protocol.md); None: the feed's default.
    format: str | None = None


class Unsubscribe(msgspec.Struct, frozen=True):
    feed: str


class Auth(msgspec.Struct, frozen=True):
    token: str


ClientMessage = Subscribe | Unsubscribe | Auth

_KINDS: dict[str, tuple[type[Any], frozenset[str], frozenset[str]]] = {
    # type: (struct, required fields, allowed fields)
    "subscribe": (
        Subscribe,
        frozenset({"feed"}),
        frozenset({"type", "feed", "after", "format"}),
    ),
    "unsubscribe": (Unsubscribe, frozenset({"feed"}), frozenset({"type", "feed"})),
    "auth": (Auth, frozenset({"token"}), frozenset({"type", "token"})),
}


class MessageError(InvalidRequest):
    """A client message that cannot be acted on; ``feed`` names its feed when known."""

    def __init__(self, message: str, feed: str | None = None) -> None:
        super().__init__(message)
        self.feed = feed


def decode_client(text: str | bytes) -> ClientMessage:
    """Decode one client text frame.  Raises :class:`MessageError` for anything else."""
    try:
        value = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise MessageError("message is not valid JSON") from exc
    if not isinstance(value, dict):
        raise MessageError("message must be a JSON object")
    kind = value.get("type")
    feed = value.get("feed") if isinstance(value.get("feed"), str) else None
    if not isinstance(kind, str) or kind not in _KINDS:
        raise MessageError("type: must be subscribe, unsubscribe or auth", feed)
    struct, required, allowed = _KINDS[kind]
    unknown = sorted(value.keys() - allowed)
    if unknown:
        raise MessageError(f"{unknown[0]}: unknown field for {kind}", feed)
    # Not ``required - value.keys()``: that is a set at run time where typeshed says
    # frozenset, and compiled code checks.
    missing = sorted(name for name in required if name not in value)
    if missing:
        raise MessageError(f"{missing[0]}: required for {kind}", feed)
    fields = {k: v for k, v in value.items() if k != "type"}
    for name, field in fields.items():
        if name in ("after", "format") and field is None:
            continue
        if not isinstance(field, str):
            raise MessageError(f"{name}: must be a string", feed)
    if feed is not None and len(feed) > MAX_FEED_NAME:
        raise MessageError("feed: name too long", feed[:MAX_FEED_NAME])
    message: ClientMessage = struct(**fields)
    return message


_encoder = msgspec.json.Encoder()


def frame(payload: bytes) -> bytes:
    """One unmasked server text frame (RFC 6455 section 5.2), ready for the socket.

    Built here rather than by websockets' ``Frame.serialize`` (the same bytes, which
    ``tests/wire/test_messages.py`` checks) because it runs once per item on the fan-out path.
    """
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    if size < 65536:
        return b"\x81\x7e" + size.to_bytes(2, "big") + payload
    return b"\x81\x7f" + size.to_bytes(8, "big") + payload


def event_payload(feed: str, epoch: int, offset: int, data: bytes) -> bytes:
    """``{"type":"event","feed":...,"cursor":"E:O","data":<data>}`` with ``data`` as is.

    The cursor as its two parts: see :func:`gateway.wire.teamitem.team_item`."""
    return b'{"type":"event","feed":%s,"cursor":"%d:%d","data":%s}' % (
        _encoder.encode(feed),
        epoch,
        offset,
        data,
    )


def event_payload_at(feed: str, cursor: bytes, data: bytes) -> bytes:
    """:func:`event_payload` with a cursor given as text (an AI SDK chunk id ``E:O:K``)."""
    return b'{"type":"event","feed":%s,"cursor":"%s","data":%s}' % (
        _encoder.encode(feed),
        cursor,
        data,
    )


def epoch_restarted(feed: str, cursor: Cursor) -> bytes:
    return _encoder.encode({"type": "epoch_restarted", "feed": feed, "cursor": str(cursor)})


def subscribed(feed: str, cursor: Cursor) -> bytes:
    return _encoder.encode({"type": "subscribed", "feed": feed, "cursor": str(cursor)})


def error(code: str, message: str, feed: str | None = None) -> bytes:
    body: dict[str, str] = {"type": "error"}
    if feed is not None:
        body["feed"] = feed
    body["code"] = code
    body["message"] = message
    return _encoder.encode(body)
