"""The hold policy (``gateway.store.hold``): when a store lets live notifications
gather, and for how long.  Pure: the tests pass the time."""

from __future__ import annotations

import pytest

from gateway.store.hold import HoldPolicy


def test_the_linger_follows_items_that_went_to_few_subscriptions_each() -> None:
    policy = HoldPolicy(0.002)
    assert policy.lingers(2, 2 * 3) == pytest.approx(0.002)  # few subscribers per item
    assert policy.lingers(1, HoldPolicy.LINGER_BELOW) == 0.0  # many: no linger
    assert policy.lingers(0, 0) == 0.0  # nothing pushed
    # All the batches of one push together: a busy feed pushed with a quiet one is
    # not held back for it (offers per item over all of them decide) ...
    busy, quiet = HoldPolicy.LINGER_BELOW * 2, 1
    assert policy.lingers(2, busy + quiet) == 0.0
    # ... and quiet feeds together linger.
    assert policy.lingers(2, quiet + quiet) == pytest.approx(0.002)
    assert HoldPolicy(0).lingers(2, 2) == 0.0  # a linger of 0 disables it


def test_a_hold_needs_the_linger_the_rate_and_a_small_read() -> None:
    policy = HoldPolicy(0.005)
    policy.HOLD_RATE = 0
    policy.HOLD_TARGET = float("inf")
    assert policy.hold(1, 1) == pytest.approx(0.005)
    assert policy.hold(1, 1, size=HoldPolicy.LARGE_READ - 1) == pytest.approx(0.005)
    # A large read: more is likely waiting, read on at once.
    assert policy.hold(1, 1, size=HoldPolicy.LARGE_READ) == 0.0
    # Items that went to many subscriptions: no hold whatever the rate.
    assert policy.hold(1, HoldPolicy.LINGER_BELOW) == 0.0
    # The default rule: nothing has arrived yet, the rate is far under HOLD_RATE.
    assert HoldPolicy(30).hold(1, 1) == 0.0


def test_a_hold_is_taken_only_when_messages_come_often_enough() -> None:
    policy = HoldPolicy()
    hold = 0.005

    def worth(received: int, now: float) -> bool:
        policy.arrived(received, now)
        return policy.hold_length(hold) > 0

    # Sparse: one message every 20 ms; a 5 ms hold would gather nothing.
    assert not any(worth(1, 100 + 0.020 * k) for k in range(20))
    # One every 0.4 ms: a hold gathers about twelve; held once they have come for a
    # few ms (the first few could be a pair that happened to come together).
    dense = [worth(1, 200 + 0.0004 * k) for k in range(30)]
    assert not any(dense[:5]) and all(dense[15:])
    # Held steadily: three messages every 2.1 ms (about 1,400 a second).
    assert all(worth(3, 200.02 + 0.0021 * k) for k in range(20))
    # Then the rate falls to one every 10 ms: holding stops within a few.
    falling = [worth(1, 200.07 + 0.010 * k) for k in range(20)]
    assert falling[0] and not any(falling[3:])
    # Pairs of messages 0.1 ms apart, a pair every 10 ms (200 a second): never held.
    assert not any(worth(1, 300 + 0.010 * k + 0.0001 * j) for k in range(20) for j in (0, 1))


def test_a_hold_lasts_as_long_as_its_target_takes_to_come_at_most_the_linger() -> None:
    policy = HoldPolicy()
    linger = 0.005
    clock = [300.0]

    def length(per_second: float) -> float:
        # A steady rate: every hand-over brings one message, 1/per_second after the
        # last, long enough for the estimate to settle (ten windows).
        clock[0] += 10.0  # the last rate is forgotten
        for _ in range(int(10 * per_second * policy.RATE_WINDOW) + 10):
            clock[0] += 1 / per_second
            policy.arrived(1, clock[0])
        # Read just after a message, the estimate counts it whole: a little high
        # when messages are few per window (226 for 200 a second).
        assert policy.rate == pytest.approx(per_second, rel=0.15)
        return policy.hold_length(linger)

    # 1,000 a second: the whole linger gathers 5 (under the target of 10): all of it.
    assert length(1_000) == pytest.approx(linger)
    # 4,000 and 50,000 a second: held only while the target comes (2.5 ms, 0.2 ms).
    assert length(4_000) == pytest.approx(0.0025, rel=0.06)
    assert length(50_000) == pytest.approx(0.0002, rel=0.06)
    # 500 and 200 a second: under HOLD_RATE (600), no hold.
    assert length(500) == 0.0
    assert length(200) == 0.0
