"""gateway.app: the logging configuration, on a real node's connections."""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
import structlog
from httpx_sse import aconnect_sse

from gateway.app import configure_logging
from tests.support import events as ev
from tests.support.node import settings, start_node, token
from tests.support.wait import until


@pytest.fixture
def restore_structlog() -> Iterator[None]:
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    # Every line is one JSON object (json.loads fails on anything else).
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


@pytest.mark.usefixtures("restore_structlog")
def test_auto_format_is_json_off_a_terminal_and_console_on_one() -> None:
    plain = io.StringIO()
    configure_logging(settings(log_format="auto"), plain)
    structlog.get_logger("gateway.test").info("hello", conn_id="abc")
    [line] = _lines(plain)
    assert line["event"] == "hello" and line["conn_id"] == "abc"
    assert line["level"] == "info" and line["timestamp"].endswith("Z")

    terminal = _Terminal()
    configure_logging(settings(log_format="auto"), terminal)
    structlog.get_logger("gateway.test").info("hello", conn_id="abc")
    out = terminal.getvalue()
    assert "hello" in out and "conn_id" in out and "abc" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)

    quiet = io.StringIO()
    configure_logging(settings(log_format="json", log_level="warning"), quiet)
    structlog.get_logger("gateway.test").info("dropped")
    structlog.get_logger("gateway.test").warning("kept")
    assert [line["event"] for line in _lines(quiet)] == ["kept"]


async def _silent_websocket(host: str, port: int, bearer: str) -> anyio.abc.SocketStream:
    """Upgrade by hand; the caller then answers nothing (not even pings)."""
    stream = await anyio.connect_tcp(host, port)
    key = base64.b64encode(os.urandom(16)).decode()
    await stream.send(
        (
            "GET /v1/ws HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: gateway.v1\r\n"
            f"Authorization: Bearer {bearer}\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += await stream.receive()
    assert head.startswith(b"HTTP/1.1 101"), head
    return stream


@pytest.mark.usefixtures("restore_structlog")
def test_a_logger_kept_from_its_first_use_still_carries_each_lines_context() -> None:
    buffer = io.StringIO()
    configure_logging(settings(log_format="json", log_level="warning"), buffer, once=True)
    log = structlog.get_logger("gateway.test.once")
    for conn_id in ("first", "second"):
        with structlog.contextvars.bound_contextvars(conn_id=conn_id):
            log.info("dropped")
            log.warning("kept")
    lines = _lines(buffer)
    assert [(line["event"], line["conn_id"]) for line in lines] == [
        ("kept", "first"),
        ("kept", "second"),
    ]


@pytest.mark.anyio
@pytest.mark.usefixtures("restore_structlog")
async def test_json_lines_of_a_real_node_carry_each_connections_context() -> None:
    buffer = io.StringIO()
    configure_logging(settings(log_format="json"), buffer)
    sse_token, ws_token = token(subject="sse-user"), token(subject="ws-user")

    def closed() -> int:
        return sum(line["event"] == "connection closed" for line in _lines(buffer))

    async with (
        start_node(ws_ping_interval=0.3, ws_ping_timeout=0.3) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        team = ev.team_id()
        headers = {"Authorization": f"Bearer {sse_token}"}
        r = await client.post(f"/v1/teams/{team}/events", json=ev.item(), headers=headers)
        assert r.status_code == 200
        async with aconnect_sse(
            client, "GET", f"/v1/teams/{team}/events", headers=headers
        ) as source:
            with anyio.fail_after(5):
                await anext(source.aiter_sse())
        await until(lambda: closed() == 1, 5, "the SSE connection logged as closed")
        # A socket that never answers pings: the server's keepalive task ends it and
        # logs why, from outside the connection's own task.
        stream = await _silent_websocket(node.settings.host, node.port, ws_token)
        try:
            await until(lambda: closed() == 2, 10, "the WebSocket logged as closed")
        finally:
            await stream.aclose()
    text = buffer.getvalue()
    for secret in (sse_token, ws_token, sse_token.split(".")[2], ws_token.split(".")[2]):
        assert secret not in text
    lines = _lines(buffer)
    sse = [line for line in lines if line.get("transport") == "sse"]
    ws = [line for line in lines if line.get("transport") == "ws"]
    assert [line["event"] for line in sse] == ["connection opened", "connection closed"]
    assert [line["event"] for line in ws] == [
        "connection opened",
        "ping timeout: closing",
        "connection closed",
    ]
    for conn in (sse, ws):
        assert len({line["conn_id"] for line in conn}) == 1
        assert {line["tenant"] for line in conn} == {"acme"}
        assert all(line["remote"].startswith("127.0.0.1:") for line in conn)
        assert all(line["level"] == "info" and "timestamp" in line for line in conn)
    assert sse[0]["conn_id"] != ws[0]["conn_id"]
    assert sse[0]["feed"] == f"team/{team}"
    assert sse[-1]["reason"] == "client"
    assert ws[-1]["reason"] == "client" and ws[-1]["code"] == 1011
