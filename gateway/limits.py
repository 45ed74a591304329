"""Per-node and per-tenant limits: open streams, and the publish rate (contract D5, D6).

Pure bookkeeping, no I/O: the routes ask before they start work and answer
``429 rate_limited`` when refused.  Messages never carry another tenant's numbers.

- :class:`ConnectionLimits` counts open streams (SSE streams and WebSocket sockets)
  per node and per tenant.  :meth:`ConnectionLimits.acquire` returns a
  :class:`Lease` that must be released on every exit path; use it as a context
  manager (``with limits.acquire(tenant): ...``).
- :class:`PublishRate` is the tenant's publish rate: items per second and a burst.  A
  publish route hands a :class:`Charge` (the request's item count) to the publisher,
  which hands it to the store with the items: the step that appends them takes the
  items from the tenant's bucket, or refuses the whole request (docs/storage.md, "The
  publish rate").  On Redis the bucket is a key shared by every node; the embedded
  store takes from this node's buckets (:meth:`PublishRate.take`), which are dropped
  once idle long enough to be full again and capped in number, so tenants cannot grow
  memory without bound.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType

from gateway.errors import RateLimited

#: Label values of ``gateway_limited_total{limit}``.
LIMIT_CONNECTIONS = "connections"
LIMIT_TENANT_CONNECTIONS = "tenant_connections"
LIMIT_PUBLISH_RATE = "publish_rate"

OnLimited = Callable[[str], None]


def _ignore(limit: str) -> None:
    pass


class Lease:
    """One counted stream; :meth:`release` (idempotent) gives the slot back."""

    __slots__ = ("_limits", "tenant")

    def __init__(self, limits: ConnectionLimits, tenant: str) -> None:
        self._limits: ConnectionLimits | None = limits
        self.tenant = tenant

    @property
    def released(self) -> bool:
        return self._limits is None

    def release(self) -> None:
        limits, self._limits = self._limits, None
        if limits is not None:
            limits._release(self.tenant)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class ConnectionLimits:
    """Open streams on this node, in total and per tenant."""

    def __init__(
        self, max_connections: int, max_tenant_connections: int, on_limited: OnLimited = _ignore
    ) -> None:
        self.max_connections = max_connections
        self.max_tenant_connections = max_tenant_connections
        self.on_limited = on_limited
        self.total = 0
        #: Open streams per tenant; a tenant with none has no entry.
        self.per_tenant: dict[str, int] = {}

    def count(self, tenant: str | None = None) -> int:
        """Open streams on the node, or of one tenant."""
        return self.total if tenant is None else self.per_tenant.get(tenant, 0)

    def acquire(self, tenant: str) -> Lease:
        """Count one more stream of ``tenant``, or raise :class:`RateLimited`."""
        if self.total >= self.max_connections:
            self.on_limited(LIMIT_CONNECTIONS)
            raise RateLimited("this node has too many open connections: retry later or elsewhere")
        held = self.per_tenant.get(tenant, 0)
        if held >= self.max_tenant_connections:
            self.on_limited(LIMIT_TENANT_CONNECTIONS)
            raise RateLimited(
                f"your tenant has too many open connections on this node "
                f"(at most {self.max_tenant_connections}): close some first"
            )
        self.total += 1
        self.per_tenant[tenant] = held + 1
        return Lease(self, tenant)

    def _release(self, tenant: str) -> None:
        self.total -= 1
        left = self.per_tenant[tenant] - 1
        if left:
            self.per_tenant[tenant] = left
        else:
            del self.per_tenant[tenant]


def refill(tokens: float, elapsed: float, rate: float, burst: int) -> float:
    """A bucket's tokens ``elapsed`` seconds after it held ``tokens``: ``rate`` more per
    second, at most ``burst``; time running backwards adds nothing.  (The append step's
    Lua, ``store/redis/bucket.lua``, computes the same on the server's clock.)"""
    return min(float(burst), tokens + max(0.0, elapsed) * rate)


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class PublishRate:
    """A tenant's publish rate: ``rate`` items per second, at most ``burst`` at once.

    :meth:`charge` is what a publish route does with it; :meth:`take` is the node's own
    token bucket per tenant, which the embedded store uses (Redis keeps the bucket in
    a key instead, shared by every node).  ``clock`` returns monotonic seconds (injected
    by tests).  A bucket untouched for ``burst / rate`` seconds is full again, exactly
    like a new one, so it is dropped; past ``max_buckets`` the least recently used
    bucket is dropped even so (that tenant starts again with a full bucket: lenient,
    never unbounded).
    """

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_buckets: int = 100_000,
        on_limited: OnLimited = _ignore,
    ) -> None:
        if not rate > 0 or burst <= 0 or max_buckets <= 0:
            raise ValueError("rate, burst and max_buckets must be positive")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.max_buckets = max_buckets
        self.on_limited = on_limited
        self.refill_seconds = burst / rate
        #: The rate and the burst as the append step's arguments (Redis).
        self.args = (repr(float(rate)), str(burst))
        #: Least recently used first.
        self.buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def charge(self, tenant: str, items: int) -> Charge:
        """The charge of a request of ``items`` items for the store to take with them.

        A request larger than the burst could never be admitted: it is refused here at
        once (:class:`RateLimited`), before any work or round trip.
        """
        if items > self.burst:
            raise self.refused(items, 0.0)
        return Charge(self, tenant, items)

    def refused(self, items: int, tokens: float) -> RateLimited:
        """Count a refusal and say why: a request of ``items`` items met a bucket holding
        ``tokens``.  ``retry_after`` is whole seconds (at least 1) until the bucket could
        hold the request (a full bucket's worth for one over the burst)."""
        self.on_limited(LIMIT_PUBLISH_RATE)
        if items > self.burst:
            wait = self.refill_seconds - tokens / self.rate
            message = (
                f"at most {self.burst} items per request at this tenant's publish rate: "
                "split the request"
            )
        else:
            wait = (items - tokens) / self.rate
            message = f"publish rate exceeded ({self.rate:g} items per second): retry later"
        return RateLimited(message, retry_after=max(1, math.ceil(wait)))

    def _evict(self, now: float) -> None:
        buckets = self.buckets
        while buckets:
            oldest = next(iter(buckets.values()))
            if now - oldest.stamp < self.refill_seconds and len(buckets) < self.max_buckets:
                return
            buckets.popitem(last=False)

    def take(self, tenant: str, items: int) -> None:
        """Take ``items`` tokens of ``tenant``'s bucket on this node, or raise
        :class:`RateLimited` (:meth:`refused`); a refused request takes nothing."""
        now = self.clock()
        self._evict(now)
        bucket = self.buckets.get(tenant)
        if bucket is None:
            bucket = self.buckets[tenant] = _Bucket(float(self.burst), now)
        else:
            self.buckets.move_to_end(tenant)
            bucket.tokens = refill(bucket.tokens, now - bucket.stamp, self.rate, self.burst)
            bucket.stamp = now
        if items <= bucket.tokens:
            bucket.tokens -= items
            return
        raise self.refused(items, bucket.tokens)


class Charge:
    """A publish request's item count, taken from its tenant's bucket by the store step
    that appends the request's items (docs/storage.md, "The publish rate").

    A step that appends nothing new (every item is a retry the feed holds) takes
    nothing; a refused one appends nothing.  The embedded store calls :meth:`take`
    (this node's bucket); Redis takes from the tenant's bucket key inside the append
    step and, when it refuses, answers the tokens the bucket held (:meth:`refused`).
    A store that took it sets :attr:`taken`: a request of several steps (the threads
    run stream) hands it to each until one took it.
    """

    __slots__ = ("items", "rate", "taken", "tenant")

    def __init__(self, rate: PublishRate, tenant: str, items: int) -> None:
        self.rate = rate
        self.tenant = tenant
        self.items = items
        self.taken = False

    def take(self) -> None:
        """Take the items from this node's bucket of the tenant, or raise RateLimited."""
        self.rate.take(self.tenant, self.items)
        self.taken = True

    def refused(self, tokens: float) -> RateLimited:
        """The refusal of a store whose bucket held ``tokens`` (counted)."""
        return self.rate.refused(self.items, tokens)


__all__ = [
    "LIMIT_CONNECTIONS",
    "LIMIT_PUBLISH_RATE",
    "LIMIT_TENANT_CONNECTIONS",
    "Charge",
    "ConnectionLimits",
    "Lease",
    "PublishRate",
    "refill",
]
