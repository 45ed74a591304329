"""What this node last saw of each feed: the positions a rollback is noticed against.

Compiled (README, "The compiled hot path"): every append reads and advances it.  Here,
not in :mod:`gateway.store.interfaces`, which stays interpreted (its abstract bases are
combined by the stores).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

from gateway.feed import FeedKey, FeedState, Known, StoredItem

#: How many feeds' last-seen positions a node remembers for rollback detection.
KNOWN_FEEDS_LIMIT = 100_000


def chain_next(previous: str, data: bytes) -> str:
    """The chain value after an item (the Lua append step computes the same)."""
    return hashlib.sha1(previous.encode("ascii") + data).hexdigest()


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

    def continues(
        self, feed: FeedKey, items: Sequence[StoredItem], before: str | None = None
    ) -> bool:
        """Whether ``items`` (one feed's, in offset order) agree with what this node saw
        of ``feed``; if they do, the newest of them is remembered.

        An item at the known offset must carry the known chain value, and the item
        right after it must continue that chain.

        ``before``, when given, says that ``items`` are what one message of the append
        step announced after that chain value (``items[0]``'s chain was computed from
        ``before``, each later item's from the item before it in the list): the check
        is then a comparison of ``before``, or of the previous item's chain, with the
        known chain.  It proves what recomputing the hash would, for none of its cost,
        since the one append step computed each chain from exactly that value
        (docs/storage.md, "The append step").  Without it (items read from the stream,
        gathered from several messages, or an older append step's message) the item
        right after the known offset has its chain recomputed from its data, each time.
        """
        known = self._known.get(feed)
        seen = known is not None
        epoch = offset = 0
        chain = ""
        if known is not None:
            epoch, offset, chain = known.epoch, known.offset, known.chain
        advanced = False
        # ``prior``: the chain announced before the item at (prior_epoch, prior_offset),
        # trusted only within one message.
        one_message = before is not None
        prior = before or ""
        prior_epoch = prior_offset = -1
        if items:
            prior_epoch, prior_offset = items[0].epoch, items[0].offset
        for item in items:
            # Each attribute read once: an item is a msgspec Struct, read through
            # getattr even from compiled code.
            at_epoch, at_offset, at_chain = item.epoch, item.offset, item.chain
            if seen and at_epoch == epoch:
                if at_offset == offset:
                    if at_chain != chain:
                        return False
                elif at_offset == offset + 1:
                    announced = at_epoch == prior_epoch and at_offset == prior_offset
                    if one_message and announced:
                        if prior != chain:
                            return False
                    elif at_chain != chain_next(chain, item.data):
                        return False
            if not seen or at_epoch > epoch or (at_epoch == epoch and at_offset > offset):
                seen = advanced = True
                epoch, offset, chain = at_epoch, at_offset, at_chain
            prior, prior_epoch, prior_offset = at_chain, at_epoch, at_offset + 1
        if advanced:
            self._set(feed, Known(epoch, offset, chain))
        return True

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
