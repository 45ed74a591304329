"""A2UI v0.9 in: validation, the surface registry, and A2UI carried as AG-UI (pure).

Decisions D10; the seed is ``gateway/schemas/a2ui-server-to-client.schema.json`` and the
mapping table ``docs/dialects/a2ui.md``.

- :func:`check_message` checks one message against the seed: exactly one of the four
  operations, no unknown key, and the seed's prose rule on ``updateDataModel`` (``value``
  for ``add`` and ``replace``, which is the default, none for ``remove``).  Components
  are checked only for what every A2UI component has (an object with string ``id`` and
  ``component``); the rest is the catalogue's, which the seed references but does not
  include, and passes through.
- :func:`check_body` adds the registry rule: ``createSurface`` before any update or
  delete of that surface, and no ``createSurface`` of a surface that is live, against
  the run's live surfaces (:func:`live_surfaces` of the run's fold), all or nothing.
- :func:`to_agui` carries a message as an AG-UI event on the activity of its surface
  (one activity per surface, ``activityType: "a2ui-surface"``, the messages in
  ``content.a2ui_operations``, the shape of the AG-UI A2UI middleware):
  ``createSurface`` is an ``ACTIVITY_SNAPSHOT`` that (re)starts the list, every other
  message an ``ACTIVITY_DELTA`` appending to it.  Replaying an activity's list in an
  A2UI renderer rebuilds the surface.  :func:`derive` is what publishing uses: the same,
  except that a message that would make a list longer than :data:`MAX_OPERATIONS` is
  carried by an ``ACTIVITY_SNAPSHOT`` of the surface compacted, so the run's fold and
  every AG-UI client hold a bounded list per surface.
- :func:`compact_activity` is the prelude hook (``RunFold.prelude(compactors=...)``): a
  late joiner's ``MESSAGES_SNAPSHOT`` carries each live surface compacted
  (:func:`gateway.dialects.a2ui_surface.compact`) and no deleted surface.
- :func:`messages_of`, :func:`late_joiner_messages` and :func:`rejoin_messages` serve
  clients that render A2UI directly (the WebSocket ``a2ui`` format).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Set
from typing import Any, Final

import jsonschema_rs

from gateway.agui.fold import RunFold
from gateway.dialects import seeds
from gateway.dialects.a2ui_surface import Surfaces, compact
from gateway.errors import InvalidRequest

Message = dict[str, Any]
Event = dict[str, Any]

#: The AG-UI activity type of A2UI surfaces (the AG-UI A2UI middleware's).
ACTIVITY_TYPE: Final = "a2ui-surface"
#: The key of the activity content that holds the surface's messages.
OPERATIONS_KEY: Final = "a2ui_operations"
#: The four operations, one of which each message has.
OPERATIONS: Final = ("createSurface", "updateComponents", "updateDataModel", "deleteSurface")
#: The pointer an ACTIVITY_DELTA appends a message at.
APPEND_PATH: Final = f"/{OPERATIONS_KEY}/-"
#: A surface's activity holds at most this many messages (see :func:`derive`).
MAX_OPERATIONS: Final = 64
#: The metadata key marking a snapshot that rebuilds a surface that already exists.
REBUILT_KEY: Final = "a2ui"

_DEFINITIONS: Final = {
    "createSurface": "CreateSurfaceMessage",
    "updateComponents": "UpdateComponentsMessage",
    "updateDataModel": "UpdateDataModelMessage",
    "deleteSurface": "DeleteSurfaceMessage",
}
#: Stands for the seed's external ``standard_catalog_definition.json#/$defs/anyComponent``:
#: what every A2UI component has; everything else belongs to the catalogue.
_ANY_COMPONENT: Final = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "component": {"type": "string"}},
    "required": ["id", "component"],
}


def _without_catalog_refs(node: Any) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            return dict(_ANY_COMPONENT)
        return {key: _without_catalog_refs(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_without_catalog_refs(item) for item in node]
    return node


@functools.cache
def _validators() -> dict[str, jsonschema_rs.Validator]:
    """One validator per operation: the seed's definition of that message."""
    document = _without_catalog_refs(seeds.schema(seeds.A2UI))
    out: dict[str, jsonschema_rs.Validator] = {}
    for operation, name in _DEFINITIONS.items():
        out[operation] = seeds.compile_schema(
            {"$schema": document["$schema"], **document["$defs"][name]}
        )
    return out


def operation_of(message: Message) -> str:
    """The operation of a checked message (``"createSurface"``, ...)."""
    return next(key for key in OPERATIONS if key in message)


def surface_of(message: Message) -> str:
    """The ``surfaceId`` of a checked message."""
    surface: str = message[operation_of(message)]["surfaceId"]
    return surface


def check_message(message: object, where: str = "message") -> Message:
    """Check one A2UI message; returns it unchanged.  Raises InvalidRequest naming the
    field (``[1].updateDataModel.value: required by op "replace"``)."""
    if not isinstance(message, dict):
        kind = seeds.json_type(message)
        raise InvalidRequest(f"{where}: an A2UI message is an object, not {kind}")
    present = [key for key in OPERATIONS if key in message]
    if len(present) != 1:
        raise InvalidRequest(
            f"{where}: exactly one of {', '.join(OPERATIONS)} must be present"
            + (f" (found {', '.join(present)})" if present else "")
        )
    operation = present[0]
    unknown = [key for key in message if key != operation]
    if unknown:
        field = seeds.clip(str(unknown[0]), 100)
        raise InvalidRequest(f"{where}.{field}: unknown field (a message has one operation key)")
    seeds.check(_validators()[operation], message, where)
    if operation == "updateDataModel":
        body = message[operation]
        op = body.get("op", "replace")
        if op == "remove" and "value" in body:
            raise InvalidRequest(f'{where}.updateDataModel.value: not allowed with op "remove"')
        if op != "remove" and "value" not in body:
            raise InvalidRequest(f'{where}.updateDataModel.value: required by op "{op}"')
    return message


def check_surfaces(messages: Iterable[Message], live: Set[str], wheres: list[str]) -> set[str]:
    """The registry rule over checked messages, in order, from the ``live`` surfaces.

    Returns the live surfaces after them.  Raises InvalidRequest for an update or delete
    of a surface that is not live, or a ``createSurface`` of one that is.
    """
    now = set(live)
    for message, where in zip(messages, wheres, strict=True):
        operation = operation_of(message)
        surface = message[operation]["surfaceId"]
        shown = seeds.clip(repr(surface), 100)
        if operation == "createSurface":
            if surface in now:
                raise InvalidRequest(
                    f"{where}.createSurface.surfaceId: the surface {shown} already exists "
                    "(deleteSurface it first)"
                )
            now.add(surface)
        elif surface not in now:
            raise InvalidRequest(
                f"{where}.{operation}.surfaceId: no surface {shown}: createSurface must come "
                "before any update or delete of a surface"
            )
        elif operation == "deleteSurface":
            now.discard(surface)
    return now


def check_body(body: object, *, live: Set[str]) -> list[Message]:
    """Check a publish body (one message or a non-empty array of them, all or nothing)
    against the seed and the registry rule, from the run's ``live`` surfaces."""
    if isinstance(body, list):
        if not body:
            raise InvalidRequest("body: the array is empty; send at least one message")
        if len(body) > seeds.MAX_ITEMS:
            raise InvalidRequest(f"body: at most {seeds.MAX_ITEMS} messages per request")
        wheres = [f"[{i}]" for i in range(len(body))]
        items: list[object] = body
    else:
        wheres, items = ["message"], [body]
    messages = [check_message(item, where) for item, where in zip(items, wheres, strict=True)]
    check_surfaces(messages, live, wheres)
    return messages


def activity_id(surface_id: str) -> str:
    """The AG-UI message id of a surface's activity: ``a2ui-surface-<surfaceId>``."""
    return f"{ACTIVITY_TYPE}-{surface_id}"


def to_agui(message: Message) -> Event:
    """The AG-UI event carrying a checked message on its surface's activity."""
    surface = surface_of(message)
    if operation_of(message) == "createSurface":
        return {
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": activity_id(surface),
            "activityType": ACTIVITY_TYPE,
            "content": {OPERATIONS_KEY: [message]},
        }
    return {
        "type": "ACTIVITY_DELTA",
        "messageId": activity_id(surface),
        "activityType": ACTIVITY_TYPE,
        "patch": [{"op": "add", "path": APPEND_PATH, "value": message}],
    }


def _rebuilt(surface: str, operations: list[Message]) -> Event:
    return {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": activity_id(surface),
        "activityType": ACTIVITY_TYPE,
        "content": {OPERATIONS_KEY: operations},
        "metadata": {REBUILT_KEY: {"rebuilt": surface}},
    }


def derive(
    messages: Iterable[Message], fold: RunFold, *, limit: int = MAX_OPERATIONS
) -> list[Event]:
    """The AG-UI events that carry checked messages, one each, given the run's fold.

    As :func:`to_agui`, except for a message that would make its surface's list longer
    than ``limit``: it is carried by an ``ACTIVITY_SNAPSHOT`` (replacing the list) of
    the surface compacted with it, marked ``metadata.a2ui.rebuilt = <surfaceId>``.  The
    same fold and messages always derive the same events.
    """
    held: dict[str, list[Message]] = {
        str(m.get("id")): _activity_operations(m) for m in _surface_activities(fold)
    }
    out: list[Event] = []
    for message in messages:
        surface = surface_of(message)
        key = activity_id(surface)
        if operation_of(message) == "createSurface":
            held[key] = [message]
            out.append(to_agui(message))
            continue
        operations = [*held.get(key, []), message]
        if len(operations) > limit:
            operations = compact(operations)
            out.append(_rebuilt(surface, operations))
        else:
            out.append(to_agui(message))
        held[key] = operations
    return out


def messages_of(event: Event) -> list[Message]:
    """The A2UI messages a stored AG-UI event carries (for the WebSocket ``a2ui``
    format): the list of an ``a2ui-surface`` ``ACTIVITY_SNAPSHOT``, the appended values
    of an ``ACTIVITY_DELTA``; nothing for any other event.  A snapshot that rebuilds a
    surface (:func:`derive`) is preceded by ``deleteSurface``: a client rendering A2UI
    already has the surface, and creating it again would be refused."""
    if event.get("activityType") != ACTIVITY_TYPE:
        return []
    if event.get("type") == "ACTIVITY_SNAPSHOT":
        metadata = event.get("metadata")
        marker = metadata.get(REBUILT_KEY) if isinstance(metadata, dict) else None
        rebuilt = marker.get("rebuilt") if isinstance(marker, dict) else None
        operations = _activity_operations(event)
        if isinstance(rebuilt, str):
            return [{"deleteSurface": {"surfaceId": rebuilt}}, *operations]
        return operations
    if event.get("type") == "ACTIVITY_DELTA":
        patch = event.get("patch")
        return [
            op["value"]
            for op in (patch if isinstance(patch, list) else [])
            if isinstance(op, dict)
            and op.get("op") == "add"
            and op.get("path") == APPEND_PATH
            and isinstance(op.get("value"), dict)
        ]
    return []


def _activity_operations(message: Message) -> list[Message]:
    content = message.get("content")
    operations = content.get(OPERATIONS_KEY) if isinstance(content, dict) else None
    return [m for m in operations if isinstance(m, dict)] if isinstance(operations, list) else []


def _surface_activities(fold: RunFold) -> list[Message]:
    return [
        m
        for m in fold.messages
        if m.get("role") == "activity" and m.get("activityType") == ACTIVITY_TYPE
    ]


def live_surfaces(fold: RunFold) -> frozenset[str]:
    """The surfaces live in a run: created and not deleted since (each activity's list
    folded in order).  Linear in the number of messages the activities hold."""
    live: set[str] = set()
    for activity in _surface_activities(fold):
        for message in _activity_operations(activity):
            for operation in ("createSurface", "deleteSurface"):
                body = message.get(operation)
                if isinstance(body, dict) and isinstance(body.get("surfaceId"), str):
                    if operation == "createSurface":
                        live.add(body["surfaceId"])
                    else:
                        live.discard(body["surfaceId"])
    return frozenset(live)


def compact_activity(message: Message) -> Message | None:
    """An ``a2ui-surface`` activity message with its list compacted; None (left out of
    the snapshot) when the surface was deleted.  Other content keys are kept."""
    operations = compact(_activity_operations(message))
    if not operations:
        return None
    content = message.get("content")
    kept = {k: copy.deepcopy(v) for k, v in content.items()} if isinstance(content, dict) else {}
    return {**message, "content": {**kept, OPERATIONS_KEY: operations}}


#: For ``RunFold.prelude(thread_id, run_id, compactors=PRELUDE_COMPACTORS)``.
PRELUDE_COMPACTORS: Final = {ACTIVITY_TYPE: compact_activity}


def late_joiner_messages(fold: RunFold) -> list[Message]:
    """What a client rendering A2UI directly needs first when it joins a run late: the
    live surfaces compacted, in the order of their activities."""
    out: list[Message] = []
    for activity in _surface_activities(fold):
        out += compact(_activity_operations(activity))
    return out


def rejoin_messages(fold: RunFold) -> list[Message]:
    """The WebSocket ``a2ui`` format's prelude: :func:`late_joiner_messages`, each
    surface's ``createSurface`` preceded by its ``deleteSurface``.

    A renderer that does not hold the surface ignores the delete (``@a2ui/web_core``
    does); one that resumes after a cursor drops the surface it holds and rebuilds it,
    where a second ``createSurface`` alone would be refused.  Either way it ends with
    the surfaces live at the cursor.
    """
    out: list[Message] = []
    for message in late_joiner_messages(fold):
        created = message.get("createSurface")
        if isinstance(created, dict):
            out.append({"deleteSurface": {"surfaceId": created["surfaceId"]}})
        out.append(message)
    return out


def view(messages: Iterable[Message]) -> dict[str, dict[str, Any]]:
    """The surfaces ``messages`` leave, as plain JSON (for tests and diagnostics)."""
    return Surfaces().extend(messages).view()
