"""Refused connections are counted and warned of (gateway/net/capacity.py).

Unit tests of :class:`Refusals` (an injected clock; the warnings captured from
structlog), of the file budget's arithmetic, and over real sockets: an
:class:`HttpServer` bounded to a few connections refuses the rest of a burst exactly,
and the stream limits (429) count in ``gateway_connections_refused_total`` too.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
import structlog

from gateway.config import Settings
from gateway.loopmetrics import LoopCounter
from gateway.net.capacity import (
    INTERNAL_MAX_SOCKETS,
    RESERVED_FILES,
    Refusals,
    raise_file_limit,
    reserved_files,
    socket_limit,
)
from gateway.net.server import HttpServer, Request, Responder
from tests.support import events as ev
from tests.support.node import auth, metric, start_node
from tests.support.wait import until

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def counter() -> LoopCounter:
    return LoopCounter("gateway_connections_refused_total", "test", ["reason"])


def warnings(logs: list[dict[str, Any]], reason: str) -> list[dict[str, Any]]:
    return [x for x in logs if x["log_level"] == "warning" and x.get("reason") == reason]


def test_the_first_refusal_is_logged_at_once_the_rest_once_per_window() -> None:
    clock = Clock()
    count = counter()
    refusals = Refusals(count, every=10.0, clock=clock)
    with structlog.testing.capture_logs() as logs:
        refusals("files")
        assert [x["refused"] for x in warnings(logs, "files")] == [1]
        assert warnings(logs, "files")[0]["since_seconds"] is None
        for _ in range(41):
            clock.now += 0.1
            refusals("files")
        # Counted, not logged: one line so far, its window ends 10 s after it.
        assert len(warnings(logs, "files")) == 1
        assert count.labels("files").value == 42
        assert refusals.next_due() == 110.0
        clock.now = 109.9
        refusals.flush()
        assert len(warnings(logs, "files")) == 1
        clock.now = 110.0
        refusals.flush()
        assert [x["refused"] for x in warnings(logs, "files")] == [1, 41]
        assert warnings(logs, "files")[1]["since_seconds"] == 10.0
        assert refusals.next_due() is None
        refusals.flush()
        assert len(warnings(logs, "files")) == 2
        # Long after, a refusal is logged at once again.
        clock.now = 200.0
        refusals("files")
        assert [x["refused"] for x in warnings(logs, "files")] == [1, 41, 1]


def test_reasons_have_windows_and_counts_of_their_own() -> None:
    clock = Clock()
    count = counter()
    details = {"connections": {"open": 5, "limit": 5}}
    refusals = Refusals(count, every=10.0, clock=clock, details=lambda r: details.get(r, {}))
    with structlog.testing.capture_logs() as logs:
        refusals("connections")
        refusals("connections")
        clock.now += 5
        refusals("tenant_connections")
        clock.now += 1
        refusals("tenant_connections")
        assert [x["reason"] for x in logs] == ["connections", "tenant_connections"]
        assert logs[0]["open"] == 5 and logs[0]["limit"] == 5
        assert "GATEWAY_MAX_CONNECTIONS" in logs[0]["event"]
        assert refusals.next_due() == 110.0
        clock.now = 110.0
        refusals.flush()  # only the reason whose window ended
        assert [(x["reason"], x["refused"]) for x in logs[2:]] == [("connections", 1)]
        clock.now = 115.0
        refusals.flush()
        assert [(x["reason"], x["refused"]) for x in logs[3:]] == [("tenant_connections", 1)]
    assert count.labels("connections").value == 2
    assert count.labels("tenant_connections").value == 2


async def test_run_writes_the_pending_count_when_the_window_ends() -> None:
    refusals = Refusals(counter(), every=0.2)
    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(refusals.run)
            refusals("accept")
            refusals("accept")
            refusals("accept")
            await until(lambda: len(warnings(logs, "accept")) == 2, 5, "the pending count")
            tg.cancel_scope.cancel()
    assert [x["refused"] for x in warnings(logs, "accept")] == [1, 2]


def test_the_file_budget() -> None:
    settings = Settings()
    assert reserved_files(settings) == RESERVED_FILES + 2 * settings.redis_max_connections
    with_internal = Settings(internal_port=9090)
    assert reserved_files(with_internal) == reserved_files(settings) + INTERNAL_MAX_SOCKETS
    assert socket_limit(20_000, 128) == 19_872
    # A small limit still serves half its files; never none.
    assert socket_limit(200, 192) == 100
    assert socket_limit(1, 128) == 1


def test_raise_file_limit_raises_the_soft_limit_to_the_hard_one() -> None:
    # In a child process: the test runner's own limit stays as it is.
    code = (
        "import resource, json\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 256))\n"
        "from gateway.net.capacity import raise_file_limit\n"
        "print(json.dumps(raise_file_limit()))\n"
        "print(json.dumps(raise_file_limit()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, text=True, timeout=30
    ).stdout.splitlines()
    assert json.loads(out[0]) == [[64, 256], [256, 256], None]
    # Already there: nothing to do.
    assert json.loads(out[1]) == [[256, 256], [256, 256], None]
    assert raise_file_limit()[1].soft == resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def ok(request: Request, responder: Responder) -> None:
    responder.send(200, b'{"ok":true}')


async def read_to_eof(stream: anyio.abc.SocketStream) -> bytes:
    data = b""
    with anyio.fail_after(5):
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return data


async def test_a_burst_past_the_bound_is_refused_exactly() -> None:
    refused: list[str] = []
    server = HttpServer(ok, max_body=1024, max_sockets=5, on_refused=refused.append)
    port = await server.start("127.0.0.1", 0)
    streams: list[anyio.abc.SocketStream] = []
    try:
        # Thirty connections at once: the kernel completes them before the server
        # accepts any, so the server takes them in one or a few loop turns, before
        # any connection_made has run.
        async with anyio.create_task_group() as tg:

            async def connect() -> None:
                streams.append(await anyio.connect_tcp("127.0.0.1", port))

            for _ in range(30):
                tg.start_soon(connect)
        await until(lambda: len(refused) == 25, 5, "25 refusals")
        await until(lambda: len(server.connections) == 5, 5, "5 connections")
        assert set(refused) == {"files"}
        assert server.open_sockets == 5
        answers = []
        held = []
        for stream in streams:
            # A held connection answers a request; a refused one has said 503 and closed.
            await stream.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        for stream in streams:
            with anyio.fail_after(5):
                answer = await stream.receive()
            answers.append(answer.split(b"\r\n", 1)[0])
            if answer.startswith(b"HTTP/1.1 200"):
                held.append(stream)
        assert (
            sorted(answers) == [b"HTTP/1.1 200 OK"] * 5 + [b"HTTP/1.1 503 Service Unavailable"] * 25
        )
        # The held ones leave: a new connection is taken again.
        for stream in held:
            await stream.aclose()
        await until(lambda: not server.connections, 5, "held connections gone")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            assert (await client.get("/")).status_code == 200
        assert len(refused) == 25
    finally:
        for stream in streams:
            await stream.aclose()
        await server.aclose()


async def test_the_stream_limits_count_as_refused_connections() -> None:
    async with (
        start_node(max_connections=2, max_tenant_connections=1) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        acme, globex, initech = ev.team_id(), ev.team_id(), ev.team_id()
        for team, tenant in ((acme, "acme"), (globex, "globex"), (initech, "initech")):
            r = await client.post(
                f"/v1/teams/{team}/events", json=[ev.item()], headers=auth(tenant)
            )
            assert r.status_code == 200, r.text
        with structlog.testing.capture_logs() as logs:
            async with (
                client.stream("GET", f"/v1/teams/{acme}/events", headers=auth("acme")) as first,
            ):
                assert first.status_code == 200
                r = await client.get(f"/v1/teams/{acme}/events", headers=auth("acme"))
                assert r.status_code == 429
                async with client.stream(
                    "GET", f"/v1/teams/{globex}/events", headers=auth("globex")
                ) as second:
                    assert second.status_code == 200
                    for _ in range(3):
                        r = await client.get(f"/v1/teams/{initech}/events", headers=auth("initech"))
                        assert r.status_code == 429
        refused = "gateway_connections_refused_total"
        assert metric(node, refused, reason="tenant_connections") == 1
        assert metric(node, refused, reason="connections") == 3
        # Still counted where they were before.
        assert metric(node, "gateway_limited_total", limit="connections") == 3
        assert [x["refused"] for x in warnings(logs, "connections")] == [1]
        assert [x["refused"] for x in warnings(logs, "tenant_connections")] == [1]
        assert warnings(logs, "connections")[0]["limit"] == 2
