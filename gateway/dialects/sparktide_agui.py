"""SparkTide AgentEvent 1.0 to AG-UI: the per-run state and the translation table (pure).

Decisions D10; the table, with a row per event name, is ``docs/dialects/sparktide.md``.

A run feed ``run/<conversationId>/<runId>`` carries one SparkTide message as one AG-UI
run.  The AG-UI events derived from a SparkTide event depend only on that event and a
:class:`RunState`, the little a publisher holds per run: the run's message, its last
sequence, whether it ended, and what is open (subagents and steps).  :func:`translate`
returns the derived events and the next state; :func:`advance` only the state.  The
same state and event always derive byte-identical events (no clock, no random ids), so
a publish retried before it was appended derives what the first attempt derived.

- The message's first event opens the run: ``RUN_STARTED`` and ``TEXT_MESSAGE_START``
  (the message's text is open for the whole run; ``text.delta`` appends to it).
- ``message.completed`` ends the run: whatever is still open is closed (steps, then
  subagents, then the text), then ``RUN_FINISHED`` if its status is one of
  :data:`SUCCESS_STATUSES`, else ``RUN_ERROR``.  An ``error`` with ``retryable: false``
  ends it the same way with ``RUN_ERROR``; a retryable one does not end it.
- Every derived event carries the original event, unchanged, in ``rawEvent``, and
  ``metadata.sparktide = {event, sequence, traceId}``; everything else of the original
  that AG-UI has no field for is only in ``rawEvent``.  Derived events validate as
  AG-UI 1.0 (``gateway.agui.events.strict_check``).

Where the state comes from: the publisher keeps it per run, or rebuilds it from the
run's fold and the feed's last event with :func:`state_from_fold`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from gateway.agui.fold import RunFold
from gateway.dialects.sparktide import (
    EVENT_NAMES,
    RunState,
    Verdict,
    check_sequence,
    event_key,
    item_keys,
)
from gateway.errors import InvalidRequest, RunEnded

Event = dict[str, Any]

#: ``message.completed`` and ``agent.completed`` statuses that mean success (compared
#: case-insensitively); any other status is a failure.
SUCCESS_STATUSES: Final = frozenset({"SUCCEEDED", "SUCCESS", "COMPLETED", "DONE", "OK"})

#: Activity types are ``sparktide.<kind>``.
ACTIVITY_PREFIX: Final = "sparktide."

#: At most this many subagents and steps may be open at once in a run (the state's bound).
MAX_OPEN: Final = 256


def is_success(status: str) -> bool:
    return status.upper() in SUCCESS_STATUSES


class Planned(msgspec.Struct, frozen=True):
    """One event of a publish body, planned by :func:`plan`."""

    event: Event
    """The SparkTide event."""
    key: str
    """Its :func:`~gateway.dialects.sparktide.event_key`."""
    retry: bool
    """Already published with this body: answer the cursor its key got, append nothing."""
    derived: list[Event]
    """The AG-UI events to append (empty for a retry)."""
    item_keys: list[str]
    """Log keys of the derived events, one each (the log's own retry safety net)."""


class _Turn:
    """The translation of one event: what it emits and how it changes what is open."""

    def __init__(self, state: RunState, event: Event, where: str) -> None:
        self.event = event
        self.data: dict[str, Any] = event["data"]
        self.where = where
        self.mid: str = event["messageId"]
        self.seq: int = event["sequence"]
        self.subagents = list(state.subagents)
        self.steps = list(state.steps)
        self.ended = False
        self.out: list[Event] = []

    def emit(self, event: Event, lane: str | None = None) -> None:
        if lane is not None:
            event["subagentRunId"] = lane
        self.out.append(event)

    def lane(self) -> str | None:
        """The subagent this event is attributed to: its agent call, if at depth >= 1
        and open (AG-UI attributes only to a subagent that started)."""
        call, depth = self.data.get("agentCallId"), self.data.get("depth")
        if isinstance(depth, int) and depth >= 1 and call in self.subagents:
            return str(call)
        return None

    def activity(self, kind: str, message_id: str, lane: str | None = None) -> None:
        content = {"event": self.event["event"], "data": self.data}
        self.emit(
            {
                "type": "ACTIVITY_SNAPSHOT",
                "messageId": message_id,
                "activityType": ACTIVITY_PREFIX + kind,
                "content": content,
            },
            lane,
        )

    def open_step(self, name: str, lane: str | None) -> None:
        if any(open_name == name for open_name, _ in self.steps):
            raise InvalidRequest(f"{self.where}.data: the step {name!r} is already open")
        self.steps.append((name, lane))
        self.emit({"type": "STEP_STARTED", "stepName": name}, lane)

    def finish_step(self, name: str, lane: str | None) -> None:
        """Finish an open step in the lane it opened in; one that never opened is
        opened first (a client refuses a finish without its start)."""
        for index, (open_name, open_lane) in enumerate(self.steps):
            if open_name == name:
                del self.steps[index]
                self.emit({"type": "STEP_FINISHED", "stepName": name}, open_lane)
                return
        self.emit({"type": "STEP_STARTED", "stepName": name}, lane)
        self.emit({"type": "STEP_FINISHED", "stepName": name}, lane)

    def start_subagent(self, call: str) -> None:
        start: Event = {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": call,
            "name": self.data["agentId"],
        }
        parent = self.data.get("parentAgentCallId")
        if parent in self.subagents:
            start["parentSubagentRunId"] = parent
        self.subagents.append(call)
        self.emit(start)

    def close_steps(self, lane: str | None, *, every: bool = False) -> None:
        for name, open_lane in reversed(list(self.steps)):
            if every or open_lane == lane:
                self.steps.remove((name, open_lane))
                self.emit({"type": "STEP_FINISHED", "stepName": name}, open_lane)

    def end(self, terminal: Event, *, failure: str | None) -> None:
        """Close everything still open, then the run (``failure`` is the error message)."""
        self.close_steps(None, every=True)
        for call in reversed(self.subagents):
            if failure is None:
                self.emit({"type": "SUBAGENT_FINISHED", "subagentRunId": call})
            else:
                self.emit({"type": "SUBAGENT_ERROR", "subagentRunId": call, "message": failure})
        self.subagents.clear()
        self.emit({"type": "TEXT_MESSAGE_END", "messageId": self.mid})
        self.emit(terminal)
        self.ended = True


# --------------------------------------------------------------------------- the rows


def _status(t: _Turn) -> None:
    t.activity("status", f"{t.mid}:status")


def _text_delta(t: _Turn) -> None:
    t.emit({"type": "TEXT_MESSAGE_CONTENT", "messageId": t.mid, "delta": t.data["text"]})


def _agent_started(t: _Turn) -> None:
    call = t.data["agentCallId"]
    if t.data["depth"] == 0:
        t.open_step(f"agent:{call}", None)
        return
    if call in t.subagents:
        raise InvalidRequest(f"{t.where}.data.agentCallId: the agent call {call!r} is already open")
    t.start_subagent(call)


def _agent_completed(t: _Turn) -> None:
    call, status = t.data["agentCallId"], t.data["status"]
    if t.data["depth"] == 0:
        t.finish_step(f"agent:{call}", None)
        return
    if call not in t.subagents:
        t.start_subagent(call)
    t.close_steps(call)
    t.subagents.remove(call)
    if is_success(status):
        finished: Event = {"type": "SUBAGENT_FINISHED", "subagentRunId": call}
        if "result" in t.data:
            finished["result"] = t.data["result"]
        t.emit(finished)
        return
    failed: Event = {
        "type": "SUBAGENT_ERROR",
        "subagentRunId": call,
        "message": f"agent {t.data['agentId']} completed with status {status}",
    }
    code = t.data.get("errorCode")
    failed["code"] = code if isinstance(code, str) else status
    t.emit(failed)


def _tool_started(t: _Turn) -> None:
    lane = t.lane()
    call = t.data["callId"]
    start: Event = {"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": t.data["toolId"]}
    if lane is None:
        # A subagent's tool call gets a message of its own: AG-UI refuses a tool call
        # attributed to a subagent inside the parent agent's message.
        start["parentMessageId"] = t.mid
    t.emit(start, lane)
    t.emit({"type": "TOOL_CALL_END", "toolCallId": call}, lane)


def _tool_completed(t: _Turn) -> None:
    result = {
        "type": "TOOL_CALL_RESULT",
        "messageId": f"{t.mid}:tool-result:{t.seq}",
        "toolCallId": t.data["callId"],
        "content": t.data["status"],
        "role": "tool",
    }
    t.emit(result, t.lane())


def _knowledge(t: _Turn) -> None:
    t.activity("knowledge", f"{t.mid}:knowledge:{t.seq}", t.lane())


def _citation_created(t: _Turn) -> None:
    t.activity("citation", f"{t.mid}:citation:{t.data['id']}", t.lane())


def _citation_verified(t: _Turn) -> None:
    t.activity("citation", f"{t.mid}:citation-check:{t.seq}", t.lane())


def _ui_created(t: _Turn) -> None:
    t.activity("ui", f"{t.mid}:ui:{t.seq}", t.lane())


def _confirmation_required(t: _Turn) -> None:
    t.activity("confirmation", f"{t.mid}:confirmation:{t.data['confirmationId']}")


def _usage_updated(t: _Turn) -> None:
    t.activity("usage", f"{t.mid}:usage:{t.data['agentCallId']}", t.lane())


def _error(t: _Turn) -> None:
    if t.data["retryable"]:
        t.activity("error", f"{t.mid}:error:{t.seq}", t.lane())
        return
    message = t.data["message"]
    t.end({"type": "RUN_ERROR", "message": message, "code": t.data["code"]}, failure=message)


def _message_completed(t: _Turn) -> None:
    _status(t)
    status = t.data["status"]
    thread, run = t.event["conversationId"], t.event["runId"]
    if is_success(status):
        t.end({"type": "RUN_FINISHED", "threadId": thread, "runId": run}, failure=None)
        return
    message = f"the message completed with status {status}"
    t.end({"type": "RUN_ERROR", "message": message, "code": status}, failure=message)


def _model_started(t: _Turn) -> None:
    t.open_step(f"model:{t.data['invocationId']}", t.lane())


def _model_completed(t: _Turn) -> None:
    t.finish_step(f"model:{t.data['invocationId']}", t.lane())


#: The translation table: one row per SparkTide event name.
ROWS: Final[Mapping[str, Callable[[_Turn], None]]] = {
    "message.started": _status,
    "status.changed": _status,
    "text.delta": _text_delta,
    "agent.started": _agent_started,
    "agent.completed": _agent_completed,
    "tool.started": _tool_started,
    "tool.completed": _tool_completed,
    "knowledge.retrieved": _knowledge,
    "citation.created": _citation_created,
    "ui.created": _ui_created,
    "confirmation.required": _confirmation_required,
    "usage.updated": _usage_updated,
    "error": _error,
    "message.completed": _message_completed,
    "model.started": _model_started,
    "model.completed": _model_completed,
    "knowledge.planned": _knowledge,
    "knowledge.fused": _knowledge,
    "citation.verified": _citation_verified,
}
if tuple(ROWS) != EVENT_NAMES:
    raise RuntimeError("the translation table must have a row per SparkTide event name")


# --------------------------------------------------------------------------- public API


def translate(state: RunState, event: Event, where: str = "event") -> tuple[RunState, list[Event]]:
    """The next state and the AG-UI events derived from one checked SparkTide event.

    ``event`` must have passed :func:`~gateway.dialects.sparktide.check_event` and the
    sequence rule (:func:`~gateway.dialects.sparktide.check_sequence` said APPEND).
    Raises :class:`InvalidRequest` for an event the run cannot take: another message
    than the run's, an agent call or step already open, more than :data:`MAX_OPEN` open
    at once; :class:`RunEnded` for an event after the run ended.
    """
    mid = event["messageId"]
    if state.message_id is not None and mid != state.message_id:
        raise InvalidRequest(
            f"{where}.messageId: the run already carries the message {state.message_id!r}; "
            "a run carries one message"
        )
    if state.ended:
        raise RunEnded(
            f"{where}.event: the run has ended (message.completed, or an error that is not "
            "retryable); nothing more can be published to it"
        )
    turn = _Turn(state, event, where)
    if state.message_id is None:
        turn.emit(
            {"type": "RUN_STARTED", "threadId": event["conversationId"], "runId": event["runId"]}
        )
        turn.emit({"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"})
    ROWS[event["event"]](turn)
    if len(turn.subagents) + len(turn.steps) > MAX_OPEN:
        raise InvalidRequest(
            f"{where}.data: more than {MAX_OPEN} subagents and steps would be open at once"
        )
    source = {"event": event["event"], "sequence": event["sequence"], "traceId": event["traceId"]}
    for derived in turn.out:
        derived["metadata"] = {"sparktide": dict(source)}
        derived["rawEvent"] = event
    after = RunState(
        message_id=mid,
        sequence=event["sequence"],
        ended=turn.ended,
        subagents=tuple(turn.subagents),
        steps=tuple(turn.steps),
    )
    return after, turn.out


def advance(state: RunState, event: Event) -> RunState:
    """The state after ``event`` (:func:`translate` without the events)."""
    return translate(state, event)[0]


def plan(
    state: RunState,
    events: list[Event],
    stored: Mapping[str, Event],
    *,
    array: bool = True,
) -> tuple[RunState, list[Planned]]:
    """Apply the sequence rule and translate a checked publish body, all or nothing.

    ``stored`` maps the :func:`~gateway.dialects.sparktide.event_key` of events the run
    already holds, for those keys among ``events``, to the SparkTide event held (the
    ``rawEvent`` of its first derived AG-UI event).  An event repeated within the body is
    a retry of its first occurrence.  ``array`` says whether the body was an array (error
    messages then name ``[i]``, else ``event``).  Raises :class:`InvalidRequest` or
    :class:`~gateway.errors.IdempotencyKeyReused`; on success returns the state after
    the body and a :class:`Planned` per event, in order.
    """
    in_body: dict[str, Event] = {}
    out: list[Planned] = []
    for index, event in enumerate(events):
        where = f"[{index}]" if array else "event"
        key = event_key(event)
        held = in_body.get(key, stored.get(key))
        if check_sequence(state, event, stored=held, where=where) is Verdict.RETRY:
            out.append(Planned(event, key, True, [], []))
            continue
        state, derived = translate(state, event, where)
        in_body[key] = event
        out.append(Planned(event, key, False, derived, item_keys(event, len(derived))))
    return state, out


def state_from_fold(fold: RunFold, last: Event | None) -> RunState:
    """The state of a run feed written by this translation, from its fold and its last
    AG-UI event (``None`` for an empty feed).

    The message is the one ``RUN_STARTED`` came from, the sequence that of the event the
    last AG-UI event came from; what is open is what the fold has open.
    """
    started = fold.run_started
    raw = started.get("rawEvent") if started is not None else None
    if not isinstance(raw, dict):
        return RunState()
    last_raw = last.get("rawEvent") if last is not None else None
    sequence = last_raw.get("sequence") if isinstance(last_raw, dict) else None
    return RunState(
        message_id=raw.get("messageId"),
        sequence=sequence if isinstance(sequence, int) else 0,
        ended=fold.terminal is not None,
        subagents=tuple(fold.subagents),
        steps=tuple((name, lane) for lane, name in fold.steps),
    )
