"""Which wire format a subscription may ask for, by name (pure).

One table for the WebSocket ``subscribe`` message's ``format`` field (docs/protocol.md):
per feed kind, the formats a client may name, the first being the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gateway.errors import InvalidRequest
from gateway.feed import FeedKind
from gateway.wire.ai_sdk_formats import AI_SDK_WS
from gateway.wire.format import Format
from gateway.wire.formats import RUN_A2UI_WS, RUN_WS, TEAM_WS

#: The formats a WebSocket ``subscribe`` may name (its ``format`` field), per feed kind;
#: the first of each kind is the default (docs/protocol.md).
WS_FORMATS: Final[Mapping[FeedKind, Mapping[str, Format]]] = {
    FeedKind.TEAM: {"team": TEAM_WS},
    FeedKind.RUN: {"ag-ui": RUN_WS, "ai-sdk": AI_SDK_WS, "a2ui": RUN_A2UI_WS},
}


def ws_format(kind: FeedKind, name: str | None) -> Format:
    """The WebSocket format a subscription to a feed of ``kind`` asked for (None: the
    default); InvalidRequest for a name that is not one of that kind's formats."""
    formats = WS_FORMATS[kind]
    if name is None:
        return next(iter(formats.values()))
    found = formats.get(name)
    if found is None:
        known = ", ".join(f'"{n}"' for n in formats)
        shown = name[:64]
        raise InvalidRequest(f"format: {shown!r} is not a format of {kind.value} feeds ({known})")
    return found
