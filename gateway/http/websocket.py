"""``GET /v1/ws``: the ``gateway.v1`` WebSocket transport (docs/contract.md D6), the
thin I/O adapter of the sans-I/O session of :mod:`gateway.session`.

The session decides (every frame the client sends goes through it, and through the
``websockets`` library's sans-I/O protocol inside it, which also answers pings and
enforces the inbound message size); this adapter writes what it says to write and does
what it says to do: open and end subscriptions, reschedule its timers, end the
connection.  Event frames for subscriptions are the shared, pre-encoded bytes the hub
writes straight into the connection.

One :class:`Socket` per connection, many subscriptions each run by the shared
:class:`~gateway.fanout.driver.Driver`: a subscription keeps a task only while it joins or
catches up; live, the hub's state change wakes it (:meth:`_Entry.wake`).  The node's
:class:`~gateway.net.connections.Ticker` drives every socket's pings and token expiry.
Nothing a socket does affects another socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

import anyio
import structlog

from gateway.auth import Principal, bearer_token
from gateway.errors import CloseCode, GatewayError, Unauthenticated, Unavailable
from gateway.fanout.driver import Driver, EndReason
from gateway.fanout.outbox import Outbox
from gateway.fanout.policy import Overflows
from gateway.fanout.subscription import Subscription
from gateway.http.route_context import RouteContext
from gateway.net import logcontext, ws_handshake
from gateway.net.server import Request, Responder, Stream, connection_id
from gateway.net.tasks import OwnedTasks
from gateway.session import Abort, Action, Finish, Join, Leave, Reschedule, Session
from gateway.wire import messages

log = structlog.get_logger("gateway.ws")

#: Seconds the socket waits, on its way out, for its tasks to end (each is bounded
#: by its own waits: the Redis timeout, the write timeout); then they are cancelled.
TASKS_END_WITHIN = 10.0
TRANSPORT = "ws"


def bearer_tokens(offered: Sequence[str]) -> list[str]:
    """The tokens of the offer's ``bearer.<token>`` elements, in order.

    An element that starts with ``bearer.`` in another case (``Bearer.<token>``) is
    refused (Unauthenticated), not passed over: it is a credential in all but spelling,
    and one the gateway ignored could be the one a proxy checked.
    """
    prefix = messages.BEARER_PREFIX
    tokens: list[str] = []
    for element in offered:
        if element.startswith(prefix):
            tokens.append(element[len(prefix) :])
        elif element[: len(prefix)].lower() == prefix:
            raise Unauthenticated("a bearer subprotocol is spelled 'bearer.<token>'")
    return tokens


def credential(authorization: str | None, offered: Sequence[str]) -> str:
    """The one bearer token of an upgrade request: the ``Authorization: Bearer`` header
    and every ``bearer.<token>`` element must be one and the same token
    (:func:`gateway.auth.bearer_token`), else Unauthenticated: the gateway never picks
    one of two credentials."""
    return bearer_token(authorization, bearer_tokens(offered))


#: What the route speaks in the opening handshake (:func:`ws_handshake.negotiate`).
TERMS = ws_handshake.Terms((messages.SUBPROTOCOL,), credential)


class _Entry:
    """One feed of a socket: its driver (once opened) and the task driving it, if any."""

    __slots__ = ("driver", "ended", "name", "ref", "socket", "task")

    def __init__(self, socket: Socket, name: str, ref: int) -> None:
        self.socket = socket
        self.name = name
        #: The session's name for this subscription (:class:`gateway.session.Join`).
        self.ref = ref
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
        socket = self.socket
        if self.task is not None or socket._tasks is None or socket.session.closing:
            return
        if socket.stream.closed:  # the connection is gone: release, do not start work
            socket._forget(self)
            return
        self.task = socket._tasks.start(socket._drive(self))

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


class Socket:
    """One open socket.  Create after the handshake, then ``await run()``."""

    def __init__(
        self,
        context: RouteContext,
        *,
        principal: Principal,
        stream: Stream,
        remote: str = "",
    ) -> None:
        #: This connection's id in the logs, and the client's address.
        self.conn_id = connection_id()
        self.remote = remote
        self.context = context
        self.settings = context.settings
        self.stream = stream
        self.session = Session(
            principal, context.settings, context.verify, clock=anyio.current_time
        )
        self.outbox = Outbox(stream.writer(), self.settings.max_queue_bytes, context.hub.budget)
        self.entries: dict[str, _Entry] = {}
        self._overflows = Overflows()
        #: The tasks driving entries (one per entry at most), while run() runs.
        self._tasks: OwnedTasks | None = None
        # asyncio's Event, not anyio's: anyio's asks for the backend on every creation
        # (one per connection); the socket only ever runs on asyncio's loop.
        self._closed = asyncio.Event()

    def log(self) -> structlog.typing.FilteringBoundLogger:
        """A logger carrying this connection's context (made when needed: sockets are
        many, log lines about them few)."""
        bound: structlog.typing.FilteringBoundLogger = log.bind(
            conn_id=self.conn_id,
            transport="ws",
            tenant=self.session.principal.tenant,
            remote=self.remote,
        )
        return bound

    # -- the session's input and output ------------------------------------------------

    def on_data(self, data: bytes) -> None:
        self.session.receive_data(data)
        self._pump()

    def on_eof(self) -> None:
        self.session.receive_eof()
        self._pump()

    def _pump(self) -> None:
        """Do what the session asks, then write what it has to send."""
        session = self.session
        actions = session.actions()
        while actions:
            for action in actions:
                self._act(action)
            actions = session.actions()
        self._flush()

    def _act(self, action: Action) -> None:
        if isinstance(action, Join):
            entry = self.entries[action.feed] = _Entry(self, action.feed, action.ref)
            assert self._tasks is not None
            entry.task = self._tasks.start(self._join(entry, action))
        elif isinstance(action, Leave):
            left = self.entries.pop(action.feed, None)
            if left is not None:
                left.end()
        elif isinstance(action, Reschedule):
            now = anyio.current_time()
            self.context.connections.schedule(self, self.session.next_due(now, time.time()))
        elif isinstance(action, Abort):
            self.log().info(f"{action.why}: closing", **action.detail)
            self.stream.abort()
        else:
            assert isinstance(action, Finish)
            self._flush()
            self._finish()

    def _flush(self) -> None:
        data = self.session.data_to_send()
        if data and not self.stream.closed:
            with contextlib.suppress(anyio.BrokenResourceError):
                self.stream.write_nowait(data)
            if self.stream.buffered() > self.settings.max_queue_bytes:
                # The client keeps asking (pings, subscribes) but does not read the
                # answers: it may not grow our memory past its bound.
                self.session.abandon(CloseCode.TOO_SLOW, "client does not read its replies")
                self._pump()

    # -- subscriptions -----------------------------------------------------------------

    @property
    def subs(self) -> dict[str, Subscription]:
        """The open subscriptions by feed name."""
        return {n: e.sub for n, e in self.entries.items() if e.sub is not None}

    async def _join(self, entry: _Entry, join: Join) -> None:
        """Open a subscription (with its prelude), then drive it until it is live.

        Runs as the entry's task: :meth:`_Entry.end` cancels it.
        """
        name = entry.name
        driver = self.context.driver(self._overflows)
        try:
            sub = await driver.open(join.key, join.cursor, join.fmt, after_piece=join.piece)
        except GatewayError as exc:
            if self.entries.get(name) is entry:  # not replaced or unsubscribed meanwhile
                del self.entries[name]
                self.session.join_failed(name, entry.ref, exc)
                self._pump()
            return
        # `subscribed` goes out with the first bytes the driver writes (the prelude, the
        # join's page): one syscall where it was two.
        lead = self.session.subscribed(name, entry.ref, sub.head)
        if self.entries.get(name) is not entry or lead is None:
            driver.close()
            return
        entry.driver = driver
        driver.attach(self.outbox)
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
        # The store failed mid-way (unavailable): this subscription ends with the
        # error; the client resubscribes from its last cursor.
        error = driver.error if reason is EndReason.ERROR else None
        self._forget(entry, error)
        if reason is EndReason.CLIENT:
            self._finish()

    def _forget(self, entry: _Entry, error: GatewayError | None = None) -> None:
        """The entry ended by itself: release it and tell the session."""
        if self.entries.get(entry.name) is entry:
            del self.entries[entry.name]
            self.session.ended(entry.name, entry.ref, error)
            self._pump()
        entry.end()

    # -- timers and closing ------------------------------------------------------------

    def tick(self, now: float, wall: float) -> float:
        """Timers, driven by the node's one :class:`Ticker` task (the session's:
        token expiry, pings and their timeout, the close handshake's timeout).
        Returns when the next one is due (monotonic)."""
        due = self.session.tick(now, wall)
        self._pump()
        return due

    def next_due(self, now: float, wall: float) -> float:
        return self.session.next_due(now, wall)

    def close(self, code: int, reason: str) -> None:
        """Close with ``code``: subscriptions end, the close frame goes out, then the
        connection closes when the client answers or after the session's timeout."""
        self.session.close(code, reason)
        self._pump()

    def shutdown(self) -> None:
        """Drain: close with 1012 so the client reconnects elsewhere and resumes."""
        self.session.shutdown()
        self._pump()

    def _finish(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self.stream.end()

    async def run(self, trailing: bytes) -> None:
        """Serve the socket until it closes (or the connection is lost).

        Entries are driven by tasks of the socket's own (:class:`OwnedTasks`: a task
        per ``subscribe`` through anyio's task group was ~4% of a reconnect).  Ending an
        entry cancels its task; on the way out every entry is ended and the tasks are
        waited for.  A task that fails ends the socket, and its exception is raised
        here once the others have ended.
        """
        tasks = self._tasks = OwnedTasks(on_failure=lambda _: self._finish())
        # What ends the wait (the connection's loss cancels us) is kept and raised after
        # the tasks ended, not waited on inside a handler: this module is compiled, and
        # a compiled coroutine must not wait there (CONTRIBUTING.md).
        failed: BaseException | None = None
        try:
            if trailing:
                self.on_data(trailing)
            await self._closed.wait()
        except BaseException as exc:
            failed = exc
        # Also when the connection was lost: live subscriptions keep no task, so nothing
        # else would release them.  Stopped first: no entry starts a task from here on.
        self.session.stop()
        self._pump()
        interrupted: BaseException | None = None
        try:
            if not await tasks.wait(TASKS_END_WITHIN):
                tasks.cancel()
                await tasks.wait(TASKS_END_WITHIN)
        except BaseException as exc:
            interrupted = exc
        # Also when cancelled during the wait: the tasks' on_failure holds this socket
        # (a cycle only the GC would free).
        self._tasks = None
        # Raised with the locals that hold them cleared: an exception kept in a local of
        # the frame its traceback holds is a cycle only the GC would free.
        if interrupted is not None:
            try:
                raise interrupted
            finally:
                interrupted = failed = None
        self.outbox.release()
        if failed is not None:
            try:
                raise failed
            finally:
                failed = None
        if tasks.failure is not None:
            raise tasks.failure

    def final_code(self) -> int | None:
        """The close code the server chose, or None when the client closed first."""
        return self.session.final_code()


async def upgrade(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET /v1/ws``: check the handshake, Origin, subprotocol and the one credential
    (:func:`ws_handshake.negotiate`, before any token is verified), verify the token,
    and hand over to a Socket.  Every refusal is an HTTP error answer; the parser
    closes the connection after it (an Upgrade that is not switched ends it)."""
    settings, metrics = context.settings, context.metrics
    if context.hub.draining:
        raise Unavailable("this node is draining: reconnect to another")
    origins = [o.strip() for o in settings.ws_origins.split(",") if o.strip()]
    handshake = ws_handshake.negotiate(request.headers, request.http11, origins, TERMS)
    principal = context.auth.verify(handshake.token)
    principal.require_subscribe()
    accept, subprotocol = handshake.accept, handshake.subprotocol
    # Refused (429) before the upgrade; the lease is given back on every exit path
    # (client gone, errors, cancellation).
    with context.limits.acquire(principal.tenant):
        socket: Socket | None = None
        pending: list[bytes] = []

        def on_data(data: bytes) -> None:
            if socket is None:
                pending.append(data)
            else:
                socket.on_data(data)

        def on_eof() -> None:
            if socket is not None:
                socket.on_eof()

        remote = responder.remote
        trailing, stream = responder.take_over(on_data, on_eof)
        stream.write_nowait(ws_handshake.response(accept, subprotocol))
        # Idle sockets are many: keep nothing of the handshake alive.
        request.headers.clear()
        socket = Socket(context, principal=principal, stream=stream, remote=remote)
        context.connections.add_timed(socket, socket.next_due(anyio.current_time(), time.time()))
        metrics.connections.labels(TRANSPORT).inc()
        metrics.connects.labels(TRANSPORT).inc()
        # The socket's own lines carry its context via Socket.log(); this binds it
        # for whatever else logs in this task.
        with logcontext.bound(
            conn_id=socket.conn_id, transport=TRANSPORT, tenant=principal.tenant, remote=remote
        ):
            log.info("connection opened")
            try:
                await socket.run(trailing + b"".join(pending))
            finally:
                # Also when the connection's loss cancelled us: the reason is what
                # the server decided before closing, if anything.
                context.connections.discard(socket)
                metrics.connections.labels(TRANSPORT).dec()
                code = socket.final_code()
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


__all__ = ["Socket", "upgrade"]
