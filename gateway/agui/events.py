"""AG-UI events as published to run feeds: validation and compact encoding (pure).

Decisions D4 and D7.  Publishing checks ``type`` and the fields that type requires (the
same in AG-UI 1.0 and the draft of seed 000, with 1.0's wider ``TOOL_CALL_RESULT``
content) and forwards everything else untouched: unknown fields and unknown event
types pass through, empty deltas pass, ``outcome`` is never stripped.  Strict mode
validates the whole event against the ``ag-ui-1`` schema embedded in the OpenAPI seed.

An event is stored as compact one-line JSON (:func:`encode`): integers keep their exact
value and the bytes are what every client receives in its ``data:`` line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from gateway.errors import InvalidRequest
from gateway.run_lease import AGUI_ENDS
from gateway.validate import MAX_BATCH_ITEMS, fast_component_validator, seed_schemas

Event = dict[str, Any]


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_list(value: object) -> bool:
    return isinstance(value, list)


def _is_object(value: object) -> bool:
    return isinstance(value, dict)


def _any(value: object) -> bool:
    return True


def _str_or_parts(value: object) -> bool:
    # The draft allows a string; 1.0 a string or an array of content parts.
    return isinstance(value, str | list)


def _reasoning(value: object) -> bool:
    return value == "reasoning"


def _subtype(value: object) -> bool:
    return value in ("tool-call", "message")


_Check = Callable[[object], bool]
_EXPECT: dict[_Check, str] = {
    _is_str: "a string",
    _is_list: "an array",
    _is_object: "an object",
    _any: "any JSON value",
    _str_or_parts: "a string or an array of content parts",
    _reasoning: 'the string "reasoning"',
    _subtype: '"tool-call" or "message"',
}

#: Required fields (besides ``type``) per event type, with the check of each.
REQUIRED: Mapping[str, Mapping[str, _Check]] = {
    "TEXT_MESSAGE_START": {"messageId": _is_str},
    "TEXT_MESSAGE_CONTENT": {"messageId": _is_str, "delta": _is_str},
    "TEXT_MESSAGE_END": {"messageId": _is_str},
    "TEXT_MESSAGE_CHUNK": {},
    "TOOL_CALL_START": {"toolCallId": _is_str, "toolCallName": _is_str},
    "TOOL_CALL_ARGS": {"toolCallId": _is_str, "delta": _is_str},
    "TOOL_CALL_END": {"toolCallId": _is_str},
    "TOOL_CALL_CHUNK": {},
    "TOOL_CALL_RESULT": {"messageId": _is_str, "toolCallId": _is_str, "content": _str_or_parts},
    "STATE_SNAPSHOT": {"snapshot": _any},
    "STATE_DELTA": {"delta": _is_list},
    "MESSAGES_SNAPSHOT": {"messages": _is_list},
    "ACTIVITY_SNAPSHOT": {"messageId": _is_str, "activityType": _is_str, "content": _is_object},
    "ACTIVITY_DELTA": {"messageId": _is_str, "activityType": _is_str, "patch": _is_list},
    "RAW": {"event": _any},
    "CUSTOM": {"name": _is_str, "value": _any},
    "RUN_STARTED": {"threadId": _is_str, "runId": _is_str},
    "RUN_FINISHED": {"threadId": _is_str, "runId": _is_str},
    "RUN_ERROR": {"message": _is_str},
    "STEP_STARTED": {"stepName": _is_str},
    "STEP_FINISHED": {"stepName": _is_str},
    "REASONING_START": {"messageId": _is_str},
    "REASONING_MESSAGE_START": {"messageId": _is_str, "role": _reasoning},
    "REASONING_MESSAGE_CONTENT": {"messageId": _is_str, "delta": _is_str},
    "REASONING_MESSAGE_END": {"messageId": _is_str},
    "REASONING_MESSAGE_CHUNK": {},
    "REASONING_END": {"messageId": _is_str},
    "REASONING_ENCRYPTED_VALUE": {
        "subtype": _subtype,
        "entityId": _is_str,
        "encryptedValue": _is_str,
    },
    "SUBAGENT_STARTED": {"subagentRunId": _is_str, "name": _is_str},
    "SUBAGENT_FINISHED": {"subagentRunId": _is_str},
    "SUBAGENT_ERROR": {"subagentRunId": _is_str, "message": _is_str},
}

#: Events that end a run (the SSE stream of the run ends after them; gateway.run_lease).
TERMINAL = AGUI_ENDS

#: Optional fields a client rejects outright when they are ``null`` (the AG-UI client's
#: verification refuses the whole stream), so publishing refuses them instead.
_NOT_NULL = ("subagentRunId",)


def check_event(event: object, where: str) -> Event:
    """Check one AG-UI event; returns it unchanged.  Raises InvalidRequest naming the field.

    ``where`` prefixes the field in the message (``"[2]"`` for the third item).
    """
    if not isinstance(event, dict):
        raise InvalidRequest(f"{where}: expected an AG-UI event object")
    kind = event.get("type")
    if not isinstance(kind, str) or not kind:
        raise InvalidRequest(f"{where}.type: required, a non-empty string")
    for name in _NOT_NULL:
        if name in event and event[name] is None:
            raise InvalidRequest(f"{where}.{name}: must be omitted rather than null")
    required = REQUIRED.get(kind)
    if required is None:
        # A type from a newer minor version: receivers tolerate it, so do we.
        return event
    for name, check in required.items():
        if name not in event:
            raise InvalidRequest(f"{where}.{name}: required by {kind}")
        if not check(event[name]):
            raise InvalidRequest(f"{where}.{name}: must be {_EXPECT[check]}")
    return event


def check_body(body: object, *, thread_id: str, run_id: str, strict: bool = False) -> list[Event]:
    """Check a D4 run-feed body: one event or an array of them (all or nothing).

    A ``RUN_STARTED`` or ``RUN_FINISHED`` naming another thread or run than the path is
    refused.  With ``strict`` every event must also validate against ``ag-ui-1``.
    """
    items = body if isinstance(body, list) else [body]
    if not items:
        raise InvalidRequest("body: an empty array publishes nothing")
    if len(items) > MAX_BATCH_ITEMS:
        raise InvalidRequest(f"body: at most {MAX_BATCH_ITEMS} events per request")
    events: list[Event] = []
    for index, item in enumerate(items):
        where = f"[{index}]" if isinstance(body, list) else "event"
        event = check_event(item, where)
        if event["type"] in ("RUN_STARTED", "RUN_FINISHED"):
            if event["threadId"] != thread_id:
                raise InvalidRequest(f"{where}.threadId: differs from the path's thread")
            if event["runId"] != run_id:
                raise InvalidRequest(f"{where}.runId: differs from the path's run")
        if strict:
            strict_check(event, where)
        events.append(event)
    return events


@functools.cache
def _strict_validators() -> tuple[Any, dict[str, Any]]:
    """The ag-ui-1 validator, and one per event type (for errors that name a field)."""
    schemas = seed_schemas()
    by_type: dict[str, Any] = {}
    for member in schemas["ag-ui-1_Event"]["oneOf"]:
        name = member["$ref"].rsplit("/", 1)[1]
        const = schemas[name].get("properties", {}).get("type", {}).get("const")
        if isinstance(const, str):
            by_type[const] = fast_component_validator(name)
    return fast_component_validator("ag-ui-1"), by_type


def strict_check(event: Event, where: str) -> None:
    """Validate ``event`` against the whole AG-UI 1.0 schema of the OpenAPI seed."""
    whole, by_type = _strict_validators()
    validator: Any = by_type.get(str(event.get("type")), whole)
    errors = list(validator.iter_errors(event))
    if errors:
        # The deepest error names the field that failed.
        best = max(errors, key=lambda e: len(list(e.instance_path)))
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in best.instance_path)
        raise InvalidRequest(f"{where}{path}: {best.message} (strict AG-UI 1.0)")


def encode(event: Event) -> bytes:
    """The event as compact one-line JSON (what clients receive)."""
    return msgspec.json.encode(event)


def decode(data: bytes) -> Event:
    value = msgspec.json.decode(data)
    if not isinstance(value, dict):
        raise InvalidRequest("stored AG-UI event is not an object")
    return value
