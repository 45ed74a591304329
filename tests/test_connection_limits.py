"""Connection limits that speak: a real ``gateway serve`` at its open-files limit.

The node starts with a low ``RLIMIT_NOFILE`` (soft 100, hard 200: ``gateway serve``
raises the soft limit to the hard one and says so).  Raw TCP clients then open more
connections than its file budget leaves room for: past ``socket_limit`` every new one is
answered 503 ``unavailable`` and closed, counted in
``gateway_connections_refused_total{reason="files"}``, and warned of in the log at most
once per reason per ten seconds (the second line carrying the count since the first).
``/readyz`` on the internal port says how many connections the node holds meanwhile,
and once the clients leave the node takes connections again.  On uvloop and on
asyncio's loop.
"""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from gateway.net.capacity import WARN_EVERY
from tests.support.gateway_process import GatewayProcess

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SOFT, HARD = 100, 200
#: Connections opened past the node's socket limit (each must be refused).
EXTRA = 25


def files_limit(soft: int, hard: int) -> Callable[[], None]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return lower


def log_lines(node: GatewayProcess) -> list[dict[str, Any]]:
    """The node's JSON log lines (the process's other output left out)."""
    lines = []
    for line in node.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def refusal_warnings(node: GatewayProcess, reason: str) -> list[dict[str, Any]]:
    return [
        line
        for line in log_lines(node)
        if line.get("level") == "warning"
        and line.get("reason") == reason
        and str(line.get("event", "")).startswith("connections refused")
    ]


async def readyz(node: GatewayProcess) -> dict[str, Any]:
    status, text = await node.readyz()
    assert status == 200, text
    body: dict[str, Any] = json.loads(text)
    return body


async def sockets_become(node: GatewayProcess, count: int, within: float = 10.0) -> None:
    with anyio.fail_after(within, reason=f"sockets did not become {count}"):
        # Polls another process, bounded above.
        while (await readyz(node))["connections"]["sockets"] != count:  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def read_to_eof(stream: anyio.abc.SocketStream, within: float = 10.0) -> bytes:
    """Everything the node sends until it closes (bounded)."""
    data = b""
    with anyio.fail_after(within, reason="the node did not close a refused connection"):
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return data


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_a_node_at_its_file_limit_refuses_counts_warns_and_recovers(
    tmp_path: Path, loop: str
) -> None:
    node = GatewayProcess(
        f"files-{loop}",
        tmp_path,
        {"GATEWAY_UVLOOP": "true" if loop == "uvloop" else "false"},
        internal_port=True,
        preexec=files_limit(SOFT, HARD),
    )
    opened: list[anyio.abc.SocketStream] = []
    try:
        await node.start()
        # Start-up: the soft limit raised to the hard one, in one info line, and a
        # warning, since 200 files leave room for fewer than 10,000 streams.
        [limit_line] = [x for x in log_lines(node) if x.get("event") == "open-files limit"]
        assert (limit_line["soft_before"], limit_line["soft"], limit_line["hard"]) == (
            SOFT,
            HARD,
            HARD,
        )
        assert any(
            x.get("level") == "warning" and "fewer client connections" in x["event"]
            for x in log_lines(node)
        )
        body = await readyz(node)
        held = body["connections"]
        assert held["files"]["soft"] == HARD and held["files"]["hard"] == HARD
        assert 0 < held["files"]["open"] < HARD
        limit = held["socket_limit"]
        assert 0 < limit < HARD
        assert held["sockets"] == 0
        assert (await node.metric("gateway_socket_limit")) == limit

        for _ in range(limit):
            opened.append(await anyio.connect_tcp(node.host, node.port))
        await sockets_become(node, limit)
        refused = []
        for _ in range(EXTRA):
            refused.append(await anyio.connect_tcp(node.host, node.port))
        for stream in refused:
            answer = await read_to_eof(stream)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b'"code":"unavailable"' in answer
            await stream.aclose()
        # The node still holds exactly its limit, and counted every refusal.
        assert (await readyz(node))["connections"]["sockets"] == limit
        assert (await node.metric("gateway_sockets")) == limit
        refusals = await node.metric("gateway_connections_refused_total", reason="files")
        assert refusals == EXTRA

        # One warning for the burst so far, then one more when the window ends, with
        # the count since the first: never a line per connection.
        first = refusal_warnings(node, "files")
        assert len(first) == 1, first
        assert first[0]["refused"] == 1 and first[0]["socket_limit"] == limit
        with anyio.fail_after(WARN_EVERY + 10, reason="no warning with the pending count"):
            # Polls the log of another process, bounded above.
            while len(refusal_warnings(node, "files")) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        lines = refusal_warnings(node, "files")
        assert len(lines) == 2, lines
        assert lines[1]["refused"] == EXTRA - 1
        assert lines[1]["since_seconds"] >= WARN_EVERY

        # The clients leave: the node takes connections again.
        for stream in opened:
            await stream.aclose()
        opened.clear()
        await sockets_become(node, 0)
        async with httpx.AsyncClient(base_url=node.url, timeout=5) as client:
            r = await client.get("/openapi.json")
            assert r.status_code == 200
        assert (await node.metric("gateway_connections_refused_total", reason="files")) == EXTRA
        assert node.running
    finally:
        for stream in opened:
            await stream.aclose()
        node.kill()


# ---------------------------------------------------------------------------
# accept() itself failing: a bare HttpServer with no bound, in a process with few files
# ---------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
#: The accept server's soft open-files limit, and the clients that overrun it.
SERVER_FILES = 40
CLIENTS = 60


class AcceptServer:
    """tests/support/accept_server.py in a process of its own; one command, one answer."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._out = BufferedByteReceiveStream(process.stdout)

    async def line(self) -> dict[str, Any]:
        with anyio.fail_after(10, reason="the accept server did not answer"):
            raw = await self._out.receive_until(b"\n", 65536)
        reply: dict[str, Any] = json.loads(raw)
        return reply

    async def send(self, command: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(command.encode() + b"\n")

    async def ask(self, command: str) -> dict[str, Any]:
        await self.send(command)
        return await self.line()


async def state_becomes(
    server: AcceptServer, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    with anyio.fail_after(10, reason=f"{what} not reached"):
        # Polls another process, bounded above.
        while not check(state := await server.ask("state")):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return state


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_a_failed_accept_is_counted_once_per_pause_and_accepting_resumes(
    loop: str,
) -> None:
    command = [sys.executable, "-m", "tests.support.accept_server", loop, str(SERVER_FILES)]
    clients: list[anyio.abc.SocketStream] = []
    async with await anyio.open_process(command, cwd=ROOT, stderr=subprocess.PIPE) as process:
        try:
            server = AcceptServer(process)
            port = (await server.line())["port"]
            started = time.monotonic()
            for _ in range(CLIENTS):
                clients.append(await anyio.connect_tcp("127.0.0.1", port))
            if loop == "asyncio":
                # asyncio reports each failed accept() to the loop's exception handler
                # (as many times as its backlog in one turn) and stops accepting for a
                # second: the server counts one refusal per turn, and the connections
                # wait in the listen backlog.
                state = await state_becomes(
                    server, lambda s: s["refused"].get("accept", 0) >= 1, "a failed accept"
                )
                held = state["connections"]
                assert 0 < held < CLIENTS
                state = await server.ask("state")
                elapsed = time.monotonic() - started
                assert 1 <= state["refused"]["accept"] <= elapsed / 1.0 + 2, (state, elapsed)
                waiting = CLIENTS - held
            else:
                # uvloop is never told: libuv closes a spare descriptor, accepts and
                # closes the waiting connections, and opens the spare again.
                await read_to_eof(clients[-1])
                state = await server.ask("state")
                held = state["connections"]
                assert 0 < held < CLIENTS
                assert state["refused"] == {}
                waiting = 0
            # The held connections close: the server takes connections again (asyncio
            # first takes those that waited).
            assert (await server.ask("close"))["closed"] == held
            await state_becomes(server, lambda s: s["connections"] == waiting, "accepting again")
            for stream in clients[:held]:
                await stream.aclose()
            del clients[:held]
            for stream in clients:
                await stream.aclose()
            clients.clear()
            await server.ask("close")
            await state_becomes(server, lambda s: s["connections"] == 0, "no connections")
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as c:
                assert (await c.get("/")).json() == {"ok": True}
            await server.send("exit")
            with anyio.fail_after(10):
                assert await process.wait() == 0
            # The failed accepts were not logged (with a traceback) by asyncio's default
            # exception handler: the server took them.
            assert process.stderr is not None
            errors = b""
            with contextlib.suppress(anyio.EndOfStream):
                while True:
                    errors += await process.stderr.receive()
            assert b"out of system resource" not in errors
            assert b"Traceback" not in errors
        finally:
            for stream in clients:
                await stream.aclose()
            if process.returncode is None:
                process.kill()
