"""A join that meets the deletion of its run feed is told so instead of waiting."""

from __future__ import annotations

import httpx
import pytest

from gateway.errors import NotFound
from gateway.feed import run_feed
from gateway.wire.formats import RUN_SSE
from tests.agui.runs import NESTED, RUN, THREAD
from tests.support.backends import lose
from tests.support.node import auth, start_node

pytestmark = pytest.mark.anyio


async def test_a_join_that_finds_its_run_deleted_gets_not_found(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    async with (
        start_node(url, prefix) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        r = await client.post(
            f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui", json=NESTED, headers=auth()
        )
        assert r.status_code == 200, r.text
        feed = run_feed("acme", THREAD, RUN)
        sub = await node.hub.open(feed, None, RUN_SSE)
        # The run's grace period ends between the join's state read and its history
        # read: its keys are gone, as after their expiry.
        await lose(node.backend, feed)
        written: list[bytes] = []

        async def write(data: bytes) -> None:
            written.append(data)

        try:
            with pytest.raises(NotFound, match="no such feed"):
                await node.hub.catch_up(sub, write)
        finally:
            node.hub.close(sub)
        assert written == []
        # A new request gets what the join was told.
        r = await client.get(f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui", headers=auth())
        assert r.status_code == 404
