"""A join that meets the deletion of its run feed is told so instead of waiting."""

from __future__ import annotations

import anyio
import httpx
import pytest

from gateway.errors import NotFound
from gateway.fanout.subscription import SubState
from gateway.feed import run_feed
from gateway.wire.formats import RUN_SSE
from tests.agui.runs import NESTED, RUN, THREAD
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
        # The join's first page was read with its state (one store call); later pages
        # are read on their own.  Such a read is made to come next, and the run's grace
        # period ends before it: its keys expire (deleted on purpose, not lost).
        assert sub.prefetched is not None
        sub.prefetched = None
        feeds = node.backend.feeds
        await feeds.expire(feed, 0.001)
        with anyio.fail_after(5):
            while await feeds.state(feed) is not None:  # noqa: ASYNC110 - the store's clock
                await anyio.sleep(0.01)
        written: list[bytes] = []

        async def write(data: bytes) -> None:
            written.append(data)

        try:
            # The join finds out itself (NotFound), or the node's reader noticed the
            # deletion first and ended the subscription as gone; either way the driver
            # ends it with not_found.
            try:
                await node.hub.catch_up(sub, write)
            except NotFound as exc:
                assert exc.message == "no such feed"
            else:
                assert sub.state is SubState.GONE
        finally:
            node.hub.close(sub)
        assert written == []
        # A new request gets what the join was told.
        r = await client.get(f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui", headers=auth())
        assert r.status_code == 404
