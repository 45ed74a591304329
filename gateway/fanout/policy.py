"""The slow-consumer policy: how often a connection may fall behind before it is cut off."""

from __future__ import annotations

#: The slow-consumer policy: a connection whose subscriptions overflow more than
#: ``MAX_CATCHUPS`` times within ``CATCHUP_WINDOW_SECONDS`` is disconnected as too slow
#: (the client resumes from its last cursors); before that each overflow is followed by
#: a catch-up from the store.
MAX_CATCHUPS = 3
CATCHUP_WINDOW_SECONDS = 60.0


class Overflows:
    """One connection's recent overflows, for the slow-consumer policy."""

    __slots__ = ("_times",)

    def __init__(self) -> None:
        self._times: list[float] = []

    def too_many(self, now: float) -> bool:
        """Record an overflow at ``now``; True when the connection must be cut off."""
        self._times = [t for t in self._times if now - t < CATCHUP_WINDOW_SECONDS]
        self._times.append(now)
        return len(self._times) > MAX_CATCHUPS
