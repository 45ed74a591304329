"""The pipelined connection: one raw connection to Redis for the append step and the verify.

redis-py costs about 150-180 us of CPU per append round trip on the project's VM (a
pooled connection checked out and back, its retry wrapper, its asyncio timeouts,
packing, a Python reply parser around hiredis), a third of a single-event publish.  A
:class:`PipelinedConnection` is an asyncio protocol on one connection: commands are
packed by hand (RESP2) and written at once, many callers' commands on the wire together,
and every reply is parsed by hiredis in ``data_received`` and handed to the future
waiting for it, in order.

What redis-py's pool did for these calls it does too, in :meth:`PipelinedConnection.run`:

- the handshake: the node's (``AUTH``, ``CLIENT SETNAME``, ``SELECT``, over TLS as its
  settings say, see ``RedisConnection.dial``) and ``INFO server``, whose ``run_id`` goes to
  ``RedisConnection.reached`` (a restart or a failover makes the node verify what it
  follows); with a Sentinel URL the master's address is asked of the Sentinels on every
  connect;
- retries: a command whose connection was lost before its reply, or that a demoted master
  refused (``READONLY``), is sent again on a new connection, twice at most, after a short
  back-off.  Commands answered before the loss are not sent again.  This is what
  redis-py's retry did for the append step (retrying it is safe for keyed items: the
  retry returns the first attempt's cursor);
- ``NOSCRIPT`` (a restarted server, ``SCRIPT FLUSH``): the caller loads the script and
  sends just those commands again (``RedisClient.run_pipelined``).

Commands are written at once when nothing is outstanding, else once per loop iteration:
every caller whose command came meanwhile shares one write (and Redis one read), with no
task, lock or cancel scope per call. It is not for a cluster (each key has its
shard) nor for blocking commands. It bounds every write itself: a write left
unanswered for the connection's ``timeout`` closes the connection and fails every call
waiting on it (Unavailable, not sent again), so a Redis that stopped answering is not
waited on again. A caller that is cancelled leaves without harm to the others: its
replies are dropped in their turn (the order of replies names each one's caller).
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol, cast

import anyio
import hiredis

from gateway.store.redis.client.error_map import map_exceptions, refusal
from gateway.store.redis.client.faults import PipelinedConnectionLost, PipelinedConnectionTimeout
from gateway.store.redis.client.resp import Address, Dial, open_raw, pack, refused


class Server(Protocol):
    """What a pipelined connection needs of its ``RedisConnection``."""

    timeout: float
    dial: Dial

    async def listener_address(self) -> Address: ...

    def reached(self, info: bytes, address: str) -> None: ...


#: Sends of one command at most (the first and two retries).
ATTEMPTS = 3
#: Back-off before each retry, in seconds (redis-py's was 10 ms doubling, capped).
BACKOFF = (0.01, 0.05)


class _Pipe(asyncio.Protocol):
    """The connection: writes commands, hands each reply to the oldest waiting future,
    and gives up on a Redis that leaves a write unanswered for ``bound`` seconds (every
    waiting future fails with PipelinedConnectionTimeout).

    A command sent while nothing is outstanding is written at once (Redis starts on it
    while the loop goes on); one sent while replies are due waits for the next
    iteration (``call_soon``), so every caller whose command came meanwhile shares one
    write.  Deferring every write instead (as the CallBatcher's one-iteration wait did)
    made pipelined publishes run in lock-step waves, the loop idle while Redis worked
    through each (1x8 rows of ``bench/publish.py``: 0.7 of a core, 30% fewer requests/s).
    The buffer is emptied at every iteration.
    """

    def __init__(self, owner: PipelinedConnection, bound: float) -> None:
        self._owner = owner
        self._bound = bound
        self._reader = hiredis.Reader()
        self._asyncio_transport: asyncio.Transport | None = None
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._out: list[bytes] = []
        self._scheduled = False
        #: Futures made and replies handed out so far: the write whose futures ran up
        #: to ``mark`` is answered once ``answered`` reaches it.
        self._made = 0
        self._answered = 0
        #: Per write still unanswered, oldest first: its mark and when it is due.
        self._due: deque[tuple[int, float]] = deque()
        #: One timer for them all, set for the oldest write's time or earlier, and set
        #: again when it finds that write answered (a timer made and cancelled per
        #: write was ~1 us of each).
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self.lost: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._asyncio_transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        waiting = self._waiting
        while True:
            reply = self._reader.gets()
            if reply is False:
                break
            if not waiting:
                # A reply nobody asked for: the connection is out of step.
                self.abort(PipelinedConnectionLost("redis sent a reply nobody asked for"))
                return
            self._answered += 1
            future = waiting.popleft()
            if not future.done():  # a caller that stopped waiting: dropped, in its turn
                future.set_result(reply)
        due = self._due
        while due and due[0][0] <= self._answered:
            due.popleft()

    def connection_lost(self, exc: Exception | None) -> None:
        self._asyncio_transport = None
        self._fail(PipelinedConnectionLost(f"redis connection lost: {exc or 'closed'}"))

    def _fail(self, exc: Exception) -> None:
        if self.lost is None:
            self.lost = exc
        self._out.clear()
        self._due.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(self.lost)
                future.exception()  # its caller may be gone: nothing to log at exit

    def abort(self, exc: Exception) -> None:
        self._fail(exc)
        if self._asyncio_transport is not None:
            self._asyncio_transport.abort()

    def send(self, commands: Sequence[bytes]) -> list[asyncio.Future[Any]]:
        """Write packed commands now if nothing is outstanding, else with this
        iteration's other commands; a future for each reply, in order."""
        if self.lost is not None or self._asyncio_transport is None:
            raise self.lost or PipelinedConnectionLost("redis connection is closed")
        loop = self._loop
        futures = [loop.create_future() for _ in commands]
        idle = not self._waiting
        self._waiting.extend(futures)
        self._made += len(futures)
        self._out.extend(commands)
        if self._scheduled:
            return futures
        if idle:
            # Nothing outstanding: Redis would sit idle for an iteration; write now.
            self._write()
        else:
            # Replies due: what comes meanwhile goes in one write, next iteration.
            self._scheduled = True
            loop.call_soon(self._write)
        return futures

    def _write(self) -> None:
        self._scheduled = False
        if not self._out or self._asyncio_transport is None:
            return
        data = b"".join(self._out)
        self._out.clear()
        self._asyncio_transport.write(data)
        self._owner.writes += 1
        when = self._loop.time() + self._bound
        self._due.append((self._made, when))
        if self._timer is None:
            self._timer = self._loop.call_at(when, self._check)

    def _check(self) -> None:
        """The timer: fail everything if the oldest unanswered write is overdue, else
        wait for it (or for nothing, with every write answered)."""
        self._timer = None
        if not self._due:
            return
        when = self._due[0][1]
        if self._loop.time() < when:
            self._timer = self._loop.call_at(when, self._check)
            return
        self.abort(PipelinedConnectionTimeout(f"redis did not answer within {self._bound:g} s"))


class PipelinedConnection:
    """One node's pipelined connection to the Redis its ``RedisConnection`` names (not
    a cluster).

    :meth:`run` sends commands and returns their replies in order: values as hiredis
    parses them (bytes, int, lists), a refused command as its ``hiredis.ReplyError`` in
    its place.  It raises :class:`~gateway.errors.Unavailable` when the connection could
    not be made or was lost with commands unanswered after every attempt, or when Redis
    left them unanswered for the connection's ``timeout``.  Commands go out at once when
    nothing is outstanding, else every caller's of the loop iteration in one write.
    """

    def __init__(self, conn: Server) -> None:
        self._conn = conn
        self._pipe: _Pipe | None = None
        self._connecting = anyio.Lock()
        #: Connections made (the first and every one after a loss), and writes made
        #: (see :class:`_Pipe`), for tests and benchmarks.
        self.connects = 0
        self.writes = 0
        self._closed = False

    async def run(self, commands: Sequence[bytes]) -> list[Any]:
        if not commands:
            return []
        with map_exceptions("the pipelined connection"):
            return await self._run(commands)

    async def _run(self, commands: Sequence[bytes]) -> list[Any]:
        """:meth:`run`, raising the connection's own failures (mapped by the caller)."""
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        for attempt in range(ATTEMPTS):
            if attempt:
                await anyio.sleep(BACKOFF[min(attempt, len(BACKOFF)) - 1])
            try:
                pipe = await self._connected()
                futures = pipe.send([commands[i] for i in todo])
            except OSError as exc:  # PipelinedConnectionLost and TimeoutError among them
                failure: Exception = exc
                continue
            try:
                # Replies come in order (and a loss fails every future at once): when
                # the last is done, all are.  A caller cancelled here simply leaves:
                # its replies are dropped in their turn, and the callers whose commands
                # share its write still get theirs.
                await futures[-1]
            except PipelinedConnectionTimeout:
                # Redis stopped answering: not sent again (the connection's bound is the call's).
                raise
            except PipelinedConnectionLost:
                pass
            again: list[int] = []
            failure = PipelinedConnectionLost("redis refused the write: READONLY")
            for i, future in zip(todo, futures, strict=True):
                if future.exception() is not None:
                    failure = cast(Exception, future.exception())
                    again.append(i)
                elif refused(future.result(), "READONLY"):
                    # A master demoted to a replica: the write did not run; find the
                    # master again (a Sentinel URL asks on connect).
                    again.append(i)
                    pipe.abort(PipelinedConnectionLost("the server is a replica now"))
                else:
                    replies[i] = future.result()
            if self._pipe is pipe and pipe.lost is not None:
                self._pipe = None
            if not again:
                return replies
            todo = again
        raise failure

    async def _connected(self) -> _Pipe:
        pipe = self._pipe
        if pipe is not None and pipe.lost is None:
            return pipe
        # Acquired and released by hand: no wait in the body of an async with in a
        # compiled module (CONTRIBUTING.md); the release does not wait.
        await self._connecting.acquire()
        try:
            pipe = self._pipe
            if pipe is not None and pipe.lost is None:
                return pipe
            if self._closed:
                raise PipelinedConnectionLost("the pipelined connection is closed")
            self._pipe = None
            pipe = await self._connect()
            self._pipe = pipe
            return pipe
        finally:
            self._connecting.release()

    async def _connect(self) -> _Pipe:
        conn = self._conn
        address = await conn.listener_address()
        dial = conn.dial
        with anyio.fail_after(dial.within):  # the connect and the handshake together
            transport, pipe = await open_raw(address, dial, lambda: _Pipe(self, conn.timeout))
            self.connects += 1
            sock = transport.get_extra_info("socket")
            if sock is not None and address.path is None:
                # As redis-py's pool: a dead peer is found without a write.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            handshake = [*dial.handshake, pack(["INFO", "server"])]
            futures = pipe.send(handshake)
            try:
                await futures[-1]
            except BaseException:
                pipe.abort(PipelinedConnectionLost("handshake abandoned"))
                raise
        replies = [future.result() for future in futures]  # PipelinedConnectionLost if lost
        for reply in replies:
            if refused(reply):
                pipe.abort(PipelinedConnectionLost(f"redis refused the handshake: {reply}"))
                raise refusal("the pipelined connection's handshake", reply)
        conn.reached(bytes(replies[-1]), address.path or f"{address.host}:{address.port}")
        return pipe

    def close(self) -> None:
        self._closed = True
        if self._pipe is not None:
            self._pipe.abort(PipelinedConnectionLost("the pipelined connection is closed"))
            self._pipe = None
