"""AG-UI run events as Vercel AI SDK UI message stream v1 chunks (pure; decisions D10).

The chunk schema is the seed's ``ai-sdk-ui`` component (``uiMessageChunkSchema`` of
``ai@7.0.113``).  One AG-UI run becomes one assistant ``UIMessage`` whose id is
:func:`message_id` of the run.  :data:`MAPPING` has a row for each of the 31 AG-UI event
types (``docs/dialects/ai-sdk.md`` is the same table in prose).

How: an :class:`AiSdkTranslator` holds a :class:`~gateway.agui.fold.RunFold` and the
parts it projects to (:mod:`gateway.dialects.ai_sdk.projection`).  Translating an event
applies it to the fold (chunk events are expanded per lane there) and emits, in order:
the row's chunks that come before the parts (``start``), the chunks that make the
client's parts follow the fold's (text / reasoning / tool input deltas, starts, ends,
outputs, approvals, data parts), then the row's chunks after them (``finish``,
``error``, ``abort``, transient data).  Contracts:

- deterministic: the chunks of an event depend only on the fold before it, the event
  and the run's ids, so chunk ``K`` of the event at ``E:O`` is the same on every read
  and every node, and :meth:`AiSdkTranslator.from_fold` at the fold before ``O``
  continues exactly as the translator that saw everything;
- :func:`compact` of the fold at ``k`` followed by the chunks of events ``[k:]`` gives
  a client the same final message as every chunk from the start;
- chunks are read-only: they may share values with the translator's fold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.agui.fold import RunFold
from gateway.dialects.ai_sdk.parts import RESET, Chunk, Part, ToolPart, build
from gateway.dialects.ai_sdk.projection import Projection

Event = dict[str, Any]
#: Transient data chunk types (never stored in the message; ``onData`` only).
STATE_TYPE = "data-ag-ui-state"
EVENT_TYPE = "data-ag-ui-event"


def message_id(thread_id: str, run_id: str) -> str:
    """The id of the run's assistant UIMessage: the same on every replay and node, so a
    client that resumes replaces the message instead of adding a second one."""
    return f"run:{thread_id}:{run_id}"


Emit = Callable[["AiSdkTranslator", Event], list[Chunk]]


@dataclass(frozen=True, slots=True)
class Row:
    """How one AG-UI event type is carried.

    ``chunks`` says what it becomes (documentation); ``parts`` whether it can change the
    UI message's parts (then the projection is diffed); ``before`` / ``after`` give the
    chunks emitted before / after the parts' chunks.
    """

    chunks: str
    parts: bool = False
    before: Emit | None = None
    after: Emit | None = None


def _start(t: AiSdkTranslator, event: Event) -> list[Chunk]:
    return [{"type": "start", "messageId": message_id(t.thread_id, t.run_id)}]


def terminal_chunks(event: Event, parts: list[Part]) -> list[Chunk]:
    """The chunks that end the stream for a RUN_FINISHED or RUN_ERROR.

    ``finish`` carries a finishReason: ``stop`` for success (or no outcome), ``tool-calls``
    for an interrupt that asks to approve a tool call, ``other`` for any other outcome;
    a ``cancelled`` outcome is ``abort`` instead, RUN_ERROR is ``error``.
    """
    if event.get("type") == "RUN_ERROR":
        return [{"type": "error", "errorText": str(event.get("message", ""))}]
    outcome = event.get("outcome")
    kind = outcome.get("type") if isinstance(outcome, dict) else None
    if kind == "cancelled":
        return [{"type": "abort", "reason": "cancelled"}]
    if kind is None or kind == "success":
        reason = "stop"
    elif kind == "interrupt" and any(
        isinstance(p, ToolPart) and p.approval is not None for p in parts
    ):
        reason = "tool-calls"
    else:
        reason = "other"
    return [{"type": "finish", "finishReason": reason}]


def _terminal(t: AiSdkTranslator, event: Event) -> list[Chunk]:
    return terminal_chunks(event, t.parts)


def state_chunk(state: Any) -> Chunk:
    """The run's folded state, as a transient data chunk (the client's ``onData``)."""
    return {"type": STATE_TYPE, "data": state, "transient": True}


def _state(t: AiSdkTranslator, event: Event) -> list[Chunk]:
    return [state_chunk(t._fold.state)]


def _passthrough(t: AiSdkTranslator, event: Event) -> list[Chunk]:
    return [{"type": EVENT_TYPE, "data": event, "transient": True}]


_TEXT = "text-start / text-delta / text-end (id = messageId)"
_REASONING = "reasoning-start / reasoning-delta / reasoning-end (id = messageId)"
_EXPANDED = "expanded into start / content / end per lane (as RunFold does), then as those"
_NOT_CARRIED = "not carried"

#: Every AG-UI event type and how it is carried.  Unknown types are not carried.
MAPPING: dict[str, Row] = {
    "RUN_STARTED": Row("start{messageId}; then the input history's reply parts", True, _start),
    "RUN_FINISHED": Row(
        "ends of open parts, tool-approval-request per interrupt naming a tool call "
        "(data-ag-ui-interrupt for others), then finish{finishReason}; "
        "a cancelled outcome ends with abort",
        True,
        after=_terminal,
    ),
    "RUN_ERROR": Row("ends of open parts, then error{errorText: message}", True, after=_terminal),
    "TEXT_MESSAGE_START": Row(_TEXT, True),
    "TEXT_MESSAGE_CONTENT": Row(_TEXT + "; an empty delta yields no chunk", True),
    "TEXT_MESSAGE_END": Row(_TEXT, True),
    "TEXT_MESSAGE_CHUNK": Row(_EXPANDED, True),
    "TOOL_CALL_START": Row("tool-input-start{toolCallId, toolName}", True),
    "TOOL_CALL_ARGS": Row("tool-input-delta{toolCallId, inputTextDelta}", True),
    "TOOL_CALL_END": Row(
        "tool-input-available{input: the arguments as JSON}, or tool-input-error", True
    ),
    "TOOL_CALL_CHUNK": Row(_EXPANDED, True),
    "TOOL_CALL_RESULT": Row("tool-output-available{toolCallId, output: content}", True),
    "STATE_SNAPSHOT": Row("transient data-ag-ui-state{data: the folded state}", after=_state),
    "STATE_DELTA": Row("transient data-ag-ui-state{data: the folded state}", after=_state),
    "MESSAGES_SNAPSHOT": Row("the chunks of the change to the reply, or reset-step + all", True),
    "ACTIVITY_SNAPSHOT": Row("data-<activityType>{id: messageId, data: content}", True),
    "ACTIVITY_DELTA": Row("data-<activityType>{id: messageId, data: patched content}", True),
    "RAW": Row(_NOT_CARRIED),
    "CUSTOM": Row("transient data-ag-ui-event{data: the event}", after=_passthrough),
    "STEP_STARTED": Row("transient data-ag-ui-event{data: the event}", after=_passthrough),
    "STEP_FINISHED": Row("transient data-ag-ui-event{data: the event}", after=_passthrough),
    "REASONING_START": Row(_NOT_CARRIED + " (the span; its messages are)"),
    "REASONING_MESSAGE_START": Row(_REASONING, True),
    "REASONING_MESSAGE_CONTENT": Row(_REASONING + "; an empty delta yields no chunk", True),
    "REASONING_MESSAGE_END": Row(_REASONING, True),
    "REASONING_MESSAGE_CHUNK": Row(_EXPANDED, True),
    "REASONING_END": Row(_NOT_CARRIED + " (the span; its messages are)"),
    "REASONING_ENCRYPTED_VALUE": Row(_NOT_CARRIED),
    "SUBAGENT_STARTED": Row("transient data-ag-ui-event{data: the event}", after=_passthrough),
    "SUBAGENT_FINISHED": Row("transient data-ag-ui-event{data: the event}", after=_passthrough),
    "SUBAGENT_ERROR": Row("transient data-ag-ui-event{data: the event}", after=_passthrough),
}
_UNKNOWN = Row(_NOT_CARRIED)


class AiSdkTranslator:
    """Translates one run feed's AG-UI events, in feed order, into AI SDK chunks."""

    __slots__ = ("_fold", "_projection", "run_id", "thread_id")

    def __init__(self, thread_id: str, run_id: str, *, fold: RunFold | None = None) -> None:
        """A translator at the start of the run, or at ``fold`` (which it then owns)."""
        self.thread_id, self.run_id = thread_id, run_id
        self._fold = fold if fold is not None else RunFold()
        self._projection = Projection(self._fold)

    @classmethod
    def from_fold(cls, fold: RunFold, thread_id: str, run_id: str) -> AiSdkTranslator:
        """A translator positioned after the events ``fold`` holds (``fold`` is copied)."""
        return cls(thread_id, run_id, fold=fold.copy())

    def copy(self) -> AiSdkTranslator:
        """An independent translator at the same position."""
        return AiSdkTranslator(self.thread_id, self.run_id, fold=self._fold.copy())

    @property
    def fold(self) -> RunFold:
        """The translator's fold (read only: changing it breaks the translation)."""
        return self._fold

    @property
    def parts(self) -> list[Part]:
        """The parts a client holds at this position, ``project(fold)`` (read only)."""
        return self._projection.parts

    def translate(self, event: Event) -> list[Chunk]:
        """The chunks of one published event (possibly none); advances the translator."""
        row = MAPPING.get(str(event.get("type")), _UNKNOWN)
        out = row.before(self, event) if row.before is not None else []
        applied = self._fold.apply(event)
        structural = any(MAPPING.get(str(e.get("type")), _UNKNOWN).parts for e in applied)
        out += self._projection.follow(self._fold, applied, structural)
        if row.after is not None:
            out += row.after(self, event)
        return out

    def compact(self) -> list[Chunk]:
        """:func:`compact` of this translator's position."""
        return compact(self._fold, self.thread_id, self.run_id, parts=self.parts)


def compact(
    fold: RunFold, thread_id: str, run_id: str, *, parts: list[Part] | None = None
) -> list[Chunk]:
    """The run so far in few chunks, for a client that has nothing (or must resync).

    ``start`` (if the run has started), ``reset-step`` (a client that held an older
    copy of the message drops its parts), every part with at most one delta (open parts
    are left open, so the events after ``fold`` continue them), the folded state as a
    transient ``data-ag-ui-state`` (unless it is ``{}``), and the terminal chunks if the
    run has ended.  ``parts`` may pass the fold's projection if it is already known.
    """
    parts = Projection(fold).parts if parts is None else parts
    out: list[Chunk] = []
    if fold.run_started is not None:
        out.append({"type": "start", "messageId": message_id(thread_id, run_id)})
    out.append(RESET)
    for part in parts:
        out += build(part)
    if fold.state != {}:
        out.append(state_chunk(fold.state))
    if fold.terminal is not None:
        out += terminal_chunks(fold.terminal, parts)
    return out
