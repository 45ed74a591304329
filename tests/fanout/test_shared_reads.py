"""Many clients joining one feed at once share the node's history reads."""

from __future__ import annotations

from collections import Counter

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

from gateway.cursor import Cursor
from gateway.feed import FeedKey, FeedState, StoredItem
from gateway.store.memory import MemoryStore, memory_backend
from tests.support import events as ev
from tests.support.node import auth, start_node

pytestmark = pytest.mark.anyio


class CountingStore(MemoryStore):
    """The embedded store, counting the reads the node makes (and slowing them a little,
    as a network round trip would, so that joins overlap)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[tuple[FeedKey, Cursor]] = Counter()
        self.states = 0

    async def read(self, feed: FeedKey, after: Cursor, limit: int) -> list[StoredItem]:
        self.reads[(feed, after)] += 1
        await anyio.sleep(0.02)
        return await super().read(feed, after, limit)

    async def state(self, feed: FeedKey) -> FeedState | None:
        self.states += 1
        await anyio.sleep(0.02)
        return await super().state(feed)


async def test_simultaneous_joiners_share_state_and_history_reads() -> None:
    store = CountingStore()
    joiners = 40
    async with start_node(backend=memory_backend(store), history_page=10) as node:
        team = ev.team_id()
        async with httpx.AsyncClient(base_url=node.url, timeout=20) as client:
            r = await client.post(
                f"/v1/teams/{team}/events", json=[ev.item() for _ in range(50)], headers=auth()
            )
            cursors = r.json()["cursors"]
            results: list[list[str]] = []

            async def join() -> None:
                got: list[str] = []
                async with aconnect_sse(
                    client, "GET", f"/v1/teams/{team}/events", headers=auth()
                ) as source:
                    async for sse in source.aiter_sse():
                        got.append(sse.id)
                        if len(got) == 50:
                            break
                results.append(got)

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for _ in range(joiners):
                        tg.start_soon(join)
    assert results == [cursors] * joiners
    pages = len(store.reads)  # distinct (feed, cursor) pages
    assert pages == 5
    # Without sharing this would be joiners x pages reads and joiners state reads.
    assert sum(store.reads.values()) < joiners * pages / 4
    assert store.states < joiners / 4
