"""The one interface the store modules reach Redis through: :class:`RedisClient`.

Three calls: :meth:`~RedisClient.call` (commands on redis-py's pool or cluster client),
:meth:`~RedisClient.pipeline` (commands queued and sent in one round trip) and
:meth:`~RedisClient.subscribe` (a pub/sub listening connection,
:mod:`.subscriber`).  Each goes through the node's one boundary
(``RedisConnection.io``): every failure becomes :class:`~gateway.errors.Unavailable`
with its cause (:mod:`.errors`), every call is bounded and, when it names a metric,
timed.  How the calls travel (the pool, the pipelined append connection, the
coalescing of one loop iteration's calls, the raw RESP of the listeners) is this
package's business, not the callers'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from gateway.store.redis.client.batching import Coalescer
from gateway.store.redis.client.pipelined import Lane
from gateway.store.redis.client.resp import Dial
from gateway.store.redis.client.subscriber import Listener, Waker
from gateway.store.redis.client.subscriber import connect as connect_listener
from gateway.store.redis.client.topology import ListenerAddress


class Boundary(Protocol):
    """What a :class:`RedisClient` needs of the node's connection to Redis
    (``gateway.store.redis.connection.RedisConnection``): named here, so that this
    package does not import the module that builds it."""

    #: redis-py's pool or cluster client.
    client: Any
    #: Whether Redis is a cluster (keys live on their own shards).
    cluster: bool
    #: How the raw connections open and greet.
    dial: Dial

    def io(
        self, what: str, command: str | None = None, *, within: float | None = None
    ) -> AbstractContextManager[None]:
        """The boundary every call goes through: bounded, timed, failures mapped."""
        ...

    def lane(self) -> Lane | None:
        """The node's one pipelined append connection (None on a cluster)."""
        ...


Reply = TypeVar("Reply")
Call = TypeVar("Call")
Answer = TypeVar("Answer")


class RedisClient:
    """The node's way to Redis for one store module (see the module)."""

    __slots__ = ("_conn", "_lane", "_redis", "pipelined")

    def __init__(self, conn: Boundary) -> None:
        self._conn = conn
        self._redis = conn.client
        self._lane: Lane | None = None
        #: Whether :meth:`send` is available: not on a cluster, whose keys live on
        #: their own shards.
        self.pipelined = not conn.cluster

    async def call(
        self,
        what: str,
        command: Callable[[Any], Awaitable[Reply]],
        *,
        metric: str | None = None,
        within: float | None = None,
    ) -> Reply:
        """``command(redis)``'s reply, ``redis`` being redis-py's client; ``command`` may
        send several commands, all inside the one bound.

        ``what`` names the operation in an Unavailable's message; ``metric`` the
        ``gateway_redis_command_seconds`` series it is timed in (none: not timed);
        ``within`` a bound other than the node's timeout (a blocking read: then it
        stays cancellable, see ``RedisConnection.io``)."""
        with self._conn.io(what, metric, within=within):
            return await command(self._redis)

    async def pipeline(
        self, what: str, queue: Callable[[Any], object], *, metric: str | None = None
    ) -> list[Any]:
        """The replies, in order, of the commands ``queue(pipe)`` queues on a pipeline
        (no MULTI: each command atomic by itself), sent in one round trip.  A refused
        command raises Unavailable as the pipeline's failure."""
        # A pipeline without MULTI or WATCH takes a connection only inside execute,
        # which gives it back: no ``async with`` needed.
        pipe = self._redis.pipeline(transaction=False)
        queue(pipe)
        with self._conn.io(what, metric):
            replies: list[Any] = await pipe.execute()
        return replies

    def script(self, source: str) -> Any:
        """A Lua script registered on redis-py's client (``await script(keys=, args=)``
        inside :meth:`call`: EVALSHA, loaded again on NOSCRIPT)."""
        return self._redis.register_script(source)

    async def subscribe(self, address: ListenerAddress, waker: Waker) -> Listener:
        """A new pub/sub listening connection to ``address`` (sharded pub/sub on a
        cluster), dialled as every raw connection of the node; ``waker`` interrupts its
        reader's wait.  It fails with the listener's own error (an ``OSError``) for
        the caller's boundary to map."""
        conn = self._conn
        return await connect_listener(address, conn.dial, waker=waker, sharded=conn.cluster)

    async def send(self, commands: Sequence[bytes]) -> list[Any]:
        """The replies, in order, to ``commands`` (each packed RESP,
        :func:`.resp.pack`) sent over the node's one pipelined connection
        (:mod:`.pipelined`: with the other callers' commands of the same loop
        iteration in one write); a refused command's reply is its ``ReplyError``.
        Bounded by the connection itself; fails with its own error (an ``OSError``).
        Only when :attr:`pipelined`."""
        lane = self._lane
        if lane is None:
            lane = self._lane = self._conn.lane()
            assert lane is not None, "no pipelined connection on a cluster"
        return await lane.run(commands)

    def coalescer(
        self, flush: Callable[[list[Call]], Awaitable[list[Answer]]]
    ) -> Coalescer[Call, Answer]:
        """A :class:`~.batching.Coalescer` that sends the calls submitted in one loop
        iteration together through ``flush`` (which goes through :meth:`call`)."""
        return Coalescer(flush)
