"""What this node last saw of each feed: the positions a rollback is noticed against.

Compiled (README, "The compiled hot path"): every append reads and advances it.  Here,
not in :mod:`gateway.store.base`, which stays interpreted (its abstract bases are
combined by the stores).
"""

from __future__ import annotations

from collections import OrderedDict

from gateway.feed import FeedKey, FeedState, Known

#: How many feeds' last-seen positions a node remembers for rollback detection.
KNOWN_FEEDS_LIMIT = 100_000


class KnownPositions:
    """What this node last saw of each feed (epoch, offset, chain), for rollback checks.

    Bounded: the least recently updated feeds are forgotten past ``limit``; a forgotten
    feed is simply not checked until the node sees it again.
    """

    def __init__(self, limit: int = KNOWN_FEEDS_LIMIT) -> None:
        self._limit = limit
        self._known: OrderedDict[FeedKey, Known] = OrderedDict()

    def get(self, feed: FeedKey) -> Known | None:
        return self._known.get(feed)

    def split(self, feed: FeedKey) -> tuple[int, int, str]:
        """``(epoch, offset, chain)`` as the append step takes them; zeros when unknown."""
        known = self._known.get(feed)
        if known is None:
            return 0, 0, ""
        return known.epoch, known.offset, known.chain

    def advance(self, feed: FeedKey, epoch: int, offset: int, chain: str) -> None:
        """Remember a position, unless one at or beyond it is already known."""
        current = self._known.get(feed)
        if current is not None and (current.epoch, current.offset) >= (epoch, offset):
            return
        self._set(feed, Known(epoch, offset, chain))

    def reset(self, feed: FeedKey, state: FeedState) -> None:
        """The feed's state as the store reports it now (after a check or an append)."""
        self._set(feed, Known(state.epoch, state.head, state.chain))

    def forget(self, feed: FeedKey) -> None:
        self._known.pop(feed, None)

    def _set(self, feed: FeedKey, known: Known) -> None:
        self._known[feed] = known
        self._known.move_to_end(feed)
        if len(self._known) > self._limit:
            self._known.popitem(last=False)
