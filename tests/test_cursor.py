"""Cursor parsing (D1) and the D2 resume table, pure."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.cursor import MAX_INT, Cursor, parse_cursor
from gateway.errors import InvalidCursor
from gateway.feed import FeedState
from gateway.resume import Replay, Restart, plan

PATTERN = re.compile(r"^[0-9]+:[0-9]+$")


@given(st.integers(0, MAX_INT), st.integers(0, MAX_INT), st.integers(0, 3), st.integers(0, 3))
def test_round_trip_and_leading_zeros(epoch: int, offset: int, z1: int, z2: int) -> None:
    text = "0" * z1 + str(epoch) + ":" + "0" * z2 + str(offset)
    cursor = parse_cursor(text)
    assert cursor == Cursor(epoch, offset)
    assert str(cursor) == f"{epoch}:{offset}"
    assert cursor.encode() == str(cursor).encode()


@given(st.text(max_size=80))
def test_anything_else_is_invalid_cursor_never_a_crash(text: str) -> None:
    ascii_digits = PATTERN.match(text) is not None and text.isascii()
    try:
        cursor = parse_cursor(text)
    except InvalidCursor as exc:
        assert exc.code == "invalid_cursor" and exc.status == 400
        if ascii_digits:
            epoch, offset = (int(p) for p in text.split(":"))
            assert epoch > MAX_INT or offset > MAX_INT or len(text) > 64
    else:
        assert ascii_digits
        assert cursor.epoch <= MAX_INT and cursor.offset <= MAX_INT


@pytest.mark.parametrize(
    "text", ["9007199254740992:0", "0:9007199254740992", "1:2:3", "1", ":", "٣:1", "1:²", ""]
)
def test_table_cases(text: str) -> None:
    with pytest.raises(InvalidCursor):
        parse_cursor(text)


STATE = FeedState(epoch=100, head=50, first=41)


@pytest.mark.parametrize(
    ("cursor", "expected"),
    [
        (None, Replay(Cursor(100, 40))),
        (Cursor(100, 50), Replay(Cursor(100, 50))),  # at the head
        (Cursor(100, 40), Replay(Cursor(100, 40))),  # offset+1 is the first retained
        (Cursor(100, 45), Replay(Cursor(100, 45))),
        (Cursor(100, 39), Restart(Cursor(100, 40))),  # 40 was trimmed away
        (Cursor(100, 0), Restart(Cursor(100, 40))),
        (Cursor(99, 1_000), Restart(Cursor(100, 40))),  # an older epoch
        (Cursor(0, 0), Restart(Cursor(100, 40))),
    ],
)
def test_resume_table(cursor: Cursor | None, expected: Replay | Restart) -> None:
    assert plan(cursor, STATE) == expected


@pytest.mark.parametrize("cursor", [Cursor(101, 0), Cursor(100, 51), Cursor(MAX_INT, 0)])
def test_resume_rejects_cursors_never_issued(cursor: Cursor) -> None:
    with pytest.raises(InvalidCursor):
        plan(cursor, STATE)


def test_empty_epoch() -> None:
    empty = FeedState(epoch=7, head=0, first=1)
    assert plan(None, empty) == Replay(Cursor(7, 0))
    assert plan(Cursor(7, 0), empty) == Replay(Cursor(7, 0))
    assert plan(Cursor(6, 3), empty) == Restart(Cursor(7, 0))
    # Everything trimmed: head 9, nothing retained.
    trimmed = FeedState(epoch=7, head=9, first=10)
    assert plan(Cursor(7, 9), trimmed) == Replay(Cursor(7, 9))
    assert plan(Cursor(7, 8), trimmed) == Restart(Cursor(7, 9))
