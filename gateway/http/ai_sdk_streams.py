"""The AI SDK UI message stream routes (docs/contract.md D10).

- ``GET /v1/threads/{thread_id}/runs/{run_id}/ui/ai-sdk``: the run feed as AI SDK chunks
  over SSE (the seed's ``uiRunFrames`` with protocol ``ai-sdk``).  Resume with
  ``Last-Event-ID`` (wins) or ``?after=``: a chunk id ``E:O:K`` continues with the next
  chunk, a cursor ``E:O`` is a resync at O (a compact replay of the run there, then the
  events after it).  Cursors the run never issued are 400 ``invalid_cursor``; one that
  cannot continue (an older epoch, a trimmed position) gets the restart chunk in band.
- ``GET /v1/ui/ai-sdk/{agent}/{chat_id}/stream``: ``useChat({resume: true})``
  (``DefaultChatTransport.reconnectToStream``).  A chat id is a thread id; while the
  thread's latest run (the latest-run index, ``RouteContext.runs``) is going, the run from its
  start as a compact replay, then live; ``204`` once it ended, or when the chat has no
  run the caller may read.  ``{agent}`` is not checked: the gateway has no agents.

Both streams end with ``data: [DONE]`` after the run's end, and with an ``error`` chunk
then ``[DONE]`` when the store fails after the stream started (the format's error frame).
"""

from __future__ import annotations

from gateway import access
from gateway.cursor import Cursor
from gateway.dialects.ai_sdk.framing import parse_chunk_id
from gateway.errors import InvalidRequest, NotFound
from gateway.feed import is_run_part
from gateway.http import sse
from gateway.http.route_context import RouteContext
from gateway.net.server import Request, Responder
from gateway.wire.ai_sdk_formats import AI_SDK_SSE

#: The chat id rule of the seed's ChatKey (the same as a thread id's, contract D1).
CHAT_ID_RULE = "chat_id: must match ^[A-Za-z0-9_.-]{1,128}$"


async def follow(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET .../ui/ai-sdk``: the run as the AI SDK UI message stream, resumable."""
    principal = context.principal(request)
    principal.require_subscribe()
    feed = access.run_for(principal, params["thread_id"], params["run_id"])
    raw = request.resume_from("after")
    cursor: Cursor | None = None
    piece: int | None = None
    if raw is not None:
        at = parse_chunk_id(raw)  # InvalidCursor (400) for a malformed id
        cursor, piece = at.cursor, at.chunk
    await sse.serve(
        context,
        request,
        responder,
        principal,
        feed,
        cursor,
        AI_SDK_SSE,
        not_found=access.NO_SUCH_RUN,
        after_piece=piece,
    )


async def reconnect(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET /v1/ui/ai-sdk/{agent}/{chat_id}/stream``: the chat's latest run while it is
    going (from its start, compacted, then live); 204 when there is nothing to resume."""
    principal = context.principal(request)
    principal.require_subscribe()
    thread_id = params["chat_id"]
    if not is_run_part(thread_id):
        raise InvalidRequest(CHAT_ID_RULE)
    nothing = context.cors.headers(request)
    # Another tenant's chat has no entry (keys are per tenant); a thread outside the
    # token's threads claim answers the same.
    latest = (
        None if context.runs is None else await context.runs.latest_run(principal.tenant, thread_id)
    )
    if latest is None:
        responder.send(204, b"", headers=nothing)
        return
    try:
        feed = access.run_for(principal, thread_id, latest.run_id)
    except NotFound:
        responder.send(204, b"", headers=nothing)
        return
    state = await context.feeds.state(feed)
    if state is None:  # the run's feed is gone (its grace period ended)
        responder.send(204, b"", headers=nothing)
        return
    try:
        # Joined at the head: the encoder's prelude is the compact replay of the whole
        # run so far, so the client's message equals one that saw every chunk.
        await sse.serve(
            context,
            request,
            responder,
            principal,
            feed,
            state.head_cursor,
            AI_SDK_SSE,
            if_ended=204,
        )
    except NotFound:  # deleted between the state read and the join
        responder.send(204, b"", headers=nothing)
