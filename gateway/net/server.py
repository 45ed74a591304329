"""The HTTP/1.1 listener: a thin asyncio adapter around the sans-I/O parser of
:mod:`gateway.net.h1`.

One :class:`HttpConnection` per TCP connection parses requests (bounded header and
body sizes), runs each request's handler as a task the server owns (and ends
in :meth:`HttpServer.aclose`), and gives the handler a :class:`Responder` for a plain response or a
long-lived stream.  Streams are written straight to the asyncio transport with HTTP/1.1
chunked framing; the handler awaits :meth:`Stream.write`, which waits while the
kernel buffer is full, so a slow client holds back only its own handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import anyio
import structlog

from gateway.errors import (
    GatewayError,
    InvalidRequest,
    TooLarge,
    UnsupportedMediaType,
    error_body,
)
from gateway.loopmetrics import LoopCounter
from gateway.net.h1 import HttpError, RequestParser, response_head
from gateway.net.tasks import OwnedTasks

log = structlog.get_logger("gateway.http")

#: Largest request head (request line and headers) accepted.
MAX_HEAD_BYTES = 16 * 1024
#: After an early error answer (413, malformed request) the rest of the request is
#: read and dropped, up to this many bytes or seconds, then the connection closes.
DISCARD_LIMIT = 8 * 1024 * 1024
DISCARD_SECONDS = 5.0
#: A connection must send a complete request head within this many seconds of opening
#: (or of its previous response): slow or idle clients do not hold connections forever.
REQUEST_HEAD_SECONDS = 30.0
#: ... and its body within this many seconds of its head (1 MiB at 256 kbit/s takes 33 s).
REQUEST_BODY_SECONDS = 120.0


class Request:
    __slots__ = ("body", "headers", "http11", "method", "path", "query", "raw_target", "route")

    def __init__(self, method: str, target: bytes, headers: dict[str, str], http11: bool) -> None:
        self.method = method
        self.raw_target = target
        if target.startswith(b"/"):  # origin form, nearly always: no need for urlsplit
            path, _, query = target.decode("latin-1").partition("?")
            query, _, _ = query.partition("#")
        else:
            parts = urlsplit(target.decode("latin-1"))
            path, query = parts.path, parts.query
        self.path = path
        self.query = parse_qs(query, keep_blank_values=True) if query else {}
        self.headers = headers
        self.http11 = http11
        self.body = b""
        #: The name of the route that matched (set by the router; metrics label it).
        self.route = "other"

    def query_one(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    def resume_from(self, query: str) -> str | None:
        """Where a stream resumes: the ``Last-Event-ID`` header, which wins over the
        ``query`` parameter when both are sent (seed rule 17, D2, D7b)."""
        raw = self.headers.get("last-event-id")
        return self.query_one(query) if raw is None else raw

    def require_json(self) -> None:
        """Raise UnsupportedMediaType unless the body is declared application/json."""
        ctype = self.headers.get("content-type", "")
        if ctype.split(";", 1)[0].strip().lower() != "application/json":
            raise UnsupportedMediaType("content-type must be application/json")


def connection_id() -> str:
    """A new id for one client connection (SSE stream or WebSocket) in the logs."""
    return secrets.token_hex(6)


def _address(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(peer) if peer else ""


Handler = Callable[[Request, "Responder"], Awaitable[None]]
RequestTask = Callable[[Request], Coroutine[Any, Any, None]]


def body_writer(asyncio_transport: asyncio.Transport, chunked: bool) -> Callable[[bytes], None]:
    """A write to ``asyncio_transport`` in the body's framing (HTTP/1.1 chunks or raw bytes).

    The one place chunks are framed: streams and the fan-out's outboxes both use it.
    Writing nothing writes nothing, in either framing: a chunk of size zero is the end of
    a chunked body (RFC 9112 7.1), so the framer never makes one, and a body ends only
    by :meth:`Stream.end`, which writes that last chunk itself.  (A raw write of nothing
    is nothing already: asyncio's and uvloop's transports drop it.)  The check is one
    per write, and a write carries a whole batch of frames.
    """
    if not chunked:
        return asyncio_transport.write

    def write_chunk(data: bytes) -> None:
        if data:
            asyncio_transport.writelines(_chunk(data))

    return write_chunk


def _chunk(data: bytes) -> tuple[bytes, bytes, bytes]:
    """``data`` as one HTTP/1.1 chunk.  Only for ``data`` that is not empty: an empty
    chunk is the body's end (see :func:`body_writer`)."""
    return b"%x\r\n" % len(data), data, b"\r\n"


class SocketWriter:
    """The fan-out's writer port (``gateway.fanout.outbox.Writer``) on an asyncio
    transport, in a body's framing.

    ``write`` is the transport's own bound method (or the framer), ``state`` the
    transport itself: the fan-out's write, closing check and buffer count are one call
    each, and the outbox that keeps them binds no method per connection.
    """

    __slots__ = ("state", "write")

    def __init__(self, asyncio_transport: asyncio.Transport, chunked: bool) -> None:
        self.write: Callable[[bytes], None] = body_writer(asyncio_transport, chunked)
        self.state: asyncio.Transport = asyncio_transport


class Stream:
    """A response body of unknown length (SSE).  Write, then :meth:`end`."""

    def __init__(self, conn: HttpConnection, chunked: bool, head: bytes = b"") -> None:
        self._conn = conn
        self._chunked = chunked
        #: The response head, when the caller chose to write it with its first bytes
        #: (:meth:`take_head`); written by :meth:`end` if nobody took it.
        self._head = head

    def take_head(self) -> bytes:
        """The response head not yet written (``Responder.stream(hold_head=True)``):
        the caller writes it, as the ``lead`` of its first :meth:`write_nowait`, before
        anything else goes to this connection."""
        head, self._head = self._head, b""
        return head

    async def write(self, data: bytes) -> None:
        """Write and wait until the asyncio transport accepts more (flow control); nothing to
        write returns at once."""
        if not data:
            return
        self.write_nowait(data)
        await self._conn.drain()

    @property
    def paused(self) -> bool:
        """The asyncio transport holds more than its high-water mark: :meth:`drain` waits."""
        return self._conn.paused

    async def drain(self) -> None:
        """Wait until the asyncio transport accepts more (BrokenResourceError once lost)."""
        await self._conn.drain()

    def write_nowait(self, data: bytes, lead: bytes = b"") -> None:
        """Write ``data`` in the body's framing, after ``lead`` (bytes outside it: a
        response head, a frame already framed), in one write.  Empty ``data`` writes
        only ``lead``: it never ends the body (that is :meth:`end`'s)."""
        asyncio_transport = self._conn.asyncio_transport
        if asyncio_transport is None or asyncio_transport.is_closing():
            raise anyio.BrokenResourceError
        if not lead:
            body_writer(asyncio_transport, self._chunked)(data)
        elif not data:
            asyncio_transport.write(lead)
        elif self._chunked:
            asyncio_transport.writelines((lead, *_chunk(data)))
        else:
            asyncio_transport.write(lead + data)

    def writer(self) -> SocketWriter:
        """The fan-out's writer of this body's framing (``gateway.fanout.outbox.Writer``),
        for its hot path: no check that the connection is open; an empty write still
        writes nothing."""
        asyncio_transport = self._conn.asyncio_transport
        if asyncio_transport is None:
            raise anyio.BrokenResourceError
        return SocketWriter(asyncio_transport, self._chunked)

    def buffered(self) -> int:
        """Bytes written but not yet taken by the kernel."""
        asyncio_transport = self._conn.asyncio_transport
        return 0 if asyncio_transport is None else asyncio_transport.get_write_buffer_size()

    def abort(self) -> None:
        """Drop the connection at once (a dead or hostile peer)."""
        asyncio_transport = self._conn.asyncio_transport
        if asyncio_transport is not None:
            asyncio_transport.abort()

    def end(self) -> None:
        """End the body (a chunked one with its last, empty chunk) and close: the only
        way a stream's body ends."""
        conn = self._conn
        if conn.asyncio_transport is not None and not conn.asyncio_transport.is_closing():
            head, self._head = self._head, b""
            if self._chunked:
                conn.asyncio_transport.write(head + b"0\r\n\r\n")
            elif head:
                conn.asyncio_transport.write(head)
            conn.asyncio_transport.close()

    @property
    def closed(self) -> bool:
        return self._conn.asyncio_transport is None or self._conn.asyncio_transport.is_closing()

    @property
    def server_stopping(self) -> bool:
        """The server is closing every connection (:meth:`HttpServer.aclose`): a stream
        lost now was ended by the server, not left by its client."""
        return self._conn.server.stopping


class Responder:
    """How a handler answers: once with :meth:`send`, or with :meth:`stream`."""

    def __init__(self, conn: HttpConnection, request: Request) -> None:
        self._conn = conn
        self._request = request
        self.started = False
        self.status = 0

    def send(
        self,
        status: int,
        body: bytes,
        content_type: bytes = b"application/json",
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        if self.started:
            raise RuntimeError("response already started")
        self.started = True
        self.status = status
        if status == 204:  # no content: no body, no content headers
            all_headers = []
        else:
            all_headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]
        all_headers += headers or []
        # A HEAD answer declares the GET's length but carries no body (RFC 9110 9.3.2).
        self._conn.send_simple(status, all_headers, b"" if self._request.method == "HEAD" else body)

    def error(self, exc: GatewayError) -> None:
        self.send(exc.status, exc.body(), headers=exc.headers())

    @contextlib.contextmanager
    def cancelled_on_loss(self) -> Iterator[None]:
        """Run what is inside in a scope the connection's loss cancels: a handler that
        streams (:meth:`stream`) or takes the connection over (:meth:`take_over`), whose
        waits last as long as the client stays."""
        conn = self._conn
        with anyio.CancelScope() as scope:
            conn._scope = scope
            if conn.asyncio_transport is None:
                scope.cancel()  # already gone
            try:
                yield
            finally:
                conn._scope = None

    def _require_scope(self) -> None:
        if self._conn._scope is None:
            raise RuntimeError("a stream needs its handler inside cancelled_on_loss()")

    @property
    def remote(self) -> str:
        """The client's address (``host:port``; "" once the connection is gone)."""
        asyncio_transport = self._conn.asyncio_transport
        return (
            ""
            if asyncio_transport is None
            else _address(asyncio_transport.get_extra_info("peername"))
        )

    def take_over(
        self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]
    ) -> tuple[bytes, Stream]:
        """Switch protocols: see :meth:`HttpConnection.take_over`.  Nothing sent yet."""
        if self.started:
            raise RuntimeError("response already started")
        self._require_scope()
        self.started = True
        self.status = 101
        return self._conn.take_over(on_data, on_eof)

    def stream(
        self, status: int, headers: list[tuple[bytes, bytes]], *, hold_head: bool = False
    ) -> Stream:
        """Start a streamed answer.  With ``hold_head`` the head is not written yet: the
        caller takes it (:meth:`Stream.take_head`) to send with the body's first bytes,
        one write where there were two."""
        if self.started:
            raise RuntimeError("response already started")
        self._require_scope()
        self.started = True
        self.status = status
        return self._conn.start_stream(status, headers, self._request.http11, hold_head)


class HttpConnection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        # Kept: CPython 3.11's get_running_loop() makes a getpid() system call.
        self._loop = asyncio.get_running_loop()
        self.asyncio_transport: asyncio.Transport | None = None
        self._parser = RequestParser(max_head=MAX_HEAD_BYTES, max_body=server.max_body)
        #: Whether the connection stays open after the current request's answer.
        self._keep_alive = True
        # Created only while the asyncio transport is paused (idle connections are many).
        self._writable: asyncio.Future[None] | None = None
        self._request: Request | None = None
        self._busy = False
        self._streaming = False
        #: The current request's head is in, its body is not: the body's timer runs.
        self._awaiting_body = False
        self._scope: anyio.CancelScope | None = None
        self._discarding = False
        self._discarded = 0
        self._head_timer: asyncio.TimerHandle | None = None
        #: When the awaited head (or body) is due; None while a request is handled.
        self._head_deadline: float | None = None
        #: Reading stopped: bytes came while a request was being handled.
        self._paused = False
        #: After an upgrade, the new protocol's byte handlers.
        self._on_data: Callable[[bytes], None] | None = None
        self._on_eof: Callable[[], None] | None = None
        #: Set while the connection's task waits for its next request (see _serve):
        #: resolved with it, or with None when the connection is lost.
        self._waiting: asyncio.Future[Request | None] | None = None

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.  Held
        # as asyncio_transport: "transport" is the product's word for SSE or WebSocket.
        self.asyncio_transport = cast(asyncio.Transport, transport)
        self.server.connections.add(self)
        self._arm_head_timer()

    def _arm_head_timer(self, seconds: float | None = None) -> None:
        """The next head (or, with ``seconds``, the current body) must be in within its
        bound.  One timer per connection, kept across requests: re-armed only when it
        fires early or would fire late (a call_later and a cancel per request are
        ~1.5 us of a keep-alive publish)."""
        loop = self._loop
        deadline = loop.time() + (REQUEST_HEAD_SECONDS if seconds is None else seconds)
        self._head_deadline = deadline
        timer = self._head_timer
        if timer is not None and timer.when() > deadline:
            timer.cancel()
            timer = None
        if timer is None:
            self._head_timer = loop.call_at(deadline, self._head_timeout)

    def _disarm_head_timer(self) -> None:
        # The timer stays: finding no deadline when it fires, it stops.
        self._head_deadline = None

    def _cancel_head_timer(self) -> None:
        self._head_deadline = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        deadline = self._head_deadline
        if deadline is None:
            return
        loop = self._loop
        if loop.time() < deadline:  # armed again since this timer was set
            self._head_timer = loop.call_at(deadline, self._head_timeout)
            return
        self._head_deadline = None
        if not self._busy and not self._streaming and self.asyncio_transport is not None:
            self.asyncio_transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self.server.connections.discard(self)
        self.asyncio_transport = None
        # The upgraded protocol's callbacks hold its session, which holds this
        # connection's stream: dropped, the connection is freed by refcount alone.
        self._on_data = self._on_eof = None
        self.resume_writing()
        if self._scope is not None:
            self._scope.cancel()
        waiting, self._waiting = self._waiting, None
        if waiting is not None and not waiting.done():
            waiting.set_result(None)  # the connection's task ends

    @property
    def paused(self) -> bool:
        """Writing is paused (the asyncio transport's buffer passed its high-water mark)."""
        return self._writable is not None

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._on_data is not None:
            self._on_data(data)
            return
        if self._streaming:
            return  # a streaming client has nothing more to say; ignore
        if self._discarding:
            # After an early error answer, swallow what the client is still sending
            # (so it can read the answer instead of a reset), up to a bound.
            self._discarded += len(data)
            if self._discarded > DISCARD_LIMIT and self.asyncio_transport is not None:
                self.asyncio_transport.close()
            return
        self._parser.receive(data)
        if self._busy:
            # Pipelined bytes while a request is handled: keep this read's worth and
            # leave the rest in the kernel until the answer is out (a bound without a
            # pause and a resume per request).
            if not self._paused and self.asyncio_transport is not None:
                self._paused = True
                self.asyncio_transport.pause_reading()
            return
        self._pump()

    def eof_received(self) -> bool | None:
        if self._on_eof is not None:
            self._on_eof()
            return True  # the upgraded protocol decides when to close
        return None  # close (a request cut short cannot be answered)

    # -- parsing ---------------------------------------------------------------------

    def _pump(self) -> None:
        if self._busy or self.asyncio_transport is None:
            return
        try:
            parsed = self._parser.next_request()
        except HttpError as exc:
            error: GatewayError = (
                TooLarge(exc.message) if exc.status == 413 else InvalidRequest(exc.message)
            )
            self._fail(exc.status, error)
            return
        if parsed is None:
            if self._parser.head_received:
                # The head came in time; the body has a bound of its own.
                if not self._awaiting_body:
                    self._awaiting_body = True
                    self._arm_head_timer(REQUEST_BODY_SECONDS)
                if self._parser.wants_continue:
                    self.asyncio_transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return
        self._disarm_head_timer()
        self._awaiting_body = False
        request = Request(parsed.method, parsed.target, parsed.headers, parsed.http11)
        request.body = parsed.body
        self._request = request
        # An upgrade not taken over (refused) ends the connection after its answer.
        self._keep_alive = parsed.keep_alive and not parsed.upgrade
        self._busy = True
        # Reading stops only if more bytes come while the handler runs (data_received):
        # pipelined requests wait in the kernel, not in our memory.
        waiting, self._waiting = self._waiting, None
        if waiting is not None and not waiting.done():
            waiting.set_result(request)  # to the connection's task, between requests
        else:  # the first request, or the task is gone (cancelled while it waited)
            self.server.spawn(self._serve, request)

    def _fail(self, status: int, exc: GatewayError) -> None:
        """Answer a request we could not parse or accept, then close the connection."""
        if self.asyncio_transport is None:
            return
        body = exc.body()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        self.asyncio_transport.write(response_head(status, headers, close=True) + body)
        self.asyncio_transport.write_eof()
        self._discarding = True
        asyncio_transport = self.asyncio_transport
        self._loop.call_later(DISCARD_SECONDS, asyncio_transport.close)

    # -- handling --------------------------------------------------------------------

    async def _serve(self, first: Request | None) -> None:
        """Handle this connection's requests, one after another, in one task.

        A task per request cost a keep-alive client ~2 us more on every request (the
        task, its registration with asyncio, its callbacks).  Between requests the task
        waits on a future that :meth:`_pump` resolves with the next request, or
        :meth:`connection_lost` with None; it keeps no request while it waits (a
        body, a token).  It ends with the connection, or after a request that ends it
        (an answer that closes, a stream, an upgrade).  Every handler leaves what it
        sets of the task's context as it found it (log fields are bound with ``with``,
        cancel scopes are exited), so requests do not see each other's.
        """
        request, first = first, None
        while request is not None:
            if not await self._handle(request):
                return
            request = None
            waiting: asyncio.Future[Request | None] = self._loop.create_future()
            self._waiting = waiting
            self._pump()  # a request already here (pipelined) resolves it at once
            if waiting.done():
                # A pipelined request waits its turn behind what the loop has ready,
                # as it did in a task of its own: handled at once, pipelined publishes
                # ran 30% slower (bench/publish.py row 1 x 4, the node idle a quarter
                # of the time).
                await asyncio.sleep(0)
            request = await waiting

    async def _handle(self, request: Request) -> bool:
        """Handle one request; True if the connection stays open for the next one."""
        responder = Responder(self, request)
        if self.asyncio_transport is None:
            return False
        # No cancel scope here: a handler that streams enters one that the
        # connection's loss cancels (Responder.cancelled_on_loss); one that answers
        # once runs to its (bounded) end.
        try:
            await self.server.handler(request, responder)
        except GatewayError as exc:
            if not responder.started:
                responder.error(exc)
        except anyio.BrokenResourceError:
            pass
        except Exception:
            log.exception("handler failed", path=request.path, method=request.method)
            if not responder.started:
                responder.send(500, error_body("internal", "internal error"))
        self.server.observe(request, responder)
        if self._streaming:
            if self.asyncio_transport is not None:
                self.asyncio_transport.close()
            return False
        if not responder.started and self.asyncio_transport is not None:
            self.asyncio_transport.close()
            return False
        self._busy = False
        if self.asyncio_transport is None:
            return False
        if self._paused:
            self._paused = False
            self.asyncio_transport.resume_reading()
        self._arm_head_timer()
        if not self._keep_alive:
            self.asyncio_transport.close()
            return False
        return True

    def send_simple(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        if self.asyncio_transport is None:
            return
        head = response_head(status, headers, close=not self._keep_alive)
        self.asyncio_transport.write(head + body if body else head)

    def start_stream(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]],
        http11: bool,
        hold_head: bool = False,
    ) -> Stream:
        self._streaming = True
        if self.asyncio_transport is None:
            raise anyio.BrokenResourceError
        chunked = http11
        all_headers = list(headers)
        if chunked:
            all_headers.append((b"transfer-encoding", b"chunked"))
        # A stream ends by closing the connection, so it says so up front: a client
        # told "keep-alive" would pool the socket and could send its next request into
        # the close (undici's "fetch failed" when the FIN arrives just after the last
        # chunk).
        head = response_head(status, all_headers, close=True)
        if not hold_head:
            self.asyncio_transport.write(head)
        # Read again (and discard): a client that goes away is noticed at once.
        self._paused = False
        self.asyncio_transport.resume_reading()
        return Stream(self, chunked, head if hold_head else b"")

    def take_over(
        self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]
    ) -> tuple[bytes, Stream]:
        """Hand the connection to another protocol (a WebSocket upgrade).

        Returns the bytes the client sent after the request and a raw stream for
        writing.  From now on received bytes go to ``on_data``.
        """
        self._streaming = True
        trailing = self._parser.detach()
        self._on_data = on_data
        self._on_eof = on_eof
        self._request = None
        self._paused = False
        if self.asyncio_transport is not None:
            self.asyncio_transport.resume_reading()
        return bytes(trailing), Stream(self, chunked=False)

    async def drain(self) -> None:
        writable = self._writable
        if writable is not None:
            await asyncio.shield(writable)
        if self.asyncio_transport is None:
            raise anyio.BrokenResourceError


#: The message asyncio's selector loop gives its exception handler when ``accept()``
#: fails for want of files or memory (it then stops accepting for a second).
ACCEPT_EXHAUSTED = "socket.accept() out of system resource"

#: A refusal's reason label (``gateway_connections_refused_total{reason}``).
OnRefused = Callable[[str], None]


def _refusal(message: str) -> bytes:
    """The whole answer to a connection refused on arrival: 503, then the close."""
    body = error_body("unavailable", message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"retry-after", b"1"),
    ]
    return response_head(503, headers, close=True) + body


_REFUSED = _refusal("this node holds as many connections as it can: retry later or elsewhere")


class _Refused(asyncio.Protocol):
    """A connection past the server's bound: answered 503 and closed at once (its file
    is given back before its request is read)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        conn = cast(asyncio.Transport, transport)
        conn.write(_REFUSED)
        conn.close()


ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


class _AcceptWatch:
    """The loop's exception handler while servers listen on it: a failed ``accept()``
    of one of their sockets (asyncio reports it here, then pauses accepting for a
    second) is told to that server instead of logged with a traceback; everything
    else goes on to the handler that was there before (or the loop's default).

    uvloop never reports a failed accept: libuv closes a spare descriptor, accepts
    and closes the waiting connections, and opens it again (its "EMFILE trick")."""

    def __init__(self, previous: ExceptionHandler | None) -> None:
        self.previous = previous
        #: Listening socket descriptor -> its server.
        self.servers: dict[int, HttpServer] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == ACCEPT_EXHAUSTED:
            sock: Any = context.get("socket")
            server = None if sock is None else self.servers.get(sock.fileno())
            if server is not None:
                server.accept_failed()
                return
        if self.previous is not None:
            self.previous(loop, context)
        else:
            loop.default_exception_handler(context)


class HttpServer:
    """Listens and runs a task per connection with requests to handle (:meth:`spawn`).
    Create, then ``await start()``; ``await aclose()`` at the end.

    ``max_sockets`` bounds the open connections: one more is answered 503 and closed
    on arrival, and ``on_refused`` is told ``refuse_reason``; a failed ``accept()``
    (asyncio's loop) tells it ``"accept"``, once per pause of accepting."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_body: int,
        requests: LoopCounter | None = None,
        max_sockets: int | None = None,
        on_refused: OnRefused | None = None,
        refuse_reason: str = "files",
    ) -> None:
        self.handler = handler
        self.max_body = max_body
        #: Requests answered by route and status (``gateway_http_requests_total``).
        self._requests = requests
        self.connections: set[HttpConnection] = set()
        self.max_sockets = max_sockets
        self._on_refused = on_refused
        self._refuse_reason = refuse_reason
        #: Connections made by :meth:`_accept` whose ``connection_made`` has not run yet
        #: (a loop turn later): counted against ``max_sockets`` until then.
        self._arriving = 0
        #: A failed accept was counted in this loop turn (asyncio reports it once per
        #: waiting connection, up to the backlog, in one turn).
        self._accept_failing = False
        self._watch: _AcceptWatch | None = None
        self._server: asyncio.base_events.Server | None = None
        #: The connections' tasks running now (see :meth:`spawn`).
        self._handlers = OwnedTasks()
        #: Set by :meth:`aclose`: the connections it closes are the server's ends.
        self.stopping = False

    @property
    def open_sockets(self) -> int:
        """Client connections open now (and arriving)."""
        return len(self.connections) + self._arriving

    def _accept(self) -> asyncio.Protocol:
        """The protocol of a connection just accepted: an :class:`HttpConnection`, or,
        past ``max_sockets``, one that refuses it."""
        limit = self.max_sockets
        if limit is not None:
            if len(self.connections) + self._arriving >= limit:
                if self._on_refused is not None:
                    self._on_refused(self._refuse_reason)
                return _Refused()
            if not self._arriving:
                # Both loops run a connection's connection_made (where it joins
                # ``connections``) in a later turn, after every connection accepted in
                # this one: scheduled now, this runs before the first of them.
                asyncio.get_running_loop().call_soon(self._arrived)
            self._arriving += 1
        return HttpConnection(self)

    def _arrived(self) -> None:
        self._arriving = 0

    def accept_failed(self) -> None:
        """``accept()`` failed on this server's socket (counted once per loop turn)."""
        if self._accept_failing:
            return
        self._accept_failing = True
        asyncio.get_running_loop().call_soon(self._accept_failed_done)
        if self._on_refused is not None:
            self._on_refused("accept")

    def _accept_failed_done(self) -> None:
        self._accept_failing = False

    def spawn(self, fn: RequestTask, request: Request) -> None:
        """Run a connection's task (its requests' handlers, :meth:`HttpConnection._serve`).

        A plain asyncio task (:class:`~gateway.net.tasks.OwnedTasks`), not
        ``start_soon``: anyio's task-group spawn costs a share of a single-event
        publish that matters.  The server still owns every such task: :meth:`aclose`
        cancels those that outlive their connections and waits for them, within the
        task group's lifetime (app.py)."""
        self._handlers.start(fn(request))

    async def aclose(self, within: float = 5.0) -> None:
        """Stop listening, close every connection, and end every handler task still
        running (cancelled; waited for at most ``within`` seconds)."""
        self.stopping = True
        self.stop_listening()
        self.close_all()
        self._handlers.cancel()
        await self._handlers.wait(within)

    def observe(self, request: Request, responder: Responder) -> None:
        """Count a request that was handled (its route and the status answered)."""
        if self._requests is not None:
            self._requests.labels(request.route, str(responder.status)).inc()

    async def start(self, host: str, port: int) -> int:
        """Start listening; returns the bound port (useful with port 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._accept, host, port, reuse_address=True, backlog=2048
        )
        # Read as a plain sequence: uvloop's servers give a list where asyncio's types
        # say tuple, which a compiled module would check (and refuse).
        sockets: Any = cast(Any, self._server).sockets
        watch = loop.get_exception_handler()
        if not isinstance(watch, _AcceptWatch):
            watch = _AcceptWatch(watch)
            loop.set_exception_handler(watch)
        for sock in sockets:
            watch.servers[sock.fileno()] = self
        self._watch = watch
        bound: Any = sockets[0].getsockname()
        return int(bound[1])

    def stop_listening(self) -> None:
        if self._server is not None:
            watch, self._watch = self._watch, None
            if watch is not None:
                for fd, server in list(watch.servers.items()):
                    if server is self:
                        del watch.servers[fd]
            self._server.close()

    def close_all(self) -> None:
        for conn in list(self.connections):
            if conn.asyncio_transport is not None:
                conn.asyncio_transport.close()
