"""The one way a subscription runs, whatever the transport.

A :class:`Driver` owns the whole life of one subscription: the plan (docs/contract.md
D2: replay, restart or refuse), the prelude of formats that have one (D7), history pages
from the subscription's cursor, the hand-over to live (the hub then writes into the
connection's outbox without this task), the restart frame, the slow-consumer policy on
overflow, and the reason it ended.  Transports are adapters: they frame and write, and
give the driver a :class:`Sink`; SSE keeps a task per stream (:meth:`Driver.follow`),
WebSocket keeps none while a subscription is live (:meth:`Driver.advance` again when the
hub changes its state).
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable
from typing import Protocol

import anyio
import structlog

from gateway.cursor import Cursor
from gateway.errors import GatewayError, InvalidCursor, NotFound
from gateway.fanout.foldcache import FoldCache
from gateway.fanout.hub import Hub
from gateway.fanout.outbox import Outbox
from gateway.fanout.policy import Overflows
from gateway.fanout.subscription import Subscription, SubState
from gateway.feed import FeedKey
from gateway.metrics import Metrics
from gateway.wire.format import Format

log = structlog.get_logger("gateway.driver")


class EndReason(enum.StrEnum):
    """Why a subscription ended (the ``reason`` of ``gateway_disconnects_total``)."""

    #: The client went away or closed.
    CLIENT = "client"
    #: Too slow: the slow-consumer policy cut it off.
    SLOW = "slow"
    #: The node is draining or stopping.
    SHUTDOWN = "shutdown"
    #: The token expired.
    AUTH = "auth"
    #: The store failed after the stream started (``Driver.error`` says how).
    ERROR = "error"
    #: ``epoch_restarted`` was sent: the cursor cannot continue.
    RESET = "reset"
    #: The format's stream ended with an item (an AG-UI run's end on SSE).
    FINISHED = "finished"


class Sink(Protocol):
    """What a transport gives the driver for one subscription's connection."""

    def write_nowait(self, data: bytes, lead: bytes = b"") -> None:
        """Hand ``lead`` (bytes outside the body's framing: a response head, a frame
        already framed) and then ``data`` (the body's bytes, framed by the sink) to the
        connection in one write; BrokenResourceError once closed.  Not both empty."""
        ...

    @property
    def paused(self) -> bool:
        """The connection holds more than it should: :meth:`drain` before writing on."""
        ...

    async def drain(self) -> None:
        """Wait until the connection takes more (BrokenResourceError once it is lost)."""
        ...


def needs_prelude(fmt: Format, sub: Subscription) -> bool:
    """A join needs a prelude when its format has one and it starts past the first item."""
    return fmt.prelude is not None and sub.state is SubState.CATCHING_UP and sub.position.offset > 0


class Driver:
    """One subscription on one connection; create per subscribe, :meth:`open`, then run.

    ``overflows`` is the connection's slow-consumer record (shared by a WebSocket's
    subscriptions).  History and prelude writes wait for the socket at most
    ``write_timeout`` seconds each (a stopped client is cut off as slow).
    """

    def __init__(
        self,
        hub: Hub,
        folds: FoldCache,
        metrics: Metrics,
        *,
        write_timeout: float,
        overflows: Overflows,
    ) -> None:
        self.hub = hub
        self.folds = folds
        self.metrics = metrics
        self.write_timeout = write_timeout
        self.overflows = overflows
        self.sub: Subscription | None = None
        #: The prelude still to write before the items (empty: none, or written).
        self.prelude = b""
        #: What :meth:`advance` writes first (see there); empty once written.
        self._lead = b""
        #: The failure that ended the subscription with ``EndReason.ERROR``.
        self.error: GatewayError | None = None

    async def open(
        self, feed: FeedKey, cursor: Cursor | None, fmt: Format, *, after_piece: int | None = None
    ) -> Subscription:
        """Plan and register the subscription and compute its prelude; nothing is sent.

        ``after_piece`` resumes a stateful format mid-item: the client holds pieces up to
        ``after_piece`` of the item at ``cursor`` (an AI SDK chunk id ``E:O:K``).
        Raises NotFound, InvalidCursor or Unavailable before any output, so the
        transport can still answer with an error status.  The caller must call
        :meth:`close` once it holds the returned subscription, on every exit path.
        """
        sub = await self.hub.open(feed, cursor, fmt)
        try:
            if fmt.encoder is not None:
                if sub.state is SubState.CATCHING_UP:
                    await self._stateful_join(sub, after_piece)
            elif needs_prelude(fmt, sub):
                assert fmt.prelude is not None
                events, ended = await self.folds.prelude(sub.feed, sub.position, fmt.prelude_kind)
                self.prelude = fmt.prelude(sub.feed, sub.position, events)
                if ended and fmt.ends is not None:
                    # Joined after the run's end: the prelude closes with the terminal
                    # event, and the stream ends with it.
                    sub.state = SubState.ENDED
        except BaseException:
            self.hub.close(sub)
            raise
        self.sub = sub
        return sub

    async def _stateful_join(self, sub: Subscription, after_piece: int | None) -> None:
        """A stateful format's encoder at the join, and what the client gets first: the
        rest of a half-sent item (``after_piece``), or the encoder's prelude (a compact
        replay of the run so far) when joining past the start."""
        fmt, feed, position = sub.fmt, sub.feed, sub.position
        assert fmt.encoder is not None
        if after_piece is None:
            encoder = fmt.encoder(feed, await self.folds.at(feed, position))
            self.prelude = encoder.prelude(position) if position.offset else b""
        else:
            if position.offset == 0:
                raise InvalidCursor("cursor: there is no item at offset 0")
            before = Cursor(position.epoch, position.offset - 1)
            items = await self.folds.feeds.read(feed, before, 1)
            if items and items[0].epoch == position.epoch and items[0].offset > position.offset:
                # Retention trimmed the item the client is in the middle of: its rest is
                # gone, so the client resyncs where the feed is complete (D2, trimmed).
                sub.restarted(Cursor(position.epoch, items[0].offset - 1))
                self.metrics.epoch_restarts.inc()
                return
            if not items or items[0].cursor != position:
                raise InvalidCursor("cursor: that item is no longer retained")
            encoder = fmt.encoder(feed, await self.folds.at(feed, before))
            self.prelude = encoder.frame(feed, items[0], after=after_piece)
        sub.encoder = encoder
        if encoder.ended and fmt.ends is not None:
            sub.state = SubState.ENDED  # the run had ended: the prelude closes the stream

    def attach(self, outbox: Outbox) -> None:
        """The connection's outbox, where the hub writes live items (before running)."""
        assert self.sub is not None
        self.sub.outbox = outbox

    def close(self) -> None:
        """Unregister the subscription (idempotent)."""
        if self.sub is not None:
            self.hub.close(self.sub)

    async def _write(self, sink: Sink, data: bytes) -> None:
        """Write (after the lead, if :meth:`advance` still holds one), then wait (at most
        ``write_timeout``) if the connection is full.

        Most writes are taken at once: only a full connection is waited on, and only
        then is a cancel scope entered (about 11 us each on the project's VM, a few
        per reconnect).
        """
        lead, self._lead = self._lead, b""
        if data or lead:
            sink.write_nowait(data, lead)
        if sink.paused:
            with anyio.fail_after(self.write_timeout):
                await sink.drain()

    async def advance(self, sink: Sink, lead: bytes = b"") -> EndReason | None:
        """Act on the subscription's state until it is live (None) or has ended.

        Writes the prelude first, catches up from the store (history pages), sends the
        restart frame, applies the slow-consumer policy after an overflow.

        ``lead`` (bytes outside the body's framing: WebSocket's ``subscribed`` frame, an
        SSE response's head) is
        written first, in one write with the first bytes of this call when they are at
        hand in the same step (the prelude, the page read with the join), else alone
        before the first wait for anything but the socket.  One syscall fewer per
        reconnect that replays something.  If this call is cancelled (the entry ended:
        unsubscribed, or the session closing) a lead not yet written is dropped, since
        nothing may follow a close frame.
        """
        self._lead = lead
        try:
            return await self._advance(sink)
        except anyio.get_cancelled_exc_class():
            self._lead = b""
            raise
        finally:
            # Also after a failure (a bug): what the client would have got before it.
            self._write_lead(sink)

    def _write_lead(self, sink: Sink) -> None:
        lead, self._lead = self._lead, b""
        if lead:
            with contextlib.suppress(anyio.BrokenResourceError):
                sink.write_nowait(b"", lead)

    async def _advance(self, sink: Sink) -> EndReason | None:
        sub = self.sub
        assert sub is not None and sub.outbox is not None
        try:
            if self.prelude:
                prelude, self.prelude = self.prelude, b""
                await self._write(sink, prelude)
                sub.outbox.wrote = True
            while True:
                state = sub.state
                if state is SubState.CATCHING_UP:
                    make_encoder = sub.fmt.encoder if sub.encoder is None else None
                    if make_encoder is not None or not sub.page_at_position():
                        # The store is asked first (Hub._catch_up writes a page read
                        # with the join without waiting): do not wait with the lead.
                        self._write_lead(sink)
                    if make_encoder is not None:
                        # Back from the live path (its encoder stayed with the hub).
                        fold = await self.folds.at(sub.feed, sub.position)
                        sub.encoder = make_encoder(sub.feed, fold)
                    await self.hub.catch_up(sub, lambda data: self._write(sink, data))
                    sub.outbox.wrote = True
                elif state is SubState.LIVE:
                    return None
                elif state is SubState.RESTARTED:
                    assert sub.restart_at is not None
                    await self._write(sink, sub.fmt.restart(sub.feed, sub.restart_at))
                    return EndReason.RESET
                elif state is SubState.OVERFLOW:
                    if self.overflows.too_many(anyio.current_time()):
                        return self._slow()
                    sub.state = SubState.CATCHING_UP
                elif state is SubState.ENDED:
                    return EndReason.FINISHED
                elif state is SubState.GONE:
                    self.error = NotFound("no such feed")
                    return EndReason.ERROR
                else:  # CLOSED: unsubscribed, or the node is draining
                    return EndReason.SHUTDOWN
        except anyio.BrokenResourceError:
            return EndReason.CLIENT
        except TimeoutError:
            return self._slow()
        except GatewayError as exc:
            # The store failed after the stream started: end it; the client resumes.
            log.warning("subscription ended by an error", code=str(exc.code), error=exc.message)
            self.error = exc
            return EndReason.ERROR

    def _slow(self) -> EndReason:
        self.metrics.slow_consumer_actions.labels(action="disconnect").inc()
        return EndReason.SLOW

    async def follow(
        self,
        sink: Sink,
        *,
        keepalive: float,
        expires_at: float,
        idle: Callable[[], object],
        lead: bytes = b"",
    ) -> EndReason:
        """Serve the subscription to its end on a transport that keeps a task for it.

        While live, waits for the hub's state changes; on ``keepalive`` seconds of
        silence calls ``idle`` (the transport's keepalive).  Ends with ``AUTH`` when the
        token expires (``expires_at``, wall clock): the client reconnects with a fresh
        token and its cursor.  ``lead`` goes first, as :meth:`advance` says.
        """
        sub = self.sub
        assert sub is not None and sub.outbox is not None
        outbox = sub.outbox
        while True:
            reason = await self.advance(sink, lead)
            lead = b""
            if reason is not None:
                return reason
            left = expires_at - time.time()
            if left <= 0:
                return EndReason.AUTH
            if not await sub.wait(min(keepalive, left)) and not outbox.wrote:
                idle()
            outbox.wrote = False
