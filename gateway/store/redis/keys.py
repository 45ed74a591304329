"""The key layout: where a node's data lives in Redis, every name under the node's
prefix (docs/storage.md, "Keys").  A feed's keys share its hash tag, so they live on one
cluster slot together."""

from __future__ import annotations

from gateway.feed import FeedKey


class KeyLayout:
    """Key names under ``prefix``; a feed's are remembered once built."""

    #: Feeds whose key names :meth:`feed_keys` remembers at most.
    FEED_KEYS_KEPT = 65_536

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._feed_keys: dict[FeedKey, tuple[str, str, str]] = {}

    def feed_keys(self, feed: FeedKey) -> tuple[str, str, str]:
        """The feed's metadata hash, stream and idempotency-key hash.

        Remembered (the tenant's percent-encoding in the hash tag costs ~1.4 us, once per
        append and read otherwise); forgotten all at once past ``FEED_KEYS_KEPT``.
        """
        keys = self._feed_keys.get(feed)
        if keys is None:
            if len(self._feed_keys) >= self.FEED_KEYS_KEPT:
                self._feed_keys.clear()
            base = f"{self.prefix}:{feed.tag()}"
            keys = self._feed_keys[feed] = (base + ":m", base + ":s", base + ":i")
        return keys

    def fold_key(self, feed: FeedKey) -> str:
        """The run's fold hash, beside the feed's other keys (same hash slot)."""
        return f"{self.prefix}:{feed.tag()}:f"
