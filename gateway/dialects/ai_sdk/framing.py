"""AI SDK chunks on the wire: SSE framing, ``E:O:K`` chunk ids, the restart chunk (pure).

Decisions D10.  Each chunk is one SSE message whose ``data:`` line is the chunk as
compact JSON.  A chunk derived from the run-feed event at ``E:O`` (feed epoch, offset)
carries the SSE id ``E:O:K``, K its index (from 0) among that event's chunks: a departure
from the seed's ``<seq>:<k>``, which cannot tell that a feed lost its history.  Chunks of
a compact replay carry no id (like the AG-UI prelude of D7): a client that loses the
connection during one still holds the cursor it sent.

Cursors a client sends back (``Last-Event-ID`` or ``?after=``), parsed by
:func:`parse_chunk_id`:

- ``E:O:K``: the client has chunks up to K of event O; the stream continues with chunk
  K+1 of O (:func:`resume_chunks`), then the events after O;
- ``E:O``: the client wants the run as of event O whatever it holds (the form the
  restart chunk carries): ``compact`` of the fold at O (which opens with ``reset-step``,
  so a stale copy of the message is replaced), then the events after O.

When a cursor cannot continue (an older epoch, or history trimmed away; decisions D2)
the stream carries :func:`restart_chunk`, a transient ``data-gateway-epoch-restarted``
chunk whose data is ``{"cursor": "E:O"}`` and whose SSE id is that cursor, then ``data:
[DONE]``, and closes.  A client reconnects with that cursor (an EventSource does by
itself) or, with ``useChat``, calls ``resumeStream()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import msgspec

from gateway.cursor import MAX_INT, Cursor, parse_cursor
from gateway.dialects.ai_sdk.parts import Chunk
from gateway.errors import InvalidCursor

RESTART_TYPE = "data-gateway-epoch-restarted"
#: The AI SDK's stream terminator (the AI SDK client ignores it; it ends every stream).
DONE = b"data: [DONE]\n\n"
#: Response headers of an AI SDK UI message stream (the seed's header included).
HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"x-vercel-ai-ui-message-stream", b"v1"),
]
_MAX_TEXT = 64


class ChunkCursor(NamedTuple):
    """A position in a run feed's chunk stream: after chunk ``chunk`` of the event at
    ``epoch:offset``, or after the whole event when ``chunk`` is None."""

    epoch: int
    offset: int
    chunk: int | None

    @property
    def cursor(self) -> Cursor:
        """The feed cursor of the event the position is in (or after)."""
        return Cursor(self.epoch, self.offset)

    def __str__(self) -> str:
        head = f"{self.epoch}:{self.offset}"
        return head if self.chunk is None else f"{head}:{self.chunk}"


def parse_chunk_id(text: str) -> ChunkCursor:
    """Parse ``E:O:K`` or ``E:O``; raise :class:`InvalidCursor` for anything else.

    Every part is a decimal integer at most 9007199254740991; leading zeros are accepted.
    """
    if len(text) > _MAX_TEXT:
        raise InvalidCursor("cursor: too long")
    parts = text.split(":")
    if len(parts) == 2:
        feed = parse_cursor(text)
        return ChunkCursor(feed.epoch, feed.offset, None)
    if len(parts) != 3:
        raise InvalidCursor("cursor: must be <epoch>:<offset>:<index> or <epoch>:<offset>")
    feed = parse_cursor(f"{parts[0]}:{parts[1]}")
    index = parts[2]
    if not index or not index.isascii() or not index.isdigit():
        raise InvalidCursor("cursor: the index must be a decimal integer")
    if int(index) > MAX_INT:
        raise InvalidCursor("cursor: the index must be at most 9007199254740991")
    return ChunkCursor(feed.epoch, feed.offset, int(index))


def chunk_id(cursor: Cursor, index: int) -> bytes:
    """The SSE id of chunk ``index`` of the event at ``cursor``: ``E:O:K``."""
    return b"%d:%d:%d" % (cursor.epoch, cursor.offset, index)


def resume_chunks(chunks: list[Chunk], index: int) -> list[Chunk]:
    """The chunks of an event after chunk ``index`` (a client resuming after ``E:O:K``).

    Raises :class:`InvalidCursor` if the event has no chunk ``index``.
    """
    if index >= len(chunks):
        raise InvalidCursor(f"cursor: the event has {len(chunks)} chunks, no chunk {index}")
    return chunks[index + 1 :]


def encode_chunk(chunk: Chunk) -> bytes:
    """A chunk as compact one-line JSON (line breaks in strings are escaped)."""
    return msgspec.json.encode(chunk)


def frame(chunk: Chunk, event_id: bytes | None = None) -> bytes:
    """One SSE message: ``id: <event_id>`` if given, then ``data: <chunk JSON>``."""
    head = b"" if event_id is None else b"id: " + event_id + b"\n"
    return head + b"data: " + encode_chunk(chunk) + b"\n\n"


def event_frames(cursor: Cursor, chunks: Iterable[Chunk], first: int = 0) -> bytes:
    """The SSE messages of an event's chunks, numbered ``E:O:first``, ``E:O:first+1``...

    ``first`` is the index of the first chunk given (a resumed event starts after 0).
    """
    return b"".join(
        frame(chunk, chunk_id(cursor, index)) for index, chunk in enumerate(chunks, first)
    )


def unnumbered_frames(chunks: Iterable[Chunk]) -> bytes:
    """SSE messages without ids (a compact replay)."""
    return b"".join(frame(chunk) for chunk in chunks)


def error_frame(text: str) -> bytes:
    """The end of a stream that failed after it started: an ``error`` chunk without an
    id (the client's cursor stays where it was), then ``[DONE]``."""
    return frame({"type": "error", "errorText": text}) + DONE


def restart_chunk(cursor: Cursor) -> Chunk:
    """The in-band announcement that the client's cursor cannot continue (see above)."""
    return {"type": RESTART_TYPE, "data": {"cursor": str(cursor)}, "transient": True}


def restart_frame(cursor: Cursor) -> bytes:
    """:func:`restart_chunk` as SSE with id ``E:O`` (the new cursor), then ``[DONE]``."""
    return frame(restart_chunk(cursor), cursor.encode()) + DONE
