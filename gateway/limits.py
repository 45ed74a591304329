"""Per-node and per-tenant limits: open streams, and the publish rate (contract D5, D6).

Pure bookkeeping, no I/O: the routes ask before they start work and answer
``429 rate_limited`` when refused.  Messages never carry another tenant's numbers.

- :class:`ConnectionLimits` counts open streams (SSE streams and WebSocket sockets)
  per node and per tenant.  :meth:`ConnectionLimits.acquire` returns a
  :class:`Lease` that must be released on every exit path; use it as a context
  manager (``with limits.acquire(tenant): ...``).
- :class:`PublishRate` is a token bucket per tenant (items per second and a burst).
  Buckets idle long enough to be full again are dropped, and the number of buckets
  is capped, so tenants cannot grow memory without bound.
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


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class PublishRate:
    """A token bucket per tenant: ``rate`` items per second, at most ``burst`` at once.

    ``clock`` returns monotonic seconds (injected by tests).  A bucket untouched for
    ``burst / rate`` seconds is full again, exactly like a new one, so it is dropped;
    past ``max_buckets`` the least recently used bucket is dropped even so (that
    tenant starts again with a full bucket: lenient, never unbounded).
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
        #: Least recently used first.
        self.buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def _evict(self, now: float) -> None:
        buckets = self.buckets
        while buckets:
            oldest = next(iter(buckets.values()))
            if now - oldest.stamp < self.refill_seconds and len(buckets) < self.max_buckets:
                return
            buckets.popitem(last=False)

    def take(self, tenant: str, items: int) -> None:
        """Take ``items`` tokens of ``tenant``'s bucket, or raise :class:`RateLimited`.

        A refused request takes nothing; its ``retry_after`` is whole seconds (at
        least 1) until the bucket could hold it.
        """
        now = self.clock()
        self._evict(now)
        bucket = self.buckets.get(tenant)
        if bucket is None:
            bucket = self.buckets[tenant] = _Bucket(float(self.burst), now)
        else:
            self.buckets.move_to_end(tenant)
            elapsed = max(0.0, now - bucket.stamp)
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate)
            bucket.stamp = now
        if items <= bucket.tokens:
            bucket.tokens -= items
            return
        self.on_limited(LIMIT_PUBLISH_RATE)
        if items > self.burst:
            wait = self.refill_seconds - bucket.tokens / self.rate
            message = (
                f"at most {self.burst} items per request at this tenant's publish rate: "
                "split the request"
            )
        else:
            wait = (items - bucket.tokens) / self.rate
            message = f"publish rate exceeded ({self.rate:g} items per second): retry later"
        raise RateLimited(message, retry_after=max(1, math.ceil(wait)))


__all__ = [
    "LIMIT_CONNECTIONS",
    "LIMIT_PUBLISH_RATE",
    "LIMIT_TENANT_CONNECTIONS",
    "ConnectionLimits",
    "Lease",
    "PublishRate",
]
