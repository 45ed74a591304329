"""Feed cursors: ``<epoch>:<offset>`` (contract D1).

Pure. Both parts are decimal integers in ``0..MAX_INT`` (the seed's events_Int).
Leading zeros are accepted and normalised away when formatting.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.errors import InvalidCursor

#: The seed's events_Int upper bound, 2**53 - 1.
MAX_INT = 9_007_199_254_740_991

# A cursor string longer than this cannot be valid (two 16-digit numbers plus
# leading zeros would be silly); the bound keeps parsing O(1) on hostile input.
_MAX_TEXT = 64


class Cursor(NamedTuple):
    """A position in one feed: every item of ``epoch`` up to ``offset`` has been seen."""

    epoch: int
    offset: int

    def __str__(self) -> str:
        return f"{self.epoch}:{self.offset}"

    def encode(self) -> bytes:
        return encode_cursor(self.epoch, self.offset)


def encode_cursor(epoch: int, offset: int) -> bytes:
    """``b"E:O"``: :meth:`Cursor.encode` from the two parts, for a hot path that has
    them and would otherwise build a ``Cursor`` only to encode it."""
    return b"%d:%d" % (epoch, offset)


def _part(text: str) -> int:
    if not text or not text.isascii() or not text.isdigit():
        raise InvalidCursor("cursor must be <epoch>:<offset>, two decimal integers")
    value = int(text)
    if value > MAX_INT:
        raise InvalidCursor("cursor parts must be at most 9007199254740991")
    return value


def parse_cursor(text: str) -> Cursor:
    """Parse ``E:O``; raise :class:`InvalidCursor` for anything else.

    Accepts exactly ``^[0-9]+:[0-9]+$`` with both parts at most :data:`MAX_INT`.
    """
    if len(text) > _MAX_TEXT:
        raise InvalidCursor("cursor is too long")
    epoch, sep, offset = text.partition(":")
    if not sep:
        raise InvalidCursor("cursor must be <epoch>:<offset>, two decimal integers")
    return Cursor(_part(epoch), _part(offset))
