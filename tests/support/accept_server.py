"""A bare :class:`~gateway.net.server.HttpServer` in a process of its own with a low
open-files limit, so that ``accept()`` really fails (EMFILE) without the test runner
running out of files.  Run as ``python -m tests.support.accept_server LOOP SOFT``
(``LOOP``: asyncio or uvloop).

It listens on a free port of 127.0.0.1 with no connection bound (``max_sockets``
unset: the kernel is the limit) and answers every request 200.  It prints one JSON line
when it listens (``{"port"}``), then reads commands from stdin, one a line, and answers
each with one JSON line:

- ``state``: ``{"connections": open connections, "refused": {reason: count}}``
- ``close``: closes every open connection, answers ``{"closed": n}``
- ``exit``: stops.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys

import anyio

from gateway.net.server import HttpServer, Request, Responder


async def answer(request: Request, responder: Responder) -> None:
    responder.send(200, b'{"ok":true}')


async def main() -> None:
    refused: dict[str, int] = {}

    def on_refused(reason: str) -> None:
        refused[reason] = refused.get(reason, 0) + 1

    server = HttpServer(answer, max_body=1024, on_refused=on_refused)
    port = await server.start("127.0.0.1", 0)
    print(json.dumps({"port": port}), flush=True)
    while True:
        line = (await anyio.to_thread.run_sync(sys.stdin.readline)).strip()
        if line == "state":
            reply: dict[str, object] = {"connections": len(server.connections), "refused": refused}
        elif line == "close":
            reply = {"closed": len(server.connections)}
            server.close_all()
        else:
            await server.aclose()
            return
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    loop_name, soft = sys.argv[1], int(sys.argv[2])
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if loop_name == "uvloop":
        import uvloop

        runner = uvloop.run
    else:
        runner = asyncio.run
    runner(main())
