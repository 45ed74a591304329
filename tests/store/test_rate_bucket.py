"""The publish rate's Lua bucket (``store/redis/bucket.lua``) against :func:`gateway.limits.refill`.

The bucket runs on a real Redis with the server's clock, so the test cannot choose the
time; it reads it instead: each take runs in a MULTI with a ``GET`` of the key and its
``PTTL`` and the server's ``TIME``, so the stamp the script stored (the time it used)
and the time right after are known.  Generated sequences of takes and give-backs
(Hypothesis) must leave exactly the tokens the Python refill computes from the previous
state at that stamp, an expiry no earlier than the moment the bucket is full again, and
a refusal must write nothing and answer tokens between the model's before and after.
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
    """The bucket as :func:`refill` sees it: None (full: no key) or (tokens, stamp µs)."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.state: tuple[float, int] | None = None

    def at(self, micros: int) -> float:
        if self.state is None:
            return float(self.burst)
        tokens, stamp = self.state
        return refill(tokens, (micros - stamp) / 1e6, self.rate, self.burst)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rate=st.sampled_from([0.5, 5.0, 50.0]),
    burst=st.integers(min_value=1, max_value=10),
    takes=st.lists(st.integers(min_value=-3, max_value=8), min_size=1, max_size=12),
)
def test_the_lua_bucket_computes_what_refill_computes(
    server: redis.Redis, redis_prefix: str, rate: float, burst: int, takes: list[int]
) -> None:
    key = f"{redis_prefix}:rate:{{{uuid.uuid4().hex}}}"
    script = server.register_script(TAKE_SCRIPT)
    model = Model(rate, burst)
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
            assert value == before_value
            assert model.at(before) - EPS <= float(held) <= model.at(after) + EPS
            continue
        if value is None:  # full again: no key
            assert model.at(after) - n >= burst - EPS
            model.state = None
            continue
        text_tokens, text_stamp = value.decode().split(" ")
        tokens, stamp = float(text_tokens), int(text_stamp)
        assert before <= stamp <= after
        expected = min(float(burst), model.at(stamp) - n)
        assert math.isclose(tokens, expected, abs_tol=EPS)
        assert tokens < burst
        # The key lives until the bucket is full again: not less (a missing key is a
        # full bucket), and rounded up to the next millisecond only.
        full_in_ms = (burst - tokens) * 1000 / rate
        elapsed_ms = (after - stamp) / 1000
        assert full_in_ms - elapsed_ms - 1 <= pttl <= math.ceil(full_in_ms)
        model.state = (tokens, stamp)
