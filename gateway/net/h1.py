"""HTTP/1.1 requests parsed and responses framed, without I/O (RFC 9112, server side).

:class:`RequestParser` takes the bytes a client sends (:meth:`~RequestParser.receive`)
and hands out complete requests, head and body (:meth:`~RequestParser.next_request`),
one at a time: the connection reads the next one only after answering this one, so
pipelined requests wait in the parser's buffer (bounded: the connection stops reading
while a request is handled).  Anything malformed raises :class:`HttpError` with the
status to answer before closing; nothing malformed is ever half-accepted, and nothing
ambiguous is resolved by a guess: where RFC 9112 requires CRLF, one value or a grammar,
anything else is refused (400 unless said otherwise), so no proxy in front can have
framed the same bytes differently.

What is accepted, by section of RFC 9112 (tests/net/test_h1.py has a case for each
row; tests/net/test_h1_differential.py compares the parser with llhttp and h11 on
generated requests).  The gateway keeps a parser of its own although llhttp behind the
same interface costs about as much: llhttp accepts request lines and chunk lines that
this table refuses, and httptools hands out nothing to check them by
(docs/benchmarks.md, "The hardened edges: what they cost"):

============================  ==========================================================
RFC 9112                      accepted (anything else: 400 and close, unless said)
============================  ==========================================================
2.1 message format            a head ``start-line *( field-line CRLF ) CRLF``, then the
                              body its framing gives (section 6); the head (request
                              line and fields) at most ``max_head`` bytes (431 beyond,
                              decided before it ends)
2.2 message parsing           every line of the head, of a chunk-size line and of the
                              trailers ends with CRLF: a bare LF or a bare CR anywhere
                              there is 400, decided as soon as it arrives; empty lines
                              (CRLF) before a request line are ignored (none count
                              towards ``max_head``); whitespace between the request
                              line and the first field is 400
2.3 HTTP version              ``HTTP/1.1`` or ``HTTP/1.0``, exactly (case, digits)
3 request line                ``method SP request-target SP HTTP-version``: one SP
                              each, no other whitespace
3.1 method                    a token, case-sensitive; one the gateway implements
                              (:data:`METHODS`: GET, HEAD, POST, PUT, DELETE, OPTIONS,
                              TRACE, PATCH; the router answers 405 where a route has
                              none); any other token, CONNECT included (the gateway
                              is no tunnel), is 501 (RFC 9110 9.1)
3.2 request target            visible ASCII without ``#`` (a fragment is never sent),
                              in origin-form (``/`` ...), absolute-form (``http://`` or
                              ``https://`` and a non-empty authority without userinfo,
                              RFC 9110 4.2.4), or asterisk-form (``*``, OPTIONS only);
                              authority-form is CONNECT's, refused with it; the target
                              is handed out raw (percent-escapes are the router's)
3.2 host                      one ``host`` field in HTTP/1.1 (none is 400, two are
                              400), at most one in HTTP/1.0; its value empty or
                              ``uri-host [ ":" port ]`` (reg-name, IPv4, or an IP
                              literal in brackets; port digits)
5 field syntax                ``field-name ":" OWS field-value OWS``: a token name (no
                              whitespace before the colon), lowercased; the value
                              without its leading and trailing OWS, of visible ASCII,
                              obs-text (kept as latin-1), SP and HTAB inside (any
                              other control character, DEL included, is 400)
5.2 obs-fold                  refused (a line starting with SP or HTAB)
5.3 field order / repeats     a field the gateway reads as one value (:data:`SINGLE`)
                              may appear once (400 otherwise: two credentials or two
                              lengths are ambiguous, and the gateway never picks
                              one); any other repeated field is one list, its lines
                              joined with ``", "`` (RFC 9110 5.3), never only the last
6.1 transfer-encoding         HTTP/1.1 only (400 in HTTP/1.0); the field (all its
                              lines) exactly ``chunked`` once, case-insensitive,
                              without empty list elements and without HTAB after the
                              value starts, even as OWS (400: llhttp reads
                              ``chunked<HTAB>`` as another coding); a coding the
                              gateway does not implement before a final ``chunked``
                              is 501
6.2 content-length            1*DIGIT (ASCII), at most 18 digits; one field line
6.3 message body length       not both transfer-encoding and content-length (400);
                              neither: no body; more than ``max_body`` bytes is 413
                              (from content-length before the body arrives, or as
                              chunks arrive)
7.1 chunked coding            ``chunk-size [ chunk-ext ] CRLF chunk-data CRLF``:
                              chunk-size 1*16HEXDIG; chunk-ext ``*( ";" token [ "="
                              ( token / quoted-string ) ] )`` without BWS (llhttp
                              refuses whitespace there; so does the gateway) and
                              ignored; exactly CRLF after the data
7.1.2 trailer section         after the last chunk, field lines as in section 5, each
                              ending with CRLF, then CRLF; read, checked, dropped
                              (never header fields); none of :data:`NOT_TRAILERS`
                              (framing, connection, routing, single-value fields:
                              RFC 9110 6.5.1); at most :data:`MAX_LINE` bytes for a
                              chunk-size line and for the whole section
9.3 persistence               HTTP/1.1 is persistent unless ``connection`` has
                              ``close``; HTTP/1.0 never (``keep_alive`` false)
9.3.2 pipelining              requests after a request wait in the buffer, each
                              handed out in order after the previous one's answer
(RFC 9110 7.8) upgrade        ``connection: upgrade`` with an ``upgrade`` field in
                              HTTP/1.1 and no content: the request is handed out
                              with ``upgrade`` set and the bytes after it stay in
                              :attr:`RequestParser.trailing` for the new protocol; the
                              same with content (content-length above 0 or chunked)
                              is 400 (llhttp gives the content to the new protocol,
                              h11 to the request: ambiguous); ignored in HTTP/1.0 (a
                              MUST); any request with an ``upgrade`` field or the
                              ``upgrade`` connection option is not
                              ``keep_alive``: if the server does not switch, it closes
                              after answering, so bytes a proxy may already treat as
                              a tunnel are never read as another request
(RFC 9110 10.1.1) expect      ``expect: 100-continue``:
                              :attr:`RequestParser.wants_continue` says when to send
                              ``100 Continue`` (HTTP/1.1 only)
============================  ==========================================================

Sections 4 (the status line) and 8 (incomplete messages: the connection closes, the
listener's part) are not the parser's; responses are framed by :func:`response_head`.
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
#: A request target: visible ASCII but "#" (no spaces, no controls, no fragment).
_TARGET_CHARS: Final = bytes(range(0x21, 0x7F)).replace(b"#", b"")
#: A field value: visible characters, obs-text, spaces and tabs (no controls).
_VALUE_CHARS: Final = bytes([0x09, *range(0x20, 0x7F), *range(0x80, 0x100)])


def _is_token(data: bytes) -> bool:
    return bool(data) and not data.translate(None, _TOKEN_CHARS)


def _is_target(data: bytes) -> bool:
    return bool(data) and not data.translate(None, _TARGET_CHARS)


def _is_value(data: bytes) -> bool:
    return not data.translate(None, _VALUE_CHARS)


def _bare_cr_or_lf(buf: bytes | bytearray, start: int, end: int) -> bool:
    """A line feed in ``buf[start:end]`` not preceded by a carriage return, or a carriage
    return not followed by a line feed (one at ``start - 1`` counts; one at ``end - 1``
    may still be followed by one: it is judged when the next bytes come)."""
    before = max(0, start - 1)
    crlf = buf.count(b"\r\n", before, end)
    return buf.count(b"\n", start, end) != crlf or buf.count(b"\r", before, end - 1) != crlf


def _tab_in(lines: list[bytes], name: bytes) -> bool:
    """A field line of ``name`` (lowercase) among ``lines`` (the head's) has a tab after
    the start of its value."""
    for line in lines[1:]:
        field, _, value = line.partition(b":")
        if b"\t" in value.lstrip(b" \t") and field.lower() == name:
            return True
    return False


#: The answer to a head with a line that ends in a bare LF or CR.
_BARE_EOL: Final = "a line of the request head ends with a bare LF or CR"
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
#: Fields never accepted in a trailer section: framing, connection, routing and the
#: fields the gateway reads as one value.  A sender must not send them there (RFC 9110
#: 6.5.1) and recipients differ on whether they count (llhttp closes the connection
#: after a trailer ``connection: close``; the gateway would not): refused.
NOT_TRAILERS: Final = SINGLE | frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: The methods the gateway knows (RFC 9110 9.3, PATCH, and QUERY, which llhttp knows
#: too), as their names: a route that does not take one answers 405; any other method
#: is 501 (CONNECT too: the gateway is no tunnel).
METHODS: Final = {
    m: m.decode("ascii")
    for m in (
        b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"TRACE", b"PATCH", b"QUERY"
    )
}  # fmt: skip
_TOKEN: Final = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED: Final = rb'"(?:[\t !\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
#: A chunk-size line without its CRLF: 1-16 hex digits, then extensions (RFC 9112 7.1.1)
#: without the BWS the RFC allows around ";" and "=" (llhttp refuses it).
_CHUNK_LINE: Final = re.compile(
    rb"([0-9A-Fa-f]{1,16})(?:;%s(?:=(?:%s|%s))?)*" % (_TOKEN, _TOKEN, _QUOTED)
)
#: An absolute-form request target's start: http or https, then an authority without
#: userinfo (RFC 9110 4.2.4), not empty (RFC 9110 4.2.1).
_ABSOLUTE: Final = re.compile(
    rb"[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9\-._~!$&'()*+,;=%:\[\]]+(?=[/?]|\Z)"
)
#: A host field's value (RFC 9112 3.2, RFC 3986 3.2.2): empty, or a reg-name or IPv4
#: address, or an IP literal, then an optional port.
_HOST: Final = re.compile(r"(?:\[[0-9A-Za-z:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(?::[0-9]*)?")
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
        self._host = ""  # the last host value found well-formed ("" needs no check)
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
            # Lines end with CRLF: a bare LF or CR is never part of a valid head, and a
            # head of LF-terminated lines would otherwise wait for a CRLF CRLF that never
            # comes.  (A complete head is checked whole, in _head_from.)
            if _bare_cr_or_lf(buf, self._scanned, len(buf)):
                raise HttpError(400, _BARE_EOL)
            self._scanned = len(buf)
            if len(buf) > self.max_head:
                raise HttpError(431, "request head too large")
            return None
        if end + 4 > self.max_head:
            if _bare_cr_or_lf(buf, self._scanned, end + 2):
                raise HttpError(400, _BARE_EOL)
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
        if not clean and _bare_cr_or_lf(head, 0, len(head) + 1):
            raise HttpError(400, _BARE_EOL)
        parts = lines[0].split(b" ")
        if len(parts) != 3:
            raise HttpError(400, "malformed request line")
        method_bytes, target, version = parts
        method = METHODS.get(method_bytes)
        if method is None:
            # Not a method the gateway implements: 501 if the line is well-formed (its
            # target's form is the method's, so only its characters are judged).
            if not _is_token(method_bytes) or not _is_target(target):
                raise HttpError(400, "malformed request line")
            if version != b"HTTP/1.1" and version != b"HTTP/1.0":
                raise HttpError(400, "unsupported HTTP version")
            raise HttpError(501, "method not implemented")
        if target and target[0] == 0x2F:  # origin-form ("/"), nearly always
            if not _is_target(target):
                raise HttpError(400, "malformed request target")
        elif target == b"*":
            if method != "OPTIONS":
                raise HttpError(400, "the asterisk-form is for OPTIONS only")
        elif not _is_target(target) or _ABSOLUTE.match(target) is None:
            raise HttpError(400, "malformed request target")
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
                if line[:1] in (b" ", b"\t"):
                    raise HttpError(400, "a folded or indented header field line")
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
        host = headers.get("host")
        if host is None:
            if http11:
                raise HttpError(400, "a request needs exactly one host header")
        elif host != self._host:  # a connection's requests name one host: checked once
            if _HOST.fullmatch(host) is None:
                raise HttpError(400, "malformed host header")
            self._host = host
        connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if coding is not None:
            if length is not None:
                raise HttpError(400, "both content-length and transfer-encoding")
            if not http11:
                raise HttpError(400, "transfer-encoding in an HTTP/1.0 request")
            if b"\t" in head and _tab_in(lines, b"transfer-encoding"):
                # llhttp takes "chunked<HTAB>" for another coding: no tab after the value
                # starts, not even as OWS.
                raise HttpError(400, "a tab in transfer-encoding")
            if coding.strip(" \t").lower() != "chunked":
                codings = [c.strip(" \t").lower() for c in coding.split(",")]
                if "" in codings or codings[-1] != "chunked" or codings.count("chunked") > 1:
                    raise HttpError(400, "transfer-encoding must be chunked, once, last")
                raise HttpError(501, "unsupported transfer-encoding")
            self._length = None
        elif length is not None:
            # ASCII digits: str.isdigit alone also takes "\xb2" (superscript two).
            if not (length.isascii() and length.isdigit()) or len(length) > 18:
                raise HttpError(400, "malformed content-length")
            self._length = int(length)
            if self._length > self.max_body:
                raise HttpError(413, f"request body is larger than {self.max_body} bytes")
        else:
            self._length = 0
        # An empty upgrade field is no upgrade (llhttp does not switch on it either); the
        # request is not kept alive all the same (below).  (Values are stripped of OWS.)
        upgrade = "upgrade" in connection and headers.get("upgrade", "") != ""
        if upgrade and self._length != 0:
            raise HttpError(400, "a request to switch protocols has content")
        # A request that asks to switch protocols (an upgrade field, or the upgrade
        # connection option) and is not switched (refused, or not a well-formed upgrade)
        # ends the connection after its answer.
        asks = "upgrade" in headers or "upgrade" in connection
        keep_alive = http11 and "close" not in connection and not asks
        # An upgrade in HTTP/1.0 is ignored (RFC 9110 7.8); the connection closes.
        return ParsedRequest(method, target, headers, http11, keep_alive, upgrade and http11)

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
                # No CRLF yet: a LF, or a CR not last, is a bare one (refused now, not
                # after MAX_LINE bytes).
                if len(buf) > MAX_LINE or _bare_cr_or_lf(buf, 0, len(buf)):
                    raise HttpError(400, "malformed chunked body")
                return None
            if line_end > MAX_LINE:
                raise HttpError(400, "malformed chunked body")
            match = _CHUNK_LINE.fullmatch(buf, 0, line_end)
            if match is None:
                raise HttpError(400, "malformed chunked body")
            size = int(match.group(1), 16)
            if size == 0:
                return self._take_trailers(line_end + 2)
            if len(self._chunks) + size > self.max_body:
                raise HttpError(413, f"request body is larger than {self.max_body} bytes")
            start = line_end + 2
            if len(buf) < start + size + 2:
                # The data is data; what comes after it must be CRLF, judged as it
                # arrives.
                after = buf[start + size : start + size + 1]
                if after and after != b"\r":
                    raise HttpError(400, "malformed chunked body")
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
        if _bare_cr_or_lf(buf, start, end + 4 if end >= 0 else len(buf)):
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
            if name.decode("ascii").lower() in NOT_TRAILERS:
                raise HttpError(400, f"a {name.decode('ascii').lower()} trailer field")
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
