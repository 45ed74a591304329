"""The dialects' seed schemas, and errors that name the failing field (pure).

The only I/O is reading a packaged schema once (``importlib.resources``).  Validators are
compiled by jsonschema-rs; a rejected instance is explained by its deepest error, the
one whose instance path names the most specific field.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Iterable
from typing import Any, Final

import jsonschema_rs
import msgspec

from gateway.errors import InvalidRequest

#: An array body may hold at most this many items (the same bound as every publish body,
#: ``gateway.validate.MAX_BATCH_ITEMS``; a test keeps the two equal).
MAX_ITEMS: Final = 1000

SPARKTIDE: Final = "sparktide-agent-event.schema.json"
A2UI: Final = "a2ui-server-to-client.schema.json"

_MAX_MESSAGE: Final = 300


@functools.cache
def schema(name: str) -> dict[str, Any]:
    """A packaged seed schema, parsed once (shared: do not change it)."""
    raw = importlib.resources.files("gateway").joinpath("schemas", name).read_bytes()
    document: dict[str, Any] = msgspec.json.decode(raw)
    return document


def compile_schema(document: dict[str, Any]) -> jsonschema_rs.Validator:
    return jsonschema_rs.validator_for(document)


def clip(text: str, limit: int = _MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def path_of(parts: Iterable[str | int]) -> str:
    """``["data", "sources", 2, "id"]`` as ``.data.sources[2].id``."""
    out = []
    for part in parts:
        out.append(f"[{part}]" if isinstance(part, int) else f".{clip(str(part), 100)}")
    return "".join(out)


def check(validator: jsonschema_rs.Validator, instance: object, where: str) -> None:
    """Raise InvalidRequest naming the deepest failing field, if ``instance`` is invalid."""
    if validator.is_valid(instance):
        return
    errors = list(validator.iter_errors(instance))
    best = max(errors, key=lambda e: len(list(e.instance_path)))
    raise InvalidRequest(f"{where}{path_of(best.instance_path)}: {clip(best.message)}")


def json_type(value: object) -> str:
    """The JSON type name of a decoded value (for messages)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    names = {dict: "object", list: "array", str: "string", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
