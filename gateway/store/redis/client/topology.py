"""Where the Redis servers are: the one server, the master the Sentinels name, or the
shards of a Redis Cluster, and where each raw connection (the pipelined one, a pub/sub
listener) must go now.

``redis://``, ``rediss://`` and ``unix://`` name one server (with ``cluster``, seed
nodes of a Redis Cluster: the client finds every shard and follows ``MOVED``/``ASK``
redirects, resharding and failovers by itself); ``redis+sentinel://``
(``rediss+sentinel://`` for TLS to the master) names the Sentinels that know the
master: every new connection asks them where the master is now, so after a failover
the node follows the new master by itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import redis.asyncio.cluster as _redis_cluster
import redis.exceptions
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import Connection, SSLConnection
from redis.asyncio.sentinel import Sentinel

from gateway.store.redis.client.resp import describe
from gateway.store.redis.settings import CLUSTER, SENTINEL, UNIX, RedisSettings


class _LastReleasedFirst(ClusterNode):
    """A cluster node that hands out its most recently released connection first.

    redis-py (8.1) follows an ASK redirect by sending ``ASKING`` as a pooled command of
    its own and then the redirected command on whatever connection the node hands out
    next.  Its free list is first-in first-out, so with two or more idle connections the
    command goes out on another connection than ``ASKING``: the importing shard answers
    MOVED, the owner ASK again, until "TTL exhausted", and a feed whose slot is half
    migrated takes no write.  Last-released-first puts both on one connection (nothing
    runs between the two: no await separates ASKING's release from the next acquire).
    """

    def acquire_connection(self) -> Any:
        try:
            return self._free.pop()
        except IndexError:
            return super().acquire_connection()


# The nodes the cluster client makes for itself (from the slot map, on redirects) are
# made by name in redis-py's module: this is the one place that name is replaced.
_redis_cluster.ClusterNode = _LastReleasedFirst  # type: ignore[misc]

#: A cluster node as the cluster client should make it (see _LastReleasedFirst).
ClusterSeed = _LastReleasedFirst


class SentinelResolved(Connection):
    """A connection that asks the Sentinels for the master's address each time it
    connects (after a failover the pool's stale connections fail and reconnect here)."""

    def __init__(self, *, resolve: Callable[[], Any], **kwargs: Any) -> None:
        self._resolve = resolve
        super().__init__(**kwargs)

    async def _connect(self) -> None:
        self.host, self.port = await self._resolve()
        await super()._connect()  # type: ignore[no-untyped-call]


class SentinelResolvedTLS(SentinelResolved, SSLConnection):
    pass


@dataclass(frozen=True)
class ListenerAddress:
    """Where a raw connection (the pipelined one, a pub/sub one) goes: the one server, the
    master, or a shard's master; how it connects and greets is the node's
    ``RedisConnection.dial``."""

    host: str
    port: int
    path: str | None = None


#: Maps failures and bounds a call (``RedisConnection.io``): ``io(what)``.
IO = Callable[[str], contextlib.AbstractContextManager[None]]


class Topology:
    """Where the servers named by ``settings`` are, for one node.

    ``client`` is the node's redis-py client (set once it is made); on a cluster its
    slot map says which shard serves which key.  ``io`` maps failures and bounds each
    call (the connection's boundary)."""

    def __init__(self, settings: RedisSettings, io: IO) -> None:
        self.settings = settings
        self.cluster = settings.kind == CLUSTER
        self.client: Any = None
        self._io = io
        self._ready = False
        self._lock = anyio.Lock()
        #: The Sentinels (Sentinel URLs only).
        self.sentinel: Sentinel | None = None
        if settings.kind == SENTINEL:
            self.sentinel = Sentinel(  # type: ignore[no-untyped-call]
                list(settings.hosts),
                sentinel_kwargs=settings.sentinel_kwargs(),
                socket_timeout=settings.timeout,
            )

    async def master_address(self) -> tuple[str, int]:
        """The master's address, asked of the Sentinels (Sentinel URLs only)."""
        assert self.sentinel is not None and self.settings.master is not None
        try:
            host, port = await self.sentinel.discover_master(self.settings.master)
        except redis.exceptions.RedisError as exc:
            raise redis.exceptions.ConnectionError(
                f"no master from the sentinels: {describe(exc)}"
            ) from exc
        return str(host), int(port)

    async def learn(self) -> None:
        """Learn the cluster's shards (once; redirects keep it current afterwards).

        Single-flight: redis-py's cluster client set up by several first commands at
        once loses some of their connections (``'NoneType' object has no attribute
        'writelines'``), so concurrent first callers wait for one initialisation."""
        if self.cluster and not self._ready:
            async with self._lock:
                if not self._ready:
                    with self._io("cluster topology"):
                        await self.client.initialize()
                    self._ready = True

    async def refresh(self) -> None:
        """Ask the cluster again who serves which slots (after a listener was refused or
        lost: a failover or a migration)."""
        if self.cluster:
            with self._io("cluster topology"):
                await self.client.nodes_manager.initialize()
            self._ready = True

    def shard_of(self, key: bytes) -> ListenerAddress:
        """Where a key's shard master is (cluster only; :meth:`learn` first)."""
        node = self.client.get_node_from_key(key)
        return ListenerAddress(str(node.host), int(node.port))

    async def listener_address(self) -> ListenerAddress:
        """Where the node's raw connections (pipelined, pub/sub) must go now
        (not a cluster): the one server, or the master the Sentinels name."""
        settings = self.settings
        if settings.kind == SENTINEL:
            with self._io("sentinel"):
                host, port = await self.master_address()
            return ListenerAddress(host, port)
        if settings.kind == UNIX:
            return ListenerAddress("localhost", 0, settings.path)
        host, port = settings.hosts[0]
        return ListenerAddress(host, port)

    def routed(self, key: bytes | str) -> dict[str, Any]:
        """Keyword arguments for a command on ``key`` that send it straight to the
        shard serving the key (on a cluster; nothing otherwise).  For XREAD and
        XREADGROUP redis-py would first ask a server which of the arguments are keys
        (``COMMAND GETKEYS``): one more round trip per command, and per command of a
        pipeline.  Redirects are still followed.  Until the client has learnt the slot
        map nothing is named: redis-py finds the shard itself."""
        if not self.cluster or not self.client.nodes_manager.slots_cache:
            return {}
        return {"target_nodes": self.client.get_node_from_key(key)}

    def primaries(self) -> list[Any]:
        """Every master that serves slots (cluster only; from the slot map known now)."""
        return list(
            {
                nodes[0].name: nodes[0]
                for nodes in self.client.nodes_manager.slots_cache.values()
                if nodes
            }.values()
        )

    async def aclose(self) -> None:
        if self.sentinel is not None:
            with contextlib.suppress(Exception):
                await self.sentinel.aclose()
