"""The Redis adapter's one error map (``gateway.store.redis.client.error_map``): every
failure met while talking to Redis, whichever way it came (redis-py, a socket, TLS, the
raw connections' own faults, a refused reply), becomes Unavailable naming the operation
and the cause, with the original as ``__cause__``; anything else passes through."""

from __future__ import annotations

import ssl

import hiredis
import pytest
import redis.exceptions

from gateway.errors import Unavailable
from gateway.store.redis.client.error_map import PubSubLost, map_exceptions, pubsub_lost, refusal
from gateway.store.redis.client.faults import (
    PipelinedConnectionLost,
    PipelinedConnectionTimeout,
    PubSubConnectionLost,
)
from gateway.store.redis.client.resp import describe

WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."


def mapped(exc: BaseException, what: str = "append step") -> Unavailable:
    """What ``exc`` raised inside the map becomes (it must become Unavailable)."""
    with pytest.raises(Unavailable) as caught, map_exceptions(what):
        raise exc
    assert caught.value.__cause__ is exc
    return caught.value


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (
            redis.exceptions.ResponseError("ERR unknown command 'NOPE'"),
            "redis rejected append step: ResponseError: ERR unknown command 'NOPE'",
        ),
        (
            redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
            "redis rejected append step: ReadOnlyError: "
            "You can't write against a read only replica.",
        ),
        (
            hiredis.ReplyError(WRONGPASS),
            f"redis rejected append step: ReplyError: {WRONGPASS}",
        ),
        (
            redis.exceptions.AuthenticationError(WRONGPASS),
            f"redis unavailable during append step: AuthenticationError: {WRONGPASS}",
        ),
        (
            redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:1."),
            "redis unavailable during append step: ConnectionError: "
            "Error 111 connecting to 127.0.0.1:1.",
        ),
        (
            redis.exceptions.TimeoutError("Timeout reading from socket"),
            "redis unavailable during append step: TimeoutError: Timeout reading from socket",
        ),
        (
            redis.exceptions.RedisClusterException("No node serves slot 42"),
            "redis unavailable during append step: RedisClusterException: No node serves slot 42",
        ),
        (
            ConnectionRefusedError(111, "Connection refused"),
            "redis unavailable during append step: ConnectionRefusedError: "
            "[Errno 111] Connection refused",
        ),
        (
            TimeoutError(),
            "redis unavailable during append step: TimeoutError",
        ),
        (
            ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed certificate"),
            "redis unavailable during append step: SSLCertVerificationError: "
            "certificate verify failed: self-signed certificate",
        ),
        (
            PipelinedConnectionLost("redis connection lost: closed"),
            "redis unavailable during append step: "
            "PipelinedConnectionLost: redis connection lost: closed",
        ),
        (
            PipelinedConnectionTimeout("redis did not answer within 0.3 s"),
            "redis unavailable during append step: "
            "PipelinedConnectionTimeout: redis did not answer within 0.3 s",
        ),
        (
            PubSubConnectionLost("listener connection lost: closed"),
            "redis unavailable during append step: "
            "PubSubConnectionLost: listener connection lost: closed",
        ),
        (
            RuntimeError("unable to perform operation on <TCPTransport closed=True>"),
            "redis connection lost during append step: RuntimeError: "
            "unable to perform operation on <TCPTransport closed=True>",
        ),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else "",
)
def test_each_failure_becomes_unavailable_with_its_cause_and_reason(
    exc: BaseException, message: str
) -> None:
    assert mapped(exc).message == message


def test_the_error_code_redis_gave_is_kept_in_the_reason() -> None:
    exc = redis.exceptions.ResponseError("no such key")
    exc.status_code = "NOSCRIPT"  # type: ignore[attr-defined]
    assert mapped(exc, "read").message == "redis rejected read: ResponseError: NOSCRIPT no such key"


def test_an_attribute_error_inside_redis_py_is_a_lost_connection() -> None:
    # Raised by code whose module is redis-py's (its cluster client closing a
    # connection another task has just taken).
    scope: dict[str, object] = {"__name__": "redis.asyncio.cluster"}
    exec(
        "def write():\n    raise AttributeError(\"'NoneType' object has no attribute 'x'\")", scope
    )
    with pytest.raises(AttributeError) as raised:
        scope["write"]()  # type: ignore[operator]
    assert mapped(raised.value, "read").message == (
        "redis connection lost during read: AttributeError: 'NoneType' object has no attribute 'x'"
    )


@pytest.mark.parametrize(
    "exc",
    [
        AttributeError("a bug of our own"),
        RuntimeError("a bug of our own"),
        ValueError("not a Redis failure"),
        Unavailable("mapped already"),
        KeyError("k"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_anything_else_passes_through_unchanged(exc: Exception) -> None:
    with pytest.raises(type(exc)) as raised, map_exceptions("read"):
        raise exc
    assert raised.value is exc


def test_a_refused_reply_handed_over_in_its_place_maps_the_same_way() -> None:
    reply = hiredis.ReplyError("ERR Error running script")
    error = refusal("append", reply)
    assert error.message == "redis rejected append: ReplyError: ERR Error running script"
    assert error.__cause__ is reply


@pytest.mark.parametrize(
    "exc",
    [
        PubSubConnectionLost("listener connection lost: closed"),
        TimeoutError(),
        ConnectionRefusedError(),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_a_pub_sub_connection_failure_is_an_unavailable_of_its_own(exc: OSError) -> None:
    # The live reader tells it from other failures: Redis may have moved.
    error = pubsub_lost(exc)
    assert isinstance(error, PubSubLost) and isinstance(error, Unavailable)
    assert error.message == f"redis unavailable during pub/sub: {describe(exc)}"
    assert error.__cause__ is exc
