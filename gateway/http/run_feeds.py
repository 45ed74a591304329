"""The run-feed routes (docs/contract.md D4, D7, D7b).

- ``POST /v1/threads/{thread_id}/runs/{run_id}/ui/ag-ui`` publishes AG-UI events.
- ``GET`` on the same path follows the run as AG-UI SSE.
- ``POST /v1/ui/ag-ui/{agent}`` with a RunAgentInput follows the run it names, so an
  unmodified AG-UI ``HttpAgent`` attaches to a run that is already going; ``{agent}``
  is not checked and no run is ever started here.
- ``GET``/``POST /v1/threads/{thread_id}/runs/{run_id}/events``: the threads run stream.
- ``POST /v1/threads/{thread_id}/runs/{run_id}/heartbeat`` renews a live run's lease
  without publishing (204; 404 for no such live run).

A client that joins anywhere but the run's start first gets the prelude (the format's,
computed by the driver); the AG-UI stream ends after the run's ``RUN_FINISHED`` or
``RUN_ERROR``.  A thread outside the token's ``threads`` claim, another tenant's run and
a missing run all answer the same 404.
"""

from __future__ import annotations

import re

import msgspec

from gateway import access
from gateway.auth import Principal
from gateway.cursor import Cursor
from gateway.errors import Forbidden, InvalidRequest, NotFound
from gateway.feed import FeedKey, run_events_feed
from gateway.http import sse
from gateway.http.publish import send_cursors, start_publish
from gateway.http.route_context import RouteContext
from gateway.net.server import Request, Responder
from gateway.publisher import Via
from gateway.runstream import parse_after_seq, seq_key, stored_seq
from gateway.wire.formats import RUN_SSE, RUN_STREAM_SSE

#: ``lease_seconds``: plain decimal digits (no sign, exponent, blanks or separators).
_SECONDS = re.compile(r"[0-9]{1,12}(\.[0-9]{1,17})?")


class _AttachInput(msgspec.Struct):
    """The part of a RunAgentInput the attach route reads (the rest is ignored)."""

    threadId: str
    runId: str


# -- the AG-UI run feed -----------------------------------------------------------------


async def follow(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET .../ui/ag-ui``: the run as AG-UI SSE."""
    principal = context.principal(request)
    principal.require_subscribe()
    feed = access.run_for(principal, params["thread_id"], params["run_id"])
    await _serve_agui(context, request, responder, principal, feed)


async def attach(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``POST /v1/ui/ag-ui/{agent}``: follow the run a RunAgentInput names."""
    principal = context.principal(request)
    principal.require_subscribe()
    request.require_json()
    try:
        body = msgspec.json.decode(request.body, type=_AttachInput)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"RunAgentInput: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"body: malformed JSON ({exc})") from exc
    feed = access.run_for(principal, body.threadId, body.runId)
    await _serve_agui(context, request, responder, principal, feed)


async def _serve_agui(
    context: RouteContext,
    request: Request,
    responder: Responder,
    principal: Principal,
    feed: FeedKey,
) -> None:
    cursor = sse.request_cursor(request)
    await sse.serve(
        context, request, responder, principal, feed, cursor, RUN_SSE, not_found=access.NO_SUCH_RUN
    )


async def publish(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``POST .../ui/ag-ui``: AG-UI events (one or an array), all or nothing."""
    thread_id, run_id = params["thread_id"], params["run_id"]
    principal, rate = start_publish(
        context, request, lambda p: access.run_for(p, thread_id, run_id)
    )
    cursors = await context.publisher.publish_run_json(
        principal.tenant,
        thread_id,
        run_id,
        request.body,
        via=Via.HTTP,
        idempotency_key=request.headers.get("idempotency-key"),
        rate=rate,
        lease_seconds=_lease_seconds(request.query_one("lease_seconds")),
    )
    send_cursors(responder, cursors)


def _lease_seconds(raw: str | None) -> float | None:
    """``?lease_seconds=``: the lease a run that this publish starts asks for (the
    publisher checks its bounds); InvalidRequest when it is not a number."""
    if raw is None:
        return None
    if _SECONDS.fullmatch(raw) is None:
        raise InvalidRequest("lease_seconds: must be a number of seconds (digits, a decimal point)")
    return float(raw)


async def heartbeat(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``POST .../heartbeat``: renew a live run's lease (204), or 404 when the run is
    not live (never started, ended, not the caller's to publish to)."""
    principal = context.principal(request)
    if "publish" not in principal.scopes:
        raise Forbidden("token lacks the publish scope")
    thread_id, run_id = params["thread_id"], params["run_id"]
    access.run_for(principal, thread_id, run_id)
    if not await context.publisher.heartbeat(principal.tenant, thread_id, run_id):
        raise NotFound("no such live run")
    responder.send(204, b"", headers=context.cors.headers(request))


# -- the threads run stream (D7b) -------------------------------------------------------


async def follow_stream(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET .../events``: SseMessages; resume with ``after_seq`` or Last-Event-ID."""
    principal = context.principal(request)
    principal.require_subscribe()
    thread_id, run_id = params["thread_id"], params["run_id"]
    access.run_for(principal, thread_id, run_id)  # the same 404 for what it may not read
    feed = run_events_feed(principal.tenant, thread_id, run_id)
    raw = request.resume_from("after_seq")
    after = parse_after_seq(raw.strip()) if raw is not None else 0
    cursor = await _seq_cursor(context, feed, after)
    await sse.serve(
        context,
        request,
        responder,
        principal,
        feed,
        cursor,
        RUN_STREAM_SSE,
        not_found=access.NO_SUCH_RUN,
    )


async def _seq_cursor(context: RouteContext, feed: FeedKey, seq: int) -> Cursor | None:
    """The cursor after which the committed events with a seq above ``seq`` come."""
    feeds = context.feeds
    state = await feeds.state(feed)
    if state is None:
        raise NotFound(access.NO_SUCH_RUN)
    if seq == 0:
        return None
    offset = await feeds.offset_of(feed, seq_key(seq))
    if offset is not None:
        return Cursor(state.epoch, offset)
    first = await feeds.read(feed, Cursor(state.epoch, state.first - 1), 1)
    oldest = stored_seq(first[0].data) if first else None
    if oldest is not None and seq < oldest:
        return None  # before what is retained: everything retained
    return state.head_cursor  # past what was committed: what comes next


async def publish_stream(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``POST .../events``: SseMessages in order (D7b)."""
    thread_id, run_id = params["thread_id"], params["run_id"]
    principal, rate = start_publish(
        context, request, lambda p: access.run_for(p, thread_id, run_id)
    )
    cursors = await context.publisher.publish_run_stream_json(
        principal.tenant,
        thread_id,
        run_id,
        request.body,
        via=Via.HTTP,
        rate=rate,
        lease_seconds=_lease_seconds(request.query_one("lease_seconds")),
    )
    send_cursors(responder, cursors)
