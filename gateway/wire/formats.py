"""The wire formats the hub encodes items into, once per item per node (pure)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from gateway.agui.events import TERMINAL
from gateway.cursor import Cursor, encode_cursor
from gateway.dialects import a2ui
from gateway.feed import FeedKey, StoredItem
from gateway.runstream import stored_kind, stored_seq
from gateway.wire import event_stream, messages
from gateway.wire.format import A2UI_PRELUDE, Format
from gateway.wire.teamitem import epoch_restarted_item, team_item


def _team_sse_frame(feed: FeedKey, item: StoredItem) -> bytes:
    epoch, offset = item.epoch, item.offset
    return event_stream.message(team_item(epoch, offset, item.data), encode_cursor(epoch, offset))


def _team_sse_restart(feed: FeedKey, cursor: Cursor) -> bytes:
    return event_stream.message(epoch_restarted_item(cursor), cursor.encode())


def _team_ws_frame(feed: FeedKey, item: StoredItem) -> bytes:
    epoch, offset = item.epoch, item.offset
    data = team_item(epoch, offset, item.data)
    return messages.frame(messages.event_payload(feed.public_name, epoch, offset, data))


def _ws_restart(feed: FeedKey, cursor: Cursor) -> bytes:
    return messages.frame(messages.epoch_restarted(feed.public_name, cursor))


#: The team feed as SSE: ``id: E:O`` and one ``data:`` line holding the TeamItem.
TEAM_SSE = Format("team-sse", _team_sse_frame, _team_sse_restart, transport="sse")
#: The team feed as ``gateway.v1`` event frames carrying the TeamItem.
TEAM_WS = Format("team-ws", _team_ws_frame, _ws_restart, transport="ws")


def _run_sse_frame(feed: FeedKey, item: StoredItem) -> bytes:
    # A run item's payload is the AG-UI event as compact one-line JSON.
    return event_stream.message(item.data, encode_cursor(item.epoch, item.offset))


def _run_sse_restart(feed: FeedKey, cursor: Cursor) -> bytes:
    # D7: epoch_restarted as a CUSTOM event whose value holds the new cursor; its id is
    # that cursor, so an EventSource that reconnects by itself resumes from it.
    return event_stream.message(run_restart_event(cursor), cursor.encode())


def run_restart_event(cursor: Cursor) -> bytes:
    return (
        b'{"type":"CUSTOM","name":"gateway.epoch_restarted","value":{"cursor":"'
        + cursor.encode()
        + b'"}}'
    )


def _run_ws_frame(feed: FeedKey, item: StoredItem) -> bytes:
    return messages.frame(
        messages.event_payload(feed.public_name, item.epoch, item.offset, item.data)
    )


def is_terminal(item: StoredItem) -> bool:
    """The item is a run's RUN_FINISHED or RUN_ERROR."""
    return run_event_type(item.data) in TERMINAL


class _TypeOnly(msgspec.Struct):
    type: str = ""


_type_decoder = msgspec.json.Decoder(_TypeOnly)


def run_event_type(data: bytes) -> str:
    """The ``type`` of a stored AG-UI event (decodes only that field)."""
    try:
        return _type_decoder.decode(data).type
    except msgspec.DecodeError:
        return ""


def _run_sse_prelude(feed: FeedKey, joined: Cursor, events: Sequence[bytes]) -> bytes:
    # Prelude events carry no SSE id: the first item after them carries its own (D7).
    return b"".join(event_stream.message(event) for event in events)


def _run_ws_prelude(feed: FeedKey, joined: Cursor, events: Sequence[bytes]) -> bytes:
    # Each prelude frame carries the cursor the client joined at, not a new position.
    name = feed.public_name
    epoch, offset = joined
    return b"".join(
        messages.frame(messages.event_payload(name, epoch, offset, event)) for event in events
    )


#: A run feed as AG-UI SSE: ``id: E:O`` and ``data: <event JSON>``; the stream ends after
#: the run's RUN_FINISHED or RUN_ERROR.
RUN_SSE = Format(
    "run-sse",
    _run_sse_frame,
    _run_sse_restart,
    transport="sse",
    ends=is_terminal,
    prelude=_run_sse_prelude,
)
#: A run feed as ``gateway.v1`` event frames carrying the AG-UI event.
RUN_WS = Format("run-ws", _run_ws_frame, _ws_restart, transport="ws", prelude=_run_ws_prelude)


def _stream_frame(feed: FeedKey, item: StoredItem) -> bytes:
    # Committed events carry their seq as the SSE id; the final result carries none.
    seq = stored_seq(item.data)
    return event_stream.message(item.data, None if seq is None else str(seq).encode())


def _stream_restart(feed: FeedKey, cursor: Cursor) -> bytes:
    # The seed's run stream has no epochs: the stream just ends and the client resumes
    # with its last seq.
    return event_stream.comment(b"stream restarted: resume with your last seq")


def _stream_ends(item: StoredItem) -> bool:
    return stored_kind(item.data) == "result"


def _stream_transient(feed: FeedKey, data: bytes) -> bytes:
    return event_stream.message(data)


#: The threads run stream (D7b): SseMessages, ``id: <seq>`` on committed events,
#: transient delta/status messages live, ending after the result.
RUN_STREAM_SSE = Format(
    "run-stream-sse",
    _stream_frame,
    _stream_restart,
    transport="sse",
    ends=_stream_ends,
    transient=_stream_transient,
)


# -- A2UI as-is over WebSocket (docs/dialects/a2ui.md) -------------------------------------

#: Every item that carries A2UI holds this (its ``activityType``); others skip decoding.
_A2UI_MARK = b'"' + a2ui.ACTIVITY_TYPE.encode() + b'"'
_message_encoder = msgspec.json.Encoder()


def _run_a2ui_ws_frame(feed: FeedKey, item: StoredItem) -> bytes:
    # One event frame per A2UI message the item carries, each with the item's cursor;
    # nothing for an item that carries none.
    if _A2UI_MARK not in item.data:
        return b""
    try:
        event = msgspec.json.decode(item.data)
    except msgspec.DecodeError:
        return b""
    if not isinstance(event, dict):
        return b""
    name, epoch, offset = feed.public_name, item.epoch, item.offset
    return b"".join(
        messages.frame(
            messages.event_payload(name, epoch, offset, _message_encoder.encode(message))
        )
        for message in a2ui.messages_of(event)
    )


#: A run feed's A2UI messages as ``gateway.v1`` event frames (the subscribe option
#: ``"format": "a2ui"``): the prelude rebuilds the surfaces live at the cursor
#: (:func:`gateway.dialects.a2ui.rejoin_messages`), then each item's messages.
RUN_A2UI_WS = Format(
    "run-a2ui-ws",
    _run_a2ui_ws_frame,
    _ws_restart,
    transport="ws",
    prelude=_run_ws_prelude,
    prelude_kind=A2UI_PRELUDE,
)
