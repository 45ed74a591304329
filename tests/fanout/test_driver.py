"""The subscription driver against fake sinks: no sockets, the embedded store.

Every state of a subscription's life is driven here the way a transport drives it:
``open`` (plan, prelude), ``advance`` until live or ended, the hub's live writes into
the outbox, ``follow`` for a transport that keeps a task.  The sink and the outbox's
transport are fakes that record what was written, so each test compares the exact bytes
a client would have received.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from gateway.agui.events import encode
from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.dialects.ai_sdk.framing import DONE, event_frames, unnumbered_frames
from gateway.dialects.ai_sdk.translator import AiSdkTranslator, compact
from gateway.errors import InvalidCursor, NotFound, Unavailable
from gateway.fanout.driver import Driver, EndReason, needs_prelude
from gateway.fanout.foldcache import BLOCK, FoldCache
from gateway.fanout.hub import Hub
from gateway.fanout.outbox import Outbox
from gateway.fanout.policy import MAX_CATCHUPS, Overflows
from gateway.fanout.subscription import Subscription, SubState
from gateway.feed import FeedKey, NewItem, StoredItem, run_feed, team_feed
from gateway.metrics import Metrics
from gateway.net.server import SocketWriter
from gateway.store.memory import MemoryStore
from gateway.wire.ai_sdk_formats import AI_SDK_SSE
from gateway.wire.format import Format
from gateway.wire.formats import RUN_SSE, RUN_WS, TEAM_SSE, TEAM_WS
from tests.agui.runs import NESTED, RUN, THREAD
from tests.support import events as ev
from tests.support.wait import until

pytestmark = pytest.mark.anyio


class FakeTransport:
    """An asyncio transport stand-in: records writes; ``held`` bytes pretend the kernel
    has not taken them (a slow client)."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.held = 0
        self.closing = False

    def get_write_buffer_size(self) -> int:
        return self.held

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written += data


class FakeStream:
    def __init__(self) -> None:
        self.transport = FakeTransport()

    def writer(self) -> SocketWriter:
        return SocketWriter(self.transport, chunked=False)  # type: ignore[arg-type]


class Sink:
    """Records what the driver writes itself (prelude, history, restart frames)."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.writes = 0
        self.chunks: list[bytes] = []
        self.paused = False

    def write_nowait(self, data: bytes, lead: bytes = b"") -> None:
        self.writes += 1
        self.written += lead + data
        self.chunks.append(lead + data)

    async def drain(self) -> None:
        self.paused = False


class BrokenSink(Sink):
    def write_nowait(self, data: bytes, lead: bytes = b"") -> None:
        raise anyio.BrokenResourceError


class StuckSink(Sink):
    """A client that stopped reading: the connection stays full."""

    def write_nowait(self, data: bytes, lead: bytes = b"") -> None:
        super().write_nowait(data, lead)
        self.paused = True

    async def drain(self) -> None:
        await anyio.sleep_forever()


class Node:
    def __init__(self) -> None:
        self.store = MemoryStore(linger=0)
        self.metrics = Metrics()
        self.hub = Hub(self.store, self.store, self.metrics, history_page=4)
        self.folds = FoldCache(self.store, self.store)

    def driver(self, overflows: Overflows | None = None, write_timeout: float = 5.0) -> Driver:
        return Driver(
            self.hub,
            self.folds,
            self.metrics,
            write_timeout=write_timeout,
            overflows=overflows or Overflows(),
        )

    async def items(self, feed: FeedKey, n: int) -> list[StoredItem]:
        new = [NewItem(ev.new_id(), b'"event":%d,"kind":"event","source":{}' % i) for i in range(n)]
        result = await self.store.append(feed, new, retention=1000)
        state = result.state
        return await self.store.read(feed, Cursor(state.epoch, result.cursors[0].offset - 1), n)


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    n = Node()
    async with anyio.create_task_group() as tg:
        tg.start_soon(n.hub.run)
        yield n
        tg.cancel_scope.cancel()


def frames(fmt: Format, feed: FeedKey, items: list[StoredItem]) -> bytes:
    return b"".join(fmt.frame(feed, item) for item in items)


async def open_live(
    node: Node, feed: FeedKey, cursor: Cursor | None, fmt: Format
) -> tuple[Driver, Sink, FakeStream]:
    driver = node.driver()
    await driver.open(feed, cursor, fmt)
    stream = FakeStream()
    driver.attach(Outbox(stream.writer(), 1 << 20, node.hub.budget))
    return driver, Sink(), stream


# -- the plan --------------------------------------------------------------------------


async def test_a_missing_feed_and_a_bad_cursor_are_refused_before_anything_is_sent(
    node: Node,
) -> None:
    feed = team_feed("acme", ev.team_id())
    with pytest.raises(NotFound):
        await node.driver().open(feed, None, TEAM_SSE)
    items = await node.items(feed, 2)
    with pytest.raises(InvalidCursor):
        await node.driver().open(feed, Cursor(items[0].epoch, 3), TEAM_SSE)
    with pytest.raises(InvalidCursor):
        await node.driver().open(feed, Cursor(items[0].epoch + 1, 0), TEAM_SSE)
    assert feed not in node.hub.audiences  # nothing left registered


async def test_history_then_live_each_item_once_in_order(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    old = await node.items(feed, 10)  # more than one history page (4)
    driver, sink, stream = await open_live(node, feed, Cursor(old[0].epoch, 3), TEAM_SSE)
    assert await driver.advance(sink) is None
    assert driver.sub is not None and driver.sub.state is SubState.LIVE
    assert bytes(sink.written) == frames(TEAM_SSE, feed, old[3:])
    assert sink.writes >= 2  # paged
    new = await node.items(feed, 3)
    expected = frames(TEAM_SSE, feed, new)
    await until(lambda: len(stream.transport.written) >= len(expected), 5, "the live items")
    assert bytes(stream.transport.written) == expected
    driver.close()
    assert feed not in node.hub.audiences


async def test_an_older_epoch_gets_the_restart_frame_and_ends(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    items = await node.items(feed, 2)
    driver, sink, _ = await open_live(node, feed, Cursor(items[0].epoch - 5, 9), TEAM_WS)
    assert await driver.advance(sink) is EndReason.RESET
    assert bytes(sink.written) == TEAM_WS.restart(feed, Cursor(items[0].epoch, 0))
    driver.close()


# -- the lead (WebSocket's subscribed frame) --------------------------------------------


async def test_the_lead_goes_out_in_one_write_with_the_join_page(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    old = await node.items(feed, 10)
    driver, sink, _ = await open_live(node, feed, Cursor(old[0].epoch, 3), TEAM_WS)
    assert driver.sub is not None and driver.sub.prefetched is not None  # read with the join
    assert await driver.advance(sink, b"LEAD") is None
    assert bytes(sink.written) == b"LEAD" + frames(TEAM_WS, feed, old[3:])
    first = sink.chunks[0]
    assert first.startswith(b"LEAD" + TEAM_WS.frame(feed, old[3])), "one write, not two"
    assert sink.chunks.count(b"LEAD") == 0
    driver.close()


async def test_the_lead_goes_alone_when_there_is_nothing_to_send_with_it(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    old = await node.items(feed, 3)
    driver, sink, _ = await open_live(node, feed, old[-1].cursor, TEAM_WS)  # at the head
    assert await driver.advance(sink, b"LEAD") is None
    assert sink.chunks == [b"LEAD"]
    assert await driver.advance(sink) is None  # written once, not again
    assert sink.chunks == [b"LEAD"]
    driver.close()


async def test_the_lead_is_written_before_the_store_is_asked(node: Node) -> None:
    """Without the join's page at hand the lead does not wait for a store read."""
    feed = team_feed("acme", ev.team_id())
    old = await node.items(feed, 6)
    driver, sink, _ = await open_live(node, feed, Cursor(old[0].epoch, 1), TEAM_WS)
    assert driver.sub is not None
    driver.sub.prefetched = None  # as if the join's page were gone
    asked: list[int] = []
    read = node.store.read

    async def counting_read(*args: object, **kwargs: object) -> list[StoredItem]:
        asked.append(len(sink.chunks))
        return await read(*args, **kwargs)  # type: ignore[arg-type]

    node.store.read = counting_read  # type: ignore[method-assign]
    assert await driver.advance(sink, b"LEAD") is None
    assert sink.chunks[0] == b"LEAD" and asked and asked[0] == 1
    assert bytes(sink.written) == b"LEAD" + frames(TEAM_WS, feed, old[1:])
    driver.close()


async def test_the_lead_goes_out_with_the_prelude(node: Node) -> None:
    items = await publish_run(node, NESTED[:-2])
    feed = run_feed("acme", THREAD, RUN)
    driver, sink, _ = await open_live(node, feed, items[6].cursor, RUN_WS)
    prelude = driver.prelude
    assert prelude  # joined past the start
    assert await driver.advance(sink, b"LEAD") is None
    assert sink.chunks[0] == b"LEAD" + prelude
    assert bytes(sink.written) == b"LEAD" + prelude + frames(RUN_WS, feed, items[7:])
    driver.close()


async def test_the_lead_comes_before_the_restart_frame(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    items = await node.items(feed, 2)
    driver, sink, _ = await open_live(node, feed, Cursor(items[0].epoch - 5, 9), TEAM_WS)
    assert await driver.advance(sink, b"LEAD") is EndReason.RESET
    assert sink.chunks == [b"LEAD" + TEAM_WS.restart(feed, Cursor(items[0].epoch, 0))]
    driver.close()


# -- the prelude -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "offset", "expected"),
    [
        (RUN_SSE, 3, True),
        (RUN_WS, 3, True),
        (RUN_SSE, 0, False),  # from the run's start: nothing to summarise
        (TEAM_SSE, 3, False),  # team feeds have no prelude
    ],
)
def test_needs_prelude(fmt: Format, offset: int, expected: bool) -> None:
    sub = Subscription(run_feed("acme", THREAD, RUN), fmt, Cursor(1, offset))
    assert needs_prelude(fmt, sub) is expected
    sub.state = SubState.RESTARTED
    assert needs_prelude(fmt, sub) is False


async def publish_run(node: Node, events: list[dict[str, object]]) -> list[StoredItem]:
    feed = run_feed("acme", THREAD, RUN)
    result = await node.store.append(
        feed, [NewItem(None, encode(e)) for e in events], retention=10_000, align=BLOCK
    )
    return await node.store.read(feed, Cursor(result.state.epoch, 0), len(events))


@pytest.mark.parametrize("fmt", [RUN_SSE, RUN_WS])
async def test_a_join_past_the_start_gets_the_prelude_first(node: Node, fmt: Format) -> None:
    cut = 7
    items = await publish_run(node, NESTED[:-2])
    feed = run_feed("acme", THREAD, RUN)
    joined = items[cut - 1].cursor
    driver, sink, _ = await open_live(node, feed, joined, fmt)
    fold = RunFold()
    for event in NESTED[:cut]:
        fold.apply(event)
    prelude = [encode(e) for e in fold.prelude(THREAD, RUN)]
    assert fmt.prelude is not None
    expected = fmt.prelude(feed, joined, prelude) + frames(fmt, feed, items[cut:])
    assert await driver.advance(sink) is None
    assert bytes(sink.written) == expected
    driver.close()


async def test_a_join_after_the_run_ended_gets_the_prelude_and_the_sse_stream_ends(
    node: Node,
) -> None:
    items = await publish_run(node, NESTED)
    feed = run_feed("acme", THREAD, RUN)
    driver, sink, _ = await open_live(node, feed, items[-1].cursor, RUN_SSE)
    assert driver.sub is not None and driver.sub.state is SubState.ENDED
    assert await driver.advance(sink) is EndReason.FINISHED
    assert sink.written.startswith(b"data: ") and b"id: " not in sink.written
    assert b"RUN_FINISHED" in sink.written
    driver.close()
    # Over WebSocket a run subscription outlives the run's end.
    ws_driver, ws_sink, _ = await open_live(node, feed, items[-1].cursor, RUN_WS)
    assert await ws_driver.advance(ws_sink) is None
    ws_driver.close()


async def test_the_sse_stream_ends_with_the_run_in_history(node: Node) -> None:
    items = await publish_run(node, NESTED)
    feed = run_feed("acme", THREAD, RUN)
    driver, sink, _ = await open_live(node, feed, None, RUN_SSE)
    assert await driver.advance(sink) is EndReason.FINISHED
    assert bytes(sink.written) == frames(RUN_SSE, feed, items)
    driver.close()


# -- slow consumers and failures ----------------------------------------------------------


async def test_an_overflow_catches_up_and_the_fourth_in_a_row_is_too_slow(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    items = await node.items(feed, 2)
    overflows = Overflows()
    driver = node.driver(overflows)
    sub = await driver.open(feed, Cursor(items[0].epoch, 0), TEAM_SSE)
    driver.attach(Outbox(FakeStream().writer(), 1 << 20, node.hub.budget))
    sink = Sink()
    assert await driver.advance(sink) is None
    for _ in range(MAX_CATCHUPS):
        sub.overflow()
        assert await driver.advance(sink) is None  # caught up from the store, live again
    sub.overflow()
    assert await driver.advance(sink) is EndReason.SLOW
    slow = node.metrics.registry.get_sample_value(
        "gateway_slow_consumer_actions_total", {"action": "disconnect"}
    )
    assert slow == 1
    driver.close()


async def test_a_client_gone_and_a_client_stuck(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    await node.items(feed, 3)
    driver = node.driver()
    await driver.open(feed, None, TEAM_SSE)
    driver.attach(Outbox(FakeStream().writer(), 1 << 20, node.hub.budget))
    assert await driver.advance(BrokenSink()) is EndReason.CLIENT
    driver.close()
    stuck = node.driver(write_timeout=0.05)
    await stuck.open(feed, None, TEAM_SSE)
    stuck.attach(Outbox(FakeStream().writer(), 1 << 20, node.hub.budget))
    with anyio.fail_after(5):
        assert await stuck.advance(StuckSink()) is EndReason.SLOW
    stuck.close()


class FullSink(Sink):
    """A connection that is full after every write until it drains."""

    def __init__(self) -> None:
        super().__init__()
        self.drains = 0

    def write_nowait(self, data: bytes, lead: bytes = b"") -> None:
        super().write_nowait(data, lead)
        self.paused = True

    async def drain(self) -> None:
        self.drains += 1
        self.paused = False


async def test_history_waits_for_a_full_connection_before_each_next_page(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    items = await node.items(feed, 9)  # three pages of four (history_page=4) and one
    driver = node.driver()
    await driver.open(feed, None, TEAM_SSE)
    driver.attach(Outbox(FakeStream().writer(), 1 << 20, node.hub.budget))
    full, roomy = FullSink(), Sink()
    assert await driver.advance(full) is None
    assert full.writes >= 3 and full.drains == full.writes
    assert all(b'"event":%d' % i in full.written for i in range(len(items)))
    driver.close()
    other = node.driver()
    await other.open(feed, None, TEAM_SSE)
    other.attach(Outbox(FakeStream().writer(), 1 << 20, node.hub.budget))
    assert await other.advance(roomy) is None
    assert roomy.written == full.written  # the same history, nothing waited on
    other.close()


class FailingReads(MemoryStore):
    async def read(self, feed: FeedKey, after: Cursor, limit: int) -> list[StoredItem]:
        raise Unavailable("redis unavailable during read")


async def test_a_store_failure_after_the_start_ends_it_with_the_error() -> None:
    store = FailingReads()
    hub = Hub(store, store, Metrics())
    driver = Driver(hub, FoldCache(store, store), Metrics(), write_timeout=5, overflows=Overflows())
    feed = team_feed("acme", ev.team_id())
    await store.append(feed, [NewItem("k", b'"event":1,"kind":"event","source":{}')], retention=9)
    await driver.open(feed, None, TEAM_SSE)
    driver.attach(Outbox(FakeStream().writer(), 1 << 20, hub.budget))
    assert await driver.advance(Sink()) is EndReason.ERROR
    assert isinstance(driver.error, Unavailable)
    driver.close()


# -- follow: the transports that keep a task ----------------------------------------------


async def test_follow_sends_keepalives_on_silence_and_ends_when_closed(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    await node.items(feed, 1)
    driver, sink, _ = await open_live(node, feed, None, TEAM_SSE)
    idle = anyio.Event()
    ticks: list[int] = []

    def keepalive() -> None:
        ticks.append(1)
        idle.set()

    async def close_after_keepalive() -> None:
        await idle.wait()
        assert driver.sub is not None
        driver.sub.close()  # what a drain does

    async with anyio.create_task_group() as tg:
        tg.start_soon(close_after_keepalive)
        with anyio.fail_after(5):
            reason = await driver.follow(
                sink, keepalive=0.05, expires_at=float("inf"), idle=keepalive
            )
    assert reason is EndReason.SHUTDOWN
    assert ticks
    driver.close()


async def test_follow_ends_when_the_token_expires(node: Node) -> None:
    feed = team_feed("acme", ev.team_id())
    await node.items(feed, 1)
    driver, sink, _ = await open_live(node, feed, None, TEAM_SSE)
    with anyio.fail_after(5):
        reason = await driver.follow(sink, keepalive=10, expires_at=0.0, idle=lambda: None)
    assert reason is EndReason.AUTH
    driver.close()


def test_end_reasons_are_the_documented_disconnect_reasons() -> None:
    from gateway.metrics import DISCONNECT_REASONS

    assert {r.value for r in EndReason} == set(DISCONNECT_REASONS)


# -- a stateful format: the AI SDK chunks of a run ------------------------------------------


def ai_sdk_stream(events: list[dict[str, object]], items: list[StoredItem]) -> bytes:
    """What a client that saw the run from the start gets: every event's chunks."""
    translator = AiSdkTranslator(THREAD, RUN)
    out = b""
    for event, item in zip(events, items, strict=True):
        out += event_frames(item.cursor, translator.translate(event))
        if event["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            out += DONE
    return out


async def test_a_stateful_format_from_the_start_and_live_shares_one_encoder(node: Node) -> None:
    half = 9
    items = await publish_run(node, NESTED[:half])
    feed = run_feed("acme", THREAD, RUN)
    a, sink_a, stream_a = await open_live(node, feed, None, AI_SDK_SSE)
    b, sink_b, stream_b = await open_live(node, feed, None, AI_SDK_SSE)
    assert await a.advance(sink_a) is None and await b.advance(sink_b) is None
    assert bytes(sink_a.written) == bytes(sink_b.written) == ai_sdk_stream(NESTED[:half], items)
    audience = node.hub.audiences[feed]
    assert list(audience.encoders) == ["ai-sdk-sse"]  # one encoder for both
    rest = await node.store.append(
        feed, [NewItem(None, encode(e)) for e in NESTED[half:]], retention=10_000, align=BLOCK
    )
    all_items = await node.store.read(feed, Cursor(rest.state.epoch, 0), len(NESTED))
    whole = ai_sdk_stream(NESTED, all_items)
    live = whole[len(sink_a.written) :]
    await until(lambda: len(stream_b.transport.written) >= len(live), 5, "the live chunks")
    assert bytes(stream_a.transport.written) == bytes(stream_b.transport.written) == live
    assert live.endswith(DONE)
    a.close()
    assert list(audience.encoders) == ["ai-sdk-sse"]  # b still follows
    b.close()
    assert feed not in node.hub.audiences


@pytest.mark.parametrize("cut", [3, 7, 12])
async def test_a_stateful_format_resumes_mid_item_and_after_a_compact_replay(
    node: Node, cut: int
) -> None:
    items = await publish_run(node, NESTED)
    feed = run_feed("acme", THREAD, RUN)
    whole = ai_sdk_stream(NESTED, items)
    # Mid-item: the client holds chunk 0 of the event at `cut` (1-based offset).
    translator = AiSdkTranslator(THREAD, RUN)
    for event in NESTED[: cut - 1]:
        translator.translate(event)
    chunks = translator.translate(NESTED[cut - 1])
    if chunks:
        driver = node.driver()
        await driver.open(feed, items[cut - 1].cursor, AI_SDK_SSE, after_piece=0)
        driver.attach(Outbox(FakeStream().writer(), 1 << 20, node.hub.budget))
        sink = Sink()
        assert await driver.advance(sink) is EndReason.FINISHED
        first = event_frames(items[cut - 1].cursor, chunks[:1])
        assert whole.index(first) >= 0
        assert bytes(sink.written) == whole[whole.index(first) + len(first) :]
        driver.close()
    # At an event boundary: the compact replay of the run so far (no ids), then the rest.
    driver = node.driver()
    await driver.open(feed, items[cut - 1].cursor, AI_SDK_SSE)
    driver.attach(Outbox(FakeStream().writer(), 1 << 20, node.hub.budget))
    sink = Sink()
    assert await driver.advance(sink) is EndReason.FINISHED
    fold = RunFold()
    for event in NESTED[:cut]:
        fold.apply(event)
    expected = (
        unnumbered_frames(compact(fold, THREAD, RUN))
        + ai_sdk_stream(NESTED, items)[len(ai_sdk_stream(NESTED[:cut], items[:cut])) :]
    )
    assert bytes(sink.written) == expected
    driver.close()


async def test_a_stateful_join_past_the_run_end_is_the_compact_replay_and_done(
    node: Node,
) -> None:
    items = await publish_run(node, NESTED)
    feed = run_feed("acme", THREAD, RUN)
    driver, sink, _ = await open_live(node, feed, items[-1].cursor, AI_SDK_SSE)
    assert driver.sub is not None and driver.sub.state is SubState.ENDED
    assert await driver.advance(sink) is EndReason.FINISHED
    assert sink.written.endswith(DONE) and b"id: " not in sink.written
    driver.close()
    with pytest.raises(InvalidCursor):  # the terminal event has no chunk 99
        await node.driver().open(feed, items[-1].cursor, AI_SDK_SSE, after_piece=99)
