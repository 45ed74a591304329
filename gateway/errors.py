"""The one exception root, the public error codes, and the WebSocket close codes.

Every failure the gateway reports to a client is a :class:`GatewayError` carrying a
public ``code`` (the seed's ``api_ApiErrorCode`` vocabulary plus our additions) and an
HTTP status.  Foreign exceptions (redis, jsonschema, jwt) are translated into
subclasses of :class:`GatewayError` at the adapter that calls the foreign library, so
nothing above the adapters ever sees them.

HTTP error bodies are exactly ``{"error": {"code": ..., "message": ...}}`` (seed rule 5).
"""

from __future__ import annotations

import enum
from typing import ClassVar

import msgspec


class ErrorCode(enum.StrEnum):
    """Public error codes. Add only; never rename (they are wire vocabulary)."""

    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    INVALID_REQUEST = "invalid_request"
    INVALID_CURSOR = "invalid_cursor"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    RUN_ENDED = "run_ended"
    TOO_LARGE = "too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class CloseCode(enum.IntEnum):
    """WebSocket close codes of the ``gateway.v1`` protocol (docs/contract.md D6)."""

    GOING_AWAY = 1001
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009
    #: The peer stopped answering pings (RFC 6455 "internal error"; what websockets
    #: itself sends on a keepalive timeout).  The connection is aborted, so the client
    #: rarely sees it.
    KEEPALIVE_TIMEOUT = 1011
    SERVICE_RESTART = 1012
    UNAUTHENTICATED = 4001
    TOO_SLOW = 4008
    RATE_LIMITED = 4029


class GatewayError(Exception):
    """Root of every error the gateway raises on purpose.

    ``code`` is the public error code, ``status`` the HTTP status it maps to, and the
    message is safe to show to the caller (it never contains secrets or another
    tenant's data).
    """

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL
    status: ClassVar[int] = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> bytes:
        """The documented HTTP error body for this error."""
        return error_body(self.code, self.message)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Extra HTTP response headers for this error (none by default)."""
        return []


class Unauthenticated(GatewayError):
    code = ErrorCode.UNAUTHENTICATED
    status = 401


class Forbidden(GatewayError):
    code = ErrorCode.FORBIDDEN
    status = 403


class NotFound(GatewayError):
    code = ErrorCode.NOT_FOUND
    status = 404


class InvalidRequest(GatewayError):
    code = ErrorCode.INVALID_REQUEST
    status = 400


class InvalidCursor(GatewayError):
    code = ErrorCode.INVALID_CURSOR
    status = 400


class IdempotencyKeyReused(GatewayError):
    code = ErrorCode.IDEMPOTENCY_KEY_REUSED
    status = 409


class RunEnded(GatewayError):
    """A new event for a run whose end (its terminal event) the run feed already holds;
    nothing was appended.  Exact retries of what the run holds are answered, not this."""

    code = ErrorCode.RUN_ENDED
    status = 409

    def __init__(
        self,
        message: str = "run: the run has ended (its feed holds its terminal event): nothing "
        "more can be published to it; nothing was appended (start a new run with another "
        "run id)",
    ) -> None:
        super().__init__(message)


class TooLarge(GatewayError):
    code = ErrorCode.TOO_LARGE
    status = 413


class UnsupportedMediaType(GatewayError):
    code = ErrorCode.UNSUPPORTED_MEDIA_TYPE
    status = 415


class MethodNotAllowed(GatewayError):
    """``allow`` (e.g. ``"GET, POST"``) becomes the ``Allow`` header a 405 must carry
    (RFC 9110, 15.5.6)."""

    code = ErrorCode.METHOD_NOT_ALLOWED
    status = 405

    def __init__(self, message: str, *, allow: str | None = None) -> None:
        super().__init__(message)
        self.allow = allow

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [] if self.allow is None else [(b"allow", self.allow.encode("ascii"))]


class RateLimited(GatewayError):
    """Too many connections or too many published items; ``retry_after`` in whole
    seconds becomes a ``Retry-After`` header when set."""

    code = ErrorCode.RATE_LIMITED
    status = 429

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> list[tuple[bytes, bytes]]:
        if self.retry_after is None:
            return []
        return [(b"retry-after", b"%d" % self.retry_after)]


class Unavailable(GatewayError):
    """The backing store could not be reached or answered with an error."""

    code = ErrorCode.UNAVAILABLE
    status = 503


class HeadMoved(Unavailable):
    """An append that expected the feed's head somewhere was refused: another writer
    appended (or the feed moved to a new epoch) since it was planned.  Nothing was
    written; plan again from the feed as it is now.  Answered 503 if it gets that far."""


class _Failure(msgspec.Struct, frozen=True):
    code: str
    message: str


class _ErrorBody(msgspec.Struct, frozen=True):
    error: _Failure


_encoder = msgspec.json.Encoder()


def error_body(code: ErrorCode | str, message: str) -> bytes:
    """Encode ``{"error": {"code": code, "message": message}}`` with nothing else."""
    return _encoder.encode(_ErrorBody(_Failure(str(code), message)))
