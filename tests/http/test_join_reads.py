"""A join reads its state and first history page in one Redis call (a reconnect
pays one round trip, not a state check and a history read).

The history a client gets is unchanged: every item after its cursor, once, in order,
including past the first page, which later pages continue.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection

from gateway.app import Gateway
from tests.support import events as ev
from tests.support.node import auth, metric, open_ws, start_node

pytestmark = pytest.mark.anyio

COMMANDS = "gateway_redis_command_seconds_count"


@pytest.fixture
async def node(redis_url: str, redis_prefix: str) -> AsyncIterator[Gateway]:
    async with start_node(redis_url, redis_prefix) as n:
        yield n


async def team_with(node: Gateway, n: int) -> tuple[str, list[str]]:
    team = ev.team_id()
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as http:
        r = await http.post(
            f"/v1/teams/{team}/events", json=[ev.item() for _ in range(n)], headers=auth()
        )
        assert r.status_code == 200, r.text
        return team, r.json()["cursors"]


async def history(ws: ClientConnection, team: str, after: str | None, n: int) -> list[str]:
    """Subscribe to ``team`` after ``after``; the cursors of the next ``n`` events."""
    message = {"type": "subscribe", "feed": f"team/{team}"}
    if after is not None:
        message["after"] = after
    await ws.send(json.dumps(message))
    cursors: list[str] = []
    with anyio.fail_after(5):
        while len(cursors) < n:
            frame = json.loads(await ws.recv())
            assert frame["type"] in ("subscribed", "event"), frame
            if frame["type"] == "event":
                cursors.append(frame["cursor"])
    return cursors


async def test_a_join_within_the_first_page_reads_no_history_of_its_own(
    node: Gateway,
) -> None:
    team, cursors = await team_with(node, 5)
    reads, states = (
        metric(node, COMMANDS, command="xrange"),
        metric(node, COMMANDS, command="state"),
    )
    async with open_ws(node) as ws:
        assert await history(ws, team, None, 5) == cursors
    async with open_ws(node) as ws:
        assert await history(ws, team, cursors[1], 3) == cursors[2:]
    assert metric(node, COMMANDS, command="xrange") == reads
    assert metric(node, COMMANDS, command="state") >= states + 2


async def test_history_past_the_first_page_is_read_on_and_stays_whole(node: Gateway) -> None:
    team, cursors = await team_with(node, 45)  # the first page holds 32
    reads = metric(node, COMMANDS, command="xrange")
    async with open_ws(node) as ws:
        assert await history(ws, team, None, 45) == cursors
    assert metric(node, COMMANDS, command="xrange") > reads
