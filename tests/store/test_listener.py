"""The live path's pub/sub listener against a Redis that requires authentication."""

from __future__ import annotations

import anyio
import httpx
import pytest
import redis.asyncio as aioredis
from httpx_sse import aconnect_sse

from gateway.store.redis.client import PubSubLost
from gateway.store.redis.client.subscriber import connect
from gateway.store.redis.client.topology import ListenerAddress
from gateway.store.redis.connection import RedisConnection
from tests.support import events as ev
from tests.support.node import auth, start_node
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis_admin]


@pytest.mark.parametrize("user", ["", "gw"])
async def test_live_items_reach_followers_through_an_authenticated_listener(user: str) -> None:
    with RedisServer() as server:
        admin = aioredis.Redis(port=server.port)
        if user:
            await admin.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all")
        await admin.config_set("requirepass", "pw")
        url = f"redis://{user}:pw@127.0.0.1:{server.port}/0"
        try:
            async with (
                start_node(url, "gwauth") as node,
                httpx.AsyncClient(base_url=node.url, timeout=10) as client,
            ):
                team = ev.team_id()
                r = await client.post(f"/v1/teams/{team}/events", json=ev.item(), headers=auth())
                assert r.status_code == 200
                got: list[str] = []
                with anyio.fail_after(10):
                    async with aconnect_sse(
                        client, "GET", f"/v1/teams/{team}/events", headers=auth()
                    ) as source:
                        async for sse in source.aiter_sse():
                            got.append(sse.id)
                            if len(got) == 1:  # history done: now live, via the listener
                                r = await client.post(
                                    f"/v1/teams/{team}/events", json=ev.item(), headers=auth()
                                )
                            if len(got) == 2:
                                break
                assert got[1] == r.json()["cursors"][0]
            wrong = RedisConnection(f"redis://{user}:wrong@127.0.0.1:{server.port}/0")
            with pytest.raises(PubSubLost, match="handshake: WRONGPASS"):
                await connect(ListenerAddress("127.0.0.1", server.port), wrong.dial)
            await wrong.aclose()
        finally:
            # Let the fixture's own shutdown (no password) work again.
            authed = aioredis.Redis(port=server.port, username=user or None, password="pw")
            await authed.config_set("requirepass", "")
            await authed.aclose()
            await admin.aclose()
