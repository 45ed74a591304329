"""RFC 8785 (JSON Canonicalization Scheme) encoding, by the maintained ``rfc8785`` package."""

from __future__ import annotations

from typing import Any

import rfc8785

from gateway.errors import InvalidRequest


def canonical(value: Any) -> bytes:
    """The RFC 8785 bytes of a JSON value (sorted keys, ES6 numbers, no whitespace).

    Raises :class:`InvalidRequest` for values JCS cannot represent (NaN, infinities,
    integers beyond IEEE 754 double precision, non-string keys).
    """
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError, TypeError) as exc:
        raise InvalidRequest(f"value cannot be canonicalised as RFC 8785 JSON: {exc}") from exc
