"""The one interface the store modules reach Redis through: :class:`RedisClient`.

Its calls: :meth:`~RedisClient.call` (commands on redis-py's pool or cluster client),
:meth:`~RedisClient.pipeline` (commands queued and sent in one round trip),
:meth:`~RedisClient.run_script` and :meth:`~RedisClient.run_pipelined` (a Lua script
run once per call, on the pool or on the node's one pipelined connection), and
:meth:`~RedisClient.subscribe` (a pub/sub listening connection, :mod:`.subscriber`).
Every failure reaches the caller as :class:`~gateway.errors.Unavailable` with its cause
(:mod:`.error_map`; a refused call of a script in its place), every call through the
node's one boundary (``RedisConnection.io``) is bounded and, when it names a metric,
timed.  How the calls travel (the pool, the pipelined connection, the batching of one
loop iteration's calls, the raw RESP of the pub/sub connections) is this package's
business, not the callers'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import anyio
from redis.exceptions import NoScriptError

from gateway.errors import Unavailable
from gateway.store.redis.client.batching import CallBatcher
from gateway.store.redis.client.error_map import REFUSED, map_exceptions, pubsub_lost, refusal
from gateway.store.redis.client.pipelined import PipelinedConnection
from gateway.store.redis.client.resp import Dial, pack, refused
from gateway.store.redis.client.subscriber import PubSubConnection, Waker
from gateway.store.redis.client.subscriber import connect as connect_pubsub
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
    #: Every command's bound, in seconds.
    timeout: float

    def io(
        self, what: str, command: str | None = None, *, within: float | None = None
    ) -> AbstractContextManager[None]:
        """The boundary every call goes through: bounded, timed, failures mapped."""
        ...

    async def topology(self) -> None:
        """Learn the cluster's shards (once; nothing on one server)."""
        ...

    def pipelined_connection(self) -> PipelinedConnection | None:
        """The node's one pipelined connection for the append step (None on a cluster)."""
        ...


Reply = TypeVar("Reply")
Call = TypeVar("Call")
Answer = TypeVar("Answer")

#: The calls of a script: each one's keys and arguments.
ScriptCalls = Sequence[tuple[list[str], list[Any]]]


class RedisClient:
    """The node's way to Redis for one store module (see the module)."""

    __slots__ = ("_conn", "_pipelined", "_redis", "pipelined")

    #: Script calls in flight at once on a cluster (its pools refuse, not queue, more).
    CLUSTER_CONCURRENCY = 16

    def __init__(self, conn: Boundary) -> None:
        self._conn = conn
        self._redis = conn.client
        self._pipelined: PipelinedConnection | None = None
        #: Whether :meth:`run_pipelined` is available: not on a cluster, whose keys live
        #: on their own shards.
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
        """A Lua script registered on redis-py's client, for :meth:`run_script` and
        :meth:`run_pipelined` (or ``await script(keys=, args=)`` inside :meth:`call`:
        EVALSHA, loaded again on NOSCRIPT)."""
        return self._redis.register_script(source)

    async def run_script(
        self,
        what: str,
        script: Any,
        calls: ScriptCalls,
        *,
        metric: str | None = None,
        wait: tuple[int, int] | None = None,
    ) -> list[Any]:
        """The replies, in order, of ``script`` (:meth:`script`) run once per call (its
        keys and arguments) on redis-py's client: one pipeline (a lone call without
        ``wait``: a plain call, which costs redis-py less), or on a cluster, which
        pipelines no scripts, the calls run concurrently (each on its key's shard), a
        bounded number at a time.  A refused call's reply (on a cluster: any failed
        call's) is an Unavailable in its place.  A server that lost its scripts (a
        restart, SCRIPT FLUSH) ran none of them: the script is loaded and just those
        calls are sent again, once.  With ``wait`` (replicas, milliseconds) a ``WAIT``
        follows the calls on their connection, its reply last.  Inside the boundary,
        as :meth:`call` (``what``, ``metric``)."""
        with self._conn.io(what, metric):
            if self._conn.cluster:
                return await self._run_concurrently(what, script, calls)
            if len(calls) == 1 and wait is None:
                [(keys, args)] = calls
                try:
                    return [await script(keys=keys, args=args)]
                except REFUSED as exc:
                    return [refusal(what, exc)]
            return await self._run_pipeline(what, script, calls, wait)

    async def _run_pipeline(
        self, what: str, script: Any, calls: ScriptCalls, wait: tuple[int, int] | None
    ) -> list[Any]:
        """:meth:`run_script` as one pipeline (not on a cluster)."""
        replies: list[Any] = [None] * len(calls)
        waited: Any = None
        todo = list(range(len(calls)))
        for attempt in range(2):
            # No async with: execute() gives the connection back itself, and a compiled
            # module must not wait inside one (CONTRIBUTING.md).
            pipe = self._redis.pipeline(transaction=False)
            for i in todo:
                keys, args = calls[i]
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            if wait is not None:
                pipe.wait(*wait)
            answers = await pipe.execute(raise_on_error=False)
            if wait is not None:
                waited = answers.pop()
            for i, answer in zip(todo, answers, strict=True):
                replies[i] = answer
            todo = [i for i in todo if isinstance(replies[i], NoScriptError)]
            if not todo or attempt:
                break
            await self._redis.script_load(script.script)
        replies = [refusal(what, r) if isinstance(r, Exception) else r for r in replies]
        return [*replies, waited] if wait is not None else replies

    async def _run_concurrently(self, what: str, script: Any, calls: ScriptCalls) -> list[Any]:
        """:meth:`run_script` on a cluster."""
        await self._conn.topology()  # before the concurrent first calls (see there)
        replies: list[Any] = [None] * len(calls)
        limiter = anyio.CapacityLimiter(self.CLUSTER_CONCURRENCY)

        async def one(index: int) -> None:
            keys, args = calls[index]
            await limiter.acquire()  # by hand: no wait inside an async with here
            try:
                with map_exceptions(what):
                    replies[index] = await script(keys=keys, args=args)
            except Unavailable as exc:  # in its place, as a pipeline's errors are
                replies[index] = exc
            finally:
                limiter.release()

        async with anyio.create_task_group() as tg:
            for index in range(len(calls)):
                tg.start_soon(one, index)
        return replies

    async def run_pipelined(self, what: str, script: Any, calls: ScriptCalls) -> list[Any]:
        """The replies, in order, of ``script`` (:meth:`script`) run once per call (its
        keys and arguments) over the node's one pipelined connection
        (:mod:`.pipelined`: with the other callers' commands of the same loop iteration
        in one write); a refused call's reply is an Unavailable in its place (``what``
        names it).  Calls a server without the script refused (``NOSCRIPT``: a
        restart, SCRIPT FLUSH) are sent again once, after the script is loaded.
        Bounded by the connection itself, not by the boundary (wrap it in :meth:`call`
        for a bound or a metric); fails with Unavailable.  Only when :attr:`pipelined`."""
        connection = self._pipelined
        if connection is None:
            connection = self._pipelined = self._conn.pipelined_connection()
            assert connection is not None, "no pipelined connection on a cluster"
        sha = script.sha
        commands = [pack(["EVALSHA", sha, len(keys), *keys, *args]) for keys, args in calls]
        replies = await connection.run(commands)
        todo = [i for i, reply in enumerate(replies) if refused(reply, "NOSCRIPT")]
        if todo:
            [loaded] = await connection.run([pack(["SCRIPT", "LOAD", script.script])])
            if refused(loaded):
                raise refusal(f"loading the script of {what}", loaded)
            again = await connection.run([commands[i] for i in todo])
            for i, reply in zip(todo, again, strict=True):
                replies[i] = reply
        return [refusal(what, reply) if refused(reply) else reply for reply in replies]

    async def subscribe(self, address: ListenerAddress, waker: Waker) -> PubSubConnection:
        """A new pub/sub listening connection to ``address`` (sharded pub/sub on a
        cluster), dialled as every raw connection of the node; ``waker`` interrupts its
        reader's wait.  It, and every failure of the connection later, fails with
        :class:`~.error_map.PubSubLost` (an Unavailable)."""
        conn = self._conn
        return await connect_pubsub(address, conn.dial, waker=waker, sharded=conn.cluster)

    async def confirmed(self, connections: Iterable[PubSubConnection]) -> None:
        """Return once Redis confirmed every subscription sent on ``connections`` (from
        then on every message published on those channels reaches them), within the
        node's timeout; else :class:`~.error_map.PubSubLost`."""
        try:
            with anyio.fail_after(self._conn.timeout):
                for connection in connections:
                    await connection.confirmed()
        except TimeoutError as exc:
            raise pubsub_lost(exc) from exc

    def batcher(
        self, flush: Callable[[list[Call]], Awaitable[list[Answer]]]
    ) -> CallBatcher[Call, Answer]:
        """A :class:`~.batching.CallBatcher` that sends the calls submitted in one loop
        iteration together through ``flush`` (which goes through :meth:`call` or
        :meth:`run_script`)."""
        return CallBatcher(flush)
