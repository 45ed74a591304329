"""Validation of team-feed publish bodies (contract D4).

Pure: the only I/O is reading the packaged seed OpenAPI document once.

A publish body for ``POST /v1/teams/{team}/events`` is one object
``{"source": TeamSource, "event": events_Event}`` or a non-empty array of them. The event
is checked against the seed's closed ``events_Event`` schema and the source against
``TeamSource``; the source must then agree with the caller's tenant and the path's team.

``events_Event`` is ``allOf[Envelope, oneOf[73 per-type branches]]`` and every branch pins
``type`` with ``const``, so at most one branch can match a given event. Rather than let
jsonschema try all 73 branches, we dispatch on ``event["type"]`` to a validator of
``events_Event`` with the ``oneOf`` replaced by that type's branch alone: the same verdict,
20 to 30 times faster, and an error that names the real problem instead of "is not valid
under any of the given schemas". The same is done for ``TeamSource`` on ``kind``.

For speed, each per-type schema is bundled before its validator is built: every local
``$ref`` is replaced by the schema it points to (a ``$ref`` with sibling keywords becomes
``allOf[target, siblings]``, which is what ``$ref`` means in 2020-12). Only references that
would recurse (``events_JsonValue`` refers to itself) are left as absolute references,
resolved through a :class:`referencing.Registry` that holds the whole document. Resolving
``$ref`` through the registry on every call costs more than the validation itself.

Two validators, one verdict that fails closed: jsonschema-rs decides alone when it
accepts; what it refuses is explained by jsonschema.  Should jsonschema find no error in
an item jsonschema-rs refused (the two disagree: a regex dialect, say, where Python's
``$`` also matches before a final newline and ECMA 262's does not), the item is refused
all the same, counted in ``gateway_validation_disagreements_total{type}`` and logged as
a warning once per type per process.  The fast validators are a parameter of the public
functions (``fast_event``, ``fast_source``), so a test can stand in one that disagrees.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NoReturn, Protocol
from urllib.parse import unquote

import jsonschema_rs
import msgspec
import structlog
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from gateway.errors import InvalidRequest
from gateway.metrics import VALIDATION_DISAGREEMENTS

__all__ = [
    "MAX_BATCH_ITEMS",
    "FastValidator",
    "FastValidators",
    "TeamPublishItem",
    "fast_component_validator",
    "seed_schemas",
    "validate_component",
    "validate_event",
    "validate_source",
    "validate_team_publish",
]

#: An array body may hold at most this many items.
MAX_BATCH_ITEMS: int = 1000

log = structlog.get_logger("gateway.validate")


class FastValidator(Protocol):
    """What the fast path asks of a validator (jsonschema-rs's ``Validator``)."""

    def is_valid(self, instance: Any) -> bool: ...


#: The fast validator of one discriminator value (an event type, a source kind).
FastValidators = Callable[[str], FastValidator]


class TeamPublishItem(msgspec.Struct, frozen=True):
    """One validated item of a team publish body."""

    event_id: str
    """``event["event_id"]``."""
    source: dict[str, Any]
    """The validated TeamSource object, as given."""
    event: dict[str, Any]
    """The validated events_Event object, as given."""
    host_opening: bool
    """True iff the event is a ``team_opened`` of ``kind: "host"`` (contract D3)."""


# --------------------------------------------------------------------------- schema

_SCHEMA_FILE: Final = "schemas/threads-host-api.openapi.json"
#: The id under which the OpenAPI document is registered; refs resolve against it.
_SCHEMA_URI: Final = "https://agent-gateway.invalid/schemas/threads-host-api.openapi.json"

# Keywords whose value is one schema, a list of schemas, or a map of name -> schema.
_ONE_SCHEMA: Final = frozenset(
    {
        "additionalProperties",
        "items",
        "contains",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contentSchema",
    }
)
_SCHEMA_LIST: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_MAP: Final = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
# Annotations only; dropped from bundled schemas (they never affect validation).
_ANNOTATIONS: Final = frozenset({"description", "title", "examples", "$comment"})
# Keywords that would make a bundled copy mean something other than the original.
_UNBUNDLABLE: Final = frozenset(
    {"$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"}
)


@functools.cache
def _document() -> dict[str, Any]:
    raw = importlib.resources.files("gateway").joinpath(_SCHEMA_FILE).read_bytes()
    doc: dict[str, Any] = msgspec.json.decode(raw)
    return doc


@functools.cache
def _registry() -> Registry[Any]:
    resource: Resource[Any] = DRAFT202012.create_resource(_document())
    registry: Registry[Any] = Registry().with_resource(_SCHEMA_URI, resource)
    return registry


def _pointer(ref: str) -> Any:
    """The schema a local ref (``#/a/b``) names in the document."""
    node: Any = _document()
    for part in ref[2:].split("/"):
        token = unquote(part).replace("~1", "/").replace("~0", "~")
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


def _bundle(schema: Any, stack: frozenset[str] = frozenset()) -> Any:
    """``schema`` (a part of the document) with its refs replaced by their targets.

    A ref back into a schema that is being expanded (recursion) stays a ref, made
    absolute so that the registry resolves it.
    """
    if not isinstance(schema, dict):
        return schema  # a boolean schema
    if _UNBUNDLABLE.intersection(schema):
        raise RuntimeError(f"cannot bundle a schema with {sorted(_UNBUNDLABLE & set(schema))}")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ANNOTATIONS or key == "$ref":
            continue
        if key in _ONE_SCHEMA:
            out[key] = _bundle(value, stack)
        elif key in _SCHEMA_LIST:
            out[key] = [_bundle(item, stack) for item in value]
        elif key in _SCHEMA_MAP:
            out[key] = {name: _bundle(item, stack) for name, item in value.items()}
        else:
            out[key] = value
    ref = schema.get("$ref")
    if ref is None:
        return out
    if not isinstance(ref, str) or not ref.startswith("#/"):
        raise RuntimeError(f"cannot bundle the ref {ref!r}")
    if ref in stack:
        target: Any = {"$ref": _SCHEMA_URI + ref}
    else:
        target = _bundle(_pointer(ref), stack | {ref})
    # In 2020-12, $ref is an applicator beside its siblings: {$ref: T, ...} = allOf[T, {...}].
    return {"allOf": [target, out]} if out else target


def _narrowed(part: dict[str, Any], branch: Any) -> Any:
    """``part`` (a schema with a ``oneOf``) with the ``oneOf`` replaced by one branch."""
    rest = {k: v for k, v in part.items() if k != "oneOf" and k not in _ANNOTATIONS}
    if not rest:
        return branch
    return {**rest, "allOf": [*rest.get("allOf", []), branch]}


@functools.cache
def _split(name: str, key: str) -> dict[str, Any]:
    """The component ``name`` narrowed to each branch of its oneOf, by the branch's const.

    The component is ``{oneOf: [...]}`` or ``{allOf: [..., {oneOf: [...]}, ...]}``, and
    every branch requires ``key`` and pins it with ``const``. Then for an instance whose
    ``key`` is ``c`` only the branch of ``c`` can match, so validating against the narrowed
    schema of ``c`` gives exactly the component's verdict. Fails loudly if the schema stops
    having that shape (the dispatch would no longer be equivalent).
    """
    component: dict[str, Any] = _document()["components"]["schemas"][name]
    if "oneOf" in component:
        one_of = component["oneOf"]

        def narrow(branch: Any) -> Any:
            return _narrowed(component, branch)

    else:
        parts: list[Any] = component["allOf"]
        (index,) = [i for i, part in enumerate(parts) if "oneOf" in part]
        one_of = parts[index]["oneOf"]

        def narrow(branch: Any) -> Any:
            narrowed = [*parts[:index], _narrowed(parts[index], branch), *parts[index + 1 :]]
            return {**component, "allOf": narrowed}

    out: dict[str, Any] = {}
    for branch in one_of:
        resolved = _pointer(branch["$ref"]) if "$ref" in branch else branch
        const = resolved["properties"][key]["const"]
        if key not in resolved["required"] or not isinstance(const, str) or const in out:
            raise RuntimeError(f"{name}: the branches are not told apart by {key!r}")
        out[const] = narrow(branch)
    return out


@functools.cache
def _rs_registry() -> jsonschema_rs.Registry:
    return jsonschema_rs.Registry([(_SCHEMA_URI, _document())])


@functools.cache
def _fast_event_validator(type_name: str) -> jsonschema_rs.Validator:
    """The same narrowed schema, compiled by jsonschema-rs (100x faster on valid input).

    It only answers "valid?"; a rejected event goes through :func:`_event_validator`,
    whose errors we know how to explain.  ``tests/test_validate.py`` checks that both
    agree on every case it has.
    """
    schema = _bundle(_split("events_Event", "type")[type_name])
    return jsonschema_rs.validator_for(schema, registry=_rs_registry())


@functools.cache
def _event_validator(type_name: str) -> Draft202012Validator:
    schema = _bundle(_split("events_Event", "type")[type_name])
    return Draft202012Validator(schema, registry=_registry())


@functools.cache
def _source_validator(kind: str) -> Draft202012Validator:
    schema = _bundle(_split("TeamSource", "kind")[kind])
    return Draft202012Validator(schema, registry=_registry())


@functools.cache
def _fast_source_validator(kind: str) -> jsonschema_rs.Validator:
    """:func:`_source_validator`'s schema by jsonschema-rs, as for events (valid input
    passes in microseconds; rejected input is explained by the other)."""
    schema = _bundle(_split("TeamSource", "kind")[kind])
    return jsonschema_rs.validator_for(schema, registry=_rs_registry())


# --------------------------------------------------------------------------- messages

_MAX_ECHO: Final = 100
_MAX_MESSAGE: Final = 400
_MAX_NAMES: Final = 5
_IDENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JSON_TYPES: Final[Mapping[type, str]] = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def _clip(text: str, limit: int = _MAX_ECHO) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_type(value: object) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _path(prefix: str, parts: Iterable[str | int]) -> str:
    out = [prefix]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENT.fullmatch(part):
            out.append("." + _clip(part))
        else:
            out.append("[" + _clip(msgspec.json.encode(part).decode()) + "]")
    return "".join(out)


def _names(names: list[str]) -> str:
    shown = ", ".join(_clip(repr(name)) for name in names[:_MAX_NAMES])
    return shown + (f" and {len(names) - _MAX_NAMES} more" if len(names) > _MAX_NAMES else "")


def _plural(word: str, names: list[str]) -> str:
    return f"{word}{'s' if len(names) > 1 else ''} {_names(names)}"


def _required_names(schema: object) -> list[str] | None:
    """``[k]`` when ``schema`` is exactly ``{"required": [k]}``, else None."""
    if isinstance(schema, dict) and schema.keys() == {"required"}:
        required = schema["required"]
        if isinstance(required, list) and len(required) == 1:
            return [str(required[0])]
    return None


def _describe(error: ValidationError) -> str:
    """A bounded, readable message for one jsonschema error (without its path)."""
    instance, schema, value = error.instance, error.schema, error.validator_value
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = schema.get("properties", {}) if isinstance(schema, dict) else {}
        patterns = schema.get("patternProperties", {}) if isinstance(schema, dict) else {}
        extra = [
            key
            for key in instance
            if key not in known and not any(re.search(p, key) for p in patterns)
        ]
        if extra:
            return "unknown " + _plural("field", extra)
    if error.validator == "not" and isinstance(instance, dict) and isinstance(value, dict):
        # `not: {required: [k]}` and `not: {anyOf: [{required: [k]}, ...]}` forbid fields.
        forbidden: list[str] = list(value.get("required", []))
        for alternative in value.get("anyOf", []):
            forbidden += _required_names(alternative) or []
        present = [name for name in forbidden if name in instance]
        if present:
            return _plural("field", present) + (
                " is not allowed here" if len(present) == 1 else " are not allowed here"
            )
    if error.validator == "oneOf" and isinstance(value, list):
        alternatives = [_required_names(branch) for branch in value]
        if alternatives and all(alternatives):
            names = [name for alt in alternatives if alt for name in alt]
            return f"exactly one of {_names(names)} must be present"
    message = error.message
    echoed = repr(instance)
    if len(echoed) > _MAX_ECHO:
        message = message.replace(echoed, _clip(echoed))
    return _clip(message, _MAX_MESSAGE)


def _best(errors: Iterable[ValidationError]) -> ValidationError | None:
    """jsonschema's best match, looking into discriminated unions.

    best_match stops at a oneOf/anyOf whose branches fail equally ("is not valid under any
    of the given schemas"). When all branches but one fail a ``const`` on a property of the
    instance itself (a discriminator such as ``status``), the remaining branch is the one
    the writer meant, so its best error is reported instead.
    """
    error: ValidationError | None = best_match(errors)
    while error is not None and error.validator in ("oneOf", "anyOf") and error.context:
        branches: dict[object, list[ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        plausible = [
            errs
            for errs in branches.values()
            if not any(sub.validator == "const" and len(sub.relative_path) == 1 for sub in errs)
        ]
        if len(plausible) != 1:
            break
        error = best_match(plausible[0])
    return error


def _check(validator: Draft202012Validator, instance: object, prefix: str) -> None:
    error = _best(validator.iter_errors(instance))
    if error is not None:
        raise InvalidRequest(f"{_path(prefix, error.absolute_path)}: {_describe(error)}")


#: The types (``source:<kind>`` for sources) whose disagreement this process has logged.
_LOGGED_DISAGREEMENTS: set[str] = set()


def _refuse(
    validator: Draft202012Validator,
    instance: object,
    prefix: str,
    label: str,
    fast: jsonschema_rs.Validator,
) -> NoReturn:
    """Refuse ``instance``, which a fast validator refused: with the reference
    ``validator``'s explanation, or, when it finds no error (the two disagree), with
    a message that it does not match the schema, at the path and with the words of
    jsonschema-rs's first error (``fast``) where that has one.  A disagreement is
    counted under ``label`` and logged once per label per process."""
    _check(validator, instance, prefix)
    VALIDATION_DISAGREEMENTS.labels(label).inc()
    message = f"{prefix}: does not match the schema"
    for error in fast.iter_errors(instance):
        where = _path(prefix, error.instance_path)
        message = f"{where}: does not match the schema ({_clip(error.message, _MAX_MESSAGE)})"
        break
    if label not in _LOGGED_DISAGREEMENTS:
        _LOGGED_DISAGREEMENTS.add(label)
        log.warning(
            "validators disagree: jsonschema-rs refused an item jsonschema accepts; "
            "refused (logged once per type)",
            type=label,
            error=message,
        )
    raise InvalidRequest(message)


# --------------------------------------------------------------------------- public API


def validate_event(event: object, *, fast: FastValidators = _fast_event_validator) -> None:
    """Validate one event against the seed's closed ``events_Event`` schema.

    Raises :class:`InvalidRequest` whose message starts with the JSON path of the failing
    field, e.g. ``event.data.text: 5 is not of type 'string'``.  ``fast`` gives the fast
    validator of a type (jsonschema-rs's by default); an event it refuses is refused,
    even when the reference validator finds no error (see the module docstring).
    """
    if not isinstance(event, dict):
        raise InvalidRequest(f"event.type: the event must be an object, not {_json_type(event)}")
    if "type" not in event:
        raise InvalidRequest("event.type: 'type' is a required property")
    type_name = event["type"]
    if not isinstance(type_name, str):
        raise InvalidRequest(f"event.type: {_clip(repr(type_name))} is not of type 'string'")
    if type_name not in _split("events_Event", "type"):
        raise InvalidRequest(f"event.type: {_clip(repr(type_name))} is not a known event type")
    if fast(type_name).is_valid(event):
        return
    _refuse(
        _event_validator(type_name), event, "event", type_name, _fast_event_validator(type_name)
    )


def seed_schemas() -> Mapping[str, Any]:
    """The seed's ``components.schemas`` (parsed once, shared; do not change it)."""
    schemas: Mapping[str, Any] = _document()["components"]["schemas"]
    return schemas


@functools.cache
def fast_component_validator(name: str) -> jsonschema_rs.Validator:
    """A jsonschema-rs validator of the seed component ``name``, its refs resolved
    through the whole document (the AG-UI 1.0 components refer to each other)."""
    return jsonschema_rs.validator_for(
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$ref": f"{_SCHEMA_URI}#/components/schemas/{name}",
        },
        registry=_rs_registry(),
    )


@functools.cache
def _component_validator(name: str) -> Draft202012Validator:
    schema = _bundle(_pointer(f"#/components/schemas/{name}"))
    return Draft202012Validator(schema, registry=_registry())


def validate_component(name: str, instance: object, prefix: str) -> None:
    """Validate against a schema of the seed's components (``RunOutcome``, ...).

    Raises :class:`InvalidRequest` whose message starts with ``prefix`` and the path.
    """
    _check(_component_validator(name), instance, prefix)


def validate_source(
    source: object,
    *,
    tenant: str,
    team: str,
    fast: FastValidators = _fast_source_validator,
) -> None:
    """Validate a ``TeamSource`` and its consistency with the caller and the path.

    ``tenant`` is the caller's tenant, ``team`` the team id in the path. A member source
    must name a member of that tenant and team; an operator source a principal of that
    tenant. Raises :class:`InvalidRequest` naming the failing field (``source....``).
    ``fast`` gives the fast validator of a kind, as for :func:`validate_event`.
    """
    if not isinstance(source, dict):
        raise InvalidRequest(f"source: must be an object, not {_json_type(source)}")
    if "kind" not in source:
        raise InvalidRequest("source.kind: 'kind' is a required property")
    kind = source["kind"]
    kinds = _split("TeamSource", "kind")
    if not isinstance(kind, str) or kind not in kinds:
        raise InvalidRequest(f"source.kind: {_clip(repr(kind))} is not one of {sorted(kinds)!r}")
    if not fast(kind).is_valid(source):
        _refuse(
            _source_validator(kind),
            source,
            "source",
            f"source:{kind}",
            _fast_source_validator(kind),
        )
    if kind == "member":
        member = source["member"]
        if member["tenant"] != tenant:
            raise InvalidRequest("source.member.tenant: does not match the caller's tenant")
        if member["team"] != team:
            raise InvalidRequest("source.member.team: does not match the team in the path")
    elif kind == "operator" and source["principal"]["tenant"] != tenant:
        raise InvalidRequest("source.principal.tenant: does not match the caller's tenant")


_ITEM_KEYS: Final = ("source", "event")


def _item(
    raw: object,
    *,
    tenant: str,
    team: str,
    fast_event: FastValidators,
    fast_source: FastValidators,
) -> TeamPublishItem:
    if not isinstance(raw, dict):
        raise InvalidRequest(
            f"must be an object with the keys 'source' and 'event', not {_json_type(raw)}"
        )
    unknown = [key for key in raw if key not in _ITEM_KEYS]
    if unknown:
        raise InvalidRequest("unknown " + _plural("field", unknown))
    for key in _ITEM_KEYS:
        if key not in raw:
            raise InvalidRequest(f"{key!r} is a required property")
    source, event = raw["source"], raw["event"]
    validate_source(source, tenant=tenant, team=team, fast=fast_source)
    validate_event(event, fast=fast_event)
    data = event["data"]
    return TeamPublishItem(
        event_id=event["event_id"],
        source=source,
        event=event,
        host_opening=event["type"] == "team_opened" and data.get("kind") == "host",
    )


def validate_team_publish(
    body: object,
    *,
    tenant: str,
    team: str,
    fast_event: FastValidators = _fast_event_validator,
    fast_source: FastValidators = _fast_source_validator,
) -> list[TeamPublishItem]:
    """Validate an already JSON-decoded publish body for ``POST /v1/teams/{team}/events``.

    ``body`` is one object ``{"source": TeamSource, "event": events_Event}`` or a non-empty
    list of at most :data:`MAX_BATCH_ITEMS` of them. Raises :class:`InvalidRequest` whose
    message names the failing item index (0 for a single object) and the JSON path of the
    failing field, e.g. ``item 2: event.data.text: 5 is not of type 'string'``. The first
    failing item wins (within an item: its keys, then ``source``, then ``event``); nothing
    is returned on failure (all or nothing).  ``fast_event`` and ``fast_source`` are the
    fast validators (see :func:`validate_event`).
    """
    if isinstance(body, dict):
        items: list[object] = [body]
    elif isinstance(body, list):
        if not body:
            raise InvalidRequest("body: the array is empty; send at least one item")
        if len(body) > MAX_BATCH_ITEMS:
            raise InvalidRequest(
                f"body: the array has {len(body)} items, more than the limit of {MAX_BATCH_ITEMS}"
            )
        items = body
    else:
        raise InvalidRequest(
            f"body: must be an object or an array of objects, not {_json_type(body)}"
        )
    out: list[TeamPublishItem] = []
    for index, raw in enumerate(items):
        try:
            out.append(
                _item(raw, tenant=tenant, team=team, fast_event=fast_event, fast_source=fast_source)
            )
        except InvalidRequest as exc:
            raise InvalidRequest(f"item {index}: {exc.message}") from None
    return out
