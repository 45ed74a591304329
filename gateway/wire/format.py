"""A wire format: how the items of a feed are encoded for one kind of client (pure).

The hub encodes each item once per format in use on the node and hands the same bytes
to every subscriber of that format, so everything here is a pure function of the feed
and the item.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.cursor import Cursor
from gateway.feed import FeedKey, StoredItem

#: Encodes the prelude events (compact JSON each) for a join at a cursor.
PreludeEncoder = Callable[[FeedKey, Cursor, Sequence[bytes]], bytes]

#: What a prelude is made of (``Format.prelude_kind``; the fold cache computes each):
#: the D7 AG-UI prelude events, or the A2UI messages that rebuild a run's live surfaces.
AGUI_PRELUDE = "ag-ui"
A2UI_PRELUDE = "a2ui"


class Format:
    """One wire format.

    ``name`` keys the hub's per-batch encoding cache, so subscribers sharing a format
    share the same bytes.  ``transport`` (``sse`` or ``ws``) labels the metrics of the
    subscriptions that use it.  ``ends``, if given, marks an item after which the
    stream of this format ends (state ``ENDED``; nothing after it is written).
    ``transient``, if given, encodes the feed's transient messages for live followers.
    ``prelude``, if given, encodes what a client joining past the feed's first item
    gets before the items (a run's AG-UI prelude, docs/contract.md D7); formats without
    it start with the items after the cursor.  ``prelude_kind`` says which events the
    encoder gets: :data:`AGUI_PRELUDE` or :data:`A2UI_PRELUDE` (A2UI messages).
    """

    __slots__ = (
        "ends",
        "frame",
        "name",
        "prelude",
        "prelude_kind",
        "restart",
        "transient",
        "transport",
    )

    def __init__(
        self,
        name: str,
        frame: Callable[[FeedKey, StoredItem], bytes],
        restart: Callable[[FeedKey, Cursor], bytes],
        *,
        transport: str,
        ends: Callable[[StoredItem], bool] | None = None,
        transient: Callable[[FeedKey, bytes], bytes] | None = None,
        prelude: PreludeEncoder | None = None,
        prelude_kind: str = AGUI_PRELUDE,
    ) -> None:
        self.name = name
        self.frame = frame
        self.restart = restart
        self.transport = transport
        self.ends = ends
        #: Encodes a transient message (never stored); None: the format carries none.
        self.transient = transient
        self.prelude = prelude
        self.prelude_kind = prelude_kind

    def __repr__(self) -> str:
        return f"Format({self.name!r})"
