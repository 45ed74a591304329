"""The hub as the store's sink (``Hub.on_items``, ``Hub.on_gap``): a pushed batch is
offered to every live subscription, and ``on_items`` answers how many subscriptions it
reached, which the store's hold policy weighs (tests/store/test_hold.py), with every
batch of one push together (``gateway.store.interfaces.push``).  Pure logic: subscriptions
write into transports that keep what they get."""

from __future__ import annotations

import pytest

from gateway.cursor import Cursor
from gateway.fanout.hub import Audience, Hub
from gateway.fanout.outbox import Outbox
from gateway.fanout.subscription import Subscription, SubState
from gateway.feed import FeedKey, StoredItem, team_feed
from gateway.metrics import Metrics
from gateway.net.server import SocketWriter
from gateway.store.hold import HoldPolicy
from gateway.store.interfaces import Batch, push
from gateway.store.memory import MemoryStore
from gateway.wire.formats import TEAM_WS
from tests.support import events as ev


class Kept:
    """A transport whose kernel takes every write at once (unless told it ``held``
    bytes already); keeps what was written."""

    def __init__(self, fail: bool = False) -> None:
        self.written: list[bytes] = []
        self.fail = fail
        self.held = 0

    def get_write_buffer_size(self) -> int:
        return self.held

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        if self.fail:
            raise RuntimeError("a bug under the write")
        self.written.append(data)


class Stream:
    def __init__(self, transport: Kept) -> None:
        self.transport = transport

    def writer(self) -> SocketWriter:
        return SocketWriter(self.transport, chunked=False)  # type: ignore[arg-type]


def hub_with(subscribers: int, *, failing: int = 0) -> tuple[Hub, FeedKey, list[Kept]]:
    store = MemoryStore()
    hub = Hub(store, store, Metrics())
    return hub, *follow(hub, subscribers, failing=failing)


def follow(hub: Hub, subscribers: int, *, failing: int = 0) -> tuple[FeedKey, list[Kept]]:
    """A feed with ``subscribers`` live subscriptions on the hub."""
    feed = team_feed("acme", ev.team_id())
    audience = hub.audiences[feed] = Audience(feed, Cursor(7, 0))
    transports = []
    for index in range(subscribers):
        transport = Kept(fail=index < failing)
        sub = Subscription(feed, TEAM_WS, Cursor(7, 0))
        sub.outbox = Outbox(Stream(transport).writer(), 1 << 20, hub.budget)
        sub.state = SubState.LIVE
        audience.subs.add(sub)
        transports.append(transport)
    return feed, transports


def batch(*offsets: int) -> Batch:
    payload = b'{"source":{"kind":"team"},"event":{}}'
    return Batch([StoredItem(7, offset, payload, "c") for offset in offsets], appended=1.0)


def hold_after(hub: Hub, batches: dict[FeedKey, Batch]) -> float:
    """Push ``batches`` into the hub as a store does; the linger the policy asks then."""
    return HoldPolicy(0.002).lingers(*push(hub, batches))


def test_a_batch_handed_over_reaches_every_live_subscriber_once() -> None:
    hub, feed, transports = hub_with(3)
    assert hub.on_items(feed, batch(1, 2)) == 3
    hold = hold_after(hub, {feed: batch(3)})
    assert hold == pytest.approx(0.002)  # few subscribers per item: linger
    assert hub.audiences[feed].position == Cursor(7, 3)
    for transport in transports:
        assert transport.written[0].count(b'"offset":') == 2  # both items in one write
    # The next batch continued; one that repeats what was delivered writes nothing.
    hold_after(hub, {feed: batch(3)})
    assert all(len(t.written) == 2 for t in transports)


def test_a_batch_for_many_subscribers_asks_for_no_hold() -> None:
    hub, feed, transports = hub_with(HoldPolicy.LINGER_BELOW)
    assert hold_after(hub, {feed: batch(1)}) == 0.0
    assert all(len(t.written) == 1 for t in transports)


def test_the_hold_follows_all_the_batches_handed_over_together() -> None:
    # As after a read: a busy feed handed over with a quiet one is not held back for
    # it (offers per item over all of them decide).
    hub, busy, _ = hub_with(HoldPolicy.LINGER_BELOW * 2)
    quiet, _ = follow(hub, 1)
    assert hold_after(hub, {busy: batch(1), quiet: batch(1)}) == 0.0
    other, _ = follow(hub, 1)
    assert hold_after(hub, {quiet: batch(2), other: batch(1)}) == pytest.approx(0.002)


def test_a_feed_no_longer_followed_is_left_alone() -> None:
    hub, _, transports = hub_with(2)
    unfollowed = team_feed("acme", ev.team_id())
    assert hub.on_items(unfollowed, batch(1)) == 0
    assert hold_after(hub, {unfollowed: batch(1)}) == 0.0
    assert all(t.written == [] for t in transports)


def test_a_dispatch_that_fails_stays_in_the_hub() -> None:
    # The store calls this from its I/O callback: a bug must not reach it.
    hub, feed, _ = hub_with(2, failing=2)
    assert hold_after(hub, {feed: batch(1)}) == pytest.approx(0.002)


def test_a_subscription_its_owner_closes_during_a_dispatch_does_not_stop_it() -> None:
    # A refused write takes a subscription off the live path and tells its owner at
    # once; an owner whose connection is already gone closes it on the spot, which
    # takes it out of the audience while the dispatch goes round the others.
    hub, feed, transports = hub_with(4)
    for sub in hub.audiences[feed].subs:
        if sub.outbox is not None and sub.outbox._write == transports[0].write:
            transports[0].held = 10**9  # over its bound: the write is refused
            sub.notify = hub.close
    hub.on_items(feed, batch(1))
    assert [len(t.written) for t in transports] == [0, 1, 1, 1]
    assert len(hub.audiences[feed].subs) == 3
