"""llhttp (through httptools) behind the interface of the gateway's own HTTP/1.1 parser,
``gateway.net.h1.RequestParser``: a candidate replacement, measured by
bench/h1_parsers.py and held to the gateway's parser by
tests/net/test_h1_differential.py (each accepts what the other accepts, framed alike).

llhttp does the grammar (strict: every leniency off): the request line, CRLF line ends,
token names, field values, Content-Length digits, chunk sizes and line ends, trailers,
one framing.  What h1 refuses on top, this adapter refuses too, with h1's statuses:
methods outside ``h1.METHODS`` (501), request-target forms and ``#``, a version other
than 1.0 / 1.1, repeated ``h1.SINGLE`` fields, the host field (HTTP/1.1 needs one, and
its value's grammar), Transfer-Encoding other than exactly ``chunked`` (400, 501 for
another coding before it, 400 in HTTP/1.0), more than 18 digits of Content-Length, an
upgrade with content, the head and body bounds (431, 413).

Known differences from h1 (none changes what a request is):

- what h1 refuses and llhttp takes where httptools hands out nothing to check:
  chunk extensions (``;a=``, ``;=b``), chunk sizes of more than 16 digits (leading
  zeros), more than one SP between the parts of a request line, a bare LF or CR among
  the empty lines before a request line;
- a chunked body past ``max_body`` is refused as its data arrives, not from the chunk
  size (httptools does not hand sizes out);
- the head bound is measured from what llhttp hands out (method, target, fields, each
  with its separators and CRLF), so OWS around values does not count (h1 counts every
  byte); a head that never ends is bounded by the bytes received since it began;
- llhttp parses every pipelined request as it arrives: the requests wait, parsed, in a
  queue (the bytes, not more), an error after them waits its turn, and
  :meth:`detach` after a request that is no upgrade returns only bytes not yet parsed
  (the server detaches only after an upgrade, which llhttp stops at exactly);
- :attr:`buffered` counts bytes received and not yet given to llhttp.
"""

from __future__ import annotations

from collections import deque

import httptools

from gateway.net.h1 import (
    _ABSOLUTE,
    _HOST,
    _VALUE_CHARS,
    METHODS,
    NOT_TRAILERS,
    SINGLE,
    HttpError,
    ParsedRequest,
    _is_target,
)

_KNOWN = {name: name for name in METHODS.values()}


class LlhttpRequestParser:
    """``gateway.net.h1.RequestParser``'s interface on llhttp; see the module."""

    def __init__(self, *, max_head: int, max_body: int) -> None:
        self.max_head = max_head
        self.max_body = max_body
        parser = httptools.HttpRequestParser(self)
        parser.set_dangerous_leniencies(
            lenient_headers=False,
            lenient_chunked_length=False,
            lenient_keep_alive=False,
            lenient_transfer_encoding=False,
            lenient_version=False,
            lenient_data_after_close=False,
            lenient_optional_lf_after_cr=False,
            lenient_optional_cr_before_lf=False,
            lenient_optional_crlf_after_chunk=False,
            lenient_spaces_after_chunk_size=False,
        )
        self._parser = parser
        self._pending = b""  # received, not yet given to llhttp (one read, nearly always)
        self._ready: deque[ParsedRequest] = deque()
        self._error: HttpError | None = None
        self._stopped = False
        # The message being parsed.
        self._in_message = False
        self._url = b""
        self._headers: dict[str, str] = {}
        self._head_size = 0
        self._head_fed = 0  # bytes received since the head began (a bound)
        self._current: ParsedRequest | None = None
        self._length: int | None = None
        self._body = bytearray()
        self._continue_sent = False
        self._upgrade_at: ParsedRequest | None = None
        self._after_upgrade = b""
        #: After an upgrade: everything the client sent after the request.
        self.trailing = b""
        self._upgraded = False

    # -- the interface -------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        self._pending = self._pending + data if self._pending else data

    @property
    def buffered(self) -> int:
        return len(self._pending)

    @property
    def wants_continue(self) -> bool:
        head = self._current
        if head is None or self._ready or self._continue_sent or not head.http11:
            return False
        if head.headers.get("expect", "").lower() != "100-continue":
            return False
        self._continue_sent = True
        return True

    @property
    def head_received(self) -> bool:
        return self._current is not None and not self._ready

    @property
    def in_request(self) -> bool:
        return bool(self._ready) or self._in_message or bool(self._pending.strip(b"\r\n"))

    def detach(self) -> bytes:
        if not self._upgraded:
            self._upgraded = True
            self.trailing = self._pending
            self._pending = b""
        return self.trailing

    def next_request(self) -> ParsedRequest | None:
        if self._upgraded:
            return None
        if not self._ready and self._error is None and not self._stopped and self._pending:
            self._feed()
        if self._ready:
            request = self._ready.popleft()
            self._continue_sent = False
            if request is self._upgrade_at:
                self._upgraded = True
                self.trailing = self._after_upgrade
            return request
        if self._error is not None:
            raise self._error
        return None

    # -- llhttp ----------------------------------------------------------------------

    def _feed(self) -> None:
        data = self._pending
        self._pending = b""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._stopped = True
            self._after_upgrade = data[int(exc.args[0]) :]
            return
        except httptools.HttpParserInvalidMethodError:
            self._fail(HttpError(501, "method not implemented"))
            return
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, HttpError):
                self._fail(cause)
            else:
                self._fail(HttpError(400, f"malformed request: {exc}"))
            return
        if self._in_message and self._current is None:
            # A head still incomplete: bounded by the bytes fed since it began (all of
            # this feed's if it began in it: an upper bound).
            self._head_fed += len(data)
            if self._head_fed > self.max_head:
                self._fail(HttpError(431, "request head too large"))

    def _fail(self, error: HttpError) -> None:
        self._error = error
        self._stopped = True

    def on_message_begin(self) -> None:
        self._in_message = True
        self._url = b""
        self._headers = {}
        self._head_size = 0
        self._head_fed = 0
        self._current = None
        self._body = bytearray()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        value = value.rstrip(b" \t")
        if self._current is not None:  # a trailer field: checked, dropped
            if value.translate(None, _VALUE_CHARS):
                raise HttpError(400, "malformed chunked body")
            if name.decode("ascii").lower() in NOT_TRAILERS:
                raise HttpError(400, f"a {name.decode('ascii').lower()} trailer field")
            return
        if value.translate(None, _VALUE_CHARS):
            raise HttpError(400, "malformed header field")
        self._head_size += len(name) + len(value) + 4
        key = name.decode("ascii").lower()
        text = value.decode("latin-1")
        headers = self._headers
        if key in headers:
            if key in SINGLE:
                raise HttpError(400, f"the {key} header field is repeated")
            text = f"{headers[key]}, {text}"
        headers[key] = text

    def on_headers_complete(self) -> None:
        parser = self._parser
        method = _KNOWN.get(parser.get_method().decode("ascii"))
        if method is None:
            raise HttpError(501, "method not implemented")
        target = self._url
        if target[:1] == b"/":
            if not _is_target(target):
                raise HttpError(400, "malformed request target")
        elif target == b"*":
            if method != "OPTIONS":
                raise HttpError(400, "the asterisk-form is for OPTIONS only")
        elif not _is_target(target) or _ABSOLUTE.match(target) is None:
            raise HttpError(400, "malformed request target")
        version = parser.get_http_version()
        if version == "1.1":
            http11 = True
        elif version == "1.0":
            http11 = False
        else:
            raise HttpError(400, "unsupported HTTP version")
        self._head_size += len(method) + len(target) + 14
        if self._head_size > self.max_head:
            raise HttpError(431, "request head too large")
        headers = self._headers
        host = headers.get("host")
        if host is None:
            if http11:
                raise HttpError(400, "a request needs exactly one host header")
        elif _HOST.fullmatch(host) is None:
            raise HttpError(400, "malformed host header")
        connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if coding is not None:
            if length is not None:
                raise HttpError(400, "both content-length and transfer-encoding")
            if not http11:
                raise HttpError(400, "transfer-encoding in an HTTP/1.0 request")
            if coding.strip(" \t").lower() != "chunked":
                codings = [c.strip(" \t").lower() for c in coding.split(",")]
                if "" in codings or codings[-1] != "chunked" or codings.count("chunked") > 1:
                    raise HttpError(400, "transfer-encoding must be chunked, once, last")
                raise HttpError(501, "unsupported transfer-encoding")
            self._length = None
        elif length is not None:
            if not (length.isascii() and length.isdigit()) or len(length) > 18:
                raise HttpError(400, "malformed content-length")
            self._length = int(length)
            if self._length > self.max_body:
                raise HttpError(413, f"request body is larger than {self.max_body} bytes")
        else:
            self._length = 0
        upgrade = "upgrade" in connection and headers.get("upgrade", "") != ""
        if upgrade and self._length != 0:
            raise HttpError(400, "a request to switch protocols has content")
        # As h1: a request that asks to switch protocols (an upgrade field or the
        # upgrade connection option) and is not switched ends its connection.
        asks = "upgrade" in headers or "upgrade" in connection
        keep_alive = http11 and "close" not in connection and not asks
        self._current = ParsedRequest(
            method, target, headers, http11, keep_alive, upgrade and http11
        )

    def on_body(self, body: bytes) -> None:
        self._body += body
        if len(self._body) > self.max_body:
            raise HttpError(413, f"request body is larger than {self.max_body} bytes")

    def on_message_complete(self) -> None:
        request = self._current
        assert request is not None
        request.body = bytes(self._body)
        self._ready.append(request)
        self._current = None
        self._in_message = False
        # llhttp stops after an upgrade; in HTTP/1.0 the upgrade is ignored (RFC 9110
        # 7.8) and the request is not kept alive, so nothing after it is read either.
        if request.upgrade and self._parser.should_upgrade():
            self._upgrade_at = request
