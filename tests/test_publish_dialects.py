"""``gateway.publish_dialects`` on the embedded store, without sockets: the per-run locks,
the SparkTide state rebuilt from a run feed, and what happens when another writer gets
between a plan and its append."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from gateway.agui.events import encode
from gateway.cursor import Cursor
from gateway.dialects import a2ui
from gateway.dialects.sparktide import RunState
from gateway.dialects.sparktide_agui import plan
from gateway.errors import IdempotencyKeyReused, InvalidRequest, Unavailable
from gateway.fanout.foldcache import FoldCache
from gateway.feed import AppendResult, FeedKey, NewItem, run_feed
from gateway.limits import Charge
from gateway.publish_dialects import REPLANS, DialectRuns, RunLocks
from gateway.store.interfaces import RunLease
from gateway.store.memory import MemoryStore
from tests.dialects.a2ui_runs import create, data
from tests.dialects.sparktide_runs import CONVERSATION, EVERYTHING, RUN, event

pytestmark = pytest.mark.anyio

FEED = run_feed("acme", CONVERSATION, RUN)


class CountingStore(MemoryStore):
    """Counts key lookups; optionally appends an item of its own before the next append
    (another writer getting between a plan and its append)."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0
        self.cut_in: list[NewItem] = []
        #: Cut in before every append, not only the next one.
        self.always = False

    async def offset_of(self, feed: FeedKey, key: str) -> int | None:
        self.lookups += 1
        return await super().offset_of(feed, key)

    async def append(
        self,
        feed: FeedKey,
        items: Sequence[NewItem],
        *,
        retention: int,
        align: int = 0,
        expect: Cursor | None = None,
        charge: Charge | None = None,
        ends: bool = False,
        lease: RunLease | None = None,
    ) -> AppendResult:
        if self.cut_in:
            other = self.cut_in if self.always else self.cut_in[:]
            if not self.always:
                self.cut_in = []
            await super().append(feed, other, retention=retention, align=align)
        return await super().append(
            feed,
            items,
            retention=retention,
            align=align,
            expect=expect,
            charge=charge,
            ends=ends,
            lease=lease,
        )


def runs(store: MemoryStore) -> DialectRuns:
    return DialectRuns(
        store, FoldCache(store, store), run_retention=100_000, run_finished_ttl=3600.0
    )


async def test_a_lock_lives_only_while_someone_holds_or_waits_for_it() -> None:
    locks = RunLocks()
    order: list[str] = []
    async with anyio.create_task_group() as tg:

        async def publish(name: str, hold: anyio.Event | None) -> None:
            async with locks.hold(FEED):
                order.append(f"{name} in")
                if hold is not None:
                    await hold.wait()
                order.append(f"{name} out")

        release = anyio.Event()
        tg.start_soon(publish, "first", release)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(publish, "second", None)
        await anyio.wait_all_tasks_blocked()
        assert len(locks) == 1 and order == ["first in"]
        release.set()
    assert order == ["first in", "first out", "second in", "second out"]
    assert len(locks) == 0


async def test_a_publish_that_waits_too_long_for_its_run_is_unavailable() -> None:
    locks = RunLocks()
    release = anyio.Event()

    async def holder() -> None:
        async with locks.hold(FEED):
            await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(Unavailable, match="busy"):
            async with locks.hold(FEED, wait=0.01):
                pass
        assert len(locks) == 1
        release.set()
    assert len(locks) == 0


async def test_the_rebuilt_state_is_the_kept_one_and_costs_a_few_lookups() -> None:
    store = CountingStore()
    dialects = runs(store)
    deltas = [event("text.delta", i, {"text": "x"}) for i in range(2, 301)]
    await dialects.sparktide("acme", [EVERYTHING[0], *deltas])
    kept = dialects._states[FEED][1]
    assert kept == plan(RunState(), [EVERYTHING[0], *deltas], {})[0]
    for body, lookups in (
        (event("text.delta", 301, {"text": "next"}), 2),  # n and n - 1
        # A retry of 300 (301 is held too): 300, 301, 303, 302, then the held event.
        (deltas[-1], 5),
        (event("text.delta", 310, {"text": "gap"}), None),
    ):
        dialects._states.clear()
        store.lookups = 0
        try:
            await dialects.sparktide("acme", body)
        except InvalidRequest as exc:
            assert "leaves a gap: the message's next sequence is 302" in exc.message
        if lookups is not None:
            assert store.lookups == lookups, body
    # A gap is found by galloping from sequence 1: logarithmic in the run's length.
    assert store.lookups < 3 + 2 * 10


CUSTOM = NewItem(None, b'{"type":"CUSTOM","name":"x","value":1}')


async def test_another_writer_between_plan_and_append_makes_it_plan_again() -> None:
    store = CountingStore()
    dialects = runs(store)
    await dialects.sparktide("acme", EVERYTHING[:3])
    before = await store.state(FEED)
    assert before is not None and FEED in dialects._states
    store.cut_in = [CUSTOM]
    cursors, appended = await dialects.sparktide("acme", EVERYTHING[3])
    # The first plan was refused (its head moved): nothing of it was written; the
    # second, from the head after the other writer's item, was appended after it.
    assert appended == 1 and dialects.replans == 1
    state = await store.state(FEED)
    assert state is not None and state.head == before.head + 2
    assert cursors == [state.head_cursor]
    [theirs, ours] = await store.read(FEED, before.head_cursor, 10)
    assert theirs.data == CUSTOM.data and ours.cursor == state.head_cursor
    await dialects.sparktide("acme", EVERYTHING[4])
    assert dialects._states[FEED][1].sequence == 5


async def test_a2ui_plans_again_when_another_writer_got_in_first() -> None:
    store = CountingStore()
    dialects = runs(store)
    await dialects.sparktide("acme", EVERYTHING[:3])
    before = await store.state(FEED)
    assert before is not None
    # Another writer creates surface t between our plan and our append (its items are
    # what the translation derives for it).  Planned again, our createSurface of t now
    # breaks the registry rule: 400, and nothing of ours is appended.
    fold = await FoldCache(store, store).at(FEED, before.head_cursor)
    derived = a2ui.derive(a2ui.check_body(create("t"), live=a2ui.live_surfaces(fold)), fold)
    store.cut_in = [NewItem(None, encode(e)) for e in derived]
    with pytest.raises(InvalidRequest):
        await dialects.a2ui("acme", CONVERSATION, RUN, create("t"))
    assert dialects.replans == 1
    after = await store.state(FEED)
    assert after is not None and after.head == before.head + len(derived)


async def test_a_run_other_writers_never_leave_alone_is_unavailable_with_nothing_appended() -> None:
    store = CountingStore()
    dialects = runs(store)
    await dialects.sparktide("acme", EVERYTHING[:3])
    store.cut_in, store.always = [CUSTOM], True
    before = await store.state(FEED)
    with pytest.raises(Unavailable, match="nothing was appended"):
        await dialects.sparktide("acme", EVERYTHING[3])
    store.always, store.cut_in = False, []
    after = await store.state(FEED)
    assert before is not None and after is not None
    assert after.head == before.head + REPLANS, "only the other writer's items"
    assert dialects.replans == REPLANS


async def test_a2ui_keeps_the_sparktide_state_of_the_run_it_shares() -> None:
    store = CountingStore()
    dialects = runs(store)
    await dialects.sparktide("acme", EVERYTHING[:3])
    before = dialects._states[FEED][1]
    cursors, appended = await dialects.a2ui(
        "acme", CONVERSATION, RUN, [create("s"), data("s", "/a", 1)]
    )
    assert appended == 2
    at, state = dialects._states[FEED]
    assert at == cursors[-1] and state == before
    store.lookups = 0
    await dialects.sparktide("acme", EVERYTHING[3])
    assert store.lookups == 0, "the kept state answered: no rebuild"


async def test_held_events_of_a_long_derivation_are_read_in_pages() -> None:
    dialects = runs(MemoryStore())
    # 40 open steps: message.completed derives more items than one page.
    opened = [
        event("model.started", i, {**EVERYTHING[2]["data"], "invocationId": f"m{i}"})
        for i in range(2, 42)
    ]
    done = event("message.completed", 42, {"status": "SUCCEEDED"})
    first, _ = await dialects.sparktide("acme", [EVERYTHING[0], *opened, done])
    dialects._states.clear()
    again, appended = await dialects.sparktide("acme", done)
    assert (again, appended) == ([first[-1]], 0)


async def test_a_sequence_another_writer_took_first() -> None:
    store = CountingStore()
    dialects = runs(store)
    await dialects.sparktide("acme", EVERYTHING[:3])
    state = dialects._states[FEED][1]

    def derived_items(event: dict[str, object]) -> list[NewItem]:
        _, [planned] = plan(state, [event], {}, array=False)
        pairs = zip(planned.item_keys, planned.derived, strict=True)
        return [NewItem(k, encode(e)) for k, e in pairs]

    # Another writer appends sequence 4 with another body after our plan: answered as if
    # it had come first.
    theirs = {**EVERYTHING[3], "traceId": "theirs"}
    store.cut_in = derived_items(theirs)
    with pytest.raises(IdempotencyKeyReused, match="already has a different event at sequence 4"):
        await dialects.sparktide("acme", EVERYTHING[3])
    # The same body: their items are ours, answered with their cursors.
    state = plan(state, [theirs], {})[0]
    items = derived_items(EVERYTHING[4])
    store.cut_in = list(items)
    before = await store.state(FEED)
    cursors, _ = await dialects.sparktide("acme", EVERYTHING[4])
    after = await store.state(FEED)
    assert before is not None and after is not None
    assert after.head == before.head + len(items), "appended once"
    assert cursors == [after.head_cursor]
