"""A connection's log fields, bound for everything its task (and the tasks it starts)
logs.

structlog's ``bound_contextvars`` keeps one context variable per field and sets and
resets each: ~5.7 us for a connection's five fields, a share of every reconnect.  Here
a connection binds one mapping in one variable (~0.4 us), and :func:`merge` (one of the
node's log processors, app.py) adds its fields to each line.  A field the line names
itself wins, as with structlog's own.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar, Token
from types import MappingProxyType, TracebackType
from typing import Any

_FIELDS: ContextVar[Mapping[str, object]] = ContextVar(
    "gateway_log_fields", default=MappingProxyType({})
)


class bound:
    """``with bound(conn_id=..., ...):`` these fields on every line logged inside
    (nested bindings add to the outer ones)."""

    __slots__ = ("_fields", "_token")

    def __init__(self, **fields: object) -> None:
        self._fields = fields
        self._token: Token[Mapping[str, object]] | None = None

    def __enter__(self) -> None:
        outer = _FIELDS.get()
        self._token = _FIELDS.set({**outer, **self._fields} if outer else self._fields)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _FIELDS.reset(self._token)
            self._token = None


def merge(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The structlog processor: the bound fields, under the line's own."""
    fields = _FIELDS.get()
    if not fields:
        return event
    return {**fields, **event}
