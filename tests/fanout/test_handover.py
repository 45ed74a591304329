"""The hand-over from history to live: no gap and no duplicate, with the race forced.

Items are published after a joining client's history read and before it goes live
(through the hub's test hook, and separately by a fast concurrent publisher); the
test shows that window was hit many times and that every client still received
every item exactly once, in order.
"""

from __future__ import annotations

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

from gateway.fanout.hub import Hooks
from gateway.fanout.subscription import Subscription, SubState
from gateway.feed import NewItem, team_feed
from gateway.wire.formats import TEAM_SSE
from gateway.wire.teamitem import team_payload
from tests.support import events as ev
from tests.support.node import auth, metric, start_node
from tests.support.wait import until

pytestmark = pytest.mark.anyio


def payload() -> NewItem:
    body = ev.item()
    return NewItem(body["event"]["event_id"], team_payload(body["source"], body["event"]))


async def test_items_published_inside_the_window_arrive_once(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    hits_wanted = 25
    hook_calls = 0
    published_in_hook = 0
    windows_forced = 0
    node_ref: list[object] = []

    async def after_history_page(sub: Subscription) -> None:
        # Publish into the window, then wait until the node's reader has taken the new
        # items onto the live path (so they bypass this not-yet-live subscription).
        nonlocal hook_calls, published_in_hook, windows_forced
        hook_calls += 1
        if hook_calls > hits_wanted:
            return
        node = node_ref[0]
        # This history read reached the live position: without the items published
        # now, the subscription would go live right after this hook.
        if sub.position >= node.hub.audiences[sub.feed].position:  # type: ignore[attr-defined]
            windows_forced += 1
        result = await node.backend.feeds.append(sub.feed, [payload(), payload()], retention=10_000)  # type: ignore[attr-defined]
        published_in_hook += 2
        target = result.cursors[-1]
        audience = node.hub.audiences[sub.feed]  # type: ignore[attr-defined]
        await until(lambda: audience.position >= target, 5, "the reader taking the items")

    async with start_node(
        url, prefix, history_page=5, hooks=Hooks(after_history_page=after_history_page)
    ) as node:
        node_ref.append(node)
        team = ev.team_id()
        async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
            r = await client.post(
                f"/v1/teams/{team}/events", json=[ev.item() for _ in range(10)], headers=auth()
            )
            assert r.status_code == 200
            epoch = int(r.json()["cursors"][0].split(":")[0])
            total = 10 + 2 * hits_wanted
            ids: list[str] = []
            with anyio.fail_after(30):
                async with aconnect_sse(
                    client, "GET", f"/v1/teams/{team}/events", headers=auth()
                ) as source:
                    async for sse in source.aiter_sse():
                        ids.append(sse.id)
                        if len(ids) == total:
                            break
        assert published_in_hook == 2 * hits_wanted
        assert ids == [f"{epoch}:{i}" for i in range(1, total + 1)]
        # The window was hit on (nearly) every hooked page, and each hit was handled.
        assert windows_forced >= hits_wanted - 2
        assert metric(node, "gateway_handover_rereads_total") == windows_forced


async def test_concurrent_joiners_under_fast_publishing(
    node_redis: tuple[str | None, str],
) -> None:
    """Many clients join at cursors while a publisher appends as fast as it can."""
    url, prefix = node_redis
    async with start_node(url, prefix, history_page=7) as node:
        team = ev.team_id()
        total = 400
        clients = 12
        async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
            r = await client.post(
                f"/v1/teams/{team}/events", json=[ev.item() for _ in range(20)], headers=auth()
            )
            epoch = int(r.json()["cursors"][0].split(":")[0])
            results: dict[int, list[str]] = {}

            async def publisher() -> None:
                for _ in range((total - 20) // 20):
                    body = [ev.item() for _ in range(20)]
                    rr = await client.post(f"/v1/teams/{team}/events", json=body, headers=auth())
                    assert rr.status_code == 200

            async def joiner(i: int) -> None:
                start = (i * 3) % 20
                got: list[str] = []
                params = {"after": f"{epoch}:{start}"}
                async with aconnect_sse(
                    client, "GET", f"/v1/teams/{team}/events", headers=auth(), params=params
                ) as source:
                    async for sse in source.aiter_sse():
                        got.append(sse.id)
                        if len(got) == total - start:
                            break
                results[start] = got

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(publisher)
                    for i in range(clients):
                        tg.start_soon(joiner, i)
        for start, got in results.items():
            assert got == [f"{epoch}:{o}" for o in range(start + 1, total + 1)], start
        assert len(results) == len({(i * 3) % 20 for i in range(clients)})


@pytest.mark.parametrize("history", [3, 0], ids=["page", "empty page"])
async def test_items_after_the_page_read_with_the_state_arrive_once(
    node_redis: tuple[str | None, str], history: int
) -> None:
    """The first page is read with the join's state, before the subscription is
    registered: items the reader delivers from then on are read after the page."""
    url, prefix = node_redis
    async with start_node(url, prefix) as node:
        feed = team_feed("acme", ev.team_id())
        feeds = node.backend.feeds
        first = await feeds.append(feed, [payload() for _ in range(history + 1)], retention=100)
        after = first.cursors[0]  # the join's cursor: ``history`` items follow it
        sub = await node.hub.open(feed, after, TEAM_SSE)
        assert sub.prefetched is not None and len(sub.prefetched[1]) == history
        later = await feeds.append(feed, [payload(), payload()], retention=100)
        audience = node.hub.audiences[feed]
        await until(lambda: audience.position >= later.cursors[-1], 5, "the reader taking them")
        written: list[bytes] = []

        async def write(data: bytes) -> None:
            written.append(data)

        try:
            await node.hub.catch_up(sub, write)
            assert sub.state is SubState.LIVE and sub.position == later.cursors[-1]
        finally:
            node.hub.close(sub)
        ids = [line for line in b"".join(written).split(b"\n") if line.startswith(b"id: ")]
        expect = first.cursors[1:] + later.cursors
        assert ids == [b"id: %s" % str(c).encode() for c in expect]
