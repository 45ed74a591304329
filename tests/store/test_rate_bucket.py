"""The publish rate's Lua bucket (``store/redis/bucket.lua``) against :func:`gateway.limits.refill`.

The Lua bucket keeps one number, the moment (server clock, µs) it is full again; the
Python one (the embedded store's) keeps tokens and a stamp.  They must agree.  The
bucket runs on a real Redis with the server's clock, so the test cannot choose the time;
it brackets it instead: each take runs in a MULTI with a ``GET`` of the key, its
``PTTL`` and the server's ``TIME``, after a ``TIME`` read just before.  Generated
sequences of takes and give-backs (Hypothesis) must leave the tokens that refill()
computes for a take at some moment in that bracket, an expiry at the moment the bucket
is full again (rounded up to the millisecond), and a refusal must write nothing and
answer tokens between the model's before and after (the key may only have run out
meanwhile, when the bucket became full).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.limits import refill
from gateway.store.redis.feeds import TAKE_SCRIPT

EPS = 1e-6


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url, socket_timeout=5.0) as client:
        yield client


def _micros(time: tuple[int, int]) -> int:
    return time[0] * 1_000_000 + time[1]


class Model:
    """The bucket as :func:`refill` sees it: ``tokens`` at the moment ``stamp`` (µs)."""

    def __init__(self, rate: float, burst: int, now: int) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = float(burst), now

    def at(self, micros: int) -> float:
        return refill(self.tokens, (micros - self.stamp) / 1e6, self.rate, self.burst)

    def after_take(self, n: int, took_at: int, seen_at: int) -> float:
        """The tokens at ``seen_at`` after taking ``n`` at ``took_at``."""
        taken = min(float(self.burst), self.at(took_at) - n)
        return refill(taken, (seen_at - took_at) / 1e6, self.rate, self.burst)


def lua_tokens(full_at: float | None, micros: int, rate: float, burst: int) -> float:
    """What the Lua bucket holds at ``micros``, from its key (None: no key, full)."""
    if full_at is None:
        return float(burst)
    return min(float(burst), burst - (full_at - micros) * rate / 1e6)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rate=st.sampled_from([0.5, 5.0, 50.0, 5000.0]),
    burst=st.integers(min_value=1, max_value=10),
    takes=st.lists(st.integers(min_value=-3, max_value=8), min_size=1, max_size=12),
)
def test_the_lua_bucket_computes_what_refill_computes(
    server: redis.Redis, redis_prefix: str, rate: float, burst: int, takes: list[int]
) -> None:
    key = f"{redis_prefix}:rate:{{{uuid.uuid4().hex}}}"
    script = server.register_script(TAKE_SCRIPT)
    model = Model(rate, burst, _micros(server.time()))
    for n in takes:
        before_value = server.get(key)
        before = _micros(server.time())
        pipe = server.pipeline(transaction=True)
        script(keys=[key], args=[repr(rate), burst, n], client=pipe)
        pipe.get(key)
        pipe.pttl(key)
        pipe.time()
        held, value, pttl, now = pipe.execute()
        after = _micros(now)
        if held is not None:  # refused: nothing written, tokens as the model had them
            assert n > float(held)
            # Unchanged, unless the key ran out meanwhile: it lives until the bucket
            # is full again (rounded up to the ms), and a full bucket has no key.
            expired = (
                before_value is not None and value is None and float(before_value) <= after + 1000
            )
            assert value == before_value or expired
            assert model.at(before) - EPS <= float(held) <= model.at(after) + EPS
            continue
        full_at = None if value is None else float(value)
        got = lua_tokens(full_at, after, rate, burst)
        # Taken at some moment between before and after: a later take leaves no more.
        assert model.after_take(n, after, after) - EPS <= got
        assert got <= model.after_take(n, before, after) + EPS
        if full_at is not None:
            # The key lives until the bucket is full again, rounded up to the ms.
            assert (full_at - after) / 1000 - 1 <= pttl <= math.ceil((full_at - before) / 1000)
        model.tokens, model.stamp = got, after
