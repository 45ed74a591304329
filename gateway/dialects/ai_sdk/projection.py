"""The AI SDK UI message of a run as a function of its fold, kept up to date (pure; D10).

The translator keeps no state of its own besides a :class:`~gateway.agui.fold.RunFold`:
after the chunks of events ``[:k]`` a client holds exactly the parts that
:func:`project` computes from the fold of ``[:k]``.  That makes a translator rebuildable
from any fold, chunk ``K`` of an event the same on every node, and the compact replay
(every part built at once) equal to having seen every chunk.

The projection, each row a part, in the fold's message order:

- scope: the fold's messages after its last ``user`` message (the run's reply to it;
  an input history that ends with an assistant turn is part of the reply);
- an assistant message: a text part (chunk id = message id) if it has text or is an
  open text message, then one static tool part (``tool-<name>``) per tool call: input
  streaming while the call is open, then the arguments parsed as JSON
  (``input-available``; empty arguments are ``{}``) or, when they are not JSON,
  ``output-error`` with the raw text; then the output of the call's last tool result
  (results of open calls wait for the call to close);
- a reasoning message: a reasoning part (id = message id);
- an activity message: a data part ``data-<activityType>`` with id = message id whose
  data is the activity's folded content;
- after ``RUN_FINISHED`` with an interrupt outcome: each interrupt naming a tool call
  of the reply becomes that tool's approval request (approval id = interrupt id,
  reason = its message), any other one a ``data-ag-ui-interrupt`` part (id = interrupt
  id, data = the interrupt);
- once the run has ended (RUN_FINISHED / RUN_ERROR) every part is closed;
- messages of other roles have no part; a second part with a key already taken (a
  duplicate id) is left out.

:meth:`Projection.follow` keeps a projection up to date after each event, in one of
three ways, all giving what :func:`project` would: the delta of an open part's text or
arguments (O(1), most events); a recompute of the reply from the earliest message the
event touched (a start, end, tool result or activity: O(distance from the end)); or the
whole projection (run events, MESSAGES_SNAPSHOT, an ended run, and replies with
duplicate ids or a tool result before its call, where locality does not hold).
"""

from __future__ import annotations

from typing import Any

from gateway.agui.fold import Message, RunFold
from gateway.dialects.ai_sdk.parts import (
    NO_OUTPUT,
    Chunk,
    DataPart,
    Part,
    TextPart,
    ToolPart,
    args_delta,
    changes,
    rebuild,
    text_delta,
)

Event = dict[str, Any]
INTERRUPT_TYPE = "data-ag-ui-interrupt"
_CONTENT = {"TEXT_MESSAGE_CONTENT": "text", "REASONING_MESSAGE_CONTENT": "reasoning"}
#: Events that change only the message they name (or the tool call's message), and
#: messages they append or insert after it.
_BY_MESSAGE = frozenset(
    {
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_DELTA",
    }
)
_BY_CALL = frozenset({"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"})


def _reply_start(messages: list[Message]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index + 1
    return 0


def _results(messages: list[Message], start: int) -> tuple[dict[str, Any], dict[str, int]]:
    """Each call's last tool result in ``messages[start:]``, and where its first is."""
    results: dict[str, Any] = {}
    first: dict[str, int] = {}
    for index in range(start, len(messages)):
        message = messages[index]
        if message.get("role") == "tool" and isinstance(message.get("toolCallId"), str):
            results[message["toolCallId"]] = message.get("content")
            first.setdefault(message["toolCallId"], index)
    return results, first


class _Scan:
    """The parts of ``fold.messages[start:]``, skipping keys ``index`` already has (and
    adding its own); ``simple`` turns false on what breaks locality."""

    def __init__(
        self,
        fold: RunFold,
        start: int,
        index: dict[tuple[str, ...], Part],
        orphans: set[str],
    ) -> None:
        messages = fold.messages
        ended = fold.terminal is not None
        results, first_result = _results(messages, start)
        self.parts: list[Part] = []
        self.starts: list[int] = []
        self.tools: dict[str, ToolPart] = {}
        self.simple = True
        self.results = results
        for position in range(start, len(messages)):
            self.starts.append(len(self.parts))
            message = messages[position]
            role, mid = message.get("role"), message.get("id")
            if not isinstance(mid, str) or role not in ("assistant", "reasoning", "activity"):
                continue
            if fold.message(mid) is not message:
                self.simple = False  # another message answers to this id
            content = message.get("content")
            if role == "assistant":
                is_open = not ended and mid in fold.texts
                if isinstance(content, str) or is_open:
                    text = content if isinstance(content, str) else ""
                    self._add(index, TextPart("text", mid, text, is_open, message))
                calls = message.get("toolCalls")
                for call in calls if isinstance(calls, list) else ():
                    if isinstance(call, dict) and isinstance(call.get("id"), str):
                        self._tool(fold, index, orphans, call, position, first_result, ended)
            elif role == "reasoning":
                is_open = not ended and mid in fold.reasoning_messages
                text = content if isinstance(content, str) else ""
                self._add(index, TextPart("reasoning", mid, text, is_open, message))
            elif isinstance(message.get("activityType"), str):
                self._add(index, DataPart("data-" + message["activityType"], mid, content))

    def _add(self, index: dict[tuple[str, ...], Part], part: Part) -> bool:
        if part.key in index:
            self.simple = False
            return False
        index[part.key] = part
        self.parts.append(part)
        return True

    def _tool(
        self,
        fold: RunFold,
        index: dict[tuple[str, ...], Part],
        orphans: set[str],
        call: dict[str, Any],
        position: int,
        first_result: dict[str, int],
        ended: bool,
    ) -> None:
        cid = call["id"]
        hit = fold.tool_call(cid)
        if hit is None or hit[1] is not call:
            self.simple = False
        if cid in orphans or first_result.get(cid, position) < position:
            self.simple = False  # a result before its call: it may sit before the scan
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        name, args = function.get("name"), function.get("arguments")
        is_open = not ended and cid in fold.tools
        tool = ToolPart(
            cid,
            name if isinstance(name, str) else "",
            args if isinstance(args, str) else "",
            is_open,
            NO_OUTPUT if is_open else self.results.get(cid, NO_OUTPUT),
            call,
        )
        if self._add(index, tool):
            self.tools[cid] = tool


def _interrupts(terminal: Event | None) -> list[Event]:
    if terminal is None or terminal.get("type") != "RUN_FINISHED":
        return []
    outcome = terminal.get("outcome")
    if not isinstance(outcome, dict) or outcome.get("type") != "interrupt":
        return []
    found = outcome.get("interrupts")
    return [
        i
        for i in (found if isinstance(found, list) else ())
        if isinstance(i, dict) and isinstance(i.get("id"), str)
    ]


class Projection:
    """The parts of a fold (see the module docstring), kept up to date by :meth:`follow`.

    ``parts`` and ``index`` (key -> part) are read only for everyone else.
    """

    __slots__ = ("_boundary", "_orphans", "_reply", "_simple", "_starts", "index", "parts")

    def __init__(self, fold: RunFold) -> None:
        messages = fold.messages
        self._reply = _reply_start(messages)
        self._boundary = messages[self._reply - 1] if self._reply else None
        self.index: dict[tuple[str, ...], Part] = {}
        scan = _Scan(fold, self._reply, self.index, set())
        self.parts, self._starts, self._simple = scan.parts, scan.starts, scan.simple
        self._orphans = {cid for cid in scan.results if ("tool", cid) not in self.index}
        for interrupt in _interrupts(fold.terminal):
            call_id = interrupt.get("toolCallId")
            target = scan.tools.get(call_id) if isinstance(call_id, str) else None
            if target is not None and target.approval is None:
                reason = interrupt.get("message")
                target.approval = (interrupt["id"], reason if isinstance(reason, str) else None)
            else:
                scan._add(self.index, DataPart(INTERRUPT_TYPE, interrupt["id"], interrupt))

    def follow(self, fold: RunFold, applied: list[Event], structural: bool) -> list[Chunk]:
        """The chunks that bring a client from this projection to ``fold``'s, which is
        this one's fold after ``applied`` (what :meth:`RunFold.apply` returned);
        ``structural``: whether those events can change parts beyond content deltas."""
        deltas = self._deltas(fold, applied)
        if deltas is not None:
            return deltas
        if not structural:
            return []
        if self._simple and fold.terminal is None:
            local = self._local(fold, applied)
            if local is not None:
                return local
        new = Projection(fold)
        out = changes(self.parts, new.parts)
        self._take(new)
        return rebuild(self.parts) if out is None else out

    def _take(self, new: Projection) -> None:
        self.parts, self.index, self._starts = new.parts, new.index, new._starts
        self._reply, self._boundary = new._reply, new._boundary
        self._simple, self._orphans = new._simple, new._orphans

    def _deltas(self, fold: RunFold, applied: list[Event]) -> list[Chunk] | None:
        """Content of open parts only: their deltas, or None.  It applies when the fold
        appended to the very message (tool call) each part comes from."""
        if not applied:
            return None
        found: list[tuple[TextPart | ToolPart, str]] = []
        for event in applied:
            kind = event.get("type")
            part: Part | None
            if kind in _CONTENT:
                mid = str(event.get("messageId"))
                part = self.index.get((_CONTENT[str(kind)], mid))
                if not isinstance(part, TextPart) or part.src is not fold.message(mid):
                    return None
                now = part.src.get("content")
            elif kind == "TOOL_CALL_ARGS":
                cid = str(event.get("toolCallId"))
                part = self.index.get(("tool", cid))
                hit = fold.tool_call(cid)
                if not isinstance(part, ToolPart) or hit is None or part.src is not hit[1]:
                    return None
                function = part.src.get("function")
                now = function.get("arguments") if isinstance(function, dict) else None
            else:
                return None
            before = part.text if isinstance(part, TextPart) else part.args
            if not part.open or not isinstance(now, str) or not now.startswith(before):
                return None
            found.append((part, now))
        out: list[Chunk] = []
        for part, now in found:
            if isinstance(part, TextPart):
                if len(now) > len(part.text):
                    out.append(text_delta(part, now[len(part.text) :]))
                part.text = now
            else:
                if len(now) > len(part.args):
                    out.append(args_delta(part, now[len(part.args) :]))
                part.args = now
        return out

    def _local(self, fold: RunFold, applied: list[Event]) -> list[Chunk] | None:
        """Recompute the reply from the earliest message ``applied`` touched, or None
        when locality does not hold (then the whole projection is recomputed)."""
        messages = fold.messages
        reply = self._reply
        if reply and (len(messages) < reply or messages[reply - 1] is not self._boundary):
            return None  # something was inserted before the reply
        if messages and messages[-1].get("role") == "user" and messages[-1] is not self._boundary:
            return None  # a new user message: the reply starts again
        targets: list[Message] = []
        for event in applied:
            kind = event.get("type")
            if kind in _BY_MESSAGE:
                target = fold.message(str(event.get("messageId")))
            elif kind in _BY_CALL:
                cid = str(event.get("toolCallId"))
                hit = fold.tool_call(cid)
                target = None if hit is None else hit[0]
                if kind == "TOOL_CALL_RESULT" and ("tool", cid) not in self.index:
                    self._orphans.add(cid)
            else:
                return None
            if target is not None:
                targets.append(target)
        first = self._earliest(messages, targets)
        rel = first - reply
        p = self._starts[rel] if rel < len(self._starts) else len(self.parts)
        old = self.parts[p:]
        for part in old:
            del self.index[part.key]
        scan = _Scan(fold, first, self.index, self._orphans)
        if not scan.simple:
            return None
        del self.parts[p:]
        self.parts += scan.parts
        del self._starts[rel:]
        self._starts += [p + s for s in scan.starts]
        out = changes(old, scan.parts)
        return rebuild(self.parts) if out is None else out

    def _earliest(self, messages: list[Message], targets: list[Message]) -> int:
        """The position of the earliest target in the reply, and at most the first
        message this projection has not seen (appended since)."""
        first = self._reply + len(self._starts)
        wanted = {id(t) for t in targets}
        for position in range(len(messages) - 1, self._reply - 1, -1):
            if not wanted:
                break
            if id(messages[position]) in wanted:
                wanted.discard(id(messages[position]))
                first = min(first, position)
        return first


def project(fold: RunFold) -> list[Part]:
    """The parts a client holds at ``fold``."""
    return Projection(fold).parts
