"""The wire formats the hub encodes items into, once per item per node."""

from __future__ import annotations

from gateway.cursor import Cursor
from gateway.fanout.subscriber import Format
from gateway.feed import FeedKey, StoredItem
from gateway.wire import sse, ws
from gateway.wire.teamitem import epoch_restarted_item, team_item


def _team_sse_frame(feed: FeedKey, item: StoredItem) -> bytes:
    cursor = item.cursor
    return sse.message(team_item(cursor, item.data), cursor.encode())


def _team_sse_restart(feed: FeedKey, cursor: Cursor) -> bytes:
    return sse.message(epoch_restarted_item(cursor), cursor.encode())


def _team_ws_frame(feed: FeedKey, item: StoredItem) -> bytes:
    cursor = item.cursor
    return ws.frame(ws.event_payload(feed.public_name, cursor, team_item(cursor, item.data)))


def _ws_restart(feed: FeedKey, cursor: Cursor) -> bytes:
    return ws.frame(ws.epoch_restarted(feed.public_name, cursor))


#: The team feed as SSE: ``id: E:O`` and one ``data:`` line holding the TeamItem.
TEAM_SSE = Format("team-sse", _team_sse_frame, _team_sse_restart)
#: The team feed as ``gateway.v1`` event frames carrying the TeamItem.
TEAM_WS = Format("team-ws", _team_ws_frame, _ws_restart)
