"""``gateway.net.server``: which handlers a lost connection cancels.  A handler that
streams runs inside ``Responder.cancelled_on_loss`` (the router puts the methods a
route lists in ``Route.streams`` there) and is cancelled when its client goes; one that
answers once runs to its end; a stream started outside such a scope is refused (500)."""

from __future__ import annotations

import anyio
import httpx
import pytest

from gateway.net.server import HttpServer, Request, Responder
from tests.support.wait import until

pytestmark = pytest.mark.anyio


async def test_a_lost_connection_cancels_a_streaming_handler_not_a_plain_one() -> None:
    streaming_ended = anyio.Event()
    plain_finished = anyio.Event()
    release = anyio.Event()
    stream_started = anyio.Event()
    plain_started = anyio.Event()

    async def handler(request: Request, responder: Responder) -> None:
        if request.path == "/stream":
            try:
                with responder.cancelled_on_loss():
                    stream = responder.stream(200, [(b"content-type", b"text/plain")])
                    await stream.write(b"hello\n")
                    stream_started.set()
                    await anyio.sleep_forever()
            finally:
                streaming_ended.set()
        elif request.path == "/plain":
            plain_started.set()
            await release.wait()  # the client is gone by then
            plain_finished.set()
            responder.send(200, b"{}")
        else:
            responder.stream(200, [])  # outside any scope: refused

    server = HttpServer(handler, max_body=1024)
    port = await server.start("127.0.0.1", 0)
    try:
        with anyio.fail_after(10):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                refused = await client.get("/refused")
                assert refused.status_code == 500
                assert refused.json()["error"]["code"] == "internal"
                async with client.stream("GET", "/stream") as r:
                    async for _ in r.aiter_bytes():
                        break
                    assert stream_started.is_set()
            # The client went: the streaming handler was cancelled.
            await streaming_ended.wait()
            stream = await anyio.connect_tcp("127.0.0.1", port)
            await stream.send(b"POST /plain HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            await plain_started.wait()
            await stream.aclose()
            await until(lambda: not server.connections, 5, "the server saw the loss")
            # The plain handler outlives its connection and ends by itself.
            release.set()
            await plain_finished.wait()
    finally:
        await server.aclose()
