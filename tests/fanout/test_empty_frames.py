"""Items that encode to nothing: no empty write reaches a connection (no sockets).

A format encodes an item to ``b""`` when it has nothing to say about it (an AI SDK
stream for AG-UI's ``REASONING_START``, the ``a2ui`` format for an item without A2UI).
On a chunked response an empty write would be the end of the body, so the fan-out moves
past such items without a write.  Here the formats are checked to give nothing for such
items; then the hub's live path (``Hub._deliver``: the encoding shared per format, cut
into chunks, offered to each subscription) runs generated runs, cut into batches at
random and with such items inserted at random, into outboxes over recording transports
with the connection's real framing: no write is empty, the bytes are every frame in
order, and h11 (the reference decoder) sees a chunked body that has not ended.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.agui.events import encode
from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.fanout.hub import Audience, Hub
from gateway.fanout.outbox import NodeBudget, Outbox
from gateway.fanout.subscription import Chunk, Subscription, SubState
from gateway.feed import FeedKey, StoredItem, run_feed
from gateway.metrics import Metrics
from gateway.net.server import SocketWriter
from gateway.store.memory import MemoryStore
from gateway.wire.ai_sdk_formats import AI_SDK_SSE, AI_SDK_WS
from gateway.wire.format import Encoder, Format
from gateway.wire.formats import RUN_A2UI_WS, RUN_SSE, RUN_WS
from tests.agui.runs import CHUNKS, NESTED, RUN, THREAD
from tests.net.test_chunked_body import HEAD, RecordingTransport, decoded

Event = dict[str, Any]
EPOCH = 1_700_000_000_000
FEED = run_feed("acme", THREAD, RUN)
RUN_FORMATS = [RUN_SSE, RUN_WS, RUN_A2UI_WS, AI_SDK_SSE, AI_SDK_WS]
#: Events that encode to nothing in the AI SDK and a2ui formats wherever they come.
NOTHING: list[Event] = [
    {"type": "REASONING_START", "messageId": "rs-x"},
    {"type": "REASONING_END", "messageId": "rs-x"},
    {"type": "RAW", "event": {"anything": 1}},
]


def stored(events: list[Event], first: int = 1) -> list[StoredItem]:
    return [
        StoredItem(EPOCH, offset, encode(event), "") for offset, event in enumerate(events, first)
    ]


def encoder_of(fmt: Format, fold: RunFold | None = None) -> Encoder | None:
    return None if fmt.encoder is None else fmt.encoder(FEED, fold or RunFold())


def framed(fmt: Format, items: list[StoredItem]) -> list[bytes]:
    """Each item's frames in ``fmt``, one item after another from the run's start."""
    encoder = encoder_of(fmt)
    if encoder is None:
        return [fmt.frame(FEED, item) for item in items]
    return [encoder.frame(FEED, item) for item in items]


# -- the formats --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [AI_SDK_SSE, AI_SDK_WS, RUN_A2UI_WS], ids=lambda f: f.name)
@pytest.mark.parametrize("event", NOTHING, ids=lambda e: e["type"])
def test_an_item_with_nothing_to_say_in_a_format_encodes_to_nothing(
    fmt: Format, event: Event
) -> None:
    started = {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN}
    frames = framed(fmt, stored([started, event]))
    assert frames[1] == b""


@pytest.mark.parametrize("fmt", [AI_SDK_SSE, AI_SDK_WS], ids=lambda f: f.name)
def test_an_empty_delta_encodes_to_no_ai_sdk_chunk(fmt: Format) -> None:
    events = [
        {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN},
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": ""},
    ]
    assert framed(fmt, stored(events))[2] == b""


@pytest.mark.parametrize("fmt", [RUN_SSE, RUN_WS, RUN_A2UI_WS], ids=lambda f: f.name)
def test_a_prelude_of_nothing_is_nothing(fmt: Format) -> None:
    assert fmt.prelude is not None
    assert fmt.prelude(FEED, Cursor(EPOCH, 3), []) == b""


# -- the offer ----------------------------------------------------------------------------


class Connection:
    """What an outbox needs of a stream: its transport and the body's framed write."""

    def __init__(self, transport: RecordingTransport, chunked: bool) -> None:
        self.transport = transport
        self.chunked = chunked

    def writer(self) -> SocketWriter:
        return SocketWriter(self.transport, self.chunked)  # type: ignore[arg-type]


def live_sub(fmt: Format, start: Cursor) -> tuple[Subscription, RecordingTransport]:
    """A live subscription whose outbox writes through the connection's framing (chunked
    for SSE formats, raw for WebSocket ones)."""
    transport = RecordingTransport()
    stream = Connection(transport, chunked=fmt.transport == "sse")
    outbox = Outbox(stream.writer(), 1 << 20, NodeBudget(1 << 30))
    sub = Subscription(FEED, fmt, start, outbox)
    sub.state = SubState.LIVE
    return sub, transport


def test_a_chunk_of_nothing_moves_the_position_and_writes_nothing() -> None:
    items = stored([NOTHING[0], NOTHING[1]], first=5)
    sub, transport = live_sub(AI_SDK_SSE, Cursor(EPOCH, 4))
    assert sub.offer(Chunk(items, [b"", b""], AI_SDK_SSE.ends))
    assert sub.position == Cursor(EPOCH, 6) and sub.state is SubState.LIVE
    # Starting before the position, the part after it is nothing as well.
    more = stored([NOTHING[2]], first=7)
    assert sub.offer(Chunk(items[1:] + more, [b"", b""], AI_SDK_SSE.ends))
    assert sub.position == Cursor(EPOCH, 7)
    assert transport.writes == []
    assert sub.outbox is not None and not sub.outbox.wrote  # the keepalive still runs


def test_a_transient_message_with_nothing_to_say_in_a_format_writes_nothing() -> None:
    def transient(feed: FeedKey, data: bytes) -> bytes:
        return data  # nothing for nothing

    # Raw writes (as on a WebSocket): an empty one would show here as b"".
    fmt = Format("quiet", RUN_WS.frame, RUN_WS.restart, transport="ws", transient=transient)
    hub = Hub(MemoryStore(), MemoryStore(), Metrics())
    audience = Audience(FEED, Cursor(EPOCH, 0))
    sub, transport = live_sub(fmt, Cursor(EPOCH, 0))
    audience.subs.add(sub)
    hub._send_transient(audience, b"")
    assert transport.writes == []
    hub._send_transient(audience, b"x")
    assert transport.writes == [b"x"]


# -- the hub's live path, generated -------------------------------------------------------


@st.composite
def batched_runs(draw: st.DrawFn) -> tuple[list[Event], list[int]]:
    """A hand-written run with events that encode to nothing inserted at random (before
    its end), and where the reader's batches end."""
    base = draw(st.sampled_from([NESTED, CHUNKS]))
    events = list(base[:-1])
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(events)))
        events.insert(at, draw(st.sampled_from(NOTHING)))
    events.append(base[-1])
    cuts = sorted(draw(st.sets(st.integers(1, len(events) - 1), max_size=len(events) - 1)))
    return events, [*cuts, len(events)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batched_runs(), st.sampled_from([64, 400, 1 << 20]))
def test_the_live_path_never_writes_nothing(
    run: tuple[list[Event], list[int]], queue_bytes: int
) -> None:
    events, cuts = run
    items = stored(events)
    # Small queue bounds cut each batch's shared bytes into many chunks, some of nothing.
    hub = Hub(MemoryStore(), MemoryStore(), Metrics(), max_queue_bytes=queue_bytes)
    audience = Audience(FEED, Cursor(EPOCH, 0))
    subs: dict[str, tuple[Subscription, RecordingTransport]] = {}
    for fmt in RUN_FORMATS:
        encoder = encoder_of(fmt)
        if encoder is not None:
            audience.encoders[fmt.name] = (encoder, Cursor(EPOCH, 0))
        subs[fmt.name] = live_sub(fmt, Cursor(EPOCH, 0))
        audience.subs.add(subs[fmt.name][0])
    start = 0
    for stop in cuts:
        hub._deliver(audience, items[start:stop])
        start = stop
    for fmt in RUN_FORMATS:
        sub, transport = subs[fmt.name]
        assert b"" not in transport.writes, fmt.name
        expected = b"".join(framed(fmt, items))
        if fmt.ends is not None:
            assert sub.state is SubState.ENDED, fmt.name
        written = b"".join(transport.writes)
        if fmt.transport == "sse":
            assert decoded(HEAD + written) == (expected, False), fmt.name
        else:
            assert written == expected, fmt.name
