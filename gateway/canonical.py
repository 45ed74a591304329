"""RFC 8785 (JSON Canonicalization Scheme) encoding.

The maintained ``rfc8785`` package is the reference, but it is pure Python and was the
largest cost of a publish (about 100 us per team event).  Most published values need
none of what makes JCS differ from sorted compact JSON: :func:`canonical` checks that
with one walk and then lets msgspec encode with sorted keys (a few microseconds); any
other value goes to ``rfc8785``.  The two agree byte for byte on the fast path's
domain (``tests/wire/test_canonical.py`` checks it on generated values):

- strings: both escape ``"``, ``\\`` and the C0 controls (``\\b \\f \\n \\r \\t``,
  else ``\\u00xx`` in lowercase) and write everything else as UTF-8;
- integers within +-(2**53 - 1): both write them in decimal (JCS writes numbers as
  ES6 doubles, which for these integers is the same digits);
- member order: JCS sorts keys by UTF-16 code units, msgspec by code points; the two
  orders are the same for keys without characters beyond U+FFFF.

Floats, larger integers, keys with such characters and anything that is not plain
JSON data (subclasses, tuples, non-string keys) take the reference path.
"""

from __future__ import annotations

from typing import Any

import msgspec
import rfc8785

from gateway.errors import InvalidRequest

_SAFE = 2**53 - 1
_ENCODER = msgspec.json.Encoder(order="sorted")


def _plain(value: Any) -> bool:
    """Whether sorted msgspec JSON of ``value`` is its RFC 8785 form (see the module)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_SAFE <= value <= _SAFE)
    if kind is list:
        return all(_plain(v) for v in value)
    if kind is dict:
        for key, v in value.items():
            if type(key) is not str or not (key.isascii() or max(key) <= "\uffff"):
                return False
            if not _plain(v):
                return False
        return True
    return False


def canonical(value: Any) -> bytes:
    """The RFC 8785 bytes of a JSON value (sorted keys, ES6 numbers, no whitespace).

    Raises :class:`InvalidRequest` for values JCS cannot represent (NaN, infinities,
    integers beyond IEEE 754 double precision, non-string keys, lone surrogates).
    """
    try:
        if _plain(value):
            return _ENCODER.encode(value)  # a lone surrogate raises UnicodeEncodeError
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError, TypeError) as exc:
        raise InvalidRequest(f"value cannot be canonicalised as RFC 8785 JSON: {exc}") from exc
