"""``GET /v1/ws``: the ``gateway.v1`` WebSocket transport (docs/contract.md D6).

The handshake and every frame the client sends go through the ``websockets``
library's sans-I/O protocol (``ServerProtocol``), which also answers pings and
enforces the inbound message size.  Event frames for subscriptions are the shared,
pre-encoded bytes the hub writes straight into the transport; control messages
(``subscribed``, ``error``, pings, close) go through the protocol object.

One :class:`Session` per socket, many subscriptions each run by the shared
:class:`~gateway.fanout.driver.Driver`: a subscription keeps a task only while it joins or
catches up; live, the hub's state change wakes it (:meth:`_Entry.wake`).  The node's
:class:`~gateway.net.connections.Ticker` drives every socket's pings and token expiry.
Nothing a socket does affects another socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

import anyio
import structlog
from websockets.frames import Close, Frame, Opcode
from websockets.protocol import State
from websockets.server import ServerProtocol

from gateway import access
from gateway.auth import Principal
from gateway.cursor import Cursor, parse_cursor
from gateway.dialects.ai_sdk_wire import parse_chunk_id
from gateway.errors import (
    CloseCode,
    ErrorCode,
    GatewayError,
    InvalidRequest,
    NotFound,
    Unavailable,
)
from gateway.fanout.driver import Driver, EndReason
from gateway.fanout.outbox import Outbox
from gateway.fanout.policy import Overflows
from gateway.fanout.subscription import Subscription
from gateway.feed import FeedKey
from gateway.http.services import Services
from gateway.net import logcontext, ws_handshake
from gateway.net.server import Request, Responder, Stream, connection_id
from gateway.net.tasks import OwnedTasks
from gateway.wire import ws
from gateway.wire.aisdk import AI_SDK_WS
from gateway.wire.format import Format
from gateway.wire.registry import ws_format

log = structlog.get_logger("gateway.ws")
#: websockets' logger, looked up once (its protocol asks for one per socket).
_WS_LOGGER = logging.getLogger("websockets.server")

#: How long a closing socket waits for the client's close frame.
CLOSE_TIMEOUT = 2.0
#: Seconds the session waits, on its way out, for its tasks to end (each is bounded
#: by its own waits: the Redis timeout, the write timeout); then they are cancelled.
TASKS_END_WITHIN = 10.0
TRANSPORT = "ws"


def subscribe_cursor(fmt: Format, after: str | None) -> tuple[Cursor | None, int | None]:
    """The subscription's ``after``: a cursor, or for the AI SDK format a chunk id
    ``E:O:K`` too (resume after chunk K of the event at ``E:O``)."""
    if after is None:
        return None, None
    if fmt is AI_SDK_WS:
        chunk = parse_chunk_id(after)
        return chunk.cursor, chunk.chunk
    return parse_cursor(after), None


class _Entry:
    """One feed of a socket: its driver (once opened) and the task driving it, if any."""

    __slots__ = ("driver", "ended", "name", "session", "task")

    def __init__(self, session: Session, name: str) -> None:
        self.session = session
        self.name = name
        self.driver: Driver | None = None
        #: The task driving the subscription (None while it is live).  Ending the
        #: entry cancels it: a plain task cancel, not an anyio scope per task (a scope
        #: made, entered, cancelled and left was ~4% of a reconnect).
        self.task: asyncio.Task[None] | None = None
        #: Set by :meth:`end`: a cancellation the task sees is then the entry's own.
        self.ended = False

    @property
    def sub(self) -> Subscription | None:
        return None if self.driver is None else self.driver.sub

    def wake(self, sub: Subscription) -> None:
        """The hub changed a live subscription's state: start a task to act on it."""
        session = self.session
        if self.task is not None or session._tasks is None or session._closing:
            return
        if session.stream.closed:  # the connection is gone: release, do not start work
            session._forget(self)
            return
        self.task = session._tasks.start(session._drive(self))

    def end(self) -> None:
        """Stop the task (if any) and release the subscription (idempotent)."""
        self.ended = True
        # Dropped, not kept: the cancelled task keeps its CancelledError, whose
        # traceback holds the frame that holds this entry (a cycle only the GC frees).
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
        sub = self.sub
        if sub is not None:
            sub.notify = None
            sub.close()
        if self.driver is not None:
            self.driver.close()


class Session:
    """One open socket.  Create after the handshake, then ``await run()``."""

    def __init__(
        self,
        services: Services,
        *,
        principal: Principal,
        stream: Stream,
        protocol: ServerProtocol,
        remote: str = "",
    ) -> None:
        #: This connection's id in the logs, and the client's address.
        self.conn_id = connection_id()
        self.remote = remote
        self.services = services
        self.settings = services.settings
        self.metrics = services.metrics
        self.principal = principal
        self.stream = stream
        self.protocol = protocol
        self.outbox = Outbox(stream.writer(), self.settings.max_queue_bytes, services.hub.budget)
        self.entries: dict[str, _Entry] = {}
        self._overflows = Overflows()
        self._bad_messages = 0
        #: The tasks driving entries (one per entry at most), while run() runs.
        self._tasks: OwnedTasks | None = None
        self._closing = False
        # asyncio's Event, not anyio's: anyio's asks for the backend on every creation
        # (one per connection); the session only ever runs on asyncio's loop.
        self._closed = asyncio.Event()
        self._ping_payload = b""
        #: Monotonic time the outstanding ping was sent (None: none outstanding).
        self._ping_sent: float | None = None
        self._next_ping = anyio.current_time() + self.settings.ws_ping_interval
        self._close_deadline: float | None = None
        self.close_code: int | None = None

    def log(self) -> structlog.typing.FilteringBoundLogger:
        """A logger carrying this connection's context (made when needed: sockets are
        many, log lines about them few)."""
        bound: structlog.typing.FilteringBoundLogger = log.bind(
            conn_id=self.conn_id,
            transport="ws",
            tenant=self.principal.tenant,
            remote=self.remote,
        )
        return bound

    # -- bytes in ----------------------------------------------------------------

    def on_data(self, data: bytes) -> None:
        self.protocol.receive_data(data)
        self._process()

    def on_eof(self) -> None:
        self.protocol.receive_eof()
        self._process()

    def _process(self) -> None:
        for event in self.protocol.events_received():
            if not isinstance(event, Frame):
                continue
            if event.opcode is Opcode.TEXT:
                self._on_text(bytes(event.data))
            elif event.opcode is Opcode.BINARY:
                self._bad(InvalidRequest("binary frames are not part of gateway.v1"))
            elif event.opcode is Opcode.PONG:
                if self._ping_sent is not None and event.data == self._ping_payload:
                    self._ping_sent = None
                    self._next_ping = anyio.current_time() + self.settings.ws_ping_interval
            elif event.opcode is Opcode.CLOSE:
                self._end_subscriptions()
        self._flush()
        if self.protocol.state is State.CLOSED or self.protocol.close_expected():
            self._finish()

    def _flush(self) -> None:
        data = self.protocol.data_to_send()
        if data and not self.stream.closed:
            with contextlib.suppress(anyio.BrokenResourceError):
                self.stream.write_nowait(b"".join(data))
            if self.stream.buffered() > self.settings.max_queue_bytes:
                # The client keeps asking (pings, subscribes) but does not read the
                # answers: it may not grow our memory past its bound.
                self.log().info("client does not read its replies: closing")
                self.close_code = CloseCode.TOO_SLOW
                self._end_subscriptions()
                self.stream.abort()
                self._finish()

    def _send(self, payload: bytes) -> None:
        """A control message, through the protocol (never blocks; small)."""
        if self.protocol.state is not State.OPEN:
            return
        self.protocol.send_text(payload)
        self._flush()

    def _bad(self, exc: GatewayError, feed: str | None = None) -> None:
        self._bad_messages += 1
        self._send(ws.error(str(exc.code), exc.message, feed))
        if self._bad_messages > self.settings.ws_max_bad_messages:
            self.close(CloseCode.POLICY_VIOLATION, "too many invalid messages")

    def _on_text(self, text: bytes) -> None:
        if self._closing:
            return
        try:
            message = ws.decode_client(text)
        except ws.MessageError as exc:
            self._bad(exc, exc.feed)
            return
        if isinstance(message, ws.Subscribe):
            self._subscribe(message)
        elif isinstance(message, ws.Unsubscribe):
            self._unsubscribe(message.feed)
        else:
            self._refresh(message.token)

    # -- subscriptions -------------------------------------------------------------

    def _subscribe(self, message: ws.Subscribe) -> None:
        name = message.feed
        try:
            key = access.feed_named(self.principal, name)
            fmt = ws_format(key.kind, message.format)
            cursor, piece = subscribe_cursor(fmt, message.after)
        except GatewayError as exc:
            # An error about a feed ends that feed's subscription, and only that one.
            self._unsubscribe(name)
            if isinstance(exc, InvalidRequest):
                self._bad(exc, name)
            else:
                self._send(ws.error(str(exc.code), exc.message, name))
            return
        limit = self.settings.ws_max_subscriptions
        if name not in self.entries and len(self.entries) >= limit:
            self._send(
                ws.error(
                    str(ErrorCode.RATE_LIMITED),
                    f"at most {limit} subscriptions per socket",
                    name,
                )
            )
            return
        # Subscribing again replaces the subscription (e.g. after epoch_restarted).
        self._unsubscribe(name)
        entry = self.entries[name] = _Entry(self, name)
        assert self._tasks is not None
        entry.task = self._tasks.start(self._join(entry, key, cursor, fmt, piece))

    def _unsubscribe(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is not None:
            entry.end()

    @property
    def subs(self) -> dict[str, Subscription]:
        """The open subscriptions by feed name."""
        return {n: e.sub for n, e in self.entries.items() if e.sub is not None}

    async def _join(
        self, entry: _Entry, key: FeedKey, cursor: Cursor | None, fmt: Format, piece: int | None
    ) -> None:
        """Open a subscription (with its prelude), then drive it until it is live.

        Runs as the entry's task: :meth:`_Entry.end` cancels it.
        """
        name = entry.name
        driver = self.services.driver(self._overflows)
        try:
            sub = await driver.open(key, cursor, fmt, after_piece=piece)
        except GatewayError as exc:
            if self.entries.get(name) is entry:  # not replaced or unsubscribed meanwhile
                del self.entries[name]
                message = access.NO_SUCH_FEED if isinstance(exc, NotFound) else exc.message
                self._send(ws.error(str(exc.code), message, name))
            return
        if self.entries.get(name) is not entry:
            driver.close()
            return
        entry.driver = driver
        driver.attach(self.outbox)
        # `subscribed` goes out with the first bytes the driver writes (the prelude, the
        # join's page): one syscall where it was two.  Framed here, not by the protocol,
        # which keeps no state for the frames the server sends.
        opened = self.protocol.state is State.OPEN
        lead = ws.frame(ws.subscribed(name, sub.head)) if opened else b""
        await self._drive(entry, lead)

    async def _drive(self, entry: _Entry, lead: bytes = b"") -> None:
        """Let the driver act until the subscription is live again or has ended.

        Runs as the entry's task.  A live subscription keeps no task: the hub's state
        change calls :meth:`_Entry.wake`, which starts this again.
        """
        driver = entry.driver
        assert driver is not None and driver.sub is not None
        try:
            reason = await driver.advance(self.stream, lead)
        except BaseException:
            if entry.ended:
                raise  # unsubscribed or closing: whoever ended it cleaned up
            self._forget(entry)
            raise
        if reason is None:
            driver.sub.notify = entry.wake
            entry.task = None
            return  # idle until the hub changes its state
        if reason is EndReason.SLOW:
            self.close(CloseCode.TOO_SLOW, "too slow: resume from your last cursors")
            return
        self._forget(entry)
        if reason is EndReason.ERROR and driver.error is not None:
            # The store failed mid-way (unavailable): end this subscription only; the
            # client resubscribes from its last cursor.
            self._send(ws.error(str(driver.error.code), driver.error.message, entry.name))
        elif reason is EndReason.CLIENT:
            self._finish()

    def _forget(self, entry: _Entry) -> None:
        if self.entries.get(entry.name) is entry:
            del self.entries[entry.name]
        entry.end()

    def _end_subscriptions(self) -> None:
        for name in list(self.entries):
            self._unsubscribe(name)

    # -- credentials ---------------------------------------------------------------

    def _refresh(self, token: str) -> None:
        try:
            fresh = self.services.auth.verify(token)
        except GatewayError as exc:
            self._send(ws.error(str(exc.code), exc.message))
            return
        old = self.principal
        if (fresh.issuer, fresh.tenant, fresh.subject) != (old.issuer, old.tenant, old.subject):
            self._send(
                ws.error(
                    str(ErrorCode.UNAUTHENTICATED),
                    "a refreshed token must have the same iss, tenant and sub",
                )
            )
            return
        try:
            fresh.require_subscribe()
        except GatewayError as exc:
            self._send(ws.error(str(exc.code), exc.message))
            return
        self.principal = fresh
        # The fresh token may expire sooner than the one it replaces.
        now = anyio.current_time()
        self.services.connections.schedule(self, self.next_due(now, time.time()))
        for name in list(self.entries):
            try:
                access.feed_named(fresh, name)
            except GatewayError:
                self._unsubscribe(name)
                self._send(ws.error(str(ErrorCode.NOT_FOUND), "no such feed", name))

    def tick(self, now: float, wall: float) -> float:
        """Timers, driven by the node's one :class:`Ticker` task: token expiry, pings
        and their timeout, and the close handshake's timeout.  Returns when the next
        one is due (monotonic)."""
        if self._close_deadline is not None:
            if now >= self._close_deadline:
                self._finish()
                return now + CLOSE_TIMEOUT
            return self._close_deadline
        if wall >= self.principal.expires_at:
            self.close(CloseCode.UNAUTHENTICATED, "token expired")
            return now + CLOSE_TIMEOUT
        if self._ping_sent is not None:
            if now - self._ping_sent > self.settings.ws_ping_timeout:
                self.log().info("ping timeout: closing", timeout=self.settings.ws_ping_timeout)
                # A peer that does not answer may not read either: do not wait on it.
                self.close_code = CloseCode.KEEPALIVE_TIMEOUT
                self._end_subscriptions()
                self.stream.abort()
                self._finish()
                return now + CLOSE_TIMEOUT
        elif now >= self._next_ping and self.protocol.state is State.OPEN:
            self._ping_payload = os.urandom(4)
            self._ping_sent = now
            self.protocol.send_ping(self._ping_payload)
            self._flush()
        return self.next_due(now, wall)

    def next_due(self, now: float, wall: float) -> float:
        """When the ping (or its timeout) or the token's expiry is next due."""
        if self._ping_sent is not None:
            ping = self._ping_sent + self.settings.ws_ping_timeout
        else:
            ping = self._next_ping
        return min(ping, now + max(0.0, self.principal.expires_at - wall))

    # -- closing -------------------------------------------------------------------

    def close(self, code: int, reason: str) -> None:
        """Close with ``code``: subscriptions end, the close frame goes out, then the
        transport closes when the client answers or after ``CLOSE_TIMEOUT``."""
        if self._closing:
            return
        self._closing = True
        self.close_code = code
        self._end_subscriptions()
        if self.protocol.state is State.OPEN:
            self.protocol.send_close(code, reason)
            self._flush()
        # The client's close frame ends it sooner (see _process).
        self._close_deadline = anyio.current_time() + CLOSE_TIMEOUT
        self.services.connections.schedule(self, self._close_deadline)

    def _finish(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self.stream.end()

    async def run(self, trailing: bytes) -> None:
        """Serve the socket until it closes (or the connection is lost).

        Entries are driven by tasks of the session's own (:class:`OwnedTasks`: a task
        per ``subscribe`` through anyio's task group was ~4% of a reconnect).  Ending an
        entry cancels its task; on the way out every entry is ended and the tasks are
        waited for.  A task that fails ends the session, and its exception is raised
        here once the others have ended.
        """
        tasks = self._tasks = OwnedTasks(on_failure=lambda _: self._finish())
        # What follows is a ``finally`` whose waits are outside the exception handler
        # (README, "The compiled hot path"): the exception that ended the wait, if any,
        # is raised again once the session has been cleaned up.
        ended: BaseException | None = None
        try:
            if trailing:
                self.on_data(trailing)
            await self._closed.wait()
        except BaseException as exc:
            ended = exc
        # Also when the connection was lost (a reset cancels us): live subscriptions
        # keep no task, so nothing else would release them.  Closing first: no entry
        # starts a task from here on.
        self._closing = True
        self._end_subscriptions()
        try:
            if not await tasks.wait(TASKS_END_WITHIN):
                tasks.cancel()
                await tasks.wait(TASKS_END_WITHIN)
        finally:
            # Also when cancelled during the wait: the tasks' on_failure holds this
            # session (a cycle only the GC would free).
            self._tasks = None
        self.outbox.release()
        if ended is not None:
            try:
                raise ended
            finally:
                ended = None  # no cycle through this frame's traceback
        if tasks.failure is not None:
            raise tasks.failure

    def final_code(self) -> int | None:
        """The close code the server chose, or None when the client closed first."""
        if self.close_code is None and isinstance(self.protocol.close_sent, Close):
            # The protocol closed by itself (a message too big, a protocol error) or
            # answered the client's close.
            sent = self.protocol.close_sent.code
            received = self.protocol.close_rcvd
            if not (isinstance(received, Close) and received.code == sent):
                return sent
        return self.close_code

    def shutdown(self) -> None:
        """Drain: close with 1012 so the client reconnects elsewhere and resumes."""
        self.close(CloseCode.SERVICE_RESTART, "service restart: reconnect and resume")


async def upgrade(
    services: Services, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET /v1/ws``: check the handshake, Origin, subprotocol and the one credential
    (:func:`ws_handshake.negotiate`, before any token is verified), verify the token,
    and hand over to a Session.  Every refusal is an HTTP error answer; the parser
    closes the connection after it (an Upgrade that is not switched ends it)."""
    settings, metrics = services.settings, services.metrics
    if services.hub.draining:
        raise Unavailable("this node is draining: reconnect to another")
    origins = [o.strip() for o in settings.ws_origins.split(",") if o.strip()]
    handshake = ws_handshake.negotiate(request.headers, request.http11, origins)
    principal = services.auth.verify(handshake.token)
    principal.require_subscribe()
    accept = handshake.accept
    # The frames from here on: websockets' protocol, already open (the handshake was
    # ours), with one logger for every socket instead of a lookup per socket.
    protocol = ServerProtocol(
        state=State.OPEN, max_size=settings.ws_max_message_bytes, logger=_WS_LOGGER
    )
    # Refused (429) before the upgrade; the lease is given back on every exit path
    # (client gone, errors, cancellation).
    with services.limits.acquire(principal.tenant):
        session: Session | None = None
        pending: list[bytes] = []

        def on_data(data: bytes) -> None:
            if session is None:
                pending.append(data)
            else:
                session.on_data(data)

        def on_eof() -> None:
            if session is not None:
                session.on_eof()

        remote = responder.remote
        trailing, stream = responder.take_over(on_data, on_eof)
        stream.write_nowait(ws_handshake.response(accept, ws.SUBPROTOCOL))
        # Idle sockets are many: keep nothing of the handshake alive.
        request.headers.clear()
        session = Session(
            services, principal=principal, stream=stream, protocol=protocol, remote=remote
        )
        services.connections.add_timed(session, session.next_due(anyio.current_time(), time.time()))
        metrics.connections.labels(TRANSPORT).inc()
        metrics.connects.labels(TRANSPORT).inc()
        # The session's own lines carry its context via Session.log(); this binds it
        # for whatever else logs in this task.
        with logcontext.bound(
            conn_id=session.conn_id, transport=TRANSPORT, tenant=principal.tenant, remote=remote
        ):
            log.info("connection opened")
            try:
                await session.run(trailing + b"".join(pending))
            finally:
                # Also when the transport's loss cancelled us: the reason is what
                # the server decided before closing, if anything.
                services.connections.discard(session)
                metrics.connections.labels(TRANSPORT).dec()
                code = session.final_code()
                # A node stopping without a drain closes its sockets itself: its end,
                # not the client's.
                reason = "shutdown" if code is None and stream.server_stopping else _reason(code)
                metrics.disconnects.labels(TRANSPORT, reason).inc()
                log.info("connection closed", reason=reason, code=code)


def _reason(code: int | None) -> str:
    reasons: dict[int | None, str] = {
        None: "client",
        CloseCode.TOO_SLOW: "slow",
        CloseCode.UNAUTHENTICATED: "auth",
        CloseCode.SERVICE_RESTART: "shutdown",
        CloseCode.GOING_AWAY: "shutdown",
        CloseCode.POLICY_VIOLATION: "error",
        CloseCode.MESSAGE_TOO_BIG: "error",
        # The server gave up on a peer that stopped answering pings: the client is gone.
        # ("reset" is for streams ended by a feed reset; a socket outlives those.)
        CloseCode.KEEPALIVE_TIMEOUT: "client",
    }
    return reasons.get(code, "error")


__all__ = ["Session", "upgrade"]
