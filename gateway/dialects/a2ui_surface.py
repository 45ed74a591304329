"""The A2UI surface fold and its compaction (pure; decisions D10).

:class:`Surfaces` applies A2UI v0.9 messages the way an A2UI renderer's message
processor does (``@a2ui/web_core``'s ``MessageProcessor`` is the reference the tests
compare with), keeping per live surface only its current state: its catalogue, its
components merged by id, its data model.  :func:`compact` turns any sequence of
messages into the shortest one that rebuilds the same surfaces: per live surface
``createSurface``, one ``updateComponents`` with every component, one
``updateDataModel`` of the whole data model; deleted surfaces are dropped.

The meaning of each message, as the fold applies it:

- ``createSurface`` creates an empty surface (data model ``{}``); for a surface that
  already exists it is ignored (renderers refuse it; publishing refuses it too).
- ``updateComponents`` stores each component under its ``id``, replacing the one held
  (a component whose type changes moves to the end of the order, as in the reference).
- ``updateDataModel`` writes ``value`` at ``path`` (no ``path``, ``""`` or ``"/"``: the
  whole data model), creating missing objects (arrays when the next segment is an
  index) on the way; ``op`` ``add`` and ``replace`` both write, ``remove`` (no
  ``value``) deletes the key, or leaves ``null`` at an array index, as the reference
  does.  A path the reference refuses (through a primitive, a non-index on an array,
  a ``__proto__``/``constructor``/``prototype`` segment) leaves the data model as it was.
- ``deleteSurface`` drops the surface; updates of a surface that does not exist are
  ignored (publishing refuses them).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any, Final

Message = dict[str, Any]

_MISSING: Final[Any] = object()
_INDEX: Final = re.compile(r"^(0|[1-9][0-9]*)$")
#: Segments the reference refuses (they would reach JavaScript prototypes).
_FORBIDDEN: Final = frozenset({"__proto__", "constructor", "prototype"})


class _Refused(Exception):
    """A data-model write the reference renderer refuses."""


def _segments(path: str) -> list[str]:
    segments = [s.replace("~1", "/").replace("~0", "~") for s in path.split("/") if s]
    if _FORBIDDEN.intersection(segments):
        raise _Refused(path)
    return segments


def _container_for(segment: str) -> Any:
    return [] if _INDEX.match(segment) else {}


def _put(array: list[Any], index: int, value: Any) -> None:
    """``array[index] = value`` as JavaScript does it (growing with holes, read as null)."""
    if index >= len(array):
        array.extend([None] * (index - len(array) + 1))
    array[index] = value


def _is_container(value: Any) -> bool:
    return isinstance(value, dict | list)


def _check_path(root: Any, segments: list[str]) -> None:
    """Raise :class:`_Refused` if the reference would refuse writing at ``segments``.

    Only what already exists can refuse a write: once the walk reaches a missing (or
    null) member, the rest of the path is created, with arrays only for index segments.
    """
    current = root
    for at, segment in enumerate(segments):
        last = at == len(segments) - 1
        if isinstance(current, list):
            if not _INDEX.match(segment):
                raise _Refused(segment)
            index = int(segment)
            held = current[index] if index < len(current) else None
        else:
            held = current.get(segment)
        if last or held is None:
            return
        if not _is_container(held):
            raise _Refused(segment)
        current = held


def write(data: Any, path: str, value: Any) -> Any:
    """``data`` with ``value`` written at ``path`` (``_MISSING``: removed), changed in place
    along the path (the result is ``data`` unless the root itself is replaced).

    ``value`` is copied, never shared.  Raises :class:`_Refused` for a write the reference
    refuses, before changing anything.
    """
    segments = _segments(path)
    if not segments:
        return copy.deepcopy(value) if value is not _MISSING else _MISSING
    if data is _MISSING or data is None:
        root: Any = {}
    elif _is_container(data):
        root = data
    else:
        raise _Refused(path)
    _check_path(root, segments)
    current = root
    for at, segment in enumerate(segments[:-1]):
        following = segments[at + 1]
        if isinstance(current, list):
            index = int(segment)
            if index >= len(current) or current[index] is None:
                _put(current, index, _container_for(following))
            current = current[index]
        else:
            if current.get(segment) is None:
                current[segment] = _container_for(following)
            current = current[segment]
    last = segments[-1]
    if isinstance(current, list):
        _put(current, int(last), None if value is _MISSING else copy.deepcopy(value))
    elif value is _MISSING:
        current.pop(last, None)
    else:
        current[last] = copy.deepcopy(value)
    return root


class Surface:
    """One live surface: its catalogue, components by id (in the reference's order) and
    data model (``_MISSING`` once the whole model was removed)."""

    __slots__ = ("catalog_id", "components", "data", "surface_id")

    def __init__(self, surface_id: str, catalog_id: str) -> None:
        self.surface_id = surface_id
        self.catalog_id = catalog_id
        self.components: dict[str, Message] = {}
        self.data: Any = {}

    def update_components(self, components: Iterable[Message]) -> None:
        for component in components:
            ident = component["id"]
            held = self.components.get(ident)
            if held is not None and held.get("component") != component.get("component"):
                del self.components[ident]
            self.components[ident] = copy.deepcopy(component)

    def update_data(self, update: Message) -> None:
        value = update.get("value", _MISSING) if update.get("op") != "remove" else _MISSING
        try:
            self.data = write(self.data, update.get("path", "/"), value)
        except _Refused:
            return

    def messages(self) -> list[Message]:
        """The messages that rebuild this surface from nothing."""
        sid = self.surface_id
        out: list[Message] = [{"createSurface": {"surfaceId": sid, "catalogId": self.catalog_id}}]
        if self.components:
            components = [copy.deepcopy(c) for c in self.components.values()]
            out.append({"updateComponents": {"surfaceId": sid, "components": components}})
        if self.data is _MISSING:
            out.append({"updateDataModel": {"surfaceId": sid, "path": "/", "op": "remove"}})
        elif self.data != {}:
            value = copy.deepcopy(self.data)
            out.append({"updateDataModel": {"surfaceId": sid, "path": "/", "value": value}})
        return out

    def view(self) -> dict[str, Any]:
        """The surface as plain JSON (what the tests compare with a renderer's)."""
        view: dict[str, Any] = {
            "catalogId": self.catalog_id,
            "components": copy.deepcopy(self.components),
        }
        if self.data is not _MISSING:
            view["data"] = copy.deepcopy(self.data)
        return view


class Surfaces:
    """The live surfaces after a sequence of A2UI messages (see the module docstring).

    Messages are expected checked (:func:`gateway.dialects.a2ui.check_message`); anything
    else is skipped rather than failing the fold.
    """

    def __init__(self) -> None:
        self.live: dict[str, Surface] = {}

    def apply(self, message: Message) -> None:
        if not isinstance(message, dict):
            return
        if "createSurface" in message:
            body = message["createSurface"]
            sid = body.get("surfaceId")
            if isinstance(sid, str) and sid not in self.live:
                self.live[sid] = Surface(sid, str(body.get("catalogId")))
            return
        for operation in ("updateComponents", "updateDataModel", "deleteSurface"):
            if operation in message:
                body = message[operation]
                break
        else:
            return
        sid = body.get("surfaceId") if isinstance(body, dict) else None
        surface = self.live.get(sid) if isinstance(sid, str) else None
        if surface is None:
            return
        if operation == "deleteSurface":
            del self.live[surface.surface_id]
        elif operation == "updateComponents":
            components = body.get("components")
            if isinstance(components, list):
                surface.update_components(c for c in components if isinstance(c, dict))
        else:
            surface.update_data(body)

    def extend(self, messages: Iterable[Message]) -> Surfaces:
        for message in messages:
            self.apply(message)
        return self

    def messages(self) -> list[Message]:
        """The messages that rebuild every live surface, in the order they were created."""
        return [m for surface in self.live.values() for m in surface.messages()]

    def view(self) -> dict[str, dict[str, Any]]:
        return {sid: surface.view() for sid, surface in self.live.items()}


def compact(operations: Iterable[Message]) -> list[Message]:
    """The shortest messages that rebuild the surfaces ``operations`` leave."""
    return Surfaces().extend(operations).messages()
