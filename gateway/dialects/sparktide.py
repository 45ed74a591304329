"""SparkTide AgentEvent 1.0 in: validation, idempotency keys and the sequence rule (pure).

Decisions D10; the seed is ``gateway/schemas/sparktide-agent-event.schema.json``.  An
event is checked against the seed (a closed envelope of exactly 8 keys, one of the 19
event names, that event's required ``data``), then against what naming a run feed needs:
``conversationId`` and ``runId`` become the feed's thread and run ids, which match
``^[A-Za-z0-9_.-]{1,128}$``.

The seed states no rule for ``sequence``; the gateway's (``docs/dialects/sparktide.md``):
a run carries one message and ``sequence`` numbers that message's events 1, 2, 3, ...
:func:`check_sequence` applies it to what the run already holds.

The translation to AG-UI is in :mod:`gateway.dialects.sparktide_agui`.
"""

from __future__ import annotations

import enum
import functools
import re
from typing import Any, Final

import jsonschema_rs
import msgspec

from gateway.canonical import canonical
from gateway.dialects import seeds
from gateway.errors import IdempotencyKeyReused, InvalidRequest

Event = dict[str, Any]

#: The 19 event names of the seed, in the seed's order.
EVENT_NAMES: Final = (
    "message.started",
    "status.changed",
    "text.delta",
    "agent.started",
    "agent.completed",
    "tool.started",
    "tool.completed",
    "knowledge.retrieved",
    "citation.created",
    "ui.created",
    "confirmation.required",
    "usage.updated",
    "error",
    "message.completed",
    "model.started",
    "model.completed",
    "knowledge.planned",
    "knowledge.fused",
    "citation.verified",
)

#: The envelope: exactly these keys, all required (the seed's top level).
ENVELOPE: Final = (
    "protocolVersion",
    "event",
    "runId",
    "traceId",
    "conversationId",
    "messageId",
    "sequence",
    "data",
)

#: Feed ids (``gateway.feed.is_run_part``; a test keeps the two equal).
RUN_PART: Final = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


@functools.cache
def _validators() -> dict[str, jsonschema_rs.Validator]:
    """One validator per event name: the seed with only that name's ``if``/``then``.

    Every branch of the seed's ``allOf`` is ``if event == name then data ...``, so for an
    event named ``name`` the other branches hold vacuously; dropping them gives the same
    verdict and errors about that event's data only.
    """
    document = seeds.schema(seeds.SPARKTIDE)
    out: dict[str, jsonschema_rs.Validator] = {}
    for branch in document["allOf"]:
        name = branch["if"]["properties"]["event"]["const"]
        narrowed = {**document, "allOf": [branch]}
        out[name] = seeds.compile_schema(narrowed)
    if set(out) != set(EVENT_NAMES):
        raise RuntimeError("the SparkTide seed's event names changed")
    return out


def check_event(event: object, where: str = "event") -> Event:
    """Check one SparkTide event; returns it unchanged.

    Raises :class:`InvalidRequest` whose message starts with ``where`` and the failing
    field (``event.data.status: "status" is a required property``).
    """
    if not isinstance(event, dict):
        kind = seeds.json_type(event)
        raise InvalidRequest(f"{where}: a SparkTide event is an object, not {kind}")
    unknown = [key for key in event if key not in ENVELOPE]
    if unknown:
        raise InvalidRequest(
            f"{where}.{seeds.clip(str(unknown[0]), 100)}: unknown field "
            f"(the envelope has exactly {', '.join(ENVELOPE)})"
        )
    for key in ENVELOPE:
        if key not in event:
            raise InvalidRequest(f"{where}.{key}: required")
    name = event["event"]
    if name not in EVENT_NAMES:
        shown = seeds.clip(repr(name), 100)
        raise InvalidRequest(f"{where}.event: {shown} is not one of the 19 SparkTide event names")
    seeds.check(_validators()[name], event, where)
    for key, role in (("conversationId", "thread"), ("runId", "run")):
        if not RUN_PART.match(event[key]):
            raise InvalidRequest(
                f"{where}.{key}: names the run feed's {role}, so it must match "
                "^[A-Za-z0-9_.-]{1,128}$"
            )
    return event


def check_body(body: object) -> list[Event]:
    """Check a publish body: one event or a non-empty array of them, all or nothing.

    An array holds the events of one run (one ``conversationId`` and ``runId``), so that
    it is appended to one run feed at once.  Messages name the item (``[2].data.text``).
    """
    if isinstance(body, list):
        if not body:
            raise InvalidRequest("body: the array is empty; send at least one event")
        if len(body) > seeds.MAX_ITEMS:
            raise InvalidRequest(f"body: at most {seeds.MAX_ITEMS} events per request")
        events = [check_event(item, f"[{i}]") for i, item in enumerate(body)]
    else:
        events = [check_event(body)]
    first = events[0]
    for index, event in enumerate(events):
        for key in ("conversationId", "runId"):
            if event[key] != first[key]:
                raise InvalidRequest(
                    f"[{index}].{key}: differs from item 0's; one request publishes to one run"
                )
    return events


def feed_of(event: Event) -> tuple[str, str]:
    """``(thread_id, run_id)`` of the run feed the event goes to."""
    return event["conversationId"], event["runId"]


def event_key(event: Event) -> str:
    """The event's idempotency key in its run: ``<messageId>:<sequence>``.

    Unambiguous although ids may contain ``:``, because the sequence is an integer and
    always the last part.
    """
    return f"{event['messageId']}:{event['sequence']}"


def item_keys(event: Event, count: int) -> list[str]:
    """Log keys for the ``count`` AG-UI events derived from ``event``:
    ``sparktide:<messageId>:<sequence>#<k>``."""
    key = event_key(event)
    return [f"sparktide:{key}#{k}" for k in range(count)]


class Verdict(enum.Enum):
    """What :func:`check_sequence` decided."""

    APPEND = "append"
    """A new event, next in its message: translate and append it."""
    RETRY = "retry"
    """Already published with this very body: answer the cursor it got the first time."""


class RunState(msgspec.Struct, frozen=True, kw_only=True):
    """What translating a run's next event depends on (``gateway.dialects.sparktide_agui``)."""

    message_id: str | None = None
    """The run's message (set by its first event)."""
    sequence: int = 0
    """The last sequence of the message the run holds (0: none yet)."""
    ended: bool = False
    """The run ended (``message.completed``, or an ``error`` that is not retryable)."""
    subagents: tuple[str, ...] = ()
    """Open subagents (``agentCallId`` of agents at depth >= 1), in opening order."""
    steps: tuple[tuple[str, str | None], ...] = ()
    """Open steps as ``(stepName, subagentRunId or None)``, in opening order."""


def check_sequence(
    state: RunState, event: Event, *, stored: Event | None, where: str = "event"
) -> Verdict:
    """The sequence rule, given what the run already holds.

    ``state.sequence`` is the last sequence the run holds of its message (0 for none),
    ``state.message_id`` that message.  ``stored`` is the SparkTide event the run holds
    under :func:`event_key` of ``event`` (the ``rawEvent`` of the first AG-UI event
    derived from it), or None if it holds none (never published, or trimmed).

    - ``sequence <= state.sequence`` and ``stored`` has the same body (RFC 8785): RETRY;
      another body: :class:`IdempotencyKeyReused` (409);
    - ``sequence == state.sequence + 1``: APPEND;
    - a gap (``sequence > state.sequence + 1``, including a message whose first event is
      not 1) or a regression (a sequence at or below the last that the run no longer
      holds): :class:`InvalidRequest` (400).

    An event of another message than the run's is not a retry: it gets APPEND here and
    the translation refuses it (a run carries one message).
    """
    sequence = event["sequence"]
    if state.message_id is not None and event["messageId"] != state.message_id:
        return Verdict.APPEND
    if sequence <= state.sequence:
        if stored is None:
            raise InvalidRequest(
                f"{where}.sequence: {sequence} is at or below the message's last sequence "
                f"{state.sequence}, and the run no longer holds it (sequences only increase)"
            )
        if canonical(stored) != canonical(event):
            raise IdempotencyKeyReused(
                f"{where}.sequence: message {seeds.clip(event['messageId'], 100)!r} already "
                f"has a different event at sequence {sequence}"
            )
        return Verdict.RETRY
    if sequence != state.sequence + 1:
        raise InvalidRequest(
            f"{where}.sequence: {sequence} leaves a gap: the message's next sequence is "
            f"{state.sequence + 1}"
        )
    return Verdict.APPEND
