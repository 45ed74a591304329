"""gateway.limits: the publish rate's pure parts (refill, charges, refusals); no I/O.

The stores' use of a charge is tested over real sockets in tests/http/test_shared_rate.py
and, for the Lua bucket against :func:`refill`, in tests/store/test_rate_bucket.py.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import RateLimited
from gateway.limits import Charge, PublishRate, refill

rates = st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False)
bursts = st.integers(min_value=1, max_value=100_000)
seconds = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(rates, bursts, st.data())
def test_refill_is_capped_and_splits_over_time(
    rate: float, burst: int, data: st.DataObject
) -> None:
    tokens = data.draw(st.floats(min_value=0.0, max_value=float(burst)))
    a, b = data.draw(seconds), data.draw(seconds)
    once = refill(tokens, a + b, rate, burst)
    twice = refill(refill(tokens, a, rate, burst), b, rate, burst)
    assert tokens <= once <= burst
    assert math.isclose(once, twice, rel_tol=1e-9, abs_tol=1e-6)


def test_refill_ignores_a_clock_that_went_back() -> None:
    assert refill(2.5, -10.0, 5.0, 10) == 2.5
    assert refill(2.5, 0.1, 5.0, 10) == 3.0
    assert refill(2.5, 100.0, 5.0, 10) == 10.0


def test_a_charge_over_the_burst_is_refused_at_once_and_counted() -> None:
    refused: list[str] = []
    rate = PublishRate(5, 5, on_limited=refused.append)
    with pytest.raises(RateLimited) as info:
        rate.charge("acme", 6)
    assert "at most 5 items per request" in info.value.message
    assert info.value.retry_after == 1  # a full bucket's refill (5 / 5 per second)
    assert refused == ["publish_rate"]
    assert rate.buckets == {}  # the node's bucket was not touched
    charge = rate.charge("acme", 5)
    assert (charge.tenant, charge.items, charge.taken) == ("acme", 5, False)


def test_a_charge_is_taken_once_and_a_refused_one_stays_untaken() -> None:
    now = [1000.0]
    rate = PublishRate(2, 4, clock=lambda: now[0])
    first = Charge(rate, "acme", 3)
    first.take()
    assert first.taken
    second = Charge(rate, "acme", 3)
    with pytest.raises(RateLimited) as info:
        second.take()
    assert not second.taken
    assert info.value.retry_after == 1  # 1 token held, 2 missing at 2 per second
    now[0] += 1.0
    second.take()
    assert second.taken


@pytest.mark.parametrize(
    ("items", "tokens", "retry_after"),
    [
        (1, 0.0, 1),
        (3, 0.5, 1),
        (3, 0.4, 2),
        (4, 3.999, 1),
        (10, 0.0, 4),
        (11, 0.0, 4),
        (11, 9.0, 1),
    ],
)
def test_a_refusal_names_whole_seconds_until_the_request_fits(
    items: int, tokens: float, retry_after: int
) -> None:
    """What a store's refusal answers, from the tokens its bucket held (rate 2.5/s,
    burst 10; a request over the burst: until the bucket is full)."""
    rate = PublishRate(2.5, 10)
    refusal = Charge(rate, "acme", items).refused(tokens)
    assert refusal.retry_after == retry_after
    assert refusal.headers() == [(b"retry-after", str(retry_after).encode())]
    assert ("split the request" in refusal.message) == (items > 10)


def test_the_store_arguments_are_the_rate_and_the_burst() -> None:
    assert PublishRate(1000, 2000).args == ("1000.0", "2000")
    assert PublishRate(0.25, 3).args == ("0.25", "3")
