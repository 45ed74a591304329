"""A small TCP proxy for tests: a stand-in for a failover endpoint in front of Redis.

It listens on a free 127.0.0.1 port and forwards every accepted connection to a
target port.  :meth:`TcpProxy.retarget` points it at another server the way a
failover endpoint (DNS name, Sentinel-aware proxy, cloud endpoint) would: every open
connection pair is closed, and new connections go to the new target.

    async with TcpProxy(primary.port) as proxy:
        async with start_node(proxy.url, prefix) as node:
            ...
            await proxy.retarget(replica.port)

Buffers are bounded: each direction reads at most ``chunk`` bytes and writes them out
completely before reading again, so a slow side back-pressures the other instead of
growing a queue.  When either side of a pair closes or fails, both are closed (Redis
clients never half-close).  Leaving the ``async with`` closes the listener and every
pair.  The proxy runs in the caller's event loop (anyio; tests use asyncio).
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Self

import anyio
import anyio.abc

CHUNK_BYTES = 64 * 1024
#: How long retarget() and close waits for the old pairs to be torn down.
CLOSE_TIMEOUT = 5.0
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class _Pair:
    """One accepted client connection and what it forwards to."""

    __slots__ = ("done", "scope")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()


class Forwarder:
    """What the proxy and :class:`tests.support.balancer.Balancer` share: a listener on a
    free 127.0.0.1 port run in the caller's task group scope, and bounded forwarding of
    one accepted connection to an upstream.  Subclasses implement :meth:`_handle`."""

    _name = "proxy"

    def __init__(self, chunk: int) -> None:
        if chunk <= 0:
            raise ValueError("chunk must be positive")
        self._chunk = chunk
        self._listener: anyio.abc.Listener[anyio.abc.SocketStream] | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"the {self._name} is not running")
        return self._port

    async def __aenter__(self) -> Self:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self._port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        self._listener = listener
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._accept_loop, listener, tg)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop listening and close every pair (idempotent)."""
        tg, self._tg = self._tg, None
        listener, self._listener = self._listener, None
        if tg is not None:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
        if listener is not None:
            with contextlib.suppress(*_GONE):
                await listener.aclose()

    async def _accept_loop(
        self, listener: anyio.abc.Listener[anyio.abc.SocketStream], tg: anyio.abc.TaskGroup
    ) -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            await listener.serve(self._handle, task_group=tg)

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        raise NotImplementedError

    async def _forward(
        self, client: anyio.abc.SocketStream, upstream: anyio.abc.SocketStream
    ) -> None:
        """Forward both ways until either side closes or fails; then both are closed."""
        async with upstream, anyio.create_task_group() as tg:
            tg.start_soon(self._pump, client, upstream, tg.cancel_scope)
            tg.start_soon(self._pump, upstream, client, tg.cancel_scope)

    async def _pump(
        self,
        source: anyio.abc.SocketStream,
        sink: anyio.abc.SocketStream,
        pair_scope: anyio.CancelScope,
    ) -> None:
        try:
            while True:
                data = await source.receive(self._chunk)
                await sink.send(data)  # returns once the data is handed to the kernel
        except _GONE:
            pass
        finally:
            pair_scope.cancel()  # one side is gone: close the pair


class TcpProxy(Forwarder):
    """Forward 127.0.0.1:<port> to <target_host>:<target_port>.  See the module docstring."""

    def __init__(
        self, target_port: int, *, target_host: str = "127.0.0.1", chunk: int = CHUNK_BYTES
    ) -> None:
        super().__init__(chunk)
        self._target_host = target_host
        self._target_port = target_port
        self._pairs: set[_Pair] = set()
        #: Connections accepted so far (for assertions and debugging).
        self.accepted = 0
        #: While set, accepted connections are closed at once (see :meth:`partition`).
        self.refusing = False

    # -- properties --------------------------------------------------------

    @property
    def url(self) -> str:
        """A Redis URL that reaches the current target through the proxy."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def target_port(self) -> int:
        return self._target_port

    @property
    def open_pairs(self) -> int:
        return len(self._pairs)

    # -- lifecycle ---------------------------------------------------------

    async def retarget(self, port: int, *, host: str | None = None) -> None:
        """Forward new connections to ``port``; close every open pair and wait for that."""
        self._target_port = port
        if host is not None:
            self._target_host = host
        await self.drop_connections()

    async def partition(self) -> None:
        """A network partition between the two sides: every open pair is closed and new
        connections are closed as soon as they are accepted, until :meth:`heal`."""
        self.refusing = True
        await self.drop_connections()

    def heal(self) -> None:
        """End :meth:`partition`: new connections are forwarded again."""
        self.refusing = False

    async def drop_connections(self) -> None:
        """Close every open pair (both sides); new connections are still accepted."""
        pairs = list(self._pairs)
        for pair in pairs:
            pair.scope.cancel()
        with anyio.fail_after(CLOSE_TIMEOUT):
            for pair in pairs:
                await pair.done.wait()

    # -- forwarding --------------------------------------------------------

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        # Register before the first await, so a retarget() that runs after this handler
        # started (and may have read the old target) always closes it.
        pair = _Pair()
        self._pairs.add(pair)
        self.accepted += 1
        try:
            with pair.scope:
                if self.refusing:
                    return
                try:
                    upstream = await anyio.connect_tcp(self._target_host, self._target_port)
                except OSError:
                    return  # target down: the client sees its connection closed
                await self._forward(client, upstream)
        finally:
            self._pairs.discard(pair)
            await anyio.aclose_forcefully(client)
            pair.done.set()

    def __repr__(self) -> str:
        port = self._port if self._port is not None else "-"
        return f"TcpProxy(port={port}, target={self._target_host}:{self._target_port})"


__all__ = ["Forwarder", "TcpProxy"]
