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

from collections.abc import Sequence

import anyio
import anyio.abc

from tests.support.tcp_proxy import CHUNK_BYTES, Forwarder


class Balancer(Forwarder):
    """Round-robin over ``ports`` on ``host``.  See the module docstring."""

    _name = "balancer"

    def __init__(
        self, ports: Sequence[int], *, host: str = "127.0.0.1", chunk: int = CHUNK_BYTES
    ) -> None:
        if not ports:
            raise ValueError("a balancer needs at least one upstream")
        super().__init__(chunk)
        self._ports = list(ports)
        self._host = host
        self._next = 0
        self._down: set[int] = set()
        self._routes: dict[int, int] = {}
        #: Connections forwarded so far, per upstream port.
        self.forwarded: dict[int, int] = dict.fromkeys(self._ports, 0)
        #: Connections an upstream refused (the next one was tried), per upstream port.
        self.refused: dict[int, int] = dict.fromkeys(self._ports, 0)

    # -- properties --------------------------------------------------------

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

    # -- forwarding --------------------------------------------------------

    def _candidates(self) -> list[int]:
        """Upstreams in round-robin order from the next one, those marked down left out."""
        start = self._next
        self._next = (self._next + 1) % len(self._ports)
        order = self._ports[start:] + self._ports[:start]
        return [p for p in order if p not in self._down]

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
                await self._forward(client, upstream)
                return
            # No upstream took it: the client sees its connection closed.
        finally:
            await anyio.aclose_forcefully(client)

    def __repr__(self) -> str:
        port = self._port if self._port is not None else "-"
        return f"Balancer(port={port}, upstreams={self._ports}, down={sorted(self._down)})"


__all__ = ["Balancer"]
