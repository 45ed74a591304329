"""Resume planning: the D2 table as a pure function.

Given the cursor a client sent and the feed's state, decide: replay from an offset
(then follow), restart at a cursor (``epoch_restarted``, then close), or reject.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.cursor import Cursor
from gateway.errors import InvalidCursor
from gateway.feed import FeedState


class Replay(NamedTuple):
    """Deliver every item after ``after`` (same epoch), each once, in order; then follow."""

    after: Cursor


class Restart(NamedTuple):
    """Send ``epoch_restarted`` with ``cursor``; the subscription ends."""

    cursor: Cursor


def restart_cursor(state: FeedState) -> Cursor:
    """The oldest position from which the feed is complete: ``E:<first retained - 1>``."""
    return Cursor(state.epoch, state.first - 1)


def plan(cursor: Cursor | None, state: FeedState) -> Replay | Restart:
    """Apply the D2 table.  Raises :class:`InvalidCursor` for a cursor the feed never issued.

    The caller has already answered ``not_found`` for a feed that does not exist and
    ``invalid_cursor`` for a malformed cursor (:func:`gateway.cursor.parse_cursor`).
    """
    if cursor is None:
        # Every retained item of the current epoch.
        return Replay(Cursor(state.epoch, state.first - 1))
    if cursor.epoch > state.epoch:
        raise InvalidCursor("cursor is from a later epoch than the feed's")
    if cursor.epoch < state.epoch:
        return Restart(restart_cursor(state))
    if cursor.offset > state.head:
        raise InvalidCursor("cursor is past the feed's head")
    if cursor.offset == state.head or cursor.offset + 1 >= state.first:
        return Replay(cursor)
    # Items after the cursor were trimmed away.
    return Restart(restart_cursor(state))
