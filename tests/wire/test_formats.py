"""The WebSocket formats a subscription may name, and the ``a2ui`` format's frames (pure)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from websockets.frames import Frame, Opcode

from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.dialects import a2ui
from gateway.errors import InvalidRequest
from gateway.feed import FeedKind, StoredItem, run_feed
from gateway.wire import messages
from gateway.wire.ai_sdk_formats import AI_SDK_WS
from gateway.wire.format import A2UI_PRELUDE, AGUI_PRELUDE
from gateway.wire.formats import RUN_A2UI_WS, RUN_WS, TEAM_WS
from gateway.wire.registry import WS_FORMATS, ws_format
from tests.dialects.a2ui_runs import SURFACES, create, data

FEED = run_feed("acme", "t", "r")


def item(offset: int, event: dict[str, Any]) -> StoredItem:
    return StoredItem(7, offset, msgspec.json.encode(event), "")


def frames(data: bytes) -> list[dict[str, Any]]:
    """The text frames in ``data`` (unmasked server frames), decoded."""
    out = []
    while data:
        size = data[1] & 0x7F
        start = 2 if size < 126 else 4 if size == 126 else 10
        if size >= 126:
            size = int.from_bytes(data[2:start], "big")
        assert data[: start + size] == Frame(Opcode.TEXT, data[start : start + size]).serialize(
            mask=False
        )
        out.append(json.loads(data[start : start + size]))
        data = data[start + size :]
    return out


def test_formats_per_feed_kind() -> None:
    assert ws_format(FeedKind.RUN, None) is RUN_WS
    assert ws_format(FeedKind.RUN, "ag-ui") is RUN_WS
    assert ws_format(FeedKind.RUN, "a2ui") is RUN_A2UI_WS
    assert ws_format(FeedKind.RUN, "ai-sdk") is AI_SDK_WS
    assert ws_format(FeedKind.TEAM, None) is TEAM_WS
    assert ws_format(FeedKind.TEAM, "team") is TEAM_WS
    assert set(WS_FORMATS) == set(FeedKind)
    for kind, name in ((FeedKind.TEAM, "a2ui"), (FeedKind.RUN, "team"), (FeedKind.RUN, "")):
        with pytest.raises(InvalidRequest, match=r"^format: "):
            ws_format(kind, name)
    assert RUN_A2UI_WS.prelude_kind == A2UI_PRELUDE and RUN_WS.prelude_kind == AGUI_PRELUDE
    assert RUN_A2UI_WS.transport == "ws" and RUN_A2UI_WS.ends is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"type":"subscribe","feed":"run/t/r","format":"a2ui"}', "a2ui"),
        ('{"type":"subscribe","feed":"run/t/r","format":null}', None),
        ('{"type":"subscribe","feed":"run/t/r"}', None),
    ],
)
def test_the_subscribe_message_takes_a_format(text: str, expected: str | None) -> None:
    message = messages.decode_client(text)
    assert isinstance(message, messages.Subscribe) and message.format == expected


def test_a_format_must_be_a_string() -> None:
    with pytest.raises(messages.MessageError, match="format: must be a string") as caught:
        messages.decode_client('{"type":"subscribe","feed":"run/t/r","format":1}')
    assert caught.value.feed == "run/t/r"
    with pytest.raises(messages.MessageError, match="format: unknown field"):
        messages.decode_client('{"type":"unsubscribe","feed":"run/t/r","format":"a2ui"}')


def test_a2ui_frames_carry_each_message_with_its_items_cursor() -> None:
    events = a2ui.derive(SURFACES, RunFold())
    for offset, event in enumerate(events, start=1):
        got = frames(RUN_A2UI_WS.frame(FEED, item(offset, event)))
        assert got == [
            {"type": "event", "feed": "run/t/r", "cursor": f"7:{offset}", "data": m}
            for m in a2ui.messages_of(event)
        ]
    # Items that carry no A2UI give nothing; a rebuilt surface its delete, then its list.
    for event in (
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "x", "activityType": "other", "content": {}},
    ):
        assert RUN_A2UI_WS.frame(FEED, item(1, event)) == b""
    assert RUN_A2UI_WS.frame(FEED, StoredItem(7, 1, b'["a2ui-surface"]', "")) == b""
    rebuilt = a2ui.derive([create("s"), data("s", "/a", 1), data("s", "/a", 2)], RunFold(), limit=2)
    assert [f["data"] for f in frames(RUN_A2UI_WS.frame(FEED, item(3, rebuilt[-1])))] == [
        {"deleteSurface": {"surfaceId": "s"}},
        create("s"),
        data("s", "/", {"a": 2}),
    ]


def test_the_a2ui_prelude_frames_carry_the_cursor_joined_at() -> None:
    prelude = [msgspec.json.encode(m) for m in (create("s"), data("s", "/", {"a": 1}))]
    assert RUN_A2UI_WS.prelude is not None
    got = frames(RUN_A2UI_WS.prelude(FEED, Cursor(7, 5), prelude))
    assert [(f["cursor"], f["data"]) for f in got] == [
        ("7:5", create("s")),
        ("7:5", data("s", "/", {"a": 1})),
    ]
