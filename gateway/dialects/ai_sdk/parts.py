"""The parts of an AI SDK UI message, and the chunks that build or change them (pure).

Decisions D10.  An AI SDK client (``readUIMessageStream``, ``useChat``) turns chunks
into one assistant ``UIMessage`` whose ``parts`` appear in the order their first chunk
arrived.  A part here is what the client holds for one text or reasoning part, tool
call or data part with an id; :mod:`gateway.dialects.ai_sdk.projection` computes them
from a run fold.  :func:`build` gives the chunks that create a part as it is (at most
one delta); :func:`diff` the chunks that turn a client holding some parts into one
holding others: appended parts, text and argument deltas, ends, outputs, approvals, data
replacements.  A change no chunk can express (parts reordered or removed, a text
rewritten, a closed part reopened, a tool's arguments changed once known) becomes
``reset-step`` followed by every part again: the translation never sends a step
boundary, so ``reset-step`` clears every part and the client rebuilds the message.
"""

from __future__ import annotations

from typing import Any

import msgspec

Chunk = dict[str, Any]

#: The error text of a tool call whose arguments are not JSON (fixed: chunks must be
#: byte-identical on every node, whatever JSON library version it runs).
NOT_JSON = "the tool call's arguments are not valid JSON"
RESET: Chunk = {"type": "reset-step"}


class _Missing:
    """No tool output yet (any JSON value, null included, may be an output)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no output>"


NO_OUTPUT: Any = _Missing()
_JSON_SPACE = " \t\n\r"


class TextPart:
    """A text or reasoning part: ``kind`` is ``"text"`` or ``"reasoning"``."""

    __slots__ = ("id", "key", "kind", "open", "src", "text")

    def __init__(
        self, kind: str, part_id: str, text: str, is_open: bool, src: dict[str, Any]
    ) -> None:
        self.kind, self.id, self.text, self.open, self.src = kind, part_id, text, is_open, src
        self.key: tuple[str, ...] = (kind, part_id)


class ToolPart:
    """A tool call: its name, argument text, whether it is open, output and approval."""

    __slots__ = ("approval", "args", "id", "key", "name", "open", "output", "src")

    def __init__(
        self, call_id: str, name: str, args: str, is_open: bool, output: Any, src: dict[str, Any]
    ) -> None:
        self.id, self.name, self.args, self.open, self.output = call_id, name, args, is_open, output
        self.src = src
        #: ``(approval id, reason or None)`` once an interrupt asks to approve the call.
        self.approval: tuple[str, str | None] | None = None
        self.key: tuple[str, ...] = ("tool", call_id)


class DataPart:
    """A data part with an id (the client replaces its data in place)."""

    __slots__ = ("data", "id", "key", "type")

    def __init__(self, part_type: str, part_id: str, data: Any) -> None:
        self.type, self.id, self.data = part_type, part_id, data
        self.key: tuple[str, ...] = ("data", part_type, part_id)


Part = TextPart | ToolPart | DataPart


def parse_input(args: str) -> tuple[bool, Any]:
    """``(True, value)`` for JSON arguments (empty ones are ``{}``), else ``(False, None)``."""
    if not args.strip(_JSON_SPACE):
        return True, {}
    try:
        return True, msgspec.json.decode(args)
    except msgspec.DecodeError:
        return False, None


def same(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same value of the same JSON types (``1`` is not
    ``true`` nor ``1.0``); identical objects are compared in O(1)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict | list):
        try:
            return msgspec.json.encode(a) == msgspec.json.encode(b)
        except (msgspec.EncodeError, TypeError, OverflowError):
            return bool(a == b)
    return bool(a == b)


# -- chunks ----------------------------------------------------------------------------

_TEXT_CHUNKS = {
    "text": ("text-start", "text-delta", "text-end"),
    "reasoning": ("reasoning-start", "reasoning-delta", "reasoning-end"),
}


def text_delta(part: TextPart, delta: str) -> Chunk:
    return {"type": _TEXT_CHUNKS[part.kind][1], "id": part.id, "delta": delta}


def _end(part: TextPart) -> Chunk:
    return {"type": _TEXT_CHUNKS[part.kind][2], "id": part.id}


def args_delta(part: ToolPart, delta: str) -> Chunk:
    return {"type": "tool-input-delta", "toolCallId": part.id, "inputTextDelta": delta}


def _input(part: ToolPart) -> Chunk:
    ok, value = parse_input(part.args)
    if ok:
        return {
            "type": "tool-input-available",
            "toolCallId": part.id,
            "toolName": part.name,
            "input": value,
        }
    return {
        "type": "tool-input-error",
        "toolCallId": part.id,
        "toolName": part.name,
        "input": part.args,
        "errorText": NOT_JSON,
    }


def _output(part: ToolPart) -> Chunk:
    return {"type": "tool-output-available", "toolCallId": part.id, "output": part.output}


def _approval(part: ToolPart) -> Chunk:
    assert part.approval is not None
    approval_id, reason = part.approval
    chunk: Chunk = {
        "type": "tool-approval-request",
        "approvalId": approval_id,
        "toolCallId": part.id,
    }
    if reason is not None:
        chunk["reason"] = reason
    return chunk


def _data(part: DataPart) -> Chunk:
    return {"type": part.type, "id": part.id, "data": part.data}


def _closed_tool(part: ToolPart) -> list[Chunk]:
    out = [_input(part)]
    if part.output is not NO_OUTPUT:
        out.append(_output(part))
    if part.approval is not None:
        out.append(_approval(part))
    return out


def build(part: Part) -> list[Chunk]:
    """The chunks that give a client ``part`` as it is, with at most one delta."""
    if isinstance(part, TextPart):
        out: list[Chunk] = [{"type": _TEXT_CHUNKS[part.kind][0], "id": part.id}]
        if part.text:
            out.append(text_delta(part, part.text))
        if not part.open:
            out.append(_end(part))
        return out
    if isinstance(part, ToolPart):
        out = [{"type": "tool-input-start", "toolCallId": part.id, "toolName": part.name}]
        if not part.open:
            return out + _closed_tool(part)
        if part.args:
            out.append(args_delta(part, part.args))
        return out
    return [_data(part)]


def _update_text(old: TextPart, new: TextPart) -> list[Chunk] | None:
    if new.text is old.text and new.open == old.open:
        return []
    if not old.open:
        return [] if (not new.open and new.text == old.text) else None
    if not new.text.startswith(old.text):
        return None
    out = [text_delta(new, new.text[len(old.text) :])] if len(new.text) > len(old.text) else []
    if not new.open:
        out.append(_end(new))
    return out


def _update_tool(old: ToolPart, new: ToolPart) -> list[Chunk] | None:
    if new.name != old.name:
        return None
    if old.open:
        if not new.open:
            return _closed_tool(new)
        if not new.args.startswith(old.args):
            return None
        return [args_delta(new, new.args[len(old.args) :])] if len(new.args) > len(old.args) else []
    if new.open or new.args != old.args:
        return None
    out: list[Chunk] = []
    if not same(new.output, old.output):
        # A second output replaces the first, but it would also undo an approval
        # request, and nothing removes an output.
        if new.output is NO_OUTPUT or old.approval is not None:
            return None
        out.append(_output(new))
    if new.approval != old.approval:
        if old.approval is not None:
            return None
        out.append(_approval(new))
    return out


def _update(old: Part, new: Part) -> list[Chunk] | None:
    """The chunks turning ``old`` into ``new`` (same key), or None if none can."""
    if isinstance(old, TextPart) and isinstance(new, TextPart):
        return _update_text(old, new)
    if isinstance(old, ToolPart) and isinstance(new, ToolPart):
        return _update_tool(old, new)
    if isinstance(old, DataPart) and isinstance(new, DataPart):
        return [] if same(old.data, new.data) else [_data(new)]
    return None


def changes(old: list[Part], new: list[Part]) -> list[Chunk] | None:
    """The chunks that turn a client holding ``old`` into one holding ``new``, or None
    if only a rebuild can (see the module docstring)."""
    if len(new) < len(old):
        return None
    out: list[Chunk] = []
    for before, after in zip(old, new, strict=False):
        step = _update(before, after) if before.key == after.key else None
        if step is None:
            return None
        out += step
    for part in new[len(old) :]:
        out += build(part)
    return out


def diff(old: list[Part], new: list[Part]) -> list[Chunk]:
    """:func:`changes`, or :func:`rebuild` of ``new`` when there are none."""
    out = changes(old, new)
    return rebuild(new) if out is None else out


def rebuild(parts: list[Part]) -> list[Chunk]:
    """``reset-step`` (the client drops every part), then every part again."""
    out = [RESET]
    for part in parts:
        out += build(part)
    return out
