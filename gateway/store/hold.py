"""When a store lets live notifications gather before the node reads them: the hold
policy, pure (no clock, no socket; the caller passes the time).

After items went to few subscriptions each (many small feeds), most of a read's work is
its own overhead, so the next read should take several notifications: the store waits
up to the *linger* for more.  A store whose notifications wake the node (Redis
pub/sub) holds them in the kernel meanwhile, but only while they come often enough for
a hold to gather some, and for about as long as a few take to come at the recent rate.
"""

from __future__ import annotations

import math


class HoldPolicy:
    """One node's hold policy; the store feeds it what it pushed and what arrived."""

    #: A push whose items went to fewer subscriptions than this per item asks for the
    #: linger; one that reaches many asks for none (its work is not overhead).
    LINGER_BELOW = 50
    #: Messages a second to the node from which a hold pays: below it, the hold's
    #: timer wake-up and the delay cost more than the wake-ups of a few lone messages
    #: (measured on KVM guests: 2 ms holds lost below ~500 messages a second and won
    #: from ~1,000; 5 ms holds cost as much as none or more at 500 a second and saved
    #: 15% at 1,000).
    HOLD_RATE = 600.0
    #: A hold lasts about as long as this many messages take to come at the recent
    #: rate (at most the linger): more per wake-up saved nothing measurable (at 4,000
    #: messages a second over 1,000 feeds, holds of 2 and 5 ms cost the same per
    #: event), and a shorter hold delays each message less.
    HOLD_TARGET = 10.0
    #: Payload bytes handed over at once past which no hold is taken: a read this
    #: large suggests more is waiting in the socket (the event loop reads at most
    #: 256 KiB at a time), and a hold would slow a backlog down to a read per hold.
    LARGE_READ = 64 * 1024
    #: The time constant of the recent rate, in seconds: a few holds long, so that a
    #: pair of messages that happen to come close together does not read as a fast
    #: stream (each hand-over's own rate did: sparse traffic was held for nothing).
    RATE_WINDOW = 0.02

    def __init__(self, linger: float = 0.002) -> None:
        #: The longest wait, in seconds, after a push to few subscriptions (0: never).
        self.linger = linger
        #: The recent rate of messages per second (see :meth:`arrived`).
        self.rate = 0.0
        self._last = 0.0

    def lingers(self, items: int, offers: int) -> float:
        """Seconds to let more gather after pushing ``items`` that made ``offers``
        (items times subscriptions reached): the linger when they went to fewer than
        :data:`LINGER_BELOW` subscriptions each, else none (0)."""
        if items and offers < self.LINGER_BELOW * items:
            return self.linger
        return 0.0

    def arrived(self, received: int, now: float) -> None:
        """``received`` messages arrived at ``now`` (seconds, monotonic): updates the
        recent rate, a count that decays with :data:`RATE_WINDOW` as its time constant."""
        elapsed = max(now - self._last, 0.0)
        self._last = now
        window = self.RATE_WINDOW
        self.rate = self.rate * math.exp(-elapsed / window) + received / window

    def hold_length(self, limit: float) -> float:
        """Seconds to hold notifications for, at most ``limit``: none (0) while the
        recent rate is under :data:`HOLD_RATE` (sparse traffic is not woken twice per
        message), else the time :data:`HOLD_TARGET` messages take to come at that rate,
        so that denser traffic is held for less."""
        rate = self.rate
        if rate < self.HOLD_RATE or limit <= 0:
            return 0.0
        if rate * limit <= self.HOLD_TARGET:
            return limit
        return self.HOLD_TARGET / rate

    def hold(self, items: int, offers: int, size: int = 0) -> float:
        """Seconds to hold notifications after a push of ``items`` that made ``offers``
        and came in ``size`` payload bytes at once (0: not read from a socket just now):
        :meth:`lingers` bounded by :meth:`hold_length`, and none after a read of
        :data:`LARGE_READ` bytes or more (more is likely waiting: read on at once)."""
        limit = self.lingers(items, offers)
        if not limit or size >= self.LARGE_READ:
            return 0.0
        return self.hold_length(limit)
