"""gateway.limits: connection counting and the per-tenant publish token bucket (pure)."""

from __future__ import annotations

import pytest

from gateway.errors import ErrorCode, RateLimited
from gateway.limits import ConnectionLimits, PublishRate


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_node_limit_refuses_then_admits_after_release() -> None:
    refused: list[str] = []
    limits = ConnectionLimits(2, 10, refused.append)
    a = limits.acquire("acme")
    b = limits.acquire("globex")
    with pytest.raises(RateLimited) as info:
        limits.acquire("initech")
    assert info.value.code is ErrorCode.RATE_LIMITED and info.value.status == 429
    assert refused == ["connections"]
    a.release()
    assert limits.count() == 1
    c = limits.acquire("initech")
    assert limits.count() == 2
    b.release()
    c.release()
    assert limits.count() == 0 and limits.per_tenant == {}


def test_tenant_limit_is_per_tenant_and_hides_other_tenants() -> None:
    refused: list[str] = []
    limits = ConnectionLimits(100, 2, refused.append)
    leases = [limits.acquire("acme"), limits.acquire("acme")]
    for _ in range(5):
        limits.acquire("globex").release()
    leases.append(limits.acquire("globex"))
    with pytest.raises(RateLimited) as info:
        limits.acquire("acme")
    assert refused == ["tenant_connections"]
    assert "globex" not in info.value.message
    # The node-wide count (3) is not revealed to a tenant.
    assert "3" not in info.value.message
    assert limits.count("acme") == 2 and limits.count("globex") == 1 and limits.count() == 3
    for lease in leases:
        lease.release()
    assert limits.count() == 0 and limits.per_tenant == {}


def test_lease_release_is_idempotent_and_a_context_manager() -> None:
    limits = ConnectionLimits(1, 1)
    with limits.acquire("acme") as lease:
        assert limits.count("acme") == 1
    assert lease.released and limits.count() == 0
    lease.release()
    assert limits.count() == 0
    with pytest.raises(ValueError), limits.acquire("acme"):
        raise ValueError("boom")
    assert limits.count() == 0 and limits.per_tenant == {}


def test_token_bucket_burst_then_rate() -> None:
    clock = Clock()
    refused: list[str] = []
    rate = PublishRate(5, 5, clock=clock, on_limited=refused.append)
    rate.take("acme", 5)
    with pytest.raises(RateLimited) as info:
        rate.take("acme", 1)
    assert info.value.retry_after == 1
    assert info.value.headers() == [(b"retry-after", b"1")]
    assert refused == ["publish_rate"]
    # Another tenant has its own bucket.
    rate.take("globex", 5)
    clock.now += 0.2  # one token back
    rate.take("acme", 1)
    with pytest.raises(RateLimited):
        rate.take("acme", 1)
    clock.now += 1.0
    rate.take("acme", 5)


def test_refused_request_takes_nothing_and_retry_after_is_whole_seconds() -> None:
    clock = Clock()
    rate = PublishRate(2, 10, clock=clock)
    rate.take("acme", 10)
    with pytest.raises(RateLimited) as info:
        rate.take("acme", 5)  # 2.5 s away
    assert info.value.retry_after == 3
    clock.now += 2.5
    rate.take("acme", 5)  # nothing was taken by the refusal


def test_request_larger_than_the_burst_is_refused_whole() -> None:
    clock = Clock()
    rate = PublishRate(5, 5, clock=clock)
    with pytest.raises(RateLimited) as info:
        rate.take("acme", 6)
    assert info.value.retry_after is not None and info.value.retry_after >= 1
    assert "5 items per request" in info.value.message
    rate.take("acme", 5)  # the bucket was left full


def test_idle_buckets_are_dropped_and_the_number_is_bounded() -> None:
    clock = Clock()
    rate = PublishRate(10, 20, clock=clock, max_buckets=100)
    for i in range(50):
        rate.take(f"t{i}", 1)
    assert len(rate.buckets) == 50
    clock.now += 2.0  # burst / rate: every bucket is full again
    rate.take("fresh", 1)
    assert list(rate.buckets) == ["fresh"]
    # Never more than max_buckets, however many tenants publish at once.
    for i in range(1000):
        rate.take(f"u{i}", 20)
    assert len(rate.buckets) <= 100


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError):
        PublishRate(0, 5)
    with pytest.raises(ValueError):
        PublishRate(5, 0)
