"""The threads run stream (contract D7b; seed ``subscribeRun``, rules 25-30), pure parts.

A run's stream carries SseMessages: committed ``{"kind": "event", "event": <events_Event>}``
messages (stored, SSE id = the event's ``seq``), transient ``delta`` and ``status``
messages (fanned out live, never stored or replayed) and the final
``{"kind": "result", "run_id", "result": RunOutcome}`` (stored; the stream ends after it).
It is kept in its own feed beside the run's AG-UI feed (:func:`gateway.feed.run_events_feed`);
each committed event is appended with the idempotency key ``seq:<seq>``, which makes
retries safe and maps ``after_seq`` to a cursor.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from gateway.errors import InvalidRequest
from gateway.validate import MAX_BATCH_ITEMS, validate_component, validate_event

Message = dict[str, Any]

#: Largest seq (the seed's events_Int).
MAX_SEQ = 9_007_199_254_740_991
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_FIELDS = {
    "event": {"kind", "event"},
    "delta": {"kind", "request_event_id", "text"},
    "status": {"kind", "status", "until"},
    "result": {"kind", "run_id", "result"},
}
#: Kinds that are stored (the others are transient).
STORED = frozenset({"event", "result"})


def seq_key(seq: int) -> str:
    return f"seq:{seq}"


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEQ


def check_message(message: object, where: str, *, thread_id: str, run_id: str) -> Message:
    """Check one SseMessage; InvalidRequest naming the field otherwise."""
    if not isinstance(message, dict):
        raise InvalidRequest(f"{where}: expected an SseMessage object")
    kind = message.get("kind")
    if kind not in _FIELDS:
        raise InvalidRequest(f"{where}.kind: must be event, delta, status or result")
    fields = _FIELDS[kind]
    for name in sorted(fields):
        if name not in message:
            raise InvalidRequest(f"{where}.{name}: required for kind {kind}")
    extra = sorted(set(message) - fields)
    if extra:
        raise InvalidRequest(f"{where}.{extra[0]}: not allowed for kind {kind}")
    if kind == "event":
        try:
            validate_event(message["event"])
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}.{exc.message}") from None
        if message["event"]["thread_id"] != thread_id:
            raise InvalidRequest(f"{where}.event.thread_id: differs from the path's thread")
    elif kind == "delta":
        if not isinstance(message["request_event_id"], str) or not _UUID.match(
            message["request_event_id"]
        ):
            raise InvalidRequest(f"{where}.request_event_id: must be a lowercase UUID")
        if not isinstance(message["text"], str):
            raise InvalidRequest(f"{where}.text: must be a string")
    elif kind == "status":
        if message["status"] != "retry_wait":
            raise InvalidRequest(f'{where}.status: must be "retry_wait"')
        if not _int(message["until"]):
            raise InvalidRequest(f"{where}.until: must be an integer time in ms")
    else:
        if message["run_id"] != run_id:
            raise InvalidRequest(f"{where}.run_id: differs from the path's run")
        validate_component("RunOutcome", message["result"], f"{where}.result")
    return message


def check_messages(body: object, *, thread_id: str, run_id: str) -> list[Message]:
    """Check a publish body (one SseMessage or an array); committed seqs must increase by one."""
    items = body if isinstance(body, list) else [body]
    if not items:
        raise InvalidRequest("body: an empty array publishes nothing")
    if len(items) > MAX_BATCH_ITEMS:
        raise InvalidRequest(f"body: at most {MAX_BATCH_ITEMS} messages per request")
    out: list[Message] = []
    last: int | None = None
    for index, item in enumerate(items):
        where = f"[{index}]" if isinstance(body, list) else "message"
        message = check_message(item, where, thread_id=thread_id, run_id=run_id)
        if message["kind"] == "event":
            seq = message["event"]["seq"]
            if last is not None and seq != last + 1:
                raise InvalidRequest(f"{where}.event.seq: {seq} does not follow {last}")
            last = seq
        out.append(message)
    return out


class _SeqOnly(msgspec.Struct):
    seq: int = 0


class _Stored(msgspec.Struct):
    kind: str = ""
    event: _SeqOnly | None = None


_decoder = msgspec.json.Decoder(_Stored)


def stored_seq(data: bytes) -> int | None:
    """The seq of a stored committed event; None for a result (or anything else)."""
    try:
        stored = _decoder.decode(data)
    except msgspec.DecodeError:
        return None
    return stored.event.seq if stored.kind == "event" and stored.event is not None else None


def stored_kind(data: bytes) -> str:
    try:
        return _decoder.decode(data).kind
    except msgspec.DecodeError:
        return ""


def parse_after_seq(raw: str) -> int:
    if not raw.isascii() or not raw.isdigit() or len(raw) > 16 or int(raw) > MAX_SEQ:
        raise InvalidRequest("after_seq: must be a decimal seq (0..9007199254740991)")
    return int(raw)
