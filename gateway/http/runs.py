"""The AG-UI run-feed routes (decisions D4, D7).

- ``POST /v1/threads/{thread_id}/runs/{run_id}/ui/ag-ui`` publishes AG-UI events.
- ``GET`` on the same path follows the run as AG-UI SSE.
- ``POST /v1/ui/ag-ui/{agent}`` with a RunAgentInput follows the run it names, so an
  unmodified AG-UI ``HttpAgent`` attaches to a run that is already going; ``{agent}``
  is not checked and no run is ever started here.

A client that joins anywhere but the run's start first gets the prelude of
:mod:`gateway.agui.fold` (events without an SSE ``id``); the stream ends after the
run's ``RUN_FINISHED`` or ``RUN_ERROR``.  A thread outside the token's ``threads``
claim, another tenant's run and a missing run all answer the same 404.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec

from gateway.agui.folds import Folds
from gateway.auth import Principal
from gateway.cursor import Cursor, parse_cursor
from gateway.errors import InvalidRequest, MethodNotAllowed, NotFound
from gateway.fanout.subscriber import Format, Subscription, SubState
from gateway.feed import FeedKey, is_run_part, run_events_feed, run_feed
from gateway.http.server import Request, Responder
from gateway.runstream import parse_after_seq, seq_key, stored_seq
from gateway.wire import sse
from gateway.wire.formats import RUN_SSE, RUN_STREAM_SSE

if TYPE_CHECKING:
    from gateway.http.routes import Routes

RUN_UI = re.compile(r"^/v1/threads/([^/]+)/runs/([^/]+)/ui/ag-ui$")
AGENT_UI = re.compile(r"^/v1/ui/ag-ui/([^/]+)$")
RUN_EVENTS = re.compile(r"^/v1/threads/([^/]+)/runs/([^/]+)/events$")
_NO_SUCH_RUN = "no such run"


class _AttachInput(msgspec.Struct):
    """The part of a RunAgentInput the attach route reads (the rest is ignored)."""

    threadId: str
    runId: str


def request_cursor(request: Request) -> Cursor | None:
    """The resume cursor: ``Last-Event-ID`` wins over ``?after=`` (D2)."""
    raw = request.resume_from("after")
    return parse_cursor(raw) if raw is not None else None


async def prelude(folds: Folds, sub: Subscription) -> tuple[bytes, bool]:
    """The SSE prelude for a subscription that starts past its run's first item.

    Returns the bytes and whether the run had already ended at the subscription's
    position (the prelude then closes with the terminal event and the stream ends).
    """
    events, ended = await folds.prelude(sub.feed, sub.position)
    return b"".join(sse.message(event) for event in events), ended


class RunRoutes:
    """The run-feed routes; shares limits, auth and the SSE follow loop with ``Routes``."""

    def __init__(self, routes: Routes, folds: Folds) -> None:
        self.routes = routes
        self.folds = folds

    def run_key(self, principal: Principal, thread_id: str, run_id: str) -> FeedKey:
        # Malformed ids, threads outside the token's claim and other tenants' runs all
        # answer exactly like a missing run.
        if (
            not is_run_part(thread_id)
            or not is_run_part(run_id)
            or not principal.may_read_thread(thread_id)
        ):
            raise NotFound(_NO_SUCH_RUN)
        return run_feed(principal.tenant, thread_id, run_id)

    async def dispatch(self, request: Request, responder: Responder) -> bool:
        """Serve the request if it is a run route; False when it is not one."""
        for pattern, follow, publish in (
            (RUN_UI, self.follow, self.publish),
            (RUN_EVENTS, self.follow_stream, self.publish_stream),
        ):
            match = pattern.match(request.path)
            if match is None:
                continue
            thread_id, run_id = match.group(1), match.group(2)
            if request.method == "GET":
                await follow(request, responder, thread_id, run_id)
            elif request.method == "POST":
                await publish(request, responder, thread_id, run_id)
            elif request.method == "OPTIONS" and self.routes.cors_origins:
                self.routes.preflight(request, responder)
            else:
                raise MethodNotAllowed("use GET to follow or POST to publish", allow="GET, POST")
            return True
        if AGENT_UI.match(request.path) is None:
            return False
        if request.method == "POST":
            await self.attach(request, responder)
        elif request.method == "OPTIONS" and self.routes.cors_origins:
            self.routes.preflight(request, responder, methods=b"POST")
        else:
            raise MethodNotAllowed("use POST with a RunAgentInput", allow="POST")
        return True

    # -- following -----------------------------------------------------------------

    async def follow(
        self, request: Request, responder: Responder, thread_id: str, run_id: str
    ) -> None:
        principal = self.routes.principal(request)
        principal.require_subscribe()
        feed = self.run_key(principal, thread_id, run_id)
        await self._serve(request, responder, principal, feed, request_cursor(request))

    async def attach(self, request: Request, responder: Responder) -> None:
        """``POST /v1/ui/ag-ui/{agent}``: follow the run a RunAgentInput names."""
        principal = self.routes.principal(request)
        principal.require_subscribe()
        request.require_json()
        try:
            body = msgspec.json.decode(request.body, type=_AttachInput)
        except msgspec.ValidationError as exc:
            raise InvalidRequest(f"RunAgentInput: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise InvalidRequest(f"body: malformed JSON ({exc})") from exc
        feed = self.run_key(principal, body.threadId, body.runId)
        await self._serve(request, responder, principal, feed, request_cursor(request))

    async def _serve(
        self,
        request: Request,
        responder: Responder,
        principal: Principal,
        feed: FeedKey,
        cursor: Cursor | None,
        fmt: Format = RUN_SSE,
    ) -> None:
        routes = self.routes
        with routes.limits.acquire(principal.tenant):
            try:
                sub = await routes.hub.open(feed, cursor, fmt)
            except NotFound:
                raise NotFound(_NO_SUCH_RUN) from None
            try:
                before = b""
                if fmt is RUN_SSE and sub.state is SubState.CATCHING_UP and sub.position.offset:
                    # Joining past the run's start: the prelude first (computed before
                    # the response starts, so a failure is still an error status).
                    before, ended = await prelude(self.folds, sub)
                    if ended:
                        sub.state = SubState.ENDED
                await routes.stream_sse(request, responder, principal, sub, before)
            finally:
                routes.hub.close(sub)

    # -- the threads run stream (D7b) --------------------------------------------------

    async def follow_stream(
        self, request: Request, responder: Responder, thread_id: str, run_id: str
    ) -> None:
        """``GET .../events``: SseMessages; resume with ``after_seq`` or Last-Event-ID."""
        principal = self.routes.principal(request)
        principal.require_subscribe()
        self.run_key(principal, thread_id, run_id)  # the same 404 for what it may not read
        feed = run_events_feed(principal.tenant, thread_id, run_id)
        raw = request.resume_from("after_seq")
        after = parse_after_seq(raw.strip()) if raw is not None else 0
        cursor = await self._seq_cursor(feed, after)
        await self._serve(request, responder, principal, feed, cursor, RUN_STREAM_SSE)

    async def _seq_cursor(self, feed: FeedKey, seq: int) -> Cursor | None:
        """The cursor after which the committed events with a seq above ``seq`` come."""
        log = self.routes.hub.log
        state = await log.state(feed)
        if state is None:
            raise NotFound(_NO_SUCH_RUN)
        if seq == 0:
            return None
        offset = await log.offset_of(feed, seq_key(seq))
        if offset is not None:
            return Cursor(state.epoch, offset)
        first = await log.read(feed, Cursor(state.epoch, state.first - 1), 1)
        oldest = stored_seq(first[0].data) if first else None
        if oldest is not None and seq < oldest:
            return None  # before what is retained: everything retained
        return state.head_cursor  # past what was committed: what comes next

    async def publish_stream(
        self, request: Request, responder: Responder, thread_id: str, run_id: str
    ) -> None:
        principal, admit = self.routes.start_publish(
            request, lambda p: self.run_key(p, thread_id, run_id)
        )
        cursors = await self.routes.publisher.publish_run_stream_json(
            principal.tenant, thread_id, run_id, request.body, path="http", admit=admit
        )
        answer = [None if c is None else str(c) for c in cursors]
        responder.send(200, msgspec.json.encode({"cursors": answer}))

    # -- publishing ----------------------------------------------------------------

    async def publish(
        self, request: Request, responder: Responder, thread_id: str, run_id: str
    ) -> None:
        routes = self.routes
        principal, admit = routes.start_publish(
            request, lambda p: self.run_key(p, thread_id, run_id)
        )
        tenant = principal.tenant
        cursors = await routes.publisher.publish_run_json(
            tenant,
            thread_id,
            run_id,
            request.body,
            path="http",
            idempotency_key=request.headers.get("idempotency-key"),
            admit=admit,
        )
        responder.send(200, msgspec.json.encode({"cursors": [str(c) for c in cursors]}))
