"""The fold of a run: what a client that saw it from the start knows, and the prelude
that gives a late joiner the same (pure; contract D7).

:class:`RunFold` applies AG-UI events one at a time, the way a strict AG-UI client does:
chunk events are first expanded into start/content/end events per *lane* (the parent
agent and each subagent have one lane of open chunk streams, closed by any other
event of that lane), then state is folded from STATE_SNAPSHOT / STATE_DELTA (RFC 6902,
by ``jsonpatch``) and messages from the text, tool-call, tool-result, reasoning and
activity events, with the partial text and arguments of what is still open.  It also
tracks what is open (subagents, steps, reasoning spans and messages, text messages,
tool calls, chunk streams).

:meth:`RunFold.prelude` returns the events that bring a fresh client to the fold's
position: ``RUN_STARTED``, ``STATE_SNAPSHOT``, ``MESSAGES_SNAPSHOT``, then the start
events of everything still open, outermost first.  A client's verification requires
every content, end or finish event to have its start, and a client keeps a reopened
message's earlier content from the snapshot, so the events after the fold's position
continue correctly.

Contract: feed events in log order to :meth:`apply`; :meth:`copy` before applying
more if the current fold must be kept (checkpoints).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch
import jsonpointer
import msgspec

Event = dict[str, Any]
Message = dict[str, Any]

_TEXT, _TOOL, _REASONING = "text", "tool", "reasoning"
#: The fields a chunk event of each kind defines (others are carried onto the content).
_CHUNK_FIELDS = {
    _TEXT: {
        "type",
        "messageId",
        "role",
        "delta",
        "name",
        "timestamp",
        "rawEvent",
        "metadata",
        "subagentRunId",
    },
    _TOOL: {
        "type",
        "toolCallId",
        "toolCallName",
        "parentMessageId",
        "delta",
        "timestamp",
        "rawEvent",
        "metadata",
        "subagentRunId",
    },
    _REASONING: {
        "type",
        "messageId",
        "delta",
        "timestamp",
        "rawEvent",
        "metadata",
        "subagentRunId",
    },
}
_CLOSES_LANE = frozenset(
    {
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "CUSTOM",
        "STEP_STARTED",
        "STEP_FINISHED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
    }
)
_CLOSES_ALL = frozenset({"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "MESSAGES_SNAPSHOT"})
_END_OF = {_TEXT: "TEXT_MESSAGE_END", _TOOL: "TOOL_CALL_END", _REASONING: "REASONING_MESSAGE_END"}
_ID_OF = {_TEXT: "messageId", _TOOL: "toolCallId", _REASONING: "messageId"}

Lane = str | None
#: Gives the activity message a late joiner needs in place of a folded one (see
#: :meth:`RunFold.prelude`); None leaves the message out.
ActivityCompactor = Callable[[Message], Message | None]


class ChunkError(ValueError):
    """A chunk sequence a client rejects (it fails the stream); the fold skips it."""


def _merge_metadata(target: dict[str, Any] | None, event: Event) -> bool:
    """Merge the event's metadata into ``target`` (shallow, incoming keys win)."""
    if target is None or "metadata" not in event or event["metadata"] is None:
        return False
    merged = dict(target.get("metadata") or {})
    merged.update(copy.deepcopy(event["metadata"]))
    target["metadata"] = merged
    return True


def _without_null_lane(message: Message) -> Message:
    if "subagentRunId" in message and message["subagentRunId"] is None:
        message = {k: v for k, v in message.items() if k != "subagentRunId"}
    return message


class RunFold:
    """The folded state of one run up to some item (see the module docstring)."""

    def __init__(self) -> None:
        self.run_started: Event | None = None
        #: The RUN_FINISHED or RUN_ERROR that ended the run, if it has ended.
        self.terminal: Event | None = None
        self.state: Any = {}
        self.messages: list[Message] = []
        #: Open chunk streams per lane: lane -> (kind, fields).
        self.lanes: dict[Lane, tuple[str, dict[str, Any]]] = {}
        #: What is open, each in the order it opened (dicts keep insertion order).
        self.subagents: dict[str, Event] = {}
        self.steps: dict[tuple[Lane, str], None] = {}
        self.reasoning_spans: dict[str, Lane] = {}
        self.reasoning_messages: dict[str, Lane] = {}
        self.texts: dict[str, Event] = {}
        self.tools: dict[str, Event] = {}
        #: Items applied (for checkpoints and metrics).
        self.applied = 0
        # Lookups by id (the first message with an id, the first message holding a tool
        # call), so a long run folds in linear time.
        self._ids: dict[str, Message] = {}
        self._calls: dict[str, tuple[Message, dict[str, Any]]] = {}

    def copy(self) -> RunFold:
        """An independent copy (checkpoints): messages and state are copied deeply;
        event dicts are shared, since the fold never changes one."""
        new = RunFold.__new__(RunFold)
        new.run_started, new.terminal = self.run_started, self.terminal
        new.state = _deep(self.state)
        new.messages = _deep(self.messages)
        new.lanes = dict(self.lanes)
        new.subagents = dict(self.subagents)
        new.steps = dict(self.steps)
        new.reasoning_spans = dict(self.reasoning_spans)
        new.reasoning_messages = dict(self.reasoning_messages)
        new.texts = dict(self.texts)
        new.tools = dict(self.tools)
        new.applied = self.applied
        new._reindex()
        return new

    def dump(self) -> bytes:
        """The fold as bytes (compact JSON: any integer survives), for :meth:`load`."""
        return msgspec.json.encode(
            {
                "v": 1,
                "run_started": self.run_started,
                "terminal": self.terminal,
                "state": self.state,
                "messages": self.messages,
                "lanes": [[lane, kind, fields] for lane, (kind, fields) in self.lanes.items()],
                "subagents": self.subagents,
                "steps": [[lane, step] for lane, step in self.steps],
                "reasoning_spans": [[k, v] for k, v in self.reasoning_spans.items()],
                "reasoning_messages": [[k, v] for k, v in self.reasoning_messages.items()],
                "texts": self.texts,
                "tools": self.tools,
                "applied": self.applied,
            }
        )

    @classmethod
    def load(cls, blob: bytes) -> RunFold:
        """A fold from :meth:`dump`.  Raises ValueError for anything else."""
        try:
            d = msgspec.json.decode(blob)
            fold = cls()
            fold.run_started, fold.terminal = d["run_started"], d["terminal"]
            fold.state, fold.messages = d["state"], d["messages"]
            fold.lanes = {lane: (kind, fields) for lane, kind, fields in d["lanes"]}
            fold.subagents = dict(d["subagents"])
            fold.steps = {(lane, step): None for lane, step in d["steps"]}
            fold.reasoning_spans = {k: v for k, v in d["reasoning_spans"]}
            fold.reasoning_messages = {k: v for k, v in d["reasoning_messages"]}
            fold.texts, fold.tools = dict(d["texts"]), dict(d["tools"])
            fold.applied = int(d["applied"])
        except (msgspec.DecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a dumped run fold: {exc}") from exc
        fold._reindex()
        return fold

    def _reindex(self) -> None:
        self._ids = {}
        self._calls = {}
        for message in self.messages:
            self._index(message)

    def _index(self, message: Message) -> None:
        mid = message.get("id")
        if isinstance(mid, str):
            self._ids.setdefault(mid, message)
        calls = message.get("toolCalls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    self._calls.setdefault(call["id"], (message, call))

    def _append(self, message: Message) -> None:
        self.messages.append(message)
        self._index(message)

    def _replace(self, index: int, message: Message) -> None:
        old = self.messages[index]
        self.messages[index] = message
        mid = message.get("id")
        if isinstance(mid, str) and self._ids.get(mid) is old:
            self._ids[mid] = message

    # -- applying ------------------------------------------------------------------

    def apply(self, event: Event) -> list[Event]:
        """Apply one published event (chunks are expanded first).

        Returns the events it stood for, in the order they were folded: the event
        itself, preceded by the ends of chunk streams it closed, or a chunk's
        start/content events; ``[]`` for a chunk a client rejects (skipped).
        """
        self.applied += 1
        try:
            expanded = self._expand(event)
        except ChunkError:
            return []
        for item in expanded:
            self._fold(item)
        return expanded

    def message(self, message_id: str) -> Message | None:
        """The message that events naming ``message_id`` apply to (read only)."""
        return self._ids.get(message_id)

    def tool_call(self, tool_call_id: str) -> tuple[Message, dict[str, Any]] | None:
        """The message holding the tool call that events naming ``tool_call_id`` apply
        to, and the call's entry in its ``toolCalls`` (read only)."""
        return self._calls.get(tool_call_id)

    def _close_lane(self, lane: Lane) -> list[Event]:
        open_ = self.lanes.pop(lane, None)
        if open_ is None:
            return []
        kind, fields = open_
        end: Event = {"type": _END_OF[kind], _ID_OF[kind]: fields[_ID_OF[kind]]}
        if fields.get("subagentRunId") is not None:
            end["subagentRunId"] = fields["subagentRunId"]
        return [end]

    def _close_all(self) -> list[Event]:
        out: list[Event] = []
        for lane in list(self.lanes):
            out += self._close_lane(lane)
        return out

    def _lane_for(self, kind: str, ident: str | None, sub: str | None) -> Lane:
        if ident is not None:
            for lane, (k, fields) in self.lanes.items():
                if k == kind and fields[_ID_OF[kind]] == ident:
                    if sub is not None and sub != lane:
                        raise ChunkError("chunk attributed to another subagent")
                    return lane
            return sub
        if sub is not None:
            return sub
        if None in self.lanes and self.lanes[None][0] == kind:
            return None
        candidates = [lane for lane, (k, _) in self.lanes.items() if k == kind]
        if len(candidates) > 1:
            raise ChunkError("ambiguous chunk")
        return candidates[0] if candidates else None

    def _expand(self, event: Event) -> list[Event]:
        kind = event.get("type")
        if kind in _CLOSES_LANE:
            return [*self._close_lane(event.get("subagentRunId")), event]
        if kind in _CLOSES_ALL:
            return [*self._close_all(), event]
        if kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            sub = event.get("subagentRunId")
            return [event] if sub is None else [*self._close_lane(sub), event]
        if kind == "TEXT_MESSAGE_CHUNK":
            return self._chunk(_TEXT, event)
        if kind == "TOOL_CALL_CHUNK":
            return self._chunk(_TOOL, event)
        if kind == "REASONING_MESSAGE_CHUNK":
            return self._chunk(_REASONING, event)
        return [event]

    def _chunk(self, kind: str, event: Event) -> list[Event]:
        id_field = _ID_OF[kind]
        ident = event.get(id_field)
        sub = event.get("subagentRunId")
        extra = {k: v for k, v in event.items() if k not in _CHUNK_FIELDS[kind]}
        lane = self._lane_for(kind, ident, sub)
        out: list[Event] = []
        current = self.lanes.get(lane)
        if current is not None and current[0] == kind and ident in (None, current[1][id_field]):
            fields = current[1]
            for name in (
                ("role", "name")
                if kind == _TEXT
                else (("toolCallName", "parentMessageId") if kind == _TOOL else ())
            ):
                if name in event and event[name] != fields.get(name):
                    raise ChunkError(f"chunk {name} differs from the open stream's")
        else:
            out += self._close_lane(lane)
            if ident is None:
                raise ChunkError("the first chunk must carry its id")
            start: Event
            if kind == _TEXT:
                fields = {
                    "messageId": ident,
                    "role": event.get("role", "assistant"),
                    "name": event.get("name"),
                    "subagentRunId": sub,
                }
                start = {"type": "TEXT_MESSAGE_START", "messageId": ident, "role": fields["role"]}
                if fields["name"] is not None:
                    start["name"] = fields["name"]
            elif kind == _TOOL:
                if "toolCallName" not in event:
                    raise ChunkError("the first tool call chunk must carry its name")
                fields = {
                    "toolCallId": ident,
                    "toolCallName": event["toolCallName"],
                    "parentMessageId": event.get("parentMessageId"),
                    "subagentRunId": sub,
                }
                start = {
                    "type": "TOOL_CALL_START",
                    "toolCallId": ident,
                    "toolCallName": event["toolCallName"],
                }
                if fields["parentMessageId"] is not None:
                    start["parentMessageId"] = fields["parentMessageId"]
            else:
                fields = {"messageId": ident, "subagentRunId": sub}
                start = {"type": "REASONING_MESSAGE_START", "messageId": ident, "role": "reasoning"}
            if sub is not None:
                start["subagentRunId"] = sub
            if event.get("metadata") is not None:
                start["metadata"] = event["metadata"]
            self.lanes[lane] = (kind, fields)
            out.append(start)
        content_type = {
            _TEXT: "TEXT_MESSAGE_CONTENT",
            _TOOL: "TOOL_CALL_ARGS",
            _REASONING: "REASONING_MESSAGE_CONTENT",
        }[kind]
        owner = fields.get("subagentRunId") if sub is None else sub
        if (
            "delta" in event
            or "rawEvent" in event
            or (not out and (event.get("metadata") is not None or extra))
        ):
            content: Event = {
                **extra,
                "type": content_type,
                id_field: fields[id_field],
                "delta": event.get("delta", ""),
            }
            if owner is not None:
                content["subagentRunId"] = owner
            if event.get("metadata") is not None:
                content["metadata"] = event["metadata"]
            out.append(content)
        return out

    # -- folding (post-expansion events) --------------------------------------------

    def _find(self, message_id: str) -> Message | None:
        return self._ids.get(message_id)

    def _position(self, message: Message) -> int:
        """Where ``message`` (this very object) is; searched from the end, where the
        messages a run changes usually are."""
        for index in range(len(self.messages) - 1, -1, -1):
            if self.messages[index] is message:
                return index
        return -1

    def _find_index(self, message_id: str) -> int:
        found = self._ids.get(message_id)
        return -1 if found is None else self._position(found)

    def _find_tool_call(self, tool_call_id: str) -> tuple[Message, dict[str, Any]] | None:
        return self._calls.get(tool_call_id)

    def _fold(self, e: Event) -> None:
        kind = e.get("type")
        lane = e.get("subagentRunId")
        if kind == "RUN_STARTED":
            if self.terminal is not None:
                # A new run on the same feed: what was open belonged to the old one.
                self._reset_open()
            self.run_started = e
            self.terminal = None
            source = e.get("input")
            messages = source.get("messages") if isinstance(source, dict) else None
            if isinstance(messages, list):
                for message in messages:
                    if isinstance(message, dict) and self._find(str(message.get("id"))) is None:
                        self._append(copy.deepcopy(_without_null_lane(message)))
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            self.terminal = e
        elif kind == "TEXT_MESSAGE_START" or kind == "REASONING_MESSAGE_START":
            mid = e["messageId"]
            found = self._find(mid)
            if found is not None and found.get("role") == "activity":
                return
            if found is None:
                if kind == "TEXT_MESSAGE_START":
                    found = {"id": mid, "role": e.get("role") or "assistant", "content": ""}
                    if "name" in e and e["name"] is not None:
                        found["name"] = e["name"]
                else:
                    found = {"id": mid, "role": "reasoning", "content": ""}
                if lane is not None:
                    found["subagentRunId"] = lane
                self._append(found)
            _merge_metadata(found, e)
            if kind == "TEXT_MESSAGE_START":
                self.texts[mid] = e
            else:
                self.reasoning_messages[mid] = lane
        elif kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"):
            found = self._find(e["messageId"])
            if found is None or found.get("role") == "activity":
                return
            text = found.get("content")
            found["content"] = (text if isinstance(text, str) else "") + str(e.get("delta", ""))
            _merge_metadata(found, e)
        elif kind in ("TEXT_MESSAGE_END", "REASONING_MESSAGE_END"):
            mid = e["messageId"]
            found = self._find(mid)
            if found is not None and found.get("role") != "activity":
                _merge_metadata(found, e)
            if kind == "TEXT_MESSAGE_END":
                self.texts.pop(mid, None)
            else:
                self.reasoning_messages.pop(mid, None)
        elif kind == "TOOL_CALL_START":
            self._tool_call_start(e)
        elif kind == "TOOL_CALL_ARGS":
            hit = self._find_tool_call(e["toolCallId"])
            if hit is not None:
                call = hit[1]
                function = call.setdefault("function", {})
                function["arguments"] = str(function.get("arguments", "")) + str(e["delta"])
                _merge_metadata(call, e)
        elif kind == "TOOL_CALL_END":
            hit = self._find_tool_call(e["toolCallId"])
            if hit is not None:
                _merge_metadata(hit[1], e)
            self.tools.pop(e["toolCallId"], None)
        elif kind == "TOOL_CALL_RESULT":
            self._tool_result(e)
        elif kind == "STATE_SNAPSHOT":
            self.state = copy.deepcopy(e.get("snapshot"))
        elif kind == "STATE_DELTA":
            self.state = self._patched(self.state, e.get("delta"))
        elif kind == "MESSAGES_SNAPSHOT":
            self._messages_snapshot(e)
        elif kind == "ACTIVITY_SNAPSHOT":
            self._activity_snapshot(e)
        elif kind == "ACTIVITY_DELTA":
            self._activity_delta(e)
        elif kind == "REASONING_ENCRYPTED_VALUE":
            self._encrypted_value(e)
        elif kind == "STEP_STARTED":
            self.steps[(lane, e["stepName"])] = None
        elif kind == "STEP_FINISHED":
            self.steps.pop((lane, e["stepName"]), None)
        elif kind == "REASONING_START":
            self.reasoning_spans[e["messageId"]] = lane
        elif kind == "REASONING_END":
            self.reasoning_spans.pop(e["messageId"], None)
        elif kind == "SUBAGENT_STARTED":
            self.subagents[e["subagentRunId"]] = e
        elif kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            self.subagents.pop(e["subagentRunId"], None)

    def _reset_open(self) -> None:
        self.lanes.clear()
        self.subagents.clear()
        self.steps.clear()
        self.reasoning_spans.clear()
        self.reasoning_messages.clear()
        self.texts.clear()
        self.tools.clear()

    @staticmethod
    def _patched(document: Any, patch: Any) -> Any:
        # A patch that does not apply leaves the state as it was (what clients do).
        try:
            # Patched on a copy (a failed patch must leave the state untouched).
            return jsonpatch.apply_patch(_deep(document), patch, in_place=True)
        except (
            jsonpatch.JsonPatchException,
            jsonpointer.JsonPointerException,
            TypeError,
            ValueError,
            KeyError,
            IndexError,
            AttributeError,
        ):
            return document

    def _tool_call_start(self, e: Event) -> None:
        call_id, name = e["toolCallId"], e["toolCallName"]
        self.tools[call_id] = e
        hit = self._find_tool_call(call_id)
        if hit is not None:
            call = hit[1]
            call.setdefault("function", {})["name"] = name
            _merge_metadata(call, e)
            return
        parent = e.get("parentMessageId")
        found = self._find(parent) if parent is not None else None
        if found is not None and found.get("role") == "assistant":
            holder = found
        else:
            hid = call_id if parent is None or found is not None else parent
            # The client attributes a message it creates here only if its id is new.
            is_new = self._find(hid) is None
            holder = {"id": hid, "role": "assistant", "toolCalls": []}
            self._append(holder)
            lane = e.get("subagentRunId")
            if is_new and lane is not None:
                holder["subagentRunId"] = lane
        calls = holder.get("toolCalls")
        if not isinstance(calls, list):
            calls = holder["toolCalls"] = []
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        calls.append(call)
        self._calls.setdefault(call_id, (holder, call))
        _merge_metadata(call, e)

    def _tool_result(self, e: Event) -> None:
        message: Message = {
            "id": e["messageId"],
            "toolCallId": e["toolCallId"],
            "role": e.get("role") or "tool",
            "content": copy.deepcopy(e["content"]),
        }
        if e.get("subagentRunId") is not None:
            message["subagentRunId"] = e["subagentRunId"]
        _merge_metadata(message, e)
        hit = self._calls.get(e["toolCallId"])
        at = -1
        if hit is not None and hit[0].get("role") == "assistant":
            at = self._position(hit[0])
        if at == -1:
            self._append(message)
            return
        at += 1
        while at < len(self.messages) and self.messages[at].get("role") == "tool":
            at += 1
        self.messages.insert(at, message)
        self._index(message)

    def _messages_snapshot(self, e: Event) -> None:
        incoming = [_without_null_lane(m) for m in e["messages"] if isinstance(m, dict)]
        by_id = {m.get("id"): m for m in incoming}
        authoritative = _authoritative_activity_types(e)
        has_activity = any(m.get("role") == "activity" for m in incoming)
        has_reasoning = any(m.get("role") == "reasoning" for m in incoming)

        def kept(m: Message) -> bool:
            if m.get("role") == "activity":
                if authoritative is _NULL_TYPES:
                    return False
                if authoritative is not None:
                    return m.get("activityType") not in authoritative
                return not has_activity
            return m.get("role") == "reasoning" and not has_reasoning

        merged = [
            copy.deepcopy(by_id[m.get("id")]) if m.get("id") in by_id else m
            for m in self.messages
            if m.get("id") in by_id or kept(m)
        ]
        present = {m.get("id") for m in merged}
        for m in incoming:
            if m.get("id") not in present:
                merged.append(copy.deepcopy(m))
        self.messages = merged
        self._reindex()

    def _activity_snapshot(self, e: Event) -> None:
        index = self._find_index(e["messageId"])
        replace = e.get("replace", True) is not False
        new: Message = {
            "id": e["messageId"],
            "role": "activity",
            "activityType": e["activityType"],
            "content": copy.deepcopy(e["content"]),
        }
        if e.get("subagentRunId") is not None:
            new["subagentRunId"] = e["subagentRunId"]
        target: Message | None = None
        if index == -1:
            self._append(new)
            target = new
        elif self.messages[index].get("role") == "activity":
            if replace:
                updated = {
                    **self.messages[index],
                    "activityType": e["activityType"],
                    "content": copy.deepcopy(e["content"]),
                }
                if e.get("subagentRunId") is not None:
                    updated["subagentRunId"] = e["subagentRunId"]
                else:
                    updated.pop("subagentRunId", None)
                self._replace(index, updated)
            target = self.messages[index]
        elif replace:
            self._replace(index, new)
            target = new
        _merge_metadata(target, e)

    def _activity_delta(self, e: Event) -> None:
        index = self._find_index(e["messageId"])
        if index == -1 or self.messages[index].get("role") != "activity":
            return
        activity = self.messages[index]
        _merge_metadata(activity, e)
        content = activity.get("content")
        # _patched works on a copy and gives back its argument itself when the patch fails.
        patched = self._patched(content if content is not None else {}, e.get("patch") or [])
        if patched is content:
            return
        self._replace(index, {**activity, "content": patched, "activityType": e["activityType"]})

    def _encrypted_value(self, e: Event) -> None:
        if e["subtype"] == "tool-call":
            hit = self._find_tool_call(e["entityId"])
            if hit is not None and hit[0].get("role") == "assistant":
                hit[1]["encryptedValue"] = e["encryptedValue"]
            return
        found = self._find(e["entityId"])
        if found is not None and found.get("role") != "activity":
            found["encryptedValue"] = e["encryptedValue"]

    # -- the prelude -----------------------------------------------------------------

    def prelude(
        self,
        thread_id: str,
        run_id: str,
        *,
        compactors: Mapping[str, ActivityCompactor] | None = None,
    ) -> list[Event]:
        """The events that bring a fresh client to this fold (see the module docstring).

        When the run has ended the terminal event closes the prelude.  ``compactors``
        maps an activity type to a function giving the activity message a late joiner
        needs instead of the folded one (None leaves it out of ``MESSAGES_SNAPSHOT``):
        a dialect whose activity content is a history (A2UI surfaces) sends its current
        state.  The fold itself keeps what a client that saw everything holds.
        """
        started = self.run_started or {
            "type": "RUN_STARTED",
            "threadId": thread_id,
            "runId": run_id,
        }
        out: list[Event] = [
            started,
            {"type": "STATE_SNAPSHOT", "snapshot": self.state},
            {"type": "MESSAGES_SNAPSHOT", "messages": _compacted(self.messages, compactors)},
        ]
        if self.terminal is not None:
            out.append(self.terminal)
            return out
        for sub_id, event in self.subagents.items():
            reopen = dict(event)
            parent = reopen.get("parentSubagentRunId")
            if parent is not None and parent not in self.subagents:
                # A client accepts a parent only if it saw it start in this stream.
                del reopen["parentSubagentRunId"]
            reopen["subagentRunId"] = sub_id
            out.append(reopen)
        for lane, step in self.steps:
            out.append(_attributed({"type": "STEP_STARTED", "stepName": step}, lane))
        for span, lane in self.reasoning_spans.items():
            out.append(_attributed({"type": "REASONING_START", "messageId": span}, lane))
        chunked = {fields[_ID_OF[kind]]: kind for kind, fields in self.lanes.values()}
        for mid, lane in self.reasoning_messages.items():
            if chunked.get(mid) != _REASONING:
                out.append(
                    _attributed(
                        {"type": "REASONING_MESSAGE_START", "messageId": mid, "role": "reasoning"},
                        lane,
                    )
                )
        for mid, start in self.texts.items():
            if chunked.get(mid) != _TEXT:
                reopen = {
                    "type": "TEXT_MESSAGE_START",
                    "messageId": mid,
                    "role": start.get("role") or "assistant",
                }
                if start.get("name") is not None:
                    reopen["name"] = start["name"]
                out.append(_attributed(reopen, start.get("subagentRunId")))
        for call_id, start in self.tools.items():
            if chunked.get(call_id) != _TOOL:
                reopen = {
                    "type": "TOOL_CALL_START",
                    "toolCallId": call_id,
                    "toolCallName": start["toolCallName"],
                }
                if start.get("parentMessageId") is not None:
                    reopen["parentMessageId"] = start["parentMessageId"]
                out.append(_attributed(reopen, start.get("subagentRunId")))
        # Open chunk streams last: any other event of their lane would close them again.
        for lane, (kind, fields) in self.lanes.items():
            out.append(_reopen_chunk(kind, fields, lane))
        return out


def _compacted(
    messages: list[Message], compactors: Mapping[str, ActivityCompactor] | None
) -> list[Message]:
    if not compactors:
        return messages
    out: list[Message] = []
    for message in messages:
        kind = message.get("activityType")
        compactor = compactors.get(kind) if isinstance(kind, str) else None
        if compactor is None or message.get("role") != "activity":
            out.append(message)
            continue
        compacted = compactor(message)
        if compacted is not None:
            out.append(compacted)
    return out


def _deep(value: Any) -> Any:
    """A deep copy of JSON data (msgpack round trip: C speed; deepcopy for what it cannot
    carry, such as integers beyond 64 bits)."""
    try:
        return msgspec.msgpack.decode(msgspec.msgpack.encode(value))
    except (msgspec.EncodeError, OverflowError, TypeError, ValueError):
        return copy.deepcopy(value)


def _attributed(event: Event, lane: Lane) -> Event:
    if lane is not None:
        event["subagentRunId"] = lane
    return event


def _reopen_chunk(kind: str, fields: dict[str, Any], lane: Lane) -> Event:
    if kind == _TEXT:
        event: Event = {
            "type": "TEXT_MESSAGE_CHUNK",
            "messageId": fields["messageId"],
            "role": fields["role"],
        }
        if fields.get("name") is not None:
            event["name"] = fields["name"]
    elif kind == _TOOL:
        event = {
            "type": "TOOL_CALL_CHUNK",
            "toolCallId": fields["toolCallId"],
            "toolCallName": fields["toolCallName"],
        }
        if fields.get("parentMessageId") is not None:
            event["parentMessageId"] = fields["parentMessageId"]
    else:
        event = {"type": "REASONING_MESSAGE_CHUNK", "messageId": fields["messageId"]}
    return _attributed(event, lane)


def _authoritative_activity_types(e: Event) -> list[str] | None:
    """The client's ``@ag-ui/client`` metadata key on a MESSAGES_SNAPSHOT.

    ``None`` when absent, ``[]`` when malformed, :data:`_NULL_TYPES` for an explicit
    ``null``, the declared list otherwise.
    """
    metadata = e.get("metadata")
    if not isinstance(metadata, dict) or "@ag-ui/client" not in metadata:
        return None
    value = metadata["@ag-ui/client"]
    if not isinstance(value, dict):
        return []
    if "authoritativeActivityTypes" not in value:
        return None
    types = value["authoritativeActivityTypes"]
    if types is None:
        return _NULL_TYPES
    if isinstance(types, list) and all(isinstance(t, str) for t in types):
        return types
    return []


#: Stands for an explicit ``authoritativeActivityTypes: null`` (every type authoritative);
#: compared by identity, never by value.
_NULL_TYPES: list[str] = ["<null>"]
