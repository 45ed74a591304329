"""The sans-I/O HTTP/1.1 request parser (gateway.net.h1) against RFC 9112 / RFC 9110.

No sockets: bytes go in with ``receive``, requests or :class:`HttpError` come out.
Every case of the tables runs twice, with the bytes fed all at once and fed one byte
at a time (``next_request`` called after every byte): both must give the same
outcome, so no rule depends on how TCP happens to split the stream.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pytest

from gateway.net.h1 import (
    MAX_LINE,
    METHODS,
    NOT_TRAILERS,
    REASONS,
    SINGLE,
    HttpError,
    ParsedRequest,
    RequestParser,
    response_head,
)
from gateway.net.server import MAX_HEAD_BYTES

MAX_BODY = 64

#: What a request is, for comparisons.
Described = tuple[str, bytes, bool, bool, bool, dict[str, str], bytes]
#: The requests a stream gave, then the status of the HttpError that ended it (or None).
Outcome = tuple[list[Described], int | None]


def parser() -> RequestParser:
    return RequestParser(max_head=MAX_HEAD_BYTES, max_body=MAX_BODY)


def describe(r: ParsedRequest) -> Described:
    return (r.method, r.target, r.http11, r.keep_alive, r.upgrade, dict(r.headers), r.body)


def _drain(p: RequestParser, out: list[Described]) -> None:
    while (r := p.next_request()) is not None:
        out.append(describe(r))


def feed(data: bytes, *, bytewise: bool = False) -> Outcome:
    """Every request ``data`` holds, fed at once or byte by byte, and the error status."""
    p = parser()
    out: list[Described] = []
    try:
        for piece in _pieces(data, bytewise):
            p.receive(piece)
            _drain(p, out)
    except HttpError as exc:
        return out, exc.status
    return out, None


def _pieces(data: bytes, bytewise: bool) -> Iterable[bytes]:
    if not bytewise:
        return [data]
    return [data[i : i + 1] for i in range(len(data))]


def one(data: bytes) -> ParsedRequest:
    """The one complete request of ``data`` (fed at once), checked byte by byte too."""
    p = parser()
    p.receive(data)
    r = p.next_request()
    assert r is not None, "the request should be complete"
    assert feed(data, bytewise=True) == ([describe(r)], None)
    return r


def error(data: bytes) -> int:
    """The status of the HttpError ``data`` raises (fed at once and byte by byte)."""
    whole, status = feed(data)
    assert status is not None, f"accepted: {whole}"
    assert feed(data, bytewise=True) == (whole, status)
    return status


def req(line: bytes = b"GET / HTTP/1.1", *headers: bytes, body: bytes = b"") -> bytes:
    return b"".join([line, b"\r\n", *(h + b"\r\n" for h in headers), b"\r\n", body])


H = b"Host: example.com"


# ---------------------------------------------------------------------------
# Request line (RFC 9112 3)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "method", "target", "http11"),
    [
        (b"GET / HTTP/1.1", "GET", b"/", True),
        (b"POST /v1/teams/t/events?a=1&b= HTTP/1.1", "POST", b"/v1/teams/t/events?a=1&b=", True),
        (b"HEAD /healthz HTTP/1.1", "HEAD", b"/healthz", True),
        # Every method the gateway implements.
        *((m + b" /x HTTP/1.1", m.decode(), b"/x", True) for m in METHODS),
        # asterisk-form (OPTIONS only), absolute-form (http, https): kept raw.
        (b"OPTIONS * HTTP/1.1", "OPTIONS", b"*", True),
        (b"GET http://example.com/a?b=c HTTP/1.1", "GET", b"http://example.com/a?b=c", True),
        (b"GET https://example.com HTTP/1.1", "GET", b"https://example.com", True),
        (b"GET HTTP://a:8080?x HTTP/1.1", "GET", b"HTTP://a:8080?x", True),
        (b"GET http://[::1]:80/ HTTP/1.1", "GET", b"http://[::1]:80/", True),
        (b"GET /%7Euser/a%20b HTTP/1.1", "GET", b"/%7Euser/a%20b", True),
        # Visible ASCII outside RFC 3986 that browsers send unescaped (as llhttp does).
        (b"GET /a|b^[]{}`\\\"<>'?q=%zz HTTP/1.1", "GET", b"/a|b^[]{}`\\\"<>'?q=%zz", True),
        (b"GET / HTTP/1.0", "GET", b"/", False),
    ],
)
def test_request_lines_accepted(line: bytes, method: str, target: bytes, http11: bool) -> None:
    r = one(req(line, H))
    assert (r.method, r.target, r.http11) == (method, target, http11)
    assert r.headers == {"host": "example.com"}
    assert r.body == b""


@pytest.mark.parametrize(
    "line",
    [
        b"GET /",  # two parts
        b"GET",
        b"GET / HTTP/1.1 x",  # four parts
        b"GET  / HTTP/1.1",  # two spaces
        b"GET / HTTP/1.1 ",  # trailing space
        b" GET / HTTP/1.1",  # leading space
        b"GET\t/\tHTTP/1.1",  # tabs are not separators
        b"GET  HTTP/1.1",  # empty target
        b"G(T / HTTP/1.1",  # not a token
        b"G\xc3\x89T / HTTP/1.1",
        b"GET /a b HTTP/1.1",
        b"GET /\x7f HTTP/1.1",
        b"GET /\x00 HTTP/1.1",
        b"GET /caf\xc3\xa9 HTTP/1.1",  # a target is ASCII
        b"GET /\r HTTP/1.1",  # bare CR
        # Request-target forms (RFC 9112 3.2).
        b"GET /a#frag HTTP/1.1",  # a fragment is never sent
        b"GET # HTTP/1.1",
        b"GET abc HTTP/1.1",
        b"GET * HTTP/1.1",  # asterisk-form: OPTIONS only
        b"POST * HTTP/1.1",
        b"OPTIONS ** HTTP/1.1",
        b"GET http:/x HTTP/1.1",
        b"GET http:// HTTP/1.1",  # an empty authority
        b"GET http:///x HTTP/1.1",
        b"GET http://user@a/ HTTP/1.1",  # userinfo (RFC 9110 4.2.4)
        b"GET http://a#f HTTP/1.1",
        b"GET mailto:a@b HTTP/1.1",
        b"GET ftp://a/ HTTP/1.1",
        b"GET httpx://a/ HTTP/1.1",
        b"GET example.com:443 HTTP/1.1",  # authority-form: CONNECT's
        b"OPTIONS example.com:443 HTTP/1.1",
        # Methods that are no token.
        b"G\x00T / HTTP/1.1",
        b"GE\x7fT / HTTP/1.1",
        b"G:T / HTTP/1.1",
        # Versions: only HTTP/1.0 and HTTP/1.1, exactly (400, as h1.py documents).
        b"GET / HTTP/2.0",
        b"GET / HTTP/1.2",
        b"GET / HTTP/0.9",
        b"GET / http/1.1",
        b"GET / HTTP/1",
        b"GET / HTTP/1.1x",
        b"GET / HTTP/01.1",
        b"GET / HTTP/1.10",
        b"GET / HTTP 1.1",
    ],
)
def test_request_lines_refused(line: bytes) -> None:
    assert error(req(line, H)) == 400


@pytest.mark.parametrize(
    "line",
    [
        # A method is a case-sensitive token; one the gateway does not implement is 501
        # (RFC 9110 9.1), whatever a route would say.
        b"get / HTTP/1.1",
        b"Get / HTTP/1.1",
        b"PURGE /x HTTP/1.1",
        b"M-SEARCH * HTTP/1.1",
        b"!#$%&'*+-.^_`|~09azAZ / HTTP/1.1",
        b"PRI * HTTP/1.1",
        # CONNECT: the gateway is no tunnel (so nothing after it is ever a tunnel's).
        b"CONNECT example.com:443 HTTP/1.1",
        b"CONNECT /x HTTP/1.1",
    ],
)
def test_methods_the_gateway_does_not_implement_are_501(line: bytes) -> None:
    assert error(req(line, H)) == 501


def test_a_malformed_line_is_400_before_its_method_is_501() -> None:
    assert error(req(b"FOO / HTTP/1.2", H)) == 400
    assert error(req(b"FOO /a#b HTTP/1.1", H)) == 400


def test_http09_request_line_is_refused() -> None:
    assert error(b"GET /\r\n\r\n") == 400


# ---------------------------------------------------------------------------
# Line endings and empty lines (RFC 9112 2.2)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\nHost: x\n\n",  # LF-terminated lines: refused at once, no waiting
        b"GET / HTTP/1.1\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\nb\r\n\r\n",
        b"\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",  # a bare-LF empty line
        b"GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n",  # bare CR
        b"GET / HTTP/1.1\r\nHost: x\r\r\n\r\n",
    ],
)
def test_bare_lf_and_bare_cr_in_the_head_are_400(data: bytes) -> None:
    assert error(data) == 400


@pytest.mark.parametrize(
    "partial",
    [
        b"GET / HTTP/1.1\rHost",
        b"GET / HTTP/1.1\r\nHost: x\rX",
        b"\r\nGET / HTTP/1.1\r\r",
        b"GET / HTTP/1.1\r\nHost: x\n",
    ],
)
def test_a_bare_cr_or_lf_in_the_head_is_refused_before_it_ends(partial: bytes) -> None:
    """No waiting for a CRLF CRLF that a head with bare line ends may never send."""
    for mode in (False, True):
        assert feed(partial, bytewise=mode) == ([], 400)


def test_a_cr_last_in_a_partial_head_waits_for_its_lf() -> None:
    p = parser()
    p.receive(b"GET / HTTP/1.1\r")
    assert p.next_request() is None
    p.receive(b"\nHost: x\r")
    assert p.next_request() is None
    p.receive(b"\n\r\n")
    assert p.next_request() is not None


def test_whitespace_between_the_request_line_and_the_first_field_is_400() -> None:
    """RFC 9112 2.2: such a line may be taken as a field or ignored; refused."""
    for ws in (b" ", b"\t", b"  "):
        assert error(b"GET / HTTP/1.1\r\n" + ws + b"Host: x\r\n\r\n") == 400
        assert error(b"GET / HTTP/1.1\r\n" + ws + b"\r\nHost: x\r\n\r\n") == 400


def test_an_lf_only_head_is_refused_before_it_ends() -> None:
    p = parser()
    p.receive(b"GET / HTTP/1.1\n")
    with pytest.raises(HttpError) as info:
        p.next_request()
    assert info.value.status == 400


def test_lf_in_a_body_is_data() -> None:
    r = one(req(b"POST / HTTP/1.1", H, b"Content-Length: 5", body=b"a\nb\r\n"))
    assert r.body == b"a\nb\r\n"


@pytest.mark.parametrize("empty", [b"\r\n", b"\r\n\r\n", b"\r\n" * 50])
def test_empty_lines_before_a_request_line_are_ignored(empty: bytes) -> None:
    r = one(empty + req(b"GET /x HTTP/1.1", H))
    assert (r.method, r.target) == ("GET", b"/x")


def test_in_request_tells_whether_part_of_a_request_arrived() -> None:
    p = parser()
    assert not p.in_request
    p.receive(b"\r\n\r\n")
    assert p.next_request() is None
    assert not p.in_request
    p.receive(b"G")
    assert p.next_request() is None
    assert p.in_request
    p.receive(b"ET / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
    assert p.next_request() is None
    assert p.in_request  # the head is in, the body is not
    p.receive(b"ok")
    r = p.next_request()
    assert r is not None and r.body == b"ok"
    assert not p.in_request
    assert p.buffered == 0


# ---------------------------------------------------------------------------
# Header fields (RFC 9112 5, RFC 9110 5)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ([b"X-A: 1"], {"x-a": "1"}),
        ([b"X-A:1"], {"x-a": "1"}),
        ([b"X-A: \t v \t "], {"x-a": "v"}),  # OWS around the value is not part of it
        ([b"X-A: a \t b"], {"x-a": "a \t b"}),  # inside it is
        ([b"X-A:"], {"x-a": ""}),
        ([b"X-A: a:b: c"], {"x-a": "a:b: c"}),
        ([b"CONTENT-TYPE: Application/JSON"], {"content-type": "Application/JSON"}),
        ([b"X-A: caf\xe9 \x80\xff"], {"x-a": "caf\xe9 \x80\xff"}),  # obs-text, latin-1
        ([b"X!#$%&'*+-.^_`|~09az: v"], {"x!#$%&'*+-.^_`|~09az": "v"}),
        # Repeated: one list, the lines joined (RFC 9110 5.3); never only the last one.
        ([b"X-A: 1", b"x-a: 2"], {"x-a": "1, 2"}),
        ([b"Connection: keep-alive", b"Connection: foo"], {"connection": "keep-alive, foo"}),
        (
            [b"Sec-WebSocket-Protocol: a", b"Sec-WebSocket-Protocol: b"],
            {"sec-websocket-protocol": "a, b"},
        ),
        ([b'X-A: "quoted, \\" string"'], {"x-a": '"quoted, \\" string"'}),
    ],
)
def test_header_fields_accepted(fields: list[bytes], expected: dict[str, str]) -> None:
    r = one(req(b"GET / HTTP/1.1", H, *fields))
    assert r.headers == {"host": "example.com", **expected}


@pytest.mark.parametrize(
    "fields",
    [
        # Whitespace between the name and the colon: refused (RFC 9112 5.1, smuggling).
        [b"X-A : v"],
        [b"X-A\t: v"],
        [b"Content-Length : 5"],
        [b"Transfer-Encoding : chunked"],
        # Line folding (obs-fold, RFC 9112 5.2): refused.
        [b"X-A: v", b" continued"],
        [b"X-A: v", b"\tcontinued"],
        [b" X-A: v"],
        [b"X-A: v", b" "],
        # Not a field.
        [b"X-A v"],
        [b": v"],
        [b"X(A): v"],
        [b"X/A: v"],
        [b"X A: v"],
        [b"X-\xe9: v"],
        [b"X-\x00: v"],
        # Control characters in the value (HTAB is allowed, see above).
        [b"X-A: a\x00b"],
        [b"X-A: a\x01"],
        [b"X-A: a\x08"],
        [b"X-A: a\x0bb"],
        [b"X-A: a\x1fb"],
        [b"X-A: a\x7fb"],
    ],
)
def test_header_fields_refused(fields: list[bytes]) -> None:
    assert error(req(b"POST / HTTP/1.1", H, *fields)) == 400


@pytest.mark.parametrize("name", sorted(SINGLE - {"host"}))
@pytest.mark.parametrize("second", [b"same", b"other"])
def test_a_single_value_field_repeated_is_refused(name: str, second: bytes) -> None:
    """Two credentials, two lengths, two keys: never one picked, whichever it would be."""
    first = b"0" if name == "content-length" else b"same"
    again = first if second == b"same" else b"1"
    field = name.encode()
    data = req(b"GET / HTTP/1.1", H, field + b": " + first, field.upper() + b": " + again)
    assert error(data) == 400
    # Once, it is taken as it is.
    assert one(req(b"GET / HTTP/1.1", H, field + b": " + first)).headers[name] == first.decode()


def test_two_authorization_fields_are_refused_whatever_their_order() -> None:
    a, b = b"Authorization: Bearer tenant-a", b"Authorization: Bearer tenant-b"
    for fields in ([a, b], [b, a], [b"Authorization: junk", a], [a, a]):
        assert error(req(b"POST /v1/teams/t/events HTTP/1.1", H, *fields)) == 400


@pytest.mark.parametrize(
    ("line", "fields", "status", "host"),
    [
        (b"GET / HTTP/1.1", [], 400, None),  # HTTP/1.1 needs a host
        (b"GET / HTTP/1.1", [b"Host: a", b"Host: a"], 400, None),  # exactly once
        (b"GET / HTTP/1.1", [b"Host: a", b"host: b"], 400, None),
        (b"GET / HTTP/1.0", [b"Host: a", b"Host: a"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: a"], None, "a"),
        (b"GET / HTTP/1.1", [b"HOST: a:8080"], None, "a:8080"),
        (b"GET / HTTP/1.1", [b"Host:"], None, ""),  # empty: allowed (RFC 9112 3.2)
        (b"GET / HTTP/1.0", [], None, None),  # HTTP/1.0 needs none
        (b"GET http://a/ HTTP/1.1", [b"Host: a"], None, "a"),
        # Its value: uri-host [ ":" port ] (RFC 9112 3.2: 400 for an invalid one).
        (b"GET / HTTP/1.1", [b"Host: 127.0.0.1:8080"], None, "127.0.0.1:8080"),
        (b"GET / HTTP/1.1", [b"Host: [::1]:443"], None, "[::1]:443"),
        (b"GET / HTTP/1.1", [b"Host: a-b.c_d~e%41!$&'()*+,;="], None, "a-b.c_d~e%41!$&'()*+,;="),
        (b"GET / HTTP/1.1", [b"Host: a:"], None, "a:"),
        (b"GET / HTTP/1.0", [b"Host: a"], None, "a"),
        (b"GET / HTTP/1.1", [b"Host: a b"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: a/b"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: user@a"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: a:b"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: a:1:2"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: a,b"], None, "a,b"),  # sub-delims are reg-name
        (b"GET / HTTP/1.1", [b"Host: [::1"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: a?b"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: a#b"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: caf\xe9"], 400, None),
        (b"GET / HTTP/1.1", [b"Host: a\tb"], 400, None),
        (b"GET / HTTP/1.0", [b"Host: a b"], 400, None),
    ],
)
def test_host(line: bytes, fields: list[bytes], status: int | None, host: str | None) -> None:
    data = req(line, *fields)
    if status is not None:
        assert error(data) == status
    else:
        assert one(data).headers.get("host") == host


def test_each_host_value_on_a_connection_is_checked() -> None:
    """The parser remembers the last well-formed host (one check per connection for a
    client that names one host); another value is checked again."""
    data = req(b"GET /1 HTTP/1.1", b"Host: a:1") + req(b"GET /2 HTTP/1.1", b"Host: a:1")
    data += req(b"GET /3 HTTP/1.1", b"Host: b") + req(b"GET /4 HTTP/1.1", b"Host: a b")
    for mode in (False, True):
        got, status = feed(data, bytewise=mode)
        assert [t for _, t, *_ in got] == [b"/1", b"/2", b"/3"]
        assert status == 400


# ---------------------------------------------------------------------------
# Content-Length (RFC 9112 6.2, 6.3; RFC 9110 8.6)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "body", "expected"),
    [
        ([b"Content-Length: 5"], b"hello", b"hello"),
        ([b"Content-Length: 0"], b"", b""),
        ([b"Content-Length: 005"], b"hello", b"hello"),
        ([b"Content-Length:  5  "], b"hello", b"hello"),
        ([b"Content-Length: %d" % MAX_BODY], b"x" * MAX_BODY, b"x" * MAX_BODY),  # at the limit
        ([], b"", b""),  # no framing: no body
    ],
)
def test_content_length_bodies(fields: list[bytes], body: bytes, expected: bytes) -> None:
    r = one(req(b"POST /p HTTP/1.1", H, *fields, body=body))
    assert r.body == expected


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ([b"Content-Length: 5", b"Content-Length: 6"], 400),  # different values
        ([b"Content-Length: 5", b"Content-Length: 5"], 400),  # the same, repeated
        ([b"Content-Length: 5", b"Content-Length: 05"], 400),  # different field values
        ([b"Content-Length: abc"], 400),
        ([b"Content-Length: -1"], 400),
        ([b"Content-Length: +5"], 400),
        ([b"Content-Length: 5 5"], 400),
        ([b"Content-Length: 5, 5"], 400),  # a list: digits only, as documented
        ([b"Content-Length: 0x5"], 400),
        ([b"Content-Length: 1e3"], 400),
        ([b"Content-Length: 5.0"], 400),
        ([b"Content-Length:"], 400),
        ([b"Content-Length: \xd9\xa5"], 400),  # a non-ASCII digit
        # Latin-1 superscripts pass str.isdigit but are no digits (int() raised).
        ([b"Content-Length: \xb2"], 400),
        ([b"Content-Length: 1\xb3"], 400),
        ([b"Content-Length: \xb9\xb9"], 400),
        ([b"Content-Length: " + b"9" * 19], 400),  # too many digits
        # Both framings: refused (RFC 9112 6.3 allows it; it stops smuggling).
        ([b"Content-Length: 5", b"Transfer-Encoding: chunked"], 400),
        ([b"Transfer-Encoding: chunked", b"Content-Length: 5"], 400),
        ([b"Transfer-Encoding: chunked", b"Content-Length: 0"], 400),
        ([b"Transfer-Encoding: gzip", b"Content-Length: 5"], 400),
        # Larger than max_body: decided from the header.
        ([b"Content-Length: %d" % (MAX_BODY + 1)], 413),
        ([b"Content-Length: " + b"9" * 18], 413),
    ],
)
def test_content_length_refused(fields: list[bytes], status: int) -> None:
    assert error(req(b"POST /p HTTP/1.1", H, *fields, body=b"hello")) == status


def test_too_large_content_length_is_413_before_the_body_arrives() -> None:
    p = parser()
    p.receive(req(b"POST /p HTTP/1.1", H, b"Content-Length: 1000000"))
    with pytest.raises(HttpError) as info:
        p.next_request()
    assert info.value.status == 413
    assert str(MAX_BODY) in info.value.message


def test_a_body_waits_until_complete() -> None:
    p = parser()
    p.receive(req(b"POST /p HTTP/1.1", H, b"Content-Length: 10", body=b"12345"))
    assert p.next_request() is None
    p.receive(b"6789")
    assert p.next_request() is None
    p.receive(b"0GET")
    r = p.next_request()
    assert r is not None and r.body == b"1234567890"
    assert p.buffered == 3  # the start of the next request waits


# ---------------------------------------------------------------------------
# Transfer-Encoding and chunked bodies (RFC 9112 6.1, 7.1)
# ---------------------------------------------------------------------------


def chunked(body: bytes, *fields: bytes) -> bytes:
    return req(b"POST /p HTTP/1.1", H, b"Transfer-Encoding: chunked", *fields, body=body)


@pytest.mark.parametrize(
    ("coding", "status"),
    [
        (b"chunked", None),
        (b"Chunked", None),
        (b"CHUNKED", None),
        (b"  chunked  ", None),
        # An empty list element: RFC 9110 5.6.1 would ignore it, llhttp and h11 refuse
        # the field (a proxy in front may frame it otherwise): refused.
        (b"chunked,", 400),
        (b",chunked", 400),
        (b"chunked, ", 400),
        # HTAB after the value starts, even as OWS: llhttp reads "chunked<HTAB>" as
        # another coding.
        (b"chunked\t", 400),
        (b"chunked \t ", 400),
        (b"\tchunked", None),  # leading OWS: skipped by both
        # chunked not the final coding, or not once: the length cannot be known (RFC
        # 9112 6.3): 400 and close.
        (b"gzip", 400),
        (b"identity", 400),
        (b"deflate", 400),
        (b"chunked, gzip", 400),
        (b"chunked, chunked", 400),
        (b"chunked, identity, chunked", 400),
        (b"chunkedx", 400),
        (b"", 400),
        (b",", 400),
        # A coding the gateway does not implement before a final chunked: 501.
        (b"gzip, chunked", 501),
        (b"identity, chunked", 501),
    ],
)
def test_transfer_codings(coding: bytes, status: int | None) -> None:
    data = req(b"POST /p HTTP/1.1", H, b"Transfer-Encoding: " + coding, body=b"0\r\n\r\n")
    if status is None:
        assert one(data).body == b""
    else:
        assert error(data) == status


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        # Repeated field lines are one list (RFC 9110 5.3): never only the last one.
        ([b"Transfer-Encoding: gzip", b"Transfer-Encoding: chunked"], 501),
        ([b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip"], 400),
        ([b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"], 400),
    ],
)
def test_repeated_transfer_encoding_lines_are_one_list(fields: list[bytes], status: int) -> None:
    assert error(req(b"POST /p HTTP/1.1", H, *fields, body=b"0\r\n\r\n")) == status


def test_transfer_encoding_in_http10_is_refused() -> None:
    """HTTP/1.0 has no chunked framing: its length cannot be known (RFC 9112 6.1)."""
    data = req(b"POST /p HTTP/1.0", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n")
    assert error(data) == 400


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"0\r\n\r\n", b""),  # the last chunk alone
        (b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
        (b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world"),
        (b"a\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),  # sizes are hex
        (b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
        (b"1f\r\n" + b"x" * 31 + b"\r\n0\r\n\r\n", b"x" * 31),
        (b"000005\r\nhello\r\n000\r\n\r\n", b"hello"),
        (b"2\r\n\r\n\r\n0\r\n\r\n", b"\r\n"),  # the data is data, whatever it holds
        (b"3\r\na\nb\r\n0\r\n\r\n", b"a\nb"),
        # Chunk extensions: ignored.
        (b"5;name=value\r\nhello\r\n0;last\r\n\r\n", b"hello"),
        (b'5;a="q;x";b\r\nhello\r\n0\r\n\r\n', b"hello"),
        (b'5;a="q\\"\\\\ \t\x80";b=c;d\r\nhello\r\n0\r\n\r\n', b"hello"),  # quoted-pairs
        (b'5;a=""\r\nhello\r\n0\r\n\r\n', b"hello"),
        (b"5;!#$%&'*+-.^_`|~09azAZ=!#$%&'*+-.^_`|~\r\nhello\r\n0\r\n\r\n", b"hello"),
        # Trailer fields: read and dropped.
        (b"5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n", b"hello"),
        (b"5\r\nhello\r\n0\r\nX-Sum: 1\r\nX-Other: 2\r\n\r\n", b"hello"),
        (b"%x\r\n" % MAX_BODY + b"y" * MAX_BODY + b"\r\n0\r\n\r\n", b"y" * MAX_BODY),
        (b"20\r\n" + b"z" * 32 + b"\r\n20\r\n" + b"z" * 32 + b"\r\n0\r\n\r\n", b"z" * 64),
    ],
)
def test_chunked_bodies(body: bytes, expected: bytes) -> None:
    r = one(chunked(body))
    assert r.body == expected
    assert "x-sum" not in r.headers  # trailers never become header fields


def test_a_request_smuggled_behind_bare_lf_trailers_is_never_parsed() -> None:
    """``0 CRLF X-T: 1 LF LF`` then a request head then a body: the trailers end in bare
    LFs, so the request is refused there, and nothing after it runs as a request."""
    smuggled = req(b"POST /v1/teams/t/events HTTP/1.1", H, b"Content-Length: 2", body=b"{}")
    data = (
        chunked(b"0\r\nX-T: 1\n\n")
        + req(b"POST /x HTTP/1.1", H, b"Content-Length: %d" % len(smuggled))
        + smuggled
    )
    for mode in (False, True):
        got, status = feed(data, bytewise=mode)
        assert (got, status) == ([], 400)


@pytest.mark.parametrize("name", sorted(NOT_TRAILERS))
def test_framing_connection_and_single_value_fields_are_refused_as_trailers(name: str) -> None:
    """RFC 9110 6.5.1: a sender must not send them there; recipients differ on whether
    they count (llhttp ends the connection after a trailer ``connection: close``)."""
    for field in (name.encode(), name.upper().encode()):
        assert error(chunked(b"0\r\n" + field + b": close\r\n\r\n")) == 400
    # Others are read and dropped.
    assert one(chunked(b"0\r\nx-" + name.encode() + b": close\r\n\r\n")).body == b""


def test_chunked_trailers_do_not_leak_into_the_next_request() -> None:
    data = chunked(b"5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n") + req(b"GET /next HTTP/1.1", H)
    for mode in (False, True):
        got, status = feed(data, bytewise=mode)
        assert status is None
        assert [(m, t, b) for m, t, *_, b in got] == [
            ("POST", b"/p", b"hello"),
            ("GET", b"/next", b""),
        ]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"x\r\nhello\r\n0\r\n\r\n", 400),  # not hex
        (b"-5\r\nhello\r\n0\r\n\r\n", 400),
        (b"+5\r\nhello\r\n0\r\n\r\n", 400),
        (b"0x5\r\nhello\r\n0\r\n\r\n", 400),
        (b"\r\nhello\r\n0\r\n\r\n", 400),  # no size
        (b" 5\r\nhello\r\n0\r\n\r\n", 400),
        (b"5 5\r\nhello\r\n0\r\n\r\n", 400),
        (b"5\nhello\r\n0\r\n\r\n", 400),  # bare LF after the size
        (b"5\rhello\r\n0\r\n\r\n", 400),
        (b"1" * 17 + b"\r\n", 400),  # more than 16 hex digits
        (b"5\r\nhelloX\r\n0\r\n\r\n", 400),  # the data is longer than its size
        (b"5\r\nhello0\r\n\r\n", 400),  # no CRLF after the data
        (b"5\r\nhello\n0\r\n\r\n", 400),
        (b"3\r\nhello\r\n0\r\n\r\n", 400),
        # The two bytes after the data are checked, not skipped: else the rest would
        # pass for the last chunk (a body shorter than sent, the rest smuggled).
        (b"5\r\nhelloXY0\r\n\r\n", 400),
        (b"3\r\nhello0\r\n\r\n", 400),
        # Chunk extensions: the grammar of RFC 9112 7.1.1, without BWS (llhttp refuses
        # whitespace around ";" and "=" too), no control characters, no bare CR.
        (b"5 \r\nhello\r\n0\r\n\r\n", 400),
        (b"5\t\r\nhello\r\n0\r\n\r\n", 400),
        (b"5 ;a\r\nhello\r\n0\r\n\r\n", 400),
        (b"5\t;a\r\nhello\r\n0\r\n\r\n", 400),
        (b"5; a\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;a =b\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;a= b\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;;a\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;a=\r\nhello\r\n0\r\n\r\n", 400),  # "=" needs a value
        (b"5;=b\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;a=b=c\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;a=b c\r\nhello\r\n0\r\n\r\n", 400),
        (b'5;a="b\r\nhello\r\n0\r\n\r\n', 400),  # an unclosed quote
        (b'5;a="b"c\r\nhello\r\n0\r\n\r\n', 400),
        (b'5;a="\\\r\nhello\r\n0\r\n\r\n', 400),
        (b'5;a="\x00"\r\nhello\r\n0\r\n\r\n', 400),
        (b'5;a="\x7f"\r\nhello\r\n0\r\n\r\n', 400),
        (b'5;a="\r"\r\nhello\r\n0\r\n\r\n', 400),  # a bare CR, quoted or not
        (b"5;a\rb\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;a\x00\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;a\x80\r\nhello\r\n0\r\n\r\n", 400),
        (b"5;a\nhello\r\n0\r\n\r\n", 400),
        (b"0;a=\r\n\r\n", 400),  # the last chunk's too
        (b"0 \r\n\r\n", 400),
        # Bare CR or LF after a chunk-size line or data: refused as it arrives.
        (b"5\rx\r\n", 400),
        (b"5\n", 400),
        (b"5\rx", 400),
        (b"5;a\n", 400),
        (b"5\r\nhello\n", 400),
        (b"5\r\nhello\r0", 400),
        (b"5\r\nhellox", 400),
        (b"5\r\nhello\r\n0\r\nnot a field\r\n\r\n", 400),  # a bad trailer
        (b"5\r\nhello\r\n0\r\n : x\r\n\r\n", 400),
        (b"5;" + b"e" * MAX_LINE + b"\r\nhello\r\n0\r\n\r\n", 400),  # a size line too long
        (b"5;" + b"e" * (MAX_LINE + 8), 400),  # ... even before its end arrives
        (b"0\r\nX-T: " + b"t" * (MAX_LINE + 8), 400),  # trailers too long
        # A trailer section is lines ending in CRLF: a bare LF or CR is refused, never
        # read past to the next CRLF CRLF.
        (b"0\r\nX-T: 1\n\n", 400),
        (b"0\r\nX-T: 1\n\r\n", 400),
        (b"0\r\nX-T: 1\r\n\n", 400),
        (b"0\r\nX-T: 1\r\r\n\r\n", 400),
        (b"0\r\nX-T: 1\rX-U: 2\r\n\r\n", 400),
        (b"0\r\nX-T: a\x00b\r\n\r\n", 400),  # a control character in a value
        (b"0\r\nX-T: 1\n", 400),  # refused before the section could end
        (b"0\r\nX-T : 1\r\n\r\n", 400),
        # Larger than max_body: 413, decided from the chunk sizes.
        (b"%x\r\n" % (MAX_BODY + 1), 413),
        (b"20\r\n" + b"z" * 32 + b"\r\n21\r\n", 413),
        (b"ffffffffffffffff\r\n", 413),
    ],
)
def test_chunked_bodies_refused(body: bytes, status: int) -> None:
    assert error(chunked(body)) == status


@pytest.mark.parametrize(
    "body",
    [b"", b"5\r\nhel", b"5\r\nhello\r\n", b"5\r\nhello\r\n0\r\n", b"5\r\nhello\r\n0\r\nX: y\r\n"],
)
def test_an_unfinished_chunked_body_waits(body: bytes) -> None:
    p = parser()
    p.receive(chunked(body))
    assert p.next_request() is None
    assert p.in_request


# ---------------------------------------------------------------------------
# The head's size (431)
# ---------------------------------------------------------------------------


def head_of(size: int) -> bytes:
    """A complete request head of exactly ``size`` bytes."""
    base = req(b"GET / HTTP/1.1", H, b"X-Pad: ")
    return req(b"GET / HTTP/1.1", H, b"X-Pad: " + b"p" * (size - len(base)))


def test_a_head_of_max_head_bytes_is_accepted() -> None:
    data = head_of(MAX_HEAD_BYTES)
    assert len(data) == MAX_HEAD_BYTES
    assert one(data).headers["x-pad"] == "p" * (
        MAX_HEAD_BYTES - len(req(b"GET / HTTP/1.1", H, b"X-Pad: "))
    )


@pytest.mark.parametrize("size", [MAX_HEAD_BYTES + 1, 20 * 1024, 64 * 1024])
def test_a_larger_head_is_431(size: int) -> None:
    assert error(head_of(size)) == 431


def test_a_large_head_is_431_before_it_ends() -> None:
    p = parser()
    p.receive(b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * MAX_HEAD_BYTES)
    with pytest.raises(HttpError) as info:
        p.next_request()
    assert info.value.status == 431


def test_empty_lines_before_the_request_do_not_count_towards_the_head() -> None:
    assert one(b"\r\n" * 100 + head_of(MAX_HEAD_BYTES)).method == "GET"


def test_the_head_limit_is_per_request_not_per_connection() -> None:
    data = head_of(MAX_HEAD_BYTES - 10) * 3
    got, status = feed(data)
    assert status is None and len(got) == 3


# ---------------------------------------------------------------------------
# Expect: 100-continue (RFC 9110 10.1.1)
# ---------------------------------------------------------------------------


def test_wants_continue_once_after_the_head_before_the_body() -> None:
    p = parser()
    assert not p.wants_continue
    p.receive(req(b"POST /p HTTP/1.1", H, b"Expect: 100-continue", b"Content-Length: 5"))
    assert p.next_request() is None
    assert p.wants_continue
    assert not p.wants_continue  # once: the caller sent it
    assert p.next_request() is None
    assert not p.wants_continue
    p.receive(b"hel")
    assert p.next_request() is None
    assert not p.wants_continue
    p.receive(b"lo")
    r = p.next_request()
    assert r is not None and r.body == b"hello"
    assert r.headers["expect"] == "100-continue"
    assert not p.wants_continue
    # The next request on the connection may expect again.
    p.receive(chunked(b"", b"Expect: 100-Continue"))
    assert p.next_request() is None
    assert p.wants_continue
    p.receive(b"0\r\n\r\n")
    r = p.next_request()
    assert r is not None and r.body == b""


@pytest.mark.parametrize(
    ("line", "fields", "wants"),
    [
        (b"POST /p HTTP/1.1", [b"Expect: 100-continue", b"Content-Length: 5"], True),
        (b"POST /p HTTP/1.1", [b"expect: 100-CONTINUE", b"Content-Length: 5"], True),
        (b"POST /p HTTP/1.1", [b"Content-Length: 5"], False),
        (b"POST /p HTTP/1.1", [b"Expect: something", b"Content-Length: 5"], False),
        # HTTP/1.0: the expectation is ignored (RFC 9110 10.1.1, a MUST).
        (b"POST /p HTTP/1.0", [b"Expect: 100-continue", b"Content-Length: 5"], False),
    ],
)
def test_wants_continue(line: bytes, fields: list[bytes], wants: bool) -> None:
    p = parser()
    p.receive(req(line, H, *fields))
    assert p.next_request() is None
    assert p.wants_continue is wants


def test_no_continue_when_the_body_came_with_the_head() -> None:
    p = parser()
    p.receive(
        req(b"POST /p HTTP/1.1", H, b"Expect: 100-continue", b"Content-Length: 2", body=b"ok")
    )
    r = p.next_request()
    assert r is not None and r.body == b"ok"
    assert not p.wants_continue


def test_no_continue_for_a_body_too_large() -> None:
    p = parser()
    p.receive(req(b"POST /p HTTP/1.1", H, b"Expect: 100-continue", b"Content-Length: 1000"))
    with pytest.raises(HttpError) as info:
        p.next_request()
    assert info.value.status == 413
    assert not p.wants_continue


# ---------------------------------------------------------------------------
# Persistence (RFC 9112 9.3)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "fields", "keep_alive"),
    [
        (b"GET / HTTP/1.1", [], True),  # HTTP/1.1: persistent by default
        (b"GET / HTTP/1.1", [b"Connection: keep-alive"], True),
        (b"GET / HTTP/1.1", [b"Connection: foo, bar"], True),
        (b"GET / HTTP/1.1", [b"Connection: close"], False),
        (b"GET / HTTP/1.1", [b"Connection: Close"], False),
        (b"GET / HTTP/1.1", [b"Connection: CLOSE"], False),
        (b"GET / HTTP/1.1", [b"Connection: keep-alive, close"], False),
        (b"GET / HTTP/1.1", [b"Connection: foo,close ,bar"], False),
        (b"GET / HTTP/1.1", [b"Connection: keep-alive", b"Connection: close"], False),
        (b"GET / HTTP/1.1", [b"Connection: close", b"Connection: keep-alive"], False),
        (b"GET / HTTP/1.1", [b"Connection: closed"], True),
        (b"GET / HTTP/1.0", [], False),  # HTTP/1.0: closed after the answer
        (b"GET / HTTP/1.0", [b"Connection: close"], False),
        (b"GET / HTTP/1.0", [b"Connection: keep-alive"], False),  # never (documented)
        # A request that asks to switch protocols: the connection ends after it, the
        # switch taken or not (what follows may be a tunnel's bytes to a proxy).
        (b"GET / HTTP/1.1", [b"Upgrade: websocket"], False),
        (b"GET / HTTP/1.1", [b"Upgrade: websocket", b"Connection: upgrade"], False),
        (b"GET / HTTP/1.1", [b"Upgrade: h2c", b"Connection: keep-alive"], False),
        (b"GET / HTTP/1.1", [b"Connection: upgrade"], False),  # nothing to switch to
        (b"GET / HTTP/1.1", [b"Connection: keep-alive, Upgrade"], False),
    ],
)
def test_keep_alive(line: bytes, fields: list[bytes], keep_alive: bool) -> None:
    assert one(req(line, H, *fields)).keep_alive is keep_alive


# ---------------------------------------------------------------------------
# Pipelining (RFC 9112 9.3.2): whole or byte by byte, the same requests in order
# ---------------------------------------------------------------------------

PIPELINES: dict[str, bytes] = {
    "two GETs": req(b"GET /healthz HTTP/1.1", H) + req(b"GET /healthz HTTP/1.1", H),
    "GET, POST, chunked POST, HEAD, close": b"".join(
        [
            req(b"GET /a?x=1 HTTP/1.1", H),
            req(b"POST /b HTTP/1.1", H, b"Content-Length: 7", body=b'{"a":1}'),
            chunked(b"3\r\nabc\r\n2;e=1\r\nde\r\n0\r\nT: v\r\n\r\n"),
            req(b"HEAD /c HTTP/1.1", H),
            req(b"GET /d HTTP/1.1", H, b"Connection: close"),
        ]
    ),
    "empty lines between": req(b"GET /1 HTTP/1.1", H) + b"\r\n\r\n" + req(b"GET /2 HTTP/1.1", H),
    "body that looks like a request": req(
        b"POST /p HTTP/1.1", H, b"Content-Length: 18", body=b"GET / HTTP/1.1\r\n\r\n"
    )
    + req(b"GET /after HTTP/1.0"),
    "HTTP/1.0 after 1.1": req(b"GET /1 HTTP/1.1", H) + req(b"GET /2 HTTP/1.0"),
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_pipelined_requests_whole_and_bytewise(name: str) -> None:
    data = PIPELINES[name]
    whole = feed(data)
    assert whole[1] is None
    assert feed(data, bytewise=True) == whole
    # Fed in every split in two, too.
    for cut in range(0, len(data), 7):
        p = parser()
        got: list[Described] = []
        for piece in (data[:cut], data[cut:]):
            p.receive(piece)
            _drain(p, got)
        assert got == whole[0], cut


def test_pipelined_requests_come_out_one_at_a_time_in_order() -> None:
    p = parser()
    p.receive(PIPELINES["GET, POST, chunked POST, HEAD, close"])
    seen = []
    while (r := p.next_request()) is not None:
        seen.append((r.method, r.target, r.body, r.keep_alive))
    assert seen == [
        ("GET", b"/a?x=1", b"", True),
        ("POST", b"/b", b'{"a":1}', True),
        ("POST", b"/p", b"abcde", True),
        ("HEAD", b"/c", b"", True),
        ("GET", b"/d", b"", False),
    ]
    assert p.buffered == 0
    assert not p.in_request


def test_a_pipelined_error_comes_after_the_good_requests() -> None:
    data = req(b"GET /ok HTTP/1.1", H) + req(b"GET /bad HTTP/1.1", b"Host : x")
    for mode in (False, True):
        got, status = feed(data, bytewise=mode)
        assert [t for _, t, *_ in got] == [b"/ok"]
        assert status == 400


# ---------------------------------------------------------------------------
# Upgrade (RFC 9110 7.8): the bytes after the request are the new protocol's
# ---------------------------------------------------------------------------

WS = [b"Upgrade: websocket", b"Connection: Upgrade", b"Sec-WebSocket-Version: 13"]


@pytest.mark.parametrize(
    ("fields", "upgrade"),
    [
        (WS, True),
        ([b"Upgrade: websocket", b"Connection: keep-alive, upgrade"], True),
        ([b"Upgrade: websocket", b"Connection: keep-alive", b"Connection: Upgrade"], True),
        ([b"Upgrade: websocket"], False),  # no "connection: upgrade"
        ([b"Connection: upgrade"], False),  # no upgrade header
        ([*WS, b"Content-Length: 0"], True),
        # An empty upgrade field names no protocol: no upgrade (as in llhttp), closed.
        ([b"Upgrade: ", b"Connection: upgrade"], False),
        ([b"Upgrade:", b"Connection: upgrade"], False),
        ([b"Upgrade:", b"Upgrade: websocket", b"Connection: upgrade"], True),
        # HTTP/1.0: an upgrade is ignored (RFC 9110 7.8, a MUST), the connection closes.
        ([*WS, b"X-Version: 1.0"], False),
    ],
)
def test_upgrade_detection(fields: list[bytes], upgrade: bool) -> None:
    line = b"GET /v1/ws HTTP/1.0" if b"X-Version: 1.0" in fields else b"GET /v1/ws HTTP/1.1"
    r = one(req(line, H, *fields) + b"\x81\x80")
    assert r.upgrade is upgrade
    if "upgrade" in r.headers:
        assert not r.keep_alive


@pytest.mark.parametrize(
    "framing",
    [
        [b"Content-Length: 3"],
        [b"Content-Length: 1"],
        [b"Transfer-Encoding: chunked"],
    ],
)
@pytest.mark.parametrize("line", [b"GET /v1/ws HTTP/1.1", b"POST /v1/ws HTTP/1.0"])
def test_a_request_to_switch_protocols_with_content_is_refused(
    line: bytes, framing: list[bytes]
) -> None:
    """Whether its content is the request's or the new protocol's, implementations
    disagree (llhttp in httptools hands it to the new protocol, h11 to the request):
    refused, in HTTP/1.0 too (where the upgrade would be ignored)."""
    fields = [H, *WS, *framing]
    if line.endswith(b"1.0") and b"Transfer-Encoding: chunked" in framing:
        fields.remove(b"Transfer-Encoding: chunked")  # refused in 1.0 anyway
        fields.append(b"Content-Length: 2")
    assert error(req(line, *fields, body=b"abc")) == 400


def test_an_upgrade_leaves_the_bytes_after_it_in_trailing() -> None:
    frames = b"\x81\x85\x00\x00\x00\x00hello" + b"GET / HTTP/1.1\r\n\r\n"
    p = parser()
    p.receive(req(b"GET /v1/ws HTTP/1.1", H, *WS) + frames)
    r = p.next_request()
    assert r is not None and r.upgrade and r.method == "GET" and r.target == b"/v1/ws"
    assert p.trailing == frames  # not parsed as HTTP
    assert p.buffered == 0
    assert p.next_request() is None  # nothing more is HTTP
    p.receive(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert p.next_request() is None
    assert p.trailing == frames


def test_an_upgrade_alone_leaves_no_trailing_bytes() -> None:
    p = parser()
    p.receive(req(b"GET /v1/ws HTTP/1.1", H, *WS))
    r = p.next_request()
    assert r is not None and r.upgrade
    assert p.trailing == b""


def test_an_upgrade_after_pipelined_requests() -> None:
    p = parser()
    p.receive(req(b"GET /a HTTP/1.1", H) + req(b"GET /v1/ws HTTP/1.1", H, *WS) + b"\x88\x00")
    first = p.next_request()
    assert first is not None and not first.upgrade
    assert p.trailing == b""
    second = p.next_request()
    assert second is not None and second.upgrade
    assert p.trailing == b"\x88\x00"


def test_not_an_upgrade_parses_what_follows_as_http() -> None:
    p = parser()
    p.receive(req(b"GET /a HTTP/1.1", H, b"Upgrade: websocket") + req(b"GET /b HTTP/1.1", H))
    a, b = p.next_request(), p.next_request()
    assert a is not None and b is not None
    assert (a.upgrade, a.keep_alive, b.target) == (False, False, b"/b")
    assert p.trailing == b""


# ---------------------------------------------------------------------------
# Response heads
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "headers", "close", "expected"),
    [
        (
            200,
            [(b"content-type", b"application/json"), (b"content-length", b"2")],
            False,
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n",
        ),
        (204, [], False, b"HTTP/1.1 204 No Content\r\n\r\n"),
        (204, [], True, b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n"),
        (
            413,
            [(b"content-length", b"0")],
            True,
            b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        ),
        (
            431,
            [],
            True,
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\r\n",
        ),
        (501, [], False, b"HTTP/1.1 501 Not Implemented\r\n\r\n"),
        (299, [], False, b"HTTP/1.1 299 Unknown\r\n\r\n"),
    ],
)
def test_response_head(
    status: int, headers: list[tuple[bytes, bytes]], close: bool, expected: bytes
) -> None:
    assert response_head(status, headers, close=close) == expected


def test_every_error_the_parser_raises_has_a_reason() -> None:
    statuses = {
        feed(data)[1]
        for data in [
            b"GET / HTTP/9.9\r\n\r\n",
            head_of(MAX_HEAD_BYTES + 1),
            req(b"POST / HTTP/1.1", H, b"Content-Length: 999"),
            req(b"POST / HTTP/1.1", H, b"Transfer-Encoding: gzip, chunked"),
        ]
    }
    assert statuses == {400, 413, 431, 501}
    assert statuses <= set(REASONS)


def test_detach_after_a_request_that_is_no_upgrade_keeps_the_bytes_after_it() -> None:
    # A handler may switch protocols on a request the parser did not see as an upgrade
    # (it had a body): what the client sent after it still goes to the new protocol.
    p = parser()
    p.receive(req(b"GET /v1/ws HTTP/1.1", b"host: x", b"content-length: 3", body=b"abc") + b"\x81")
    request = p.next_request()
    assert request is not None and not request.upgrade and request.body == b"abc"
    assert p.detach() == b"\x81"
    p.receive(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    assert p.next_request() is None  # detached: nothing more is parsed as HTTP


def test_detach_after_an_upgrade_is_the_trailing_bytes() -> None:
    p = parser()
    p.receive(
        req(b"GET /v1/ws HTTP/1.1", b"host: x", b"connection: upgrade", b"upgrade: x") + b"ws"
    )
    request = p.next_request()
    assert request is not None and request.upgrade
    assert p.detach() == b"ws" == p.trailing


def test_head_received_is_true_between_the_head_and_the_end_of_the_body() -> None:
    p = parser()
    data = req(b"POST / HTTP/1.1", b"host: x", b"content-length: 2", body=b"{}")
    p.receive(data[:-2])
    assert p.next_request() is None and p.head_received
    p.receive(data[-2:])
    assert p.next_request() is not None and not p.head_received


# ---------------------------------------------------------------------------
# Character classes, byte by byte (the parser checks them without regular
# expressions; these are the RFC's classes written as regular expressions)
# ---------------------------------------------------------------------------

_TCHAR = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]")
_VCHAR = re.compile(rb"[\x21-\x7e]")
_FIELD_CHAR = re.compile(rb"[\t\x20-\x7e\x80-\xff]")
_QDTEXT = re.compile(rb"[\t !\x23-\x5b\x5d-\x7e\x80-\xff]")


@pytest.mark.parametrize("bytewise", [False, True])
def test_every_byte_in_every_part_of_the_head_is_judged_by_its_class(bytewise: bool) -> None:
    for value in range(256):
        c = bytes([value])
        if c in b"\r\n":
            continue  # line endings: above
        token, vchar = bool(_TCHAR.fullmatch(c)), bool(_VCHAR.fullmatch(c))
        # (the request, the status it gets: None when accepted)
        cases: list[tuple[bytes, int | None]] = [
            # A token that is no method the gateway implements: 501.
            (
                b"G" + c + b"T / HTTP/1.1\r\nHost: x\r\n\r\n",
                None if b"G" + c + b"T" in METHODS else 501 if token else 400,
            ),
            (b"GET /" + c + b" HTTP/1.1\r\nHost: x\r\n\r\n", None if vchar and c != b"#" else 400),
            (b"GET / HTTP/1.1\r\nHost: x\r\nX" + c + b"Y: 1\r\n\r\n", None if token else 400),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nX: a" + c + b"b\r\n\r\n",
                None if _FIELD_CHAR.fullmatch(c) else 400,
            ),
            (
                chunked(b"1;e=a" + c + b"b\r\nx\r\n0\r\n\r\n"),
                None if token or c == b";" else 400,  # ";": "e=a" then "b"
            ),
            (
                chunked(b'1;e="a' + c + b'b"\r\nx\r\n0\r\n\r\n'),
                None if _QDTEXT.fullmatch(c) or c == b"\\" else 400,  # "\\b": a quoted-pair
            ),
        ]
        if c == b":":
            del cases[2]  # a colon ends the field name: "X" with the value "Y: 1"
        for data, expected in cases:
            requests, status = feed(data, bytewise=bytewise)
            assert status == expected, (data, status)
            assert len(requests) == (1 if expected is None else 0)
