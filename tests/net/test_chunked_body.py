"""The chunked framing of streamed bodies, decoded by h11 (the reference; no sockets).

An HTTP/1.1 chunk of size zero ends a chunked body, so a write of nothing must write
nothing: whatever a stream is given (empty payloads among others, through every way it
writes), h11 sees the payloads' bytes and no end of the message until ``Stream.end``.
"""

from __future__ import annotations

from typing import Any

import h11
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.net.server import HttpConnection, HttpServer, Request, Responder, body_writer


class RecordingTransport:
    """An asyncio transport stand-in that keeps every write call's bytes, in order."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, parts: Any) -> None:
        self.writes.append(b"".join(parts))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def resume_reading(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


def decoded(response: bytes) -> tuple[bytes, bool]:
    """What an h11 client reads from ``response`` (head included): the body's bytes, and
    whether the message ended."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/", headers=[("Host", "gateway")]))
    client.send(h11.EndOfMessage())
    client.receive_data(response)
    body = b""
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            return body, False
        if isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return body, True
        else:
            assert isinstance(event, h11.Response), event


payloads = st.lists(st.one_of(st.just(b""), st.binary(min_size=1, max_size=64)), max_size=20)


@given(payloads)
def test_the_chunk_framer_never_ends_the_body(parts: list[bytes]) -> None:
    transport = RecordingTransport()
    write = body_writer(transport, chunked=True)  # type: ignore[arg-type]
    for part in parts:
        write(part)
    assert b"" not in transport.writes  # nothing empty was handed to the transport
    assert len(transport.writes) == sum(1 for p in parts if p)
    body = b"".join(transport.writes)
    assert decoded(HEAD + body) == (b"".join(parts), False)
    # The end Stream.end writes is the one that ends it.
    assert decoded(HEAD + body + b"0\r\n\r\n") == (b"".join(parts), True)


async def noop(request: Request, responder: Responder) -> None:
    pass


@pytest.mark.anyio
@pytest.mark.parametrize("hold_head", [False, True])
async def test_no_way_a_stream_writes_ends_its_body_before_end(hold_head: bool) -> None:
    server = HttpServer(noop, max_body=1024)
    conn = HttpConnection(server)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    try:
        stream = conn.start_stream(200, [], http11=True, hold_head=hold_head)
        head = stream.take_head()
        stream.write_nowait(b"", head)  # the head alone (or nothing at all)
        stream.write_nowait(b"")
        stream.write_nowait(b"a")
        stream.write_nowait(b"", b"")
        stream.writer().write(b"")
        stream.writer().write(b"b")
        await stream.write(b"")
        await stream.write(b"c")
        response = b"".join(transport.writes)
        assert decoded(response) == (b"abc", False)
        assert b"" not in transport.writes
        stream.end()
        assert decoded(b"".join(transport.writes)) == (b"abc", True)
        assert transport.closed
    finally:
        conn.connection_lost(None)
