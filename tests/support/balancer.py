"""A round-robin TCP load balancer for tests: a stand-in for the one in front of gateways.

It listens on a free 127.0.0.1 port and forwards each accepted connection to the next
upstream port in turn, skipping upstreams marked down (what a load balancer does once
an upstream's readiness check fails) and trying the next one when an upstream refuses
the connection (what it does when a node stopped listening before its health check
noticed).  It remembers which upstream each connection went to, by the client's local
port, so a test can tell which node serves one of its connections::

    async with Balancer([a.port, b.port]) as lb:
        async with connect(f"ws://127.0.0.1:{lb.port}/v1/ws", ...) as ws:
            node_port = lb.upstream_of(ws.local_address[1])
        lb.mark_down(a.port)   # new connections go to b only

Buffers are bounded like :class:`tests.support.tcp_proxy.TcpProxy`'s: each direction
reads at most ``chunk`` bytes and writes them out before reading again.  When either
side of a pair closes or fails, both are closed.  Leaving the ``async with`` closes the
listener and every pair.  Runs in the caller's event loop (anyio).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from types import TracebackType

import anyio
import anyio.abc

CHUNK_BYTES = 64 * 1024
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class Balancer:
    """Round-robin over ``ports`` on ``host``.  See the module docstring."""

    def __init__(
        self, ports: Sequence[int], *, host: str = "127.0.0.1", chunk: int = CHUNK_BYTES
    ) -> None:
        if not ports:
            raise ValueError("a balancer needs at least one upstream")
        if chunk <= 0:
            raise ValueError("chunk must be positive")
        self._ports = list(ports)
        self._host = host
        self._chunk = chunk
        self._next = 0
        self._down: set[int] = set()
        self._routes: dict[int, int] = {}
        self._listener: anyio.abc.Listener[anyio.abc.SocketStream] | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._port: int | None = None
        #: Connections forwarded so far, per upstream port.
        self.forwarded: dict[int, int] = dict.fromkeys(self._ports, 0)
        #: Connections an upstream refused (the next one was tried), per upstream port.
        self.refused: dict[int, int] = dict.fromkeys(self._ports, 0)

    # -- properties --------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the balancer is not running")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the gateways behind the balancer."""
        return f"http://127.0.0.1:{self.port}"

    def upstream_of(self, client_port: int) -> int | None:
        """The upstream port of the latest connection from ``client_port`` (None: unknown)."""
        return self._routes.get(client_port)

    def mark_down(self, port: int) -> None:
        """Send no new connections to ``port`` (open ones stay)."""
        self._down.add(port)

    def mark_up(self, port: int) -> None:
        self._down.discard(port)

    # -- lifecycle ---------------------------------------------------------

    async def __aenter__(self) -> Balancer:
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

    # -- forwarding --------------------------------------------------------

    def _candidates(self) -> list[int]:
        """Upstreams in round-robin order from the next one, those marked down left out."""
        start = self._next
        self._next = (self._next + 1) % len(self._ports)
        order = self._ports[start:] + self._ports[:start]
        return [p for p in order if p not in self._down]

    async def _accept_loop(
        self, listener: anyio.abc.Listener[anyio.abc.SocketStream], tg: anyio.abc.TaskGroup
    ) -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            await listener.serve(self._handle, task_group=tg)

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        client_port = int(client.extra(anyio.abc.SocketAttribute.remote_port))
        try:
            for port in self._candidates():
                try:
                    upstream = await anyio.connect_tcp(self._host, port)
                except OSError:
                    self.refused[port] += 1
                    continue
                # Recorded before any byte is forwarded: a client that has an answer
                # always finds its route.
                self._routes[client_port] = port
                self.forwarded[port] += 1
                async with upstream, anyio.create_task_group() as tg:
                    tg.start_soon(self._pump, client, upstream, tg.cancel_scope)
                    tg.start_soon(self._pump, upstream, client, tg.cancel_scope)
                return
            # No upstream took it: the client sees its connection closed.
        finally:
            await anyio.aclose_forcefully(client)

    async def _pump(
        self,
        source: anyio.abc.SocketStream,
        sink: anyio.abc.SocketStream,
        pair_scope: anyio.CancelScope,
    ) -> None:
        try:
            while True:
                await sink.send(await source.receive(self._chunk))
        except _GONE:
            pass
        finally:
            pair_scope.cancel()  # one side is gone: close the pair

    def __repr__(self) -> str:
        port = self._port if self._port is not None else "-"
        return f"Balancer(port={port}, upstreams={self._ports}, down={sorted(self._down)})"


__all__ = ["Balancer"]
