"""The latest-run index (contract D10), the same suite on the embedded store and on Redis,
and how the publisher keeps it.

One entry per tenant and thread: recording a run replaces the previous one and removes
an expiry; ``expire_run`` gives the entry the run feed's grace period only while it
still names the run that ended; tenants never see each other's entries.
"""

from __future__ import annotations

import time

import anyio
import pytest

from gateway.agui.events import TERMINAL
from gateway.errors import Unavailable
from gateway.fanout.foldcache import FoldCache
from gateway.feed import run_feed
from gateway.metrics import Metrics
from gateway.publisher import Publisher, Via
from gateway.store.interfaces import Backend, LatestRun, RunIndex
from gateway.store.memory import MemoryStore, memory_backend
from gateway.store.redis import RedisRuns
from tests.agui.runs import NESTED, RUN, THREAD

pytestmark = pytest.mark.anyio


class _AnyTime(float):
    """Equal to any time (the started_at of a run recorded by the publisher)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, float)

    __hash__ = float.__hash__


ANY_TIME = _AnyTime()


def index(backend: Backend) -> RunIndex:
    assert backend.runs is not None, "both backends keep the index"
    return backend.runs


async def expiry(backend: Backend, tenant: str, thread: str) -> float | None:
    """Seconds until the entry expires; None when it never does (or does not exist)."""
    runs = index(backend)
    if isinstance(runs, RedisRuns):
        ms = await runs.conn.client.pttl(runs.key(tenant, thread))
        return None if ms < 0 else ms / 1000
    assert isinstance(runs, MemoryStore)
    entry = runs._runs.get((tenant, thread))
    if entry is None or entry[1] is None:
        return None
    return entry[1] - time.monotonic()


async def test_the_latest_recorded_run_of_a_thread_wins(store: Backend) -> None:
    runs = index(store)
    assert await runs.latest_run("acme", "t1") is None
    await runs.record_run("acme", "t1", "r1", 1_700_000_000.25)
    assert await runs.latest_run("acme", "t1") == LatestRun("r1", 1_700_000_000.25)
    await runs.record_run("acme", "t1", "r2", 1_700_000_001.5)
    assert await runs.latest_run("acme", "t1") == LatestRun("r2", 1_700_000_001.5)
    # Other threads and other tenants have entries of their own.
    assert await runs.latest_run("acme", "t2") is None
    assert await runs.latest_run("other", "t1") is None
    await runs.record_run("other", "t1", "theirs", 1.0)
    assert (await runs.latest_run("acme", "t1")) == LatestRun("r2", 1_700_000_001.5)


async def test_tenants_cannot_reach_each_others_keys(store: Backend) -> None:
    # A tenant whose name holds the key separators still gets a key of its own.
    runs = index(store)
    await runs.record_run("a:thread:b", "c", "r-evil", 1.0)
    await runs.record_run("a", "b}:c", "r-odd", 1.0)
    assert await runs.latest_run("a", "c") is None
    assert await runs.latest_run("a:thread:b", "c") == LatestRun("r-evil", 1.0)
    if isinstance(runs, RedisRuns):
        assert runs.key("a:thread:b", "c") != runs.key("a", "thread:b:c")
        assert "{a%3Athread%3Ab:thread:c}" in runs.key("a:thread:b", "c")


async def test_an_ended_run_expires_unless_a_later_run_replaced_it(store: Backend) -> None:
    runs = index(store)
    await runs.record_run("acme", "t1", "r1", 1.0)
    assert await expiry(store, "acme", "t1") is None  # a going run never expires
    await runs.expire_run("acme", "t1", "other-run", 60)
    assert await expiry(store, "acme", "t1") is None  # names another run: left alone
    await runs.expire_run("acme", "t1", "r1", 60)
    left = await expiry(store, "acme", "t1")
    assert left is not None and 50 < left <= 60
    # A new run on the thread: its entry has no expiry, and the old run's end cannot
    # give it one.
    await runs.record_run("acme", "t1", "r2", 2.0)
    assert await expiry(store, "acme", "t1") is None
    await runs.expire_run("acme", "t1", "r1", 60)
    assert await expiry(store, "acme", "t1") is None
    # A prefix of the run id is another run.
    await runs.expire_run("acme", "t1", "r", 60)
    assert await expiry(store, "acme", "t1") is None
    await runs.expire_run("acme", "t1", "r2", 0.02)
    left = await expiry(store, "acme", "t1")
    assert left is not None and left <= 0.02
    # The grace period passes (time is what is under test here: a bounded poll).
    with anyio.fail_after(5):
        while await runs.latest_run("acme", "t1") is not None:  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def test_the_embedded_index_forgets_the_least_recently_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gateway.store.memory as memory

    monkeypatch.setattr(memory, "RUNS_LIMIT", 3)
    store = MemoryStore()
    for n in range(4):
        await store.record_run("acme", f"t{n}", "r", float(n))
    assert await store.latest_run("acme", "t0") is None
    assert [await store.latest_run("acme", f"t{n}") for n in (1, 2, 3)] == [
        LatestRun("r", 1.0),
        LatestRun("r", 2.0),
        LatestRun("r", 3.0),
    ]
    await store.record_run("acme", "t1", "r", 4.0)  # recorded again: the newest now
    await store.record_run("acme", "t4", "r", 5.0)
    assert await store.latest_run("acme", "t2") is None
    assert await store.latest_run("acme", "t1") == LatestRun("r", 4.0)


# -- the publisher keeps the index --------------------------------------------------------


def publisher(backend: Backend, *, ttl: float = 600.0, runs: RunIndex | None = None) -> Publisher:
    return Publisher(
        backend.feeds,
        backend.live,
        FoldCache(backend.feeds, backend.folds),
        Metrics(),
        team_retention=100,
        run_finished_ttl=ttl,
        runs=backend.runs if runs is None else runs,
    )


async def test_run_started_records_and_the_end_expires(store: Backend) -> None:
    pub = publisher(store)
    before = time.time()
    await pub.publish_run("acme", THREAD, RUN, NESTED[:3], via=Via.HTTP)
    latest = await index(store).latest_run("acme", THREAD)
    assert latest is not None and latest.run_id == RUN
    assert before <= latest.started_at <= time.time()
    assert await expiry(store, "acme", THREAD) is None
    # Events without RUN_STARTED change nothing; the terminal event starts the grace
    # period of the entry with the run feed's.
    await pub.publish_run("acme", THREAD, RUN, NESTED[3:-1], via=Via.HTTP)
    assert await index(store).latest_run("acme", THREAD) == latest
    assert NESTED[-1]["type"] in TERMINAL
    await pub.publish_run("acme", THREAD, RUN, NESTED[-1:], via=Via.HTTP)
    left = await expiry(store, "acme", THREAD)
    assert left is not None and 590 < left <= 600
    # The thread's next run replaces it.
    second = [dict(NESTED[0], runId="run-2")]
    await pub.publish_run("acme", THREAD, "run-2", second, via=Via.HTTP)
    assert await index(store).latest_run("acme", THREAD) == LatestRun("run-2", ANY_TIME)
    assert await expiry(store, "acme", THREAD) is None


async def test_without_a_grace_period_the_entry_lives_with_the_feed(store: Backend) -> None:
    pub = publisher(store, ttl=0)
    await pub.publish_run("acme", THREAD, RUN, NESTED, via=Via.HTTP)
    assert await index(store).latest_run("acme", THREAD) == LatestRun(RUN, ANY_TIME)
    assert await expiry(store, "acme", THREAD) is None


class BrokenIndex(MemoryStore):
    """A latest-run index that fails (its live-run index works)."""

    async def record_run(self, tenant: str, thread_id: str, run_id: str, at: float) -> None:
        raise Unavailable("redis unavailable during record_run")

    async def latest_run(self, tenant: str, thread_id: str) -> LatestRun | None:
        raise Unavailable("redis unavailable during latest_run")

    async def expire_run(self, tenant: str, thread_id: str, run_id: str, seconds: float) -> None:
        raise Unavailable("redis unavailable during expire_run")


async def test_a_failing_index_does_not_fail_the_publish() -> None:
    # The events are appended before the index is written: failing the request would
    # make a client without an Idempotency-Key append them twice on its retry.
    backend = memory_backend()
    pub = publisher(backend, runs=BrokenIndex())
    cursors = await pub.publish_run("acme", THREAD, RUN, NESTED, via=Via.HTTP)
    assert len(cursors) == len(NESTED)
    state = await backend.feeds.state(run_feed("acme", THREAD, RUN))
    assert state is not None and state.head == len(NESTED)


async def test_a_sparktide_run_is_its_threads_latest_too(store: Backend) -> None:
    # SparkTide publishes into the run feed run/<conversationId>/<runId>: its first
    # event starts the run, its end starts the grace period, as for AG-UI.
    from tests.dialects.sparktide_runs import CONVERSATION, EVERYTHING
    from tests.dialects.sparktide_runs import RUN as SPARK_RUN

    pub = publisher(store)
    await pub.publish_sparktide("acme", EVERYTHING[:2], via=Via.HTTP)
    assert await index(store).latest_run("acme", CONVERSATION) == LatestRun(SPARK_RUN, ANY_TIME)
    assert await expiry(store, "acme", CONVERSATION) is None
    await pub.publish_sparktide("acme", EVERYTHING[2:], via=Via.HTTP)
    left = await expiry(store, "acme", CONVERSATION)
    assert left is not None and 590 < left <= 600
