"""AI SDK chunks on the wire: ``E:O:K`` ids, SSE framing, the restart chunk (pure)."""

from __future__ import annotations

import pytest

from gateway.cursor import Cursor
from gateway.dialects.ai_sdk.framing import (
    DONE,
    HEADERS,
    ChunkCursor,
    chunk_id,
    encode_chunk,
    event_frames,
    frame,
    parse_chunk_id,
    restart_chunk,
    restart_frame,
    resume_chunks,
    unnumbered_frames,
)
from gateway.errors import InvalidCursor

MAX = 9007199254740991


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1:2:3", ChunkCursor(1, 2, 3)),
        ("0:0:0", ChunkCursor(0, 0, 0)),
        ("007:01:002", ChunkCursor(7, 1, 2)),
        (f"{MAX}:{MAX}:{MAX}", ChunkCursor(MAX, MAX, MAX)),
        ("5:9", ChunkCursor(5, 9, None)),
    ],
)
def test_chunk_ids_parse(text: str, parsed: ChunkCursor) -> None:
    assert parse_chunk_id(text) == parsed
    assert parsed.cursor == Cursor(parsed.epoch, parsed.offset)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1",
        "1:2:3:4",
        "1::3",
        ":2:3",
        "1:2:",
        "1:2:x",
        "1:2:-3",
        "1:2:+3",
        "1:2: 3",
        "1:2:\uff13",  # a non-ASCII digit
        f"1:2:{MAX + 1}",
        f"{MAX + 1}:2:3",
        "1:" + "0" * 70 + ":3",
    ],
)
def test_malformed_chunk_ids_are_invalid_cursors(text: str) -> None:
    with pytest.raises(InvalidCursor, match="cursor"):
        parse_chunk_id(text)


def test_a_chunk_id_round_trips() -> None:
    assert chunk_id(Cursor(17, 4), 2) == b"17:4:2"
    assert parse_chunk_id(chunk_id(Cursor(17, 4), 2).decode()) == ChunkCursor(17, 4, 2)
    assert str(ChunkCursor(17, 4, 2)) == "17:4:2" and str(ChunkCursor(17, 4, None)) == "17:4"


def test_resuming_inside_an_event_skips_the_chunks_the_client_has() -> None:
    chunks = [{"type": "a"}, {"type": "b"}, {"type": "c"}]
    assert resume_chunks(chunks, 0) == chunks[1:]
    assert resume_chunks(chunks, 2) == []
    with pytest.raises(InvalidCursor, match="3 chunks, no chunk 3"):
        resume_chunks(chunks, 3)


def test_frames_are_one_data_line_with_the_chunk_id() -> None:
    chunk = {"type": "text-delta", "id": "m", "delta": "a\nb\r\u2028"}
    assert encode_chunk(chunk) == b'{"type":"text-delta","id":"m","delta":"a\\nb\\r\xe2\x80\xa8"}'
    assert frame(chunk, b"1:2:0") == b"id: 1:2:0\ndata: " + encode_chunk(chunk) + b"\n\n"
    assert frame(chunk) == b"data: " + encode_chunk(chunk) + b"\n\n"
    chunks = [{"type": "text-start", "id": "m"}, chunk]
    assert event_frames(Cursor(1, 2), chunks) == frame(chunks[0], b"1:2:0") + frame(chunk, b"1:2:1")
    assert event_frames(Cursor(1, 2), chunks[1:], 1) == frame(chunk, b"1:2:1")
    assert unnumbered_frames(chunks) == frame(chunks[0]) + frame(chunk)
    assert DONE == b"data: [DONE]\n\n"
    assert (b"x-vercel-ai-ui-message-stream", b"v1") in HEADERS


def test_the_restart_chunk_carries_the_new_cursor() -> None:
    assert restart_chunk(Cursor(1700000000001, 0)) == {
        "type": "data-gateway-epoch-restarted",
        "data": {"cursor": "1700000000001:0"},
        "transient": True,
    }
    assert restart_frame(Cursor(8, 3)) == (
        b'id: 8:3\ndata: {"type":"data-gateway-epoch-restarted","data":{"cursor":"8:3"},'
        b'"transient":true}\n\ndata: [DONE]\n\n'
    )
    # Its id is a cursor the route accepts back: resync at that event boundary.
    assert parse_chunk_id("8:3") == ChunkCursor(8, 3, None)
