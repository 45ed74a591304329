"""``gateway.net.server``: a keep-alive connection's requests are handled in turn by one
task of the connection's (``HttpConnection._serve``), which waits between requests and
ends with the connection.  Real sockets, a real server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest

from gateway.net.server import Handler, HttpServer, Request, Responder
from tests.support.wait import until

pytestmark = pytest.mark.anyio


async def _read_answer(stream: anyio.abc.ByteStream, buffer: bytearray) -> bytes:
    """One answer with a ``content-length`` body, read from ``stream``."""
    while b"\r\n\r\n" not in buffer:
        buffer += await stream.receive()
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += await stream.receive()
    del buffer[:]
    buffer += rest[length:]
    return rest[:length]


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode()


async def _empty(request: Request, responder: Responder) -> None:
    responder.send(200, b"{}")


@contextlib.asynccontextmanager
async def _served(handler: Handler) -> AsyncIterator[tuple[HttpServer, int]]:
    """A started server and its port, for at most 10 s; closed at the end."""
    server = HttpServer(handler, max_body=1024)
    try:
        with anyio.fail_after(10):
            yield server, await server.start("127.0.0.1", 0)
    finally:
        await server.aclose()


async def test_one_task_handles_a_connections_requests_in_turn_and_ends_with_it() -> None:
    tasks: list[asyncio.Task[object] | None] = []

    async def handler(request: Request, responder: Responder) -> None:
        tasks.append(asyncio.current_task())
        await anyio.lowlevel.checkpoint()
        responder.send(200, b"-")

    async with _served(handler) as (server, port):
        stream = await anyio.connect_tcp("127.0.0.1", port)
        buffer = bytearray()
        # One after another, then three pipelined in one write.
        for path in ("/a", "/b"):
            await stream.send(_get(path))
            assert await _read_answer(stream, buffer) == b"-"
        await stream.send(_get("/c") + _get("/d") + _get("/e"))
        assert [await _read_answer(stream, buffer) for _ in range(3)] == [b"-"] * 3
        assert len(tasks) == 5 and len(set(map(id, tasks))) == 1
        # Between requests the connection keeps its one task, waiting.
        assert len(server._handlers) == 1
        # A second connection has a task of its own.
        other = await anyio.connect_tcp("127.0.0.1", port)
        await other.send(_get("/f"))
        assert await _read_answer(other, bytearray()) == b"-"
        assert tasks[-1] is not tasks[0] and len(server._handlers) == 2
        await stream.aclose()
        await until(lambda: len(server._handlers) == 1, 5, "the closed one's task ended")
        await other.aclose()
        await until(lambda: len(server._handlers) == 0, 5, "every task ended")
        assert all(task is not None and task.done() for task in tasks)


async def test_a_request_that_closes_the_connection_ends_its_task() -> None:
    async with _served(_empty) as (server, port):
        stream = await anyio.connect_tcp("127.0.0.1", port)
        await stream.send(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert await _read_answer(stream, bytearray()) == b"{}"
        await until(lambda: len(server._handlers) == 0, 5, "the task ended")
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await stream.receive()  # and the server closed the connection
        await stream.aclose()


async def test_closing_the_server_ends_the_tasks_of_idle_connections() -> None:
    async with _served(_empty) as (server, port):
        streams = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(3)]
        for stream in streams:
            await stream.send(_get("/"))
            assert await _read_answer(stream, bytearray()) == b"{}"
        assert len(server._handlers) == 3
        await server.aclose(within=5)
        assert len(server._handlers) == 0
        for stream in streams:
            await stream.aclose()


async def test_a_pipelined_request_waits_its_turn_behind_other_connections() -> None:
    """A connection's next request, already here, is not handled before the work the
    loop has ready (here another connection's handler, released at the same moment):
    a pipelining client does not go ahead of the others."""
    release = anyio.Event()
    waiting: list[str] = []
    order: list[str] = []

    async def handler(request: Request, responder: Responder) -> None:
        name = request.path.strip("/")
        order.append(f"{name} starts")
        if name in ("a1", "b1"):
            waiting.append(name)
            await release.wait()
        order.append(f"{name} ends")
        responder.send(200, b"{}")

    async with _served(handler) as (_server, port):
        a = await anyio.connect_tcp("127.0.0.1", port)
        await a.send(_get("/a1") + _get("/a2"))  # pipelined
        await until(lambda: waiting == ["a1"], 5, "a1 waits")
        b = await anyio.connect_tcp("127.0.0.1", port)
        await b.send(_get("/b1"))
        await until(lambda: waiting == ["a1", "b1"], 5, "b1 waits")
        release.set()  # a1, then b1, may go on
        buffer = bytearray()
        assert [await _read_answer(a, buffer) for _ in range(2)] == [b"{}", b"{}"]
        assert await _read_answer(b, bytearray()) == b"{}"
        assert order[2:] == ["a1 ends", "b1 ends", "a2 starts", "a2 ends"]
        await a.aclose()
        await b.aclose()


async def test_a_connection_whose_task_was_cancelled_between_requests_is_still_served() -> None:
    async with _served(_empty) as (server, port):
        stream = await anyio.connect_tcp("127.0.0.1", port)
        buffer = bytearray()
        await stream.send(_get("/"))
        assert await _read_answer(stream, buffer) == b"{}"
        server._handlers.cancel()  # the task waiting for the next request
        await until(lambda: len(server._handlers) == 0, 5, "the task ended")
        # The next request is answered (by a new task), not dropped.
        await stream.send(_get("/"))
        assert await _read_answer(stream, buffer) == b"{}"
        assert len(server._handlers) == 1
        await stream.aclose()
