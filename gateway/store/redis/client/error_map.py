"""The one error map of the Redis adapter: every failure met while talking to Redis,
whichever way it was reached, becomes :class:`~gateway.errors.Unavailable`.

redis-py's pool and cluster client raise ``redis.exceptions``; the raw connections (the
pipelined connection, the pub/sub connections) raise socket errors, TLS errors and their own
(:mod:`gateway.store.redis.client.faults`, all ``ConnectionError``) and hand refused replies
over as ``hiredis.ReplyError``.  :func:`map_exceptions` turns each into ``Unavailable``
whose message names what was being done and the cause (:func:`describe`: a wrong
password, a certificate that does not verify, a name that does not resolve each say
so), with the original as ``__cause__``; a pub/sub connection's failures become its
subclass :class:`PubSubLost` (:func:`pubsub_lost`).  Nothing outside this package sees
redis-py or a socket error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import hiredis
import redis.exceptions

from gateway.errors import Unavailable
from gateway.store.redis.client.resp import describe

#: Redis answered, refusing the command (its error reply).
REFUSED = (redis.exceptions.ResponseError, hiredis.ReplyError)
#: Redis could not be reached, or the connection failed under the command.
#: ``RedisClusterException``: no node serves the key's slot now (a cluster changing);
#: ``OSError`` takes in timeouts, TLS errors (``ssl.SSLError``) and the raw
#: connections' own failures (``PipelinedConnectionLost``, ``PubSubConnectionLost``).
UNREACHABLE = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError)


@contextlib.contextmanager
def map_exceptions(what: str) -> Iterator[None]:
    """Raise every Redis failure inside the block as Unavailable, ``what`` naming the
    operation (``"append step"``, ``"read_new"``):

    - a refused command: ``redis rejected <what>: <cause>``;
    - an unreachable server or a lost connection: ``redis unavailable during <what>:
      <cause>``;
    - a transport closed under a write (uvloop says so with ``RuntimeError``) and an
      ``AttributeError`` raised inside redis-py (its cluster client closing a
      connection another task has just taken): ``redis connection lost during <what>:
      <cause>``.

    The cause is :func:`describe` of the original, which is ``__cause__``.  Anything
    else (a bug of our own, an Unavailable raised already, a cancellation) passes
    through unchanged.
    """
    try:
        yield
    except REFUSED as exc:
        raise Unavailable(f"redis rejected {what}: {describe(exc)}") from exc
    except UNREACHABLE as exc:
        raise Unavailable(f"redis unavailable during {what}: {describe(exc)}") from exc
    except RuntimeError as exc:
        if "closed" not in str(exc):
            raise
        raise Unavailable(f"redis connection lost during {what}: {describe(exc)}") from exc
    except AttributeError as exc:
        if not raised_in_redis(exc):
            raise
        raise Unavailable(f"redis connection lost during {what}: {describe(exc)}") from exc


def raised_in_redis(exc: BaseException) -> bool:
    """Whether ``exc`` was raised in redis-py's own code (by module: this adapter's
    files live under a ``redis`` directory too)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    return isinstance(module, str) and module.split(".")[0] == "redis"


def refusal(what: str, reply: BaseException) -> Unavailable:
    """A refused reply a raw connection handed over in its place (a ``ReplyError``),
    as :func:`map_exceptions` would raise it, with the reply as ``__cause__``."""
    error = Unavailable(f"redis rejected {what}: {describe(reply)}")
    error.__cause__ = reply
    return error


class PubSubLost(Unavailable):
    """A pub/sub connection (:mod:`.subscriber`) failed, could not be made, or left a
    subscription unconfirmed: what was published meanwhile may be lost to it, and
    Redis may have moved (a restart, a failover).  Its ``__cause__`` is the
    connection's own error."""


def pubsub_lost(exc: BaseException) -> PubSubLost:
    """A pub/sub connection's failure ``exc`` (an ``OSError``: ``PubSubConnectionLost``, a
    timeout, a refused connect) as :class:`PubSubLost`, worded as
    :func:`map_exceptions` words an unreachable server, with ``exc`` as ``__cause__``."""
    error = PubSubLost(f"redis unavailable during pub/sub: {describe(exc)}")
    error.__cause__ = exc
    return error
