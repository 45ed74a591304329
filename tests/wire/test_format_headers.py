"""Response headers and the in-band error frame are properties of a wire format (pure).

The SSE adapter answers with ``fmt.headers`` and, when the store fails after a stream
started, ends it with ``fmt.error`` if the format has one: only the AI SDK format does
(the seed's in-band ``error{errorText}`` chunk, then ``[DONE]``).
"""

from __future__ import annotations

import json

from gateway.dialects.ai_sdk.framing import HEADERS as AI_SDK_HEADERS
from gateway.dialects.ai_sdk.framing import error_frame
from gateway.errors import NotFound, Unavailable
from gateway.feed import run_feed
from gateway.wire import event_stream
from gateway.wire.ai_sdk_formats import AI_SDK_SSE, AI_SDK_WS
from gateway.wire.format import Format
from gateway.wire.formats import RUN_SSE, RUN_STREAM_SSE, TEAM_SSE

FEED = run_feed("acme", "t1", "r1")


def test_sse_formats_answer_with_the_sse_headers_unless_they_say_otherwise() -> None:
    for fmt in (TEAM_SSE, RUN_SSE, RUN_STREAM_SSE):
        assert fmt.headers == event_stream.HEADERS, fmt
    assert AI_SDK_SSE.headers == AI_SDK_HEADERS
    assert dict(AI_SDK_SSE.headers) == {
        b"content-type": b"text/event-stream; charset=utf-8",
        b"cache-control": b"no-cache",
        b"x-accel-buffering": b"no",
        b"x-vercel-ai-ui-message-stream": b"v1",
    }
    # A format's headers are its own copy: changing one changes no other format.
    fmt = Format("x", RUN_SSE.frame, RUN_SSE.restart, transport="sse")
    fmt.headers.append((b"x-extra", b"1"))
    assert (b"x-extra", b"1") not in event_stream.HEADERS


def test_only_the_ai_sdk_sse_format_ends_a_failed_stream_in_band() -> None:
    assert all(f.error is None for f in (TEAM_SSE, RUN_SSE, RUN_STREAM_SSE, AI_SDK_WS))
    assert AI_SDK_SSE.error is not None
    frame = AI_SDK_SSE.error(FEED, Unavailable("redis unavailable during read"))
    head, done = frame.split(b"\n\n", 1)
    assert done == b"data: [DONE]\n\n"
    assert head.startswith(b"data: ") and b"id:" not in head  # the cursor stays put
    assert json.loads(head[len(b"data: ") :]) == {
        "type": "error",
        "errorText": "unavailable: redis unavailable during read",
    }
    assert AI_SDK_SSE.error(FEED, NotFound("no such run")) == error_frame("not_found: no such run")


def test_the_error_frame_is_one_line_of_json() -> None:
    frame = error_frame('a "quoted"\nline')
    assert frame.count(b"\n") == 4  # data line, blank, [DONE], blank
    assert json.loads(frame.split(b"\n")[0][6:])["errorText"] == 'a "quoted"\nline'
