"""TeamItem encoding (seed rules 9-14, 21): RFC 8785 JSON built once per item.

The log stores a team item's payload as the canonical TeamItem without its cursor,
``"event":<E>,"kind":"event","source":<S>``; with RFC 8785's sorted keys the cursor
comes first, so the full item is one concatenation.
"""

from __future__ import annotations

from typing import Any

from gateway.canonical import canonical
from gateway.cursor import Cursor


def team_payload(source: Any, event: Any) -> bytes:
    """The stored payload of a team item (RFC 8785 members after ``cursor``)."""
    return b'"event":' + canonical(event) + b',"kind":"event","source":' + canonical(source)


def team_item(epoch: int, offset: int, payload: bytes) -> bytes:
    """The RFC 8785 JSON of ``{"kind": "event", "cursor": ..., "source": ..., "event": ...}``
    for the item at ``epoch:offset``.  (The cursor's two parts, not a
    :class:`~gateway.cursor.Cursor`: every delivered item is framed here, and building a
    ``Cursor`` costs more than the formatting.)"""
    return b'{"cursor":{"epoch":%d,"offset":%d},%s}' % (epoch, offset, payload)


def epoch_restarted_item(cursor: Cursor) -> bytes:
    """The RFC 8785 JSON of ``{"kind": "epoch_restarted", "cursor": ...}``."""
    return b'{"cursor":{"epoch":%d,"offset":%d},"kind":"epoch_restarted"}' % (
        cursor.epoch,
        cursor.offset,
    )
