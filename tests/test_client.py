"""gateway.client resumes by itself: across a node switch and a drain, nothing lost."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import httpx
import pytest

from gateway.app import Gateway
from gateway.client import Event, FeedClient, FeedError, Restarted
from tests.support import events as ev
from tests.support.node import auth, start_node, token
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.anyio


async def publish(node: Gateway, team: str, n: int = 1) -> list[str]:
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as c:
        r = await c.post(
            f"/v1/teams/{team}/events", json=[ev.item() for _ in range(n)], headers=auth()
        )
        assert r.status_code == 200, r.text
        cursors: list[str] = r.json()["cursors"]
        return cursors


@pytest.mark.parametrize("transport", ["ws", "sse"])
@pytest.mark.parametrize("how", ["switch", "drain"])
async def test_follows_two_feeds_across_a_node_switch(
    redis_url: str, redis_prefix: str, transport: Any, how: str
) -> None:
    teams = [ev.team_id(), ev.team_id()]
    async with (
        start_node(redis_url, redis_prefix, drain_seconds=0.1) as a,
        start_node(redis_url, redis_prefix) as b,
        TcpProxy(a.port) as proxy,
        contextlib.AsyncExitStack() as stack,
    ):
        published: dict[str, list[str]] = {f"team/{t}": [] for t in teams}
        for team in teams:
            published[f"team/{team}"] += await publish(b, team, 3)
        client = FeedClient(
            f"http://127.0.0.1:{proxy.port}", token, transport=transport, min_backoff=0.02
        )
        await stack.enter_async_context(client)
        got: dict[str, list[str]] = {name: [] for name in published}
        total = 2 * 3 + 2 * 40

        async def publisher() -> None:
            for i in range(40):
                for team in teams:
                    published[f"team/{team}"] += await publish(b, team)
                if i == 15:
                    if how == "drain":
                        await a.drain(0.1)
                    await proxy.retarget(b.port)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(publisher)
                count = 0
                async for item in client.follow(list(published)):
                    assert isinstance(item, Event)
                    got[item.feed].append(item.cursor)
                    count += 1
                    if count == total:
                        break
        assert got == published
        assert client.reconnects >= 1


async def test_restarted_is_reported_and_followed(redis_url: str, redis_prefix: str) -> None:
    team = ev.team_id()
    async with start_node(redis_url, redis_prefix, team_retention=2) as node:
        cursors = await publish(node, team, 5)
        epoch = cursors[0].split(":")[0]
        client = FeedClient(node.url, token(), cursors={f"team/{team}": cursors[0]})
        items: list[Any] = []
        with anyio.fail_after(10):
            async for item in client.follow([f"team/{team}"]):
                items.append(item)
                if len(items) == 3:
                    break
        assert items[0] == Restarted(f"team/{team}", f"{epoch}:3")
        assert [i.cursor for i in items[1:]] == cursors[3:]


async def test_a_refused_feed_raises(redis_url: str, redis_prefix: str) -> None:
    team = ev.team_id()
    async with start_node(redis_url, redis_prefix) as node:
        await publish(node, team)
        client = FeedClient(node.url, token(), cursors={f"team/{team}": "1:x"})
        with anyio.fail_after(10), pytest.raises(FeedError) as info:
            async for _ in client.follow([f"team/{team}"]):
                pass
        assert info.value.code == "invalid_cursor"
