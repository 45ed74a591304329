"""Single, timed requests to one node, for the Redis-fault tests.

Each probe goes straight to a node (never through HAProxy, whose own 503 for a node it
took out would look like the gateway's answer), sends one request, waits at most
``within`` seconds, and says what came back and when.  Nothing is retried: the tests
assert on the first answer (D9: "a publish or subscribe during a Redis hang answers
503 ``unavailable`` within a documented time").
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import anyio
import httpx
from httpx_sse import aconnect_sse
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Subprotocol

from tests.support import events as ev
from tests.support.gateway_process import GatewayProcess
from tests.support.node import auth


@dataclass(frozen=True)
class Answer:
    """What one probe got: ``what`` is a status and code, an SSE/WS message kind, or
    ``"no answer"`` when ``within`` ran out."""

    what: str
    elapsed: float

    def within(self, bound: float) -> bool:
        return self.elapsed <= bound


def _code(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return body[:80].decode(errors="replace")


async def publish(node: GatewayProcess, team: str, within: float) -> tuple[Answer, list[str]]:
    """One publish of one new item; the answer, and the item's ``event_id``."""
    body = [ev.item()]
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=node.url, timeout=within) as client:
        try:
            r = await client.post(f"/v1/teams/{team}/events", json=body, headers=auth())
        except httpx.TimeoutException:
            return Answer("no answer", time.monotonic() - started), []
        except httpx.HTTPError as exc:
            return Answer(f"transport error {exc!r}", time.monotonic() - started), []
    elapsed = time.monotonic() - started
    ids = [body[0]["event"]["event_id"]]
    if r.status_code == 200:
        return Answer(f"200 {r.json()['cursors']}", elapsed), ids
    return Answer(f"{r.status_code} {_code(r.content)}", elapsed), ids


async def sse(node: GatewayProcess, team: str, after: str | None, within: float) -> Answer:
    """One SSE request: its status and code, or the kind of its first message."""
    headers = auth() if after is None else {**auth(), "Last-Event-ID": after}
    started = time.monotonic()
    timeout = httpx.Timeout(within)
    try:
        with anyio.fail_after(within):
            async with (
                httpx.AsyncClient(base_url=node.url, timeout=timeout) as client,
                aconnect_sse(client, "GET", f"/v1/teams/{team}/events", headers=headers) as s,
            ):
                if s.response.status_code != 200:
                    body = await s.response.aread()
                    return Answer(
                        f"{s.response.status_code} {_code(body)}", time.monotonic() - started
                    )
                async for message in s.aiter_sse():
                    kind = json.loads(message.data).get("kind")
                    return Answer(f"200 {kind} {message.id}", time.monotonic() - started)
                return Answer("200 ended", time.monotonic() - started)
    except (TimeoutError, httpx.TimeoutException):
        return Answer("no answer", time.monotonic() - started)
    except httpx.HTTPError as exc:
        return Answer(f"transport error {exc!r}", time.monotonic() - started)


async def ws_subscribe(node: GatewayProcess, feed: str, after: str | None, within: float) -> Answer:
    """A new socket subscribes: the first frame about the feed after ``subscribed``
    (``event``, ``epoch_restarted <cursor>``, ``error <code>``)."""
    started = time.monotonic()
    message: dict[str, str] = {"type": "subscribe", "feed": feed}
    if after is not None:
        message["after"] = after
    try:
        with anyio.fail_after(within):
            async with connect(
                node.ws_url,
                subprotocols=[Subprotocol("gateway.v1")],
                additional_headers=auth(),
                compression=None,
                proxy=None,
                open_timeout=within,
                close_timeout=1,
                ping_interval=None,
            ) as ws:
                await ws.send(json.dumps(message))
                while True:
                    frame = json.loads(await ws.recv())
                    kind = frame.get("type")
                    if kind == "subscribed":
                        continue
                    detail = frame.get("code") or frame.get("cursor") or ""
                    return Answer(f"{kind} {detail}".strip(), time.monotonic() - started)
    except TimeoutError:
        return Answer("no answer", time.monotonic() - started)
    except (OSError, InvalidHandshake, ConnectionClosed) as exc:
        return Answer(f"socket error {exc!r}", time.monotonic() - started)


async def readyz_turns(node: GatewayProcess, status: int, within: float) -> Answer:
    """Poll ``/readyz`` until it answers ``status``; a request that hangs counts as no
    answer for that poll (each may take a second)."""
    started = time.monotonic()
    last = "no answer"
    async with httpx.AsyncClient(base_url=node.url, timeout=1.0) as client:
        while time.monotonic() - started <= within:
            try:
                r = await client.get("/readyz")
                last = f"{r.status_code} {r.text[:80]}"
                if r.status_code == status:
                    return Answer(last, time.monotonic() - started)
            except httpx.HTTPError as exc:
                last = f"no answer ({type(exc).__name__})"
            await anyio.sleep(0.1)  # polling another process, bounded by ``within``
    return Answer(f"still {last}", time.monotonic() - started)


async def old_cursor(
    nodes: list[GatewayProcess], team: str, cursor: str, within: float = 5.0
) -> dict[str, str]:
    """A reconnect with ``cursor`` (lost in the store) on every node, over SSE and
    WebSocket: ``{"<node> sse|ws": answer}``."""
    feed = f"team/{team}"
    answers: dict[str, str] = {}
    for node in nodes:
        answers[f"{node.name} sse"] = (await sse(node, team, cursor, within)).what
        answers[f"{node.name} ws"] = (await ws_subscribe(node, feed, cursor, within)).what
    return answers


def not_restarted(answers: dict[str, str]) -> dict[str, str]:
    """The answers of :func:`old_cursor` that are not ``epoch_restarted``."""
    return {
        k: v
        for k, v in answers.items()
        if not v.startswith(("200 epoch_restarted", "epoch_restarted"))
    }


__all__ = [
    "Answer",
    "not_restarted",
    "old_cursor",
    "publish",
    "readyz_turns",
    "sse",
    "ws_subscribe",
]
