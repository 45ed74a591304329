"""The feed index (FeedIndex, D11), the same suite on the embedded store and on Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from gateway.feed import FeedKey, FeedKind, run_feed, team_feed
from gateway.metrics import Metrics
from gateway.store.interfaces import Backend, FeedIndex, IndexEntry
from gateway.store.memory import MemoryFeedIndex
from gateway.store.redis import RedisFeedIndex, redis_backend
from gateway.store.redis.index import SCAN_STEP
from tests.support import events as ev
from tests.support.backends import open_backend, redis_feeds

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000_000
Bounded = Callable[..., FeedIndex]


@pytest.fixture
async def backend(node_redis: tuple[str | None, str]) -> AsyncIterator[Backend]:
    url, prefix = node_redis
    b = open_backend(url, prefix)
    try:
        yield b
    finally:
        await b.aclose()


@pytest.fixture
def index(backend: Backend) -> FeedIndex:
    assert backend.index is not None
    return backend.index


@pytest.fixture
def bounded(backend: Backend) -> Bounded:
    """An index of the same kind as ``backend``'s, with other bounds."""

    def make(**bounds: int) -> FeedIndex:
        if backend.name == "redis":
            return RedisFeedIndex(redis_feeds(backend).conn, **bounds)
        return MemoryFeedIndex(**bounds)

    return make


def teams(n: int, tenant: str = "acme") -> list[FeedKey]:
    return [team_feed(tenant, ev.team_id()) for _ in range(n)]


async def everything(index: FeedIndex, tenant: str, kind: FeedKind, page: int) -> list[IndexEntry]:
    """Every entry, read ``page`` at a time (bounded)."""
    out: list[IndexEntry] = []
    before = None
    for _ in range(1000):
        got = await index.page(tenant, kind, before=before, limit=page)
        out.extend(got)
        if len(got) < page:
            return out
        before = got[-1]
    raise AssertionError("the index did not end")


async def test_most_recent_first_and_ties_by_id(index: FeedIndex) -> None:
    a, b, c, d = teams(4)
    await index.touch([(a, T0 + 1), (b, T0 + 3), (c, T0 + 2), (d, T0 + 2)])
    got = await index.page("acme", FeedKind.TEAM, before=None, limit=10)
    ties = sorted([c.id, d.id], reverse=True)
    assert got == [
        IndexEntry(b.id, T0 + 3),
        IndexEntry(ties[0], T0 + 2),
        IndexEntry(ties[1], T0 + 2),
        IndexEntry(a.id, T0 + 1),
    ]
    assert await index.page("acme", FeedKind.TEAM, before=None, limit=2) == got[:2]
    assert await index.page("acme", FeedKind.TEAM, before=got[1], limit=10) == got[2:]
    assert await index.page("acme", FeedKind.TEAM, before=got[-1], limit=10) == []
    assert await index.page("acme", FeedKind.TEAM, before=None, limit=0) == []


async def test_paging_visits_every_entry_once_even_with_many_ties(index: FeedIndex) -> None:
    # More entries in one millisecond than a Redis read skips in one step.
    feeds = teams(2 * SCAN_STEP + 7)
    await index.touch([(f, T0 + (i % 3 == 0)) for i, f in enumerate(feeds)])
    for page in (1, 5, SCAN_STEP + 1, 1000):
        got = await everything(index, "acme", FeedKind.TEAM, page)
        assert sorted(e.id for e in got) == sorted(f.id for f in feeds), page
        assert got == sorted(got, key=lambda e: (e.updated_ms, e.id), reverse=True)


async def test_an_earlier_time_does_not_move_an_entry_back(index: FeedIndex) -> None:
    (a,) = teams(1)
    await index.touch([(a, T0 + 10)])
    await index.touch([(a, T0 + 5)])
    assert await index.page("acme", FeedKind.TEAM, before=None, limit=5) == [
        IndexEntry(a.id, T0 + 10)
    ]
    await index.touch([(a, T0 + 20), (a, T0 + 15)])  # the same feed twice in one touch
    assert await index.page("acme", FeedKind.TEAM, before=None, limit=5) == [
        IndexEntry(a.id, T0 + 20)
    ]


async def test_tenants_and_kinds_are_apart(index: FeedIndex) -> None:
    (ours,) = teams(1, "acme")
    (theirs,) = teams(1, "globex")
    run = run_feed("acme", "t1", "r1")
    await index.touch([(ours, T0), (theirs, T0), (run, T0)])
    assert [e.id for e in await index.page("acme", FeedKind.TEAM, before=None, limit=9)] == [
        ours.id
    ]
    assert [e.id for e in await index.page("globex", FeedKind.TEAM, before=None, limit=9)] == [
        theirs.id
    ]
    assert [e.id for e in await index.page("acme", FeedKind.RUN, before=None, limit=9)] == ["t1/r1"]
    assert await index.page("initech", FeedKind.TEAM, before=None, limit=9) == []


async def test_forget(index: FeedIndex) -> None:
    a, b = teams(2)
    await index.touch([(a, T0), (b, T0 + 1)])
    await index.forget("acme", FeedKind.TEAM, [b.id, "no-such-feed"])
    await index.forget("acme", FeedKind.TEAM, [])
    assert await index.page("acme", FeedKind.TEAM, before=None, limit=9) == [IndexEntry(a.id, T0)]


async def test_bounded_in_size_keeping_the_most_recent(bounded: Bounded) -> None:
    index = bounded(max_feeds=5)
    feeds = teams(12)
    for i, f in enumerate(feeds):
        await index.touch([(f, T0 + i)])
    got = await index.page("acme", FeedKind.TEAM, before=None, limit=100)
    assert [e.id for e in got] == [f.id for f in reversed(feeds[-5:])]


async def test_bounded_in_age_from_the_newest_time(bounded: Bounded) -> None:
    index = bounded(max_age_ms=1000)
    old, kept, new = teams(3)
    await index.touch([(old, T0), (kept, T0 + 500)])
    await index.touch([(new, T0 + 1400)])
    got = await index.page("acme", FeedKind.TEAM, before=None, limit=100)
    assert [e.id for e in got] == [new.id, kept.id]


async def test_on_redis_one_touch_is_one_round_trip_and_the_set_expires(
    redis_url: str, redis_prefix: str
) -> None:
    metrics = Metrics()
    backend = redis_backend(redis_url, prefix=redis_prefix, metrics=metrics)
    try:
        index = backend.index
        assert isinstance(index, RedisFeedIndex)
        feeds = [*teams(50), *teams(50, "globex"), run_feed("acme", "t", "r")]
        await index.touch([(f, T0) for f in feeds])
        count = metrics.registry.get_sample_value(
            "gateway_redis_command_seconds_count", {"command": "index_touch"}
        )
        assert count == 1
        client = redis_feeds(backend).conn.client
        key = index.key("acme", FeedKind.TEAM)
        assert key == f"{redis_prefix}:index:{{acme}}:team"
        assert await client.zcard(key) == 50
        assert 0 < await client.pttl(key) <= 86_400_000
    finally:
        await backend.aclose()
