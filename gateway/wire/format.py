"""A wire format: how the items of a feed are encoded for one kind of client (pure).

The hub encodes each item once per format in use on the node and hands the same bytes
to every subscriber of that format, so everything here is a pure function of the feed
and the item.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.errors import GatewayError
from gateway.feed import FeedKey, StoredItem
from gateway.wire import event_stream

#: Encodes the prelude events (compact JSON each) for a join at a cursor.
PreludeEncoder = Callable[[FeedKey, Cursor, Sequence[bytes]], bytes]

#: What a prelude is made of (``Format.prelude_kind``; the fold cache computes each):
#: the D7 AG-UI prelude events, or the A2UI messages that rebuild a run's live surfaces.
AGUI_PRELUDE = "ag-ui"
A2UI_PRELUDE = "a2ui"


class Encoder(Protocol):
    """A stateful format's encoding of one run feed from some position on.

    Its frames depend on what came before the item (the run fold), but are the same for
    every subscriber at the same position, so the hub keeps one encoder per feed and
    format and hands its bytes to every live subscriber of that format.
    """

    @property
    def ended(self) -> bool:
        """The run had ended at the encoder's position."""
        ...

    def frame(self, feed: FeedKey, item: StoredItem, after: int | None = None) -> bytes:
        """The item's frames (advancing the encoder), ``b""`` when it has none; with
        ``after`` only those after the item's ``after``-th piece (a client resuming
        mid-item).  Raises InvalidCursor when the item has no piece ``after``."""
        ...

    def prelude(self, joined: Cursor) -> bytes:
        """What a client joining at this position (``joined``) gets before the items
        after it."""
        ...

    def copy(self) -> Encoder: ...


#: Builds a stateful format's encoder positioned after the items ``fold`` holds.
EncoderFactory = Callable[[FeedKey, RunFold], Encoder]


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
    prelude encoder gets: :data:`AGUI_PRELUDE` or :data:`A2UI_PRELUDE` (A2UI messages).
    ``encoder``, if given, makes the format stateful (its frames depend on the run so
    far, docs/contract.md D10): items are framed by an :class:`Encoder` built from the
    run's fold, not by ``frame``.
    ``headers`` are the response headers of a stream in this format (SSE formats; the
    SSE headers unless given).  ``error``, if given, encodes the in-band frame that ends
    a stream the store failed after it started (the AI SDK ``error`` chunk); formats
    without it just end.

    Every encoding returns whole frames, and ``b""`` for what has nothing to say in the
    format (an AG-UI ``REASONING_START`` in the AI SDK formats, an item without A2UI in
    ``a2ui``, a prelude of a run with nothing to replay).  Nothing empty is ever
    written: the fan-out moves past such items without a write
    (:meth:`~gateway.fanout.subscription.Subscription.offer`), the driver writes no
    empty page or prelude, and the chunked framing drops an empty write
    (:func:`~gateway.net.server.body_writer`), since an empty HTTP/1.1 chunk would end
    the response.
    """

    __slots__ = (
        "encoder",
        "ends",
        "error",
        "frame",
        "headers",
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
        encoder: EncoderFactory | None = None,
        prelude_kind: str = AGUI_PRELUDE,
        headers: Sequence[tuple[bytes, bytes]] | None = None,
        error: Callable[[FeedKey, GatewayError], bytes] | None = None,
    ) -> None:
        self.name = name
        self.frame = frame
        self.restart = restart
        self.transport = transport
        self.ends = ends
        #: Encodes a transient message (never stored); None: the format carries none.
        self.transient = transient
        self.prelude = prelude
        self.encoder = encoder
        self.prelude_kind = prelude_kind
        self.headers: list[tuple[bytes, bytes]] = list(
            event_stream.HEADERS if headers is None else headers
        )
        self.error = error

    def __repr__(self) -> str:
        return f"Format({self.name!r})"
