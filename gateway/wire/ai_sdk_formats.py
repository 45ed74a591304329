"""Run feeds as the AI SDK UI message stream: the stateful formats (pure; contract D10).

Each stored AG-UI event becomes the chunks :class:`~gateway.dialects.ai_sdk.translator.
AiSdkTranslator` derives from it; chunk ``K`` of the event at ``E:O`` is ``E:O:K``.  The
translation depends on the run so far, so these formats frame items with an
:class:`AiSdkEncoder` (one per feed per node, built from the run's fold), not per item.

- ``AI_SDK_SSE``: SSE messages ``id: E:O:K`` + ``data: <chunk>``; ``data: [DONE]`` after
  the run's end, and the stream ends there.  Its responses carry the header
  ``x-vercel-ai-ui-message-stream: v1``; a stream the store failed after it started ends
  with an ``error`` chunk (no id: the client's cursor stays where it was) and ``[DONE]``.
- ``AI_SDK_WS``: one ``gateway.v1`` event frame per chunk, ``"cursor": "E:O:K"``.
"""

from __future__ import annotations

from gateway.agui.events import TERMINAL, decode
from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.dialects.ai_sdk.framing import (
    DONE,
    HEADERS,
    chunk_id,
    encode_chunk,
    error_frame,
    event_frames,
    restart_chunk,
    restart_frame,
    resume_chunks,
    unnumbered_frames,
)
from gateway.dialects.ai_sdk.parts import Chunk
from gateway.dialects.ai_sdk.translator import AiSdkTranslator
from gateway.errors import GatewayError
from gateway.feed import FeedKey, StoredItem
from gateway.wire import messages
from gateway.wire.format import Encoder, Format
from gateway.wire.formats import is_terminal


class AiSdkEncoder:
    """The AI SDK chunks of one run feed, from the position of its translator on."""

    __slots__ = ("_ws_name", "translator")

    def __init__(self, translator: AiSdkTranslator, ws_name: str | None) -> None:
        self.translator = translator
        #: The feed's public name on WebSocket; None for SSE.
        self._ws_name = ws_name

    @property
    def ended(self) -> bool:
        return self.translator.fold.terminal is not None

    def _chunks(self, item: StoredItem) -> tuple[list[Chunk], bool]:
        try:
            event = decode(item.data)
        except GatewayError:
            return [], False  # not an object: nothing to translate (publishing refuses it)
        return self.translator.translate(event), event.get("type") in TERMINAL

    def frame(self, feed: FeedKey, item: StoredItem, after: int | None = None) -> bytes:
        chunks, terminal = self._chunks(item)
        first = 0
        if after is not None:
            chunks, first = resume_chunks(chunks, after), after + 1
        if self._ws_name is None:
            out = event_frames(item.cursor, chunks, first)
            return out + DONE if terminal else out
        return self._ws(item.cursor, chunks, first)

    def _ws(self, cursor: Cursor, chunks: list[Chunk], first: int) -> bytes:
        assert self._ws_name is not None
        return b"".join(
            messages.frame(
                messages.event_payload_at(self._ws_name, chunk_id(cursor, k), encode_chunk(c))
            )
            for k, c in enumerate(chunks, first)
        )

    def prelude(self, joined: Cursor) -> bytes:
        """The compact replay of the run so far, and ``[DONE]`` if it ended (SSE).

        SSE frames carry no id (a client that loses the connection during it still holds
        the cursor it sent); WebSocket frames carry the cursor the client joined at, as
        the AG-UI prelude's frames do (resuming with it replays the compact view again).
        """
        chunks = self.translator.compact()
        if self._ws_name is None:
            out = unnumbered_frames(chunks)
            return out + DONE if self.ended else out
        at = joined.encode()
        return b"".join(
            messages.frame(messages.event_payload_at(self._ws_name, at, encode_chunk(c)))
            for c in chunks
        )

    def copy(self) -> AiSdkEncoder:
        return AiSdkEncoder(self.translator.copy(), self._ws_name)


def _thread_and_run(feed: FeedKey) -> tuple[str, str]:
    thread_id, _, run_id = feed.id.partition("/")
    return thread_id, run_id


def _sse_encoder(feed: FeedKey, fold: RunFold) -> Encoder:
    thread_id, run_id = _thread_and_run(feed)
    return AiSdkEncoder(AiSdkTranslator.from_fold(fold, thread_id, run_id), None)


def _ws_encoder(feed: FeedKey, fold: RunFold) -> Encoder:
    thread_id, run_id = _thread_and_run(feed)
    return AiSdkEncoder(AiSdkTranslator.from_fold(fold, thread_id, run_id), feed.public_name)


def _no_frame(feed: FeedKey, item: StoredItem) -> bytes:
    raise AssertionError("a stateful format frames items with its encoder")


def _sse_restart(feed: FeedKey, cursor: Cursor) -> bytes:
    return restart_frame(cursor)


def _ws_restart(feed: FeedKey, cursor: Cursor) -> bytes:
    return messages.frame(messages.epoch_restarted(feed.public_name, cursor))


def _sse_error(feed: FeedKey, exc: GatewayError) -> bytes:
    # The seed's in-band failure of a started AI SDK stream: useChat reports it
    # (onError, status "error"); the client resumes from its last chunk id.
    return error_frame(f"{exc.code}: {exc.message}")


#: A run feed as the AI SDK UI message stream over SSE; ends with the run.
AI_SDK_SSE = Format(
    "ai-sdk-sse",
    _no_frame,
    _sse_restart,
    transport="sse",
    ends=is_terminal,
    encoder=_sse_encoder,
    headers=HEADERS,
    error=_sse_error,
)
#: A run feed as AI SDK chunks in ``gateway.v1`` event frames (cursor ``E:O:K``).
AI_SDK_WS = Format("ai-sdk-ws", _no_frame, _ws_restart, transport="ws", encoder=_ws_encoder)

__all__ = ["AI_SDK_SSE", "AI_SDK_WS", "AiSdkEncoder", "restart_chunk"]
