"""The feed-log contract (D1), the same suite on the embedded log and on Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import pytest

from gateway.cursor import Cursor
from gateway.errors import HeadMoved, IdempotencyKeyReused
from gateway.feed import FeedKey, NewItem, team_feed
from gateway.store.interfaces import Backend, Joined, Positions
from gateway.store.last_seen import chain_next
from gateway.store.redis import redis_backend
from gateway.store.redis.live import _after, _announced
from tests.support import events as ev
from tests.support.backends import lose, redis_feeds
from tests.support.live import read_new

pytestmark = pytest.mark.anyio


def feed() -> FeedKey:
    return team_feed("acme", ev.team_id())


def items(n: int, tag: str = "x") -> list[NewItem]:
    return [NewItem(f"{tag}-{ev.new_id()}", f'"{tag}{i}"'.encode()) for i in range(n)]


async def test_offsets_are_contiguous_from_one(store: Backend) -> None:
    f = feed()
    assert await store.feeds.state(f) is None
    r1 = await store.feeds.append(f, items(3), retention=100)
    assert r1.new_epoch
    epoch = r1.state.epoch
    assert r1.cursors == [Cursor(epoch, 1), Cursor(epoch, 2), Cursor(epoch, 3)]
    r2 = await store.feeds.append(f, items(2), retention=100)
    assert not r2.new_epoch
    assert r2.cursors == [Cursor(epoch, 4), Cursor(epoch, 5)]
    state = await store.feeds.state(f)
    assert state is not None
    assert (state.epoch, state.head, state.first) == (epoch, 5, 1)


async def test_chain_is_sha1_over_previous_chain_and_data(store: Backend) -> None:
    f = feed()
    new = items(3)
    await store.feeds.append(f, new, retention=100)
    chain = ""
    got = await store.feeds.read(f, Cursor((await store.feeds.state(f)).epoch, 0), 10)  # type: ignore[union-attr]
    for item, stored in zip(new, got, strict=True):
        chain = chain_next(chain, item.data)
        assert stored.chain == chain and stored.data == item.data


async def test_retry_returns_original_cursor_and_reuse_is_refused(store: Backend) -> None:
    f = feed()
    first = await store.feeds.append(f, items(2), retention=100)
    a = NewItem("same-key", b'"a"')
    [ca] = (await store.feeds.append(f, [a], retention=100)).cursors
    again = await store.feeds.append(f, [a], retention=100)
    assert again.cursors == [ca]
    assert again.state.head == 3
    with pytest.raises(IdempotencyKeyReused, match="item 1"):
        await store.feeds.append(f, [*items(1), NewItem("same-key", b'"b"')], retention=100)
    state = await store.feeds.state(f)
    assert state is not None and state.head == 3  # all or nothing
    assert first.state.epoch == state.epoch


async def test_an_append_that_expects_a_head_writes_only_there(store: Backend) -> None:
    f = feed()
    # Cursor(0, 0): the feed must not exist yet.
    first = await store.feeds.append(f, items(2), retention=100, expect=Cursor(0, 0))
    epoch = first.state.epoch
    with pytest.raises(HeadMoved):
        await store.feeds.append(f, items(1), retention=100, expect=Cursor(0, 0))
    with pytest.raises(HeadMoved):  # an older head: someone appended since
        await store.feeds.append(f, items(1), retention=100, expect=Cursor(epoch, 1))
    state = await store.feeds.state(f)
    assert state is not None and state.head == 2, "nothing written by the refused ones"
    again = items(1)
    r = await store.feeds.append(f, again, retention=100, expect=Cursor(epoch, 2))
    assert r.cursors == [Cursor(epoch, 3)]
    # A retry of items already held is answered whatever the head.
    retry = await store.feeds.append(f, again, retention=100, expect=Cursor(epoch, 1))
    assert retry.cursors == [Cursor(epoch, 3)]
    # A feed that lost its data moves to a new epoch: no plan made before holds.
    await lose(store, f)
    with pytest.raises(HeadMoved):
        await store.feeds.append(f, items(1), retention=100, expect=Cursor(epoch, 3))


async def test_append_many_is_one_step_per_feed(store: Backend) -> None:
    a, b, c = feed(), feed(), feed()
    earlier = await store.feeds.append(c, [NewItem("taken", b'"c0"')], retention=100)
    results = await store.feeds.append_many(
        [(a, items(2, "a")), (b, items(1, "b")), (c, [NewItem("taken", b'"other"')])],
        retention=100,
    )
    ra, rb, rc = results
    assert not isinstance(ra, Exception) and not isinstance(rb, Exception)
    assert ra.cursors == [Cursor(ra.state.epoch, 1), Cursor(ra.state.epoch, 2)]
    assert rb.cursors == [Cursor(rb.state.epoch, 1)]
    assert isinstance(rc, IdempotencyKeyReused)  # that feed alone failed
    got = await store.feeds.read(a, Cursor(ra.state.epoch, 0), 10)
    assert [i.data for i in got] == [b'"a0"', b'"a1"']
    state = await store.feeds.state(c)
    assert state is not None and state.head == earlier.state.head == 1
    assert await store.feeds.append_many([], retention=100) == []


async def test_retention_trims_oldest_and_forgets_their_keys(store: Backend) -> None:
    f = feed()
    batch = items(5)
    r = await store.feeds.append(f, batch, retention=3)
    epoch = r.state.epoch
    state = await store.feeds.state(f)
    assert state is not None and (state.head, state.first) == (5, 3)
    got = await store.feeds.read(f, Cursor(epoch, 0), 10)
    assert [i.offset for i in got] == [3, 4, 5]
    # A trimmed item's key is forgotten: publishing it again appends it anew.
    again = await store.feeds.append(f, [batch[0]], retention=3)
    assert again.cursors == [Cursor(epoch, 6)]
    # A retained one still deduplicates.
    assert (await store.feeds.append(f, [batch[4]], retention=3)).cursors == [Cursor(epoch, 5)]
    assert (await store.feeds.state(f)).epoch == epoch  # type: ignore[union-attr]


async def test_read_pages_within_one_epoch(store: Backend) -> None:
    f = feed()
    r = await store.feeds.append(f, items(7), retention=100)
    epoch = r.state.epoch
    page1 = await store.feeds.read(f, Cursor(epoch, 0), 3)
    page2 = await store.feeds.read(f, page1[-1].cursor, 3)
    page3 = await store.feeds.read(f, page2[-1].cursor, 3)
    assert [i.offset for i in page1 + page2 + page3] == [1, 2, 3, 4, 5, 6, 7]
    assert await store.feeds.read(f, Cursor(epoch, 7), 3) == []
    assert await store.feeds.read(f, Cursor(epoch - 1, 0), 3) == []


async def test_a_join_reads_its_first_page_with_the_state(store: Backend) -> None:
    f = feed()
    assert await store.feeds.joined(f, None, 3) == Joined(None, None, [])
    r = await store.feeds.append(f, items(7), retention=5)  # retains 3..7
    epoch = r.state.epoch
    state = await store.feeds.state(f)
    assert state is not None and (state.head, state.first) == (7, 3)
    expect = await store.feeds.read(f, Cursor(epoch, 2), 3)

    def offsets(j: Joined) -> list[int]:
        return [i.offset for i in j.items]

    # Without a cursor: from the first retained item, as many as asked.
    j = await store.feeds.joined(f, None, 3)
    assert (j.state, j.after, j.items) == (state, Cursor(epoch, 2), expect)
    # After a cursor: what a read from there gives, up to the head.
    j = await store.feeds.joined(f, Cursor(epoch, 4), 10)
    assert (j.after, offsets(j)) == (Cursor(epoch, 4), [5, 6, 7])
    j = await store.feeds.joined(f, Cursor(epoch, 7), 10)
    assert (j.after, j.items) == (Cursor(epoch, 7), [])
    # A trimmed cursor reads what a read reads (the join then restarts).
    j = await store.feeds.joined(f, Cursor(epoch, 1), 2)
    assert (j.after, offsets(j)) == (Cursor(epoch, 1), [3, 4])
    # Another epoch, or past the head: the state alone.
    for after in (Cursor(epoch - 1, 3), Cursor(epoch + 1, 0), Cursor(epoch, 8)):
        j = await store.feeds.joined(f, after, 10)
        assert (j.state, j.after, j.items) == (state, None, [])


async def test_data_loss_starts_a_larger_epoch(store: Backend) -> None:
    f = feed()
    old = await store.feeds.append(f, items(3), retention=100)
    await lose(store, f)
    assert await store.feeds.state(f) is None
    new = await store.feeds.append(f, items(1), retention=100)
    assert new.new_epoch
    assert new.state.epoch > old.state.epoch
    assert new.cursors == [Cursor(new.state.epoch, 1)]
    # Nothing of the old epoch is readable as if it were the new one.
    assert await store.feeds.read(f, Cursor(old.state.epoch, 0), 10) == []


async def test_host_flag_comes_from_the_first_item_only(store: Backend) -> None:
    host = feed()
    await store.feeds.append(
        host, [NewItem("h", b'"h"', host_opening=True), *items(1)], retention=100
    )
    assert (await store.feeds.state(host)).host  # type: ignore[union-attr]
    lead = feed()
    await store.feeds.append(lead, items(1), retention=100)
    await store.feeds.append(lead, [NewItem("h", b'"h"', host_opening=True)], retention=100)
    assert not (await store.feeds.state(lead)).host  # type: ignore[union-attr]


async def test_read_new_follows_many_feeds_and_epoch_changes(store: Backend) -> None:
    f1, f2 = feed(), feed()
    r1 = await store.feeds.append(f1, items(2), retention=100)
    r2 = await store.feeds.append(f2, items(1), retention=100)
    positions = {f1: Cursor(r1.state.epoch, 1), f2: r2.state.head_cursor}
    got = await read_new(store.live, positions, count=100, block_ms=100)
    assert list(got) == [f1]
    assert [i.offset for i in got[f1].items] == [2]
    # Blocks until something arrives on any followed feed.
    positions = {f1: Cursor(r1.state.epoch, 2), f2: r2.state.head_cursor}
    result: dict[FeedKey, list[int]] = {}

    async def reader() -> None:
        batches = await read_new(store.live, positions, count=100, block_ms=5_000)
        result.update({k: [i.offset for i in b.items] for k, b in batches.items()})

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.sleep(0.05)  # let the read block (correctness does not depend on it)
            await store.feeds.append(f2, items(1), retention=100)
    assert result == {f2: [2]}
    # A newer epoch's items come after the old position.
    await lose(store, f1)
    r3 = await store.feeds.append(f1, items(2), retention=100)
    got = await read_new(store.live, {f1: Cursor(r1.state.epoch, 2)}, count=100, block_ms=100)
    assert [(i.epoch, i.offset) for i in got[f1].items] == [
        (r3.state.epoch, 1),
        (r3.state.epoch, 2),
    ]


class CountedPositions(Positions):
    """Positions that count the passes over their feeds (``__iter__``)."""

    def __init__(self, positions: dict[FeedKey, Cursor]) -> None:
        self.positions = positions
        self.generation = 0
        self.passes = 0

    def __getitem__(self, feed: FeedKey) -> Cursor:
        return self.positions[feed]

    def __iter__(self) -> Iterator[FeedKey]:
        self.passes += 1
        return iter(self.positions)

    def __len__(self) -> int:
        return len(self.positions)

    def __contains__(self, feed: object) -> bool:
        return feed in self.positions


async def test_read_new_follows_the_feeds_a_new_generation_adds_and_removes(
    store: Backend, node_redis: tuple[str | None, str]
) -> None:
    f1, f2, f3 = feed(), feed(), feed()
    heads = {f: (await store.feeds.append(f, items(1), retention=100)).state for f in (f1, f2, f3)}
    positions = CountedPositions({f1: heads[f1].head_cursor, f2: heads[f2].head_cursor})
    assert await read_new(store.live, positions, count=100, block_ms=100) == {}

    async def read() -> dict[FeedKey, list[int]]:
        got = await read_new(store.live, positions, count=100, block_ms=2_000)
        for f, batch in got.items():
            if batch.items:
                positions.positions[f] = batch.items[-1].cursor
        return {f: [i.offset for i in b.items] for f, b in got.items()}

    await store.feeds.append(f1, items(1), retention=100)
    assert await read() == {f1: [2]}
    passes = positions.passes
    await store.feeds.append(f2, items(1), retention=100)
    assert await read() == {f2: [2]}
    if node_redis[0] is not None:
        # The same generation: the same feeds, no pass over them to find out.
        assert positions.passes == passes
    # A new generation: f3 in, f1 out.
    positions.positions[f3] = heads[f3].head_cursor
    del positions.positions[f1]
    positions.generation += 1
    await store.live.wake()
    await store.feeds.append(f1, items(1), retention=100)
    await store.feeds.append(f3, items(1), retention=100)
    got: dict[FeedKey, list[int]] = {}
    with anyio.fail_after(10):
        while f3 not in got:
            got.update(await read())
    assert got == {f3: [2]}
    await store.feeds.append(f1, items(1), retention=100)
    await store.feeds.append(f2, items(1), retention=100)
    with anyio.fail_after(10):
        while f2 not in got:
            got.update(await read())
    assert f1 not in got and got[f2] == [3]


async def test_reads_carry_the_append_time(store: Backend) -> None:
    f = feed()
    r = await store.feeds.append(f, items(2), retention=100)
    # Redis: the first read of a feed is an XREAD (the stream entries' t field) ...
    got = await read_new(store.live, {f: Cursor(r.state.epoch, 0)}, count=100, block_ms=100)
    first = got[f].appended
    assert abs(first - time.time()) < 60  # wall-clock seconds (Redis TIME or ours)
    # ... the next ones take the published message (its header's append time).
    await store.feeds.append(f, items(1), retention=100)
    got = await read_new(store.live, {f: r.state.head_cursor}, count=100, block_ms=2_000)
    assert [i.offset for i in got[f].items] == [3]
    assert got[f].appended >= first


def test_announcements_are_read_with_or_without_an_append_time() -> None:
    payload = b"c1 2\nabc2 1\nd"
    items, appended, before = _announced(b"17 4 1700000000.250000 c0\n" + payload)
    assert appended == 1700000000.25
    assert before == "c0"
    assert [(i.epoch, i.offset, i.data, i.chain) for i in items] == [
        (17, 4, b"ab", "c1"),
        (17, 5, b"d", "c2"),
    ]
    # At an epoch's start the chain before is empty, which is not "unknown".
    assert _announced(b"17 1 1.5 \n" + payload)[2] == ""
    # What an older append step published (no chain before; no time either), or an
    # odd time: items still read, and the chain before is unknown.
    for head in (b"17 4\n", b"17 4 soon\n", b"17 4 1.5\n"):
        again, when, unknown = _announced(head + payload)
        assert again == items
        assert when == (1.5 if b"1.5" in head else 0.0)
        assert unknown is None
    # A header alone announces nothing (and is not an error).
    assert _announced(b"17 4 1.5 c3") == ([], 1.5, "c3")
    # Item data is bytes as stored, whatever it holds; only the header lines are text.
    data = "é\n".encode()
    odd = _announced(b"17 4 1.5 c3\nc4 %d\n" % len(data) + data)[0]
    assert [(i.offset, i.data, i.chain) for i in odd] == [(4, data, "c4")]


def test_the_items_after_a_position_name_the_chain_before_the_first_of_them() -> None:
    payload = b"17 4 1.5 c3\nc4 1\nac5 1\nbc6 1\nc"
    fresh, _, continues, before = _after(payload, Cursor(17, 3))
    assert [i.offset for i in fresh] == [4, 5, 6] and continues and before == "c3"
    # Items this node already has are skipped: the chain before is the last skipped one's.
    fresh, _, continues, before = _after(payload, Cursor(17, 5))
    assert [i.offset for i in fresh] == [6] and continues and before == "c5"
    # A gap: not a continuation (the stream is read instead).
    fresh, _, continues, _ = _after(payload, Cursor(17, 2))
    assert [i.offset for i in fresh] == [4, 5, 6] and not continues
    assert _after(payload, Cursor(17, 6))[0] == []
    # Another epoch: a newer one continues only from its first offset; an older one's
    # items are behind any position in a newer epoch.
    fresh, _, continues, before = _after(payload, Cursor(16, 9))
    assert [i.offset for i in fresh] == [4, 5, 6] and not continues
    fresh, _, continues, before = _after(b"17 1 1.5 \nc1 1\na", Cursor(16, 9))
    assert [i.offset for i in fresh] == [1] and continues and before == ""
    assert _after(payload, Cursor(18, 0))[0] == []


async def test_wake_returns_a_blocked_read(store: Backend) -> None:
    f = feed()
    r = await store.feeds.append(f, items(1), retention=100)
    with anyio.fail_after(4):
        async with anyio.create_task_group() as tg:
            done = anyio.Event()

            async def reader() -> None:
                await read_new(store.live, {f: r.state.head_cursor}, count=10, block_ms=30_000)
                done.set()

            tg.start_soon(reader)
            await anyio.sleep(0.05)
            await store.live.wake()
            await done.wait()


async def test_rollback_seen_by_this_node_moves_the_feed_on(
    redis_url: str, redis_prefix: str
) -> None:
    """A node that saw offsets the store no longer has starts a new epoch on append.

    Redis only: the embedded log lives and dies with its node, it cannot roll back.
    """
    store = redis_backend(redis_url, prefix=redis_prefix)
    try:
        await _rollback_seen(store)
    finally:
        await store.aclose()


async def _rollback_seen(store: Backend) -> None:
    f = feed()
    r = await store.feeds.append(f, items(5), retention=100)
    meta, stream, _ = redis_feeds(store).keys(f)
    # Simulate a restore that lost offsets 4 and 5.
    await redis_feeds(store).conn.client.xtrim(stream, minid=f"{r.state.epoch}-0")
    await redis_feeds(store).conn.client.xdel(stream, f"{r.state.epoch}-4", f"{r.state.epoch}-5")
    chain3 = (await store.feeds.read(f, Cursor(r.state.epoch, 2), 1))[0].chain
    await redis_feeds(store).conn.client.hset(meta, mapping={"head": "3", "chain": chain3})
    after = await store.feeds.append(f, items(1), retention=100)
    assert after.new_epoch and after.state.epoch > r.state.epoch
    assert after.cursors == [Cursor(after.state.epoch, 1)]
