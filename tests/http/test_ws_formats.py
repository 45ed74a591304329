"""A WebSocket subscription picks the wire format of a run feed (``format``, contract D6).

Over a real socket on a real node: ``ai-sdk`` frames carry one AI SDK chunk each with
the chunk id ``E:O:K`` as cursor, exactly the chunks the pure translation derives;
resuming ``after`` a chunk id continues with the next chunk; an unknown format, or a
format on a team feed, is an ``error`` for that feed only.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection

from gateway.app import Gateway
from gateway.cursor import parse_cursor
from gateway.dialects.ai_sdk.translator import AiSdkTranslator
from tests.agui.runs import NESTED, RUN, THREAD
from tests.support import events as ev
from tests.support.node import auth, open_ws

pytestmark = pytest.mark.anyio

FEED = f"run/{THREAD}/{RUN}"


async def recv(ws: ClientConnection) -> dict[str, Any]:
    with anyio.fail_after(5):
        frame: dict[str, Any] = json.loads(await ws.recv())
    return frame


def expected_chunks(cursors: list[str]) -> list[tuple[str, dict[str, Any]]]:
    translator = AiSdkTranslator(THREAD, RUN)
    out = []
    for event, cursor in zip(NESTED, cursors, strict=True):
        for k, chunk in enumerate(translator.translate(event)):
            out.append((f"{cursor}:{k}", json.loads(json.dumps(chunk))))
    return out


async def publish_run(node: Gateway) -> list[str]:
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        r = await client.post(
            f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui", json=NESTED, headers=auth()
        )
    assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    return cursors


async def test_ai_sdk_format_carries_the_translated_chunks_and_resumes_mid_event(
    node: Gateway,
) -> None:
    cursors = await publish_run(node)
    expected = expected_chunks(cursors)
    async with open_ws(node) as ws:
        await ws.send(json.dumps({"type": "subscribe", "feed": FEED, "format": "ai-sdk"}))
        assert (await recv(ws))["type"] == "subscribed"
        got = [await recv(ws) for _ in expected]
        assert [(f["cursor"], f["data"]) for f in got] == expected
        assert all(f["type"] == "event" and f["feed"] == FEED for f in got)
        # Resume after a chunk id: the stream goes on with the next chunk.
        cut = len(expected) // 2
        await ws.send(
            json.dumps(
                {"type": "subscribe", "feed": FEED, "format": "ai-sdk", "after": expected[cut][0]}
            )
        )
        assert (await recv(ws))["type"] == "subscribed"
        rest = [await recv(ws) for _ in expected[cut + 1 :]]
        assert [(f["cursor"], f["data"]) for f in rest] == expected[cut + 1 :]
        epoch = parse_cursor(cursors[0]).epoch
        assert all(f["cursor"].startswith(f"{epoch}:") for f in rest)


async def test_an_unknown_format_or_a_format_on_a_team_feed_is_an_error_for_that_feed(
    node: Gateway,
) -> None:
    await publish_run(node)
    team = f"team/{ev.team_id()}"
    async with open_ws(node) as ws:
        await ws.send(json.dumps({"type": "subscribe", "feed": FEED, "format": "nope"}))
        error = await recv(ws)
        assert (error["type"], error["feed"], error["code"]) == ("error", FEED, "invalid_request")
        await ws.send(json.dumps({"type": "subscribe", "feed": team, "format": "ai-sdk"}))
        error = await recv(ws)
        assert (error["type"], error["feed"], error["code"]) == ("error", team, "invalid_request")
        # The socket goes on: the default format still works.
        await ws.send(json.dumps({"type": "subscribe", "feed": FEED}))
        assert (await recv(ws))["type"] == "subscribed"
        first = await recv(ws)
        assert first["type"] == "event" and first["data"]["type"] == "RUN_STARTED"
