"""The SSE transport: one subscription per HTTP response, driven by the shared driver.

This adapter only starts the ``200 text/event-stream`` response (with the format's
headers), counts and logs the connection, gives the driver the stream to write to, sends
``: keepalive`` on silence, and ends a stream the store failed with the format's error
frame if it has one; everything about the subscription itself is the driver's.
"""

from __future__ import annotations

import anyio
import structlog

from gateway.access import NO_SUCH_FEED
from gateway.auth import Principal
from gateway.cursor import Cursor, parse_cursor
from gateway.errors import NotFound
from gateway.fanout.driver import Driver, EndReason
from gateway.fanout.outbox import Outbox
from gateway.fanout.policy import Overflows
from gateway.fanout.subscription import SubState
from gateway.feed import FeedKey
from gateway.http.route_context import RouteContext
from gateway.net import logcontext
from gateway.net.server import Request, Responder, Stream, connection_id
from gateway.wire import event_stream
from gateway.wire.format import Format

log = structlog.get_logger("gateway.sse")

TRANSPORT = "sse"


class _Open:
    """The registered connection (for draining): ending it closes its subscription."""

    __slots__ = ("driver",)

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def shutdown(self) -> None:
        if self.driver.sub is not None:
            self.driver.sub.close()


async def serve(
    context: RouteContext,
    request: Request,
    responder: Responder,
    principal: Principal,
    feed: FeedKey,
    cursor: Cursor | None,
    fmt: Format,
    *,
    not_found: str = NO_SUCH_FEED,
    after_piece: int | None = None,
    if_ended: int | None = None,
) -> None:
    """Follow ``feed`` from ``cursor`` as SSE in ``fmt`` until the subscription ends.

    ``after_piece`` resumes a stateful format mid-item (``Driver.open``).  With
    ``if_ended``, a subscription that has ended before anything was sent (a join after
    the run's end) is answered with that status and no body instead of a stream.
    Errors before the stream starts (NotFound with the message ``not_found``,
    InvalidCursor, Unavailable, 429 past the connection limits) are raised for the
    route to answer with their status.
    """
    # Refused (429) before the stream starts; the lease is given back on every exit.
    with context.limits.acquire(principal.tenant):
        driver = context.driver(Overflows())
        try:
            sub = await driver.open(feed, cursor, fmt, after_piece=after_piece)
        except NotFound:
            raise NotFound(not_found) from None
        try:
            if if_ended is not None and sub.state is SubState.ENDED:
                responder.send(if_ended, b"", headers=context.cors.headers(request))
                return
            await _stream(context, request, responder, principal, driver)
        finally:
            driver.close()


async def _stream(
    context: RouteContext,
    request: Request,
    responder: Responder,
    principal: Principal,
    driver: Driver,
) -> None:
    sub = driver.sub
    assert sub is not None
    settings, metrics = context.settings, context.metrics
    # The head goes out with the stream's first bytes (the prelude, the join's page,
    # or alone before the first wait): see Driver.advance's lead.
    stream: Stream = responder.stream(
        200, sub.fmt.headers + context.cors.headers(request), hold_head=True
    )
    head = stream.take_head()
    outbox = Outbox(stream.writer(), settings.max_queue_bytes, context.hub.budget)
    driver.attach(outbox)
    registered = _Open(driver)
    context.connections.add(registered)
    # Every log line of this connection's task carries its context.
    with logcontext.bound(
        conn_id=connection_id(),
        transport=TRANSPORT,
        tenant=principal.tenant,
        remote=responder.remote,
        feed=sub.feed.public_name,
    ):
        metrics.connections.labels(TRANSPORT).inc()
        metrics.connects.labels(TRANSPORT).inc()
        log.info("connection opened")
        reason = EndReason.ERROR
        try:
            reason = await driver.follow(
                stream,
                keepalive=settings.keepalive_seconds,
                expires_at=principal.expires_at,
                # Through the outbox, so a keepalive never passes the bound; when it is
                # refused the client has unread data anyway.
                idle=lambda: outbox.try_write(event_stream.KEEPALIVE),
                lead=head,
            )
            if reason is EndReason.ERROR and driver.error is not None and sub.fmt.error:
                # In band, once the stream has started (seed rule 8); never waits: a
                # connection that cannot take it at once just ends.
                frame = sub.fmt.error(sub.feed, driver.error)
                if frame:
                    outbox.try_write(frame)
        except anyio.get_cancelled_exc_class():
            # The client went away (its connection was lost), or the node is draining or
            # stopping (it closed the connection itself).  Nothing else ends the body
            # early: no write can (server.body_writer), only stream.end() below.
            stopping = context.hub.draining or stream.server_stopping
            reason = EndReason.SHUTDOWN if stopping else EndReason.CLIENT
            raise
        finally:
            context.connections.discard(registered)
            outbox.release()
            metrics.connections.labels(TRANSPORT).dec()
            metrics.disconnects.labels(TRANSPORT, reason.value).inc()
            log.info("connection closed", reason=reason.value)
        stream.end()


def request_cursor(request: Request) -> Cursor | None:
    """The resume cursor of an SSE request: ``Last-Event-ID`` wins over ``?after=`` (D2)."""
    raw = request.resume_from("after")
    return parse_cursor(raw) if raw is not None else None
