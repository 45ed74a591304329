"""HTTP/1.1 requests parsed and responses framed, without I/O (RFC 9112, server side).

:class:`RequestParser` takes the bytes a client sends (:meth:`~RequestParser.receive`)
and hands out complete requests, head and body (:meth:`~RequestParser.next_request`),
one at a time: the connection reads the next one only after answering this one, so
pipelined requests wait in the parser's buffer (bounded: the connection stops reading
while a request is handled).  Anything malformed raises :class:`HttpError` with the
status to answer before closing; nothing malformed is ever half-accepted.

What is accepted:

- a request line ``method SP target SP HTTP/1.1`` (or ``HTTP/1.0``), after any empty
  lines; lines end with CRLF (a bare LF in the head is refused at once: 400); the head
  (request line and headers) at most ``max_head`` bytes (431 beyond);
- header fields ``name: value`` (a token name, no space before the colon, no line
  folding, no control characters in the value); names are lowercased; a field the
  gateway reads as one value (:data:`SINGLE`: ``authorization``, ``host``,
  ``content-type``, ``content-length``, the WebSocket handshake's, ...) may appear once
  (400 otherwise: two credentials or two lengths are ambiguous, and the gateway never
  picks one); any other repeated field is one list, its lines joined with ``", "``
  (RFC 9110 5.3), never only the last; HTTP/1.1 requires ``host``;
- a body framed by ``content-length`` (digits) or ``transfer-encoding`` whose only
  coding is ``chunked`` (not both; 400 for a list where ``chunked`` is not the final
  coding exactly once and in HTTP/1.0, whose framing it cannot be; 501 for another
  coding before it), at most ``max_body`` bytes (413: decided from ``content-length``
  before the body arrives, or as chunks arrive); the trailer section after the last
  chunk is lines ending in CRLF like the head's (a bare CR or LF there is 400, not the
  end of the trailers);
- ``expect: 100-continue``: :attr:`RequestParser.wants_continue` says when to send
  ``100 Continue`` (HTTP/1.1 only: the expectation is ignored in HTTP/1.0);
- an upgrade (``connection: upgrade`` with an ``upgrade`` header, no body): the request
  is handed out and the bytes after it stay in :attr:`RequestParser.trailing` for the
  new protocol.  Any request with an ``upgrade`` header is not ``keep_alive``: if the
  server does not switch protocols, it closes after answering, so bytes a proxy may
  already treat as a tunnel are never read as another request.

:func:`response_head` frames a response head.
"""

from __future__ import annotations

import re
from typing import Final

# The character classes below are checked with bytes.translate (delete the allowed
# characters; anything left is not allowed) and bytes.count, which run in C at memory
# speed; the regular expressions they replace were ~5% of a single-event publish.
#: Characters of a token (RFC 9110 5.6.2), for methods and header names.
_TOKEN_CHARS: Final = (
    b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)
#: A request target: visible ASCII, nothing else (no spaces, no controls).
_TARGET_CHARS: Final = bytes(range(0x21, 0x7F))
#: A field value: visible characters, obs-text, spaces and tabs (no controls).
_VALUE_CHARS: Final = bytes([0x09, *range(0x20, 0x7F), *range(0x80, 0x100)])


def _is_token(data: bytes) -> bool:
    return bool(data) and not data.translate(None, _TOKEN_CHARS)


def _is_target(data: bytes) -> bool:
    return bool(data) and not data.translate(None, _TARGET_CHARS)


def _is_value(data: bytes) -> bool:
    return not data.translate(None, _VALUE_CHARS)


def _bare_lf(buf: bytes | bytearray, start: int, end: int) -> bool:
    """A line feed in ``buf[start:end]`` not preceded by a carriage return (the one
    before ``start`` counts)."""
    return buf.count(b"\n", start, end) != buf.count(b"\r\n", max(0, start - 1), end)


#: The answer to a head with a line that ends in LF alone (checked in two places).
_BARE_LF: Final = "a line of the request head ends with a bare LF"
#: Fields the gateway reads as one value: a request that repeats one is refused, so the
#: gateway never picks one of two (a proxy may have checked the other).
SINGLE: Final = frozenset(
    {
        "authorization",
        "content-length",
        "content-type",
        "expect",
        "host",
        "idempotency-key",
        "last-event-id",
        "origin",
        "sec-websocket-key",
        "sec-websocket-version",
    }
)
#: A chunk-size line: hex digits, then optional extensions.
_CHUNK_SIZE: Final = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?")
#: A chunk-size line (or a trailer field) longer than this is refused.
MAX_LINE: Final = 8 * 1024

REASONS: Final = {
    100: b"Continue",
    101: b"Switching Protocols",
    200: b"OK",
    204: b"No Content",
    308: b"Permanent Redirect",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    409: b"Conflict",
    413: b"Content Too Large",
    415: b"Unsupported Media Type",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
}


def reason(status: int) -> bytes:
    return REASONS.get(status, b"Unknown")


class HttpError(Exception):
    """A request that cannot be accepted: answer ``status`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ParsedRequest:
    """One complete request.  ``keep_alive``: the connection may carry another after
    the answer (HTTP/1.1 without ``connection: close``; HTTP/1.0 never)."""

    __slots__ = ("body", "headers", "http11", "keep_alive", "method", "target", "upgrade")

    def __init__(
        self,
        method: str,
        target: bytes,
        headers: dict[str, str],
        http11: bool,
        keep_alive: bool,
        upgrade: bool,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.http11 = http11
        self.keep_alive = keep_alive
        self.upgrade = upgrade
        self.body = b""


class RequestParser:
    """See the module docstring."""

    def __init__(self, *, max_head: int, max_body: int) -> None:
        self.max_head = max_head
        self.max_body = max_body
        self._buf = bytearray()
        self._scanned = 0  # where the search for the end of the head resumes
        self._head: ParsedRequest | None = None
        self._length: int | None = None  # the body's length; None: chunked
        self._chunks = bytearray()
        self._continue_sent = False
        #: After an upgrade: everything the client sent after the request.
        self.trailing = b""
        self._upgraded = False

    # -- input ----------------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def wants_continue(self) -> bool:
        """A head with ``expect: 100-continue`` is in and its body is not: the client
        waits for ``100 Continue`` (true once; the caller sends it)."""
        head = self._head
        if head is None or self._continue_sent or not head.http11:
            return False
        if head.headers.get("expect", "").lower() != "100-continue":
            return False
        self._continue_sent = True
        return True

    @property
    def head_received(self) -> bool:
        """The head of the current request is in; its body is not (yet)."""
        return self._head is not None

    def detach(self) -> bytes:
        """Stop parsing (the connection switches protocols) and return every byte
        received after the last request handed out: :attr:`trailing` after an
        upgrade, else whatever was buffered (pipelined bytes are not lost)."""
        if not self._upgraded:
            self._upgraded = True
            self.trailing = bytes(self._buf)
            self._buf = bytearray()
        return self.trailing

    @property
    def in_request(self) -> bool:
        """Part of a request has arrived (an EOF now cuts it short)."""
        return self._head is not None or bool(self._buf.strip(b"\r\n"))

    # -- requests -------------------------------------------------------------------

    def next_request(self) -> ParsedRequest | None:
        """The next complete request, or None until more bytes arrive.  Raises
        HttpError.  Call again only after answering the request it returned."""
        if self._upgraded:
            return None
        if self._head is None:
            head = self._parse_head()
            if head is None:
                return None
            self._head = head
        head = self._head
        body = self._take_body()
        if body is None:
            return None
        head.body = body
        self._head = None
        self._chunks = bytearray()
        self._continue_sent = False
        if head.upgrade:
            self._upgraded = True
            self.trailing = bytes(self._buf)
            self._buf = bytearray()
        return head

    def _parse_head(self) -> ParsedRequest | None:
        buf = self._buf
        # Empty lines before a request line are ignored (RFC 9112 2.2).
        skip = 0
        while buf.startswith(b"\r\n", skip):
            skip += 2
        if skip:
            del buf[:skip]
            self._scanned = 0
        end = buf.find(b"\r\n\r\n", max(0, self._scanned - 3))
        if end < 0:
            # Lines end with CRLF: a bare LF is never part of a valid head, and a head
            # of LF-terminated lines would otherwise wait for a CRLF CRLF that never
            # comes.  (A complete head is checked whole, in _head_from.)
            if _bare_lf(buf, self._scanned, len(buf)):
                raise HttpError(400, _BARE_LF)
            self._scanned = len(buf)
            if len(buf) > self.max_head:
                raise HttpError(431, "request head too large")
            return None
        if end + 4 > self.max_head:
            if _bare_lf(buf, self._scanned, end):
                raise HttpError(400, _BARE_LF)
            raise HttpError(431, "request head too large")
        head = bytes(buf[:end])
        del buf[: end + 4]
        self._scanned = 0
        return self._head_from(head)

    def _head_from(self, head: bytes) -> ParsedRequest:
        lines = head.split(b"\r\n")
        # One pass over the whole head: with the field-value characters deleted, a head
        # whose only other bytes are its line ends has no control character, bare CR or
        # bare LF anywhere, and its values need no check of their own.  Otherwise every
        # part is checked alone, for the precise answer.
        clean = len(head.translate(None, _VALUE_CHARS)) == 2 * (len(lines) - 1)
        if not clean and _bare_lf(head, 0, len(head)):
            raise HttpError(400, _BARE_LF)
        parts = lines[0].split(b" ")
        if len(parts) != 3:
            raise HttpError(400, "malformed request line")
        method, target, version = parts
        if not _is_token(method) or not _is_target(target):
            raise HttpError(400, "malformed request line")
        if version == b"HTTP/1.1":
            http11 = True
        elif version == b"HTTP/1.0":
            http11 = False
        else:
            raise HttpError(400, "unsupported HTTP version")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not _is_token(name):
                # Also a folded line (it starts with a space) or a space before the colon.
                raise HttpError(400, "malformed header field")
            value = value.strip(b" \t")
            if not clean and not _is_value(value):
                raise HttpError(400, "malformed header field")
            key = name.decode("ascii").lower()
            text = value.decode("latin-1")
            if key in headers:
                if key in SINGLE:
                    raise HttpError(400, f"the {key} header field is repeated")
                text = f"{headers[key]}, {text}"
            headers[key] = text
        if http11 and "host" not in headers:
            raise HttpError(400, "a request needs exactly one host header")
        connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if coding is not None:
            if length is not None:
                raise HttpError(400, "both content-length and transfer-encoding")
            if not http11:
                raise HttpError(400, "transfer-encoding in an HTTP/1.0 request")
            codings = [c for c in (c.strip().lower() for c in coding.split(",")) if c]
            if not codings or codings[-1] != "chunked" or codings.count("chunked") > 1:
                raise HttpError(400, "transfer-encoding must end with chunked, once")
            if len(codings) > 1:
                raise HttpError(501, "unsupported transfer-encoding")
            self._length = None
        elif length is not None:
            if not length.isdigit() or len(length) > 18:
                raise HttpError(400, "malformed content-length")
            self._length = int(length)
            if self._length > self.max_body:
                raise HttpError(413, f"request body is larger than {self.max_body} bytes")
        else:
            self._length = 0
        # A request that asks to switch protocols and is not switched (refused, or not a
        # well-formed upgrade) ends the connection after its answer.
        keep_alive = http11 and "close" not in connection and "upgrade" not in headers
        upgrade = "upgrade" in connection and "upgrade" in headers and self._length == 0
        return ParsedRequest(method.decode("ascii"), target, headers, http11, keep_alive, upgrade)

    def _take_body(self) -> bytes | None:
        buf = self._buf
        length = self._length
        if length is not None:
            if len(buf) < length:
                return None
            body = bytes(buf[:length])
            del buf[:length]
            return body
        # Chunked: decode as much as has arrived; the chunks so far wait in _chunks.
        while True:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                if len(buf) > MAX_LINE:
                    raise HttpError(400, "malformed chunked body")
                return None
            if line_end > MAX_LINE:
                raise HttpError(400, "malformed chunked body")
            match = _CHUNK_SIZE.fullmatch(bytes(buf[:line_end]))
            if match is None:
                raise HttpError(400, "malformed chunked body")
            size = int(match.group(1), 16)
            if size == 0:
                return self._take_trailers(line_end + 2)
            if len(self._chunks) + size > self.max_body:
                raise HttpError(413, f"request body is larger than {self.max_body} bytes")
            start = line_end + 2
            if len(buf) < start + size + 2:
                return None
            if buf[start + size : start + size + 2] != b"\r\n":
                raise HttpError(400, "malformed chunked body")
            self._chunks += buf[start : start + size]
            del buf[: start + size + 2]

    def _take_trailers(self, start: int) -> bytes | None:
        """After the last chunk: trailer fields (checked, then dropped), then an empty
        line.  Lines end with CRLF: a bare CR or LF is refused, never taken for the end
        of the section (which would read the next request's head as trailers)."""
        buf = self._buf
        if buf[start : start + 2] == b"\r\n":  # no trailers
            del buf[: start + 2]
            return bytes(self._chunks)
        end = buf.find(b"\r\n\r\n", start)
        # Up to the end of the section, or everything buffered but a CR that may be
        # the first half of a CRLF still to come.
        limit = end + 4 if end >= 0 else len(buf) - (1 if buf.endswith(b"\r") else 0)
        if _bare_lf(buf, start, limit) or buf.count(b"\r", start, limit) != buf.count(
            b"\r\n", start, limit
        ):
            raise HttpError(400, "a trailer line ends with a bare CR or LF")
        if end < 0:
            if len(buf) - start > MAX_LINE:
                raise HttpError(400, "malformed chunked body")
            return None
        if end - start > MAX_LINE:
            raise HttpError(400, "malformed chunked body")
        for line in bytes(buf[start:end]).split(b"\r\n"):
            name, colon, value = line.partition(b":")
            if not colon or not _is_token(name) or not _is_value(value):
                raise HttpError(400, "malformed chunked body")
        del buf[: end + 4]
        return bytes(self._chunks)


def response_head(status: int, headers: list[tuple[bytes, bytes]], *, close: bool) -> bytes:
    """``HTTP/1.1 <status> <reason>`` and the headers, with ``connection: close`` when
    the connection closes after this response."""
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, reason(status))]
    parts += [name + b": " + value + b"\r\n" for name, value in headers]
    if close:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
