"""One node's connection to Redis: redis-py's pool (or cluster client) and the pipelined
connection, the error boundary every command goes through, and the node-wide facts the
Redis parts share.  Each concern of its own lives beside it: the URL and settings
(:mod:`..settings`, parsed once), where the servers are (:mod:`.client.topology`), which
server process was reached (:mod:`.client.identity`), the key names (:mod:`..keys`)
and the one error map (:mod:`.client.error_map`).  The store modules reach Redis through
:attr:`RedisConnection.redis` (:class:`~.client.redis_client.RedisClient`) alone.

Every ``redis.exceptions`` error (and socket error) raised inside :meth:`RedisConnection.io`
becomes :class:`~gateway.errors.Unavailable` (:func:`~.client.error_map.map_exceptions`),
and every call there is bounded by ``timeout`` seconds in all (pool wait, retries and
reply): nothing above ``gateway.store.redis`` sees redis-py, and nothing waits out a
Redis that hangs.

Every connection is made of the one :class:`~.settings.RedisSettings` (parsed from the
URL once, see :mod:`.settings`): redis-py's pool or cluster client, the pipelined
connection, the pub/sub connections and the Sentinels alike.  Key layout: docs/storage.md.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.maint_notifications import MaintNotificationsConfig

from gateway.errors import Unavailable
from gateway.loopmetrics import Bins
from gateway.metrics import Metrics
from gateway.store.redis.client.error_map import map_exceptions
from gateway.store.redis.client.identity import ServerIdentity
from gateway.store.redis.client.pipelined import PipelinedConnection
from gateway.store.redis.client.redis_client import RedisClient
from gateway.store.redis.client.resp import Dial, pack
from gateway.store.redis.client.topology import (
    ClusterSeed,
    SentinelResolved,
    SentinelResolvedTLS,
    Topology,
)
from gateway.store.redis.keys import KeyLayout
from gateway.store.redis.settings import (
    CLUSTER,
    SENTINEL,
    UNIX,
    RedisSettings,
    client_name_of,
    parse,
)

#: The writer identity the append step replaces with the shard master's node id.
CLUSTER_IDENTITY = "@cluster"


class RedisConnection:
    """The pool and the node-wide facts the Redis parts share.

    ``identity``, ``suspect`` and ``server_changes`` are the server's
    (:class:`ServerIdentity`, :attr:`server`); ``feed_keys`` and ``fold_key`` the key
    layout's (:class:`KeyLayout`, :attr:`keys`); ``topology``, ``refresh_topology``,
    ``shard_of``, ``listener_address``, ``routed`` and ``master_address`` the
    topology's (:class:`Topology`, :attr:`servers`).
    """

    def __init__(
        self,
        url: str | RedisSettings,
        *,
        prefix: str = "gw",
        node_id: str | None = None,
        max_connections: int = 32,
        metrics: Metrics | None = None,
        timeout: float = 3.0,
        cluster: bool = False,
    ) -> None:
        """``url``: a Redis URL (parsed with ``cluster`` and ``timeout``, see
        :func:`.settings.parse`), or settings parsed already (which say both)."""
        self.node_id = node_id or f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        if isinstance(url, str):
            url = parse(url, cluster=cluster, timeout=timeout)
        #: Every connection's settings; their client name is ``gateway:<node id>``
        #: unless the URL names one.
        self.settings = settings = url.named(client_name_of(self.node_id))
        #: Every command's bound, in seconds (pool wait, retries and reply included).
        self.timeout = settings.timeout
        #: A Redis Cluster: keys of one feed share a slot (their hash tag), live items
        #: go over sharded pub/sub on the feed's shard.
        self.cluster = settings.kind == CLUSTER
        #: How the raw connections (pipelined, pub/sub) open and greet: the TLS
        #: context (certificates loaded once, here) and the handshake's commands.
        self.dial = Dial(
            settings.tls.context() if settings.tls is not None else None,
            [pack(command) for command in settings.handshake()],
            settings.connect_timeout,
        )
        #: Where the servers are.
        self.servers = servers = Topology(settings, self.io)
        self.topology = servers.learn
        self.refresh_topology = servers.refresh
        self.shard_of = servers.shard_of
        self.listener_address = servers.listener_address
        self.routed = servers.routed
        self.master_address = servers.master_address
        #: The server behind the connections (see :class:`ServerIdentity`).
        self.server = ServerIdentity(
            CLUSTER_IDENTITY if self.cluster else settings.identity,
            follows_master=settings.kind == SENTINEL,
        )
        self.reached = self.server.reached
        #: Key names under ``prefix``.
        self.keys = KeyLayout(prefix)
        self.prefix = prefix
        self.feed_keys = self.keys.feed_keys
        self.fold_key = self.keys.fold_key
        self.client: Any = self._client(settings, max_connections)
        servers.client = self.client
        #: The one interface the store modules reach Redis through.
        self.redis = RedisClient(self)
        #: Where command durations go (``gateway_redis_command_seconds``).
        self.metrics = metrics
        self._pipelined: PipelinedConnection | None = None

    def _client(self, settings: RedisSettings, max_connections: int) -> Any:
        """redis-py's cluster client, or a client on a pool of the one server (or of the
        master the Sentinels name)."""
        tls = settings.tls.redis_py() if settings.tls is not None else {}
        if self.cluster:
            # The writer's identity is the shard master's own node id, which the append
            # step reads itself (it knows where it runs; a redirect cannot mislead it).
            return RedisCluster(
                startup_nodes=[ClusterSeed(host, port) for host, port in settings.hosts],
                max_connections=max_connections,
                decode_responses=False,
                socket_connect_timeout=settings.connect_timeout,
                socket_timeout=settings.timeout,
                socket_keepalive=True,
                # Redirects, TRYAGAIN and a shard's failover are followed within the
                # node's bound (io() cancels whatever takes longer).
                retry=Retry(ExponentialBackoff(cap=0.25, base=0.01), 3),
                protocol=2,
                maint_notifications_config=MaintNotificationsConfig(enabled=False),
                client_name=settings.client_name,
                ssl=settings.tls is not None,
                **settings.credentials.redis_py(),
                **tls,
            )
        options: dict[str, Any] = {
            "max_connections": max_connections,
            "timeout": settings.timeout,
            "decode_responses": False,
            "socket_connect_timeout": settings.connect_timeout,
            "health_check_interval": 30,
            # No command here blocks for long (reads wait on pub/sub with their own
            # timeout), so a Redis that stops answering fails calls instead of hanging.
            "socket_timeout": settings.timeout,
            "protocol": 2,
            # After a Redis restart or failover, pooled connections are stale: the pool
            # must notice (its check is skipped while maintenance notifications are on)
            # and a command that meets a dead connection (or a master demoted to a
            # replica: READONLY) is retried on a new one.  Retrying the append step is
            # safe for keyed items: the retry returns the first attempt's cursor.
            "maint_notifications_config": MaintNotificationsConfig(enabled=False),
            "retry": Retry(ExponentialBackoff(cap=0.25, base=0.01), 2),
            "retry_on_error": [
                redis.exceptions.ConnectionError,
                redis.exceptions.TimeoutError,
                redis.exceptions.ReadOnlyError,
            ],
            "redis_connect_func": self._on_connect,
            "db": settings.db,
            "client_name": settings.client_name,
            **settings.credentials.redis_py(),
        }
        if settings.kind != UNIX:
            # As the pipelined connection: a dead peer is found without a write (no such option on a
            # unix socket).
            options["socket_keepalive"] = True
        if settings.kind == SENTINEL:
            pool = aioredis.BlockingConnectionPool(
                connection_class=SentinelResolvedTLS if tls else SentinelResolved,
                resolve=self.servers.master_address,
                **options,
                **tls,
            )
        elif settings.kind == UNIX:
            pool = aioredis.BlockingConnectionPool(
                connection_class=UnixDomainSocketConnection, path=settings.path, **options
            )
        else:
            host, port = settings.hosts[0]
            pool = aioredis.BlockingConnectionPool(
                connection_class=SSLConnection if tls else Connection,
                host=host,
                port=port,
                **options,
                **tls,
            )
        # redis-py's own annotations are looser than its replies; the adapter owns them.
        return aioredis.Redis(connection_pool=pool)

    # -- the server behind the connections -------------------------------------------

    @property
    def identity(self) -> str:
        """The server the node writes to (:attr:`ServerIdentity.identity`)."""
        return self.server.identity

    @property
    def suspect(self) -> bool:
        """The node reached another server process, or lost a listener: the live reader
        verifies every feed it follows before reading on (:class:`ServerIdentity`)."""
        return self.server.suspect

    @suspect.setter
    def suspect(self, value: bool) -> None:
        self.server.suspect = value

    @property
    def server_changes(self) -> int:
        """How many times this node found itself talking to another Redis process."""
        return self.server.server_changes

    async def _on_connect(self, connection: Any) -> None:
        """Every new connection of the pool: the usual handshake, then note which server
        it reached (:meth:`ServerIdentity.reached`)."""
        try:
            await connection.on_connect_check_health(check_health=True)
            await connection.send_command("INFO", "server")
            info = await connection.read_response()
        except RuntimeError as exc:
            # uvloop reports a transport closed under the handshake as RuntimeError: it
            # is a failed connection like any other (retried, or Unavailable).
            raise redis.exceptions.ConnectionError(f"connection lost: {exc}") from exc
        path = getattr(connection, "path", None)  # a unix socket's connection has no host
        self.reached(bytes(info), path or f"{connection.host}:{connection.port}")

    def pipelined_connection(self) -> PipelinedConnection | None:
        """The node's one pipelined connection for the append step
        (:mod:`.client.pipelined`), made on first use; None on a cluster, whose keys live
        on their own shards."""
        if self.cluster:
            return None
        if self._pipelined is None:
            self._pipelined = PipelinedConnection(self)
        return self._pipelined

    @property
    def publish_command(self) -> str:
        """How the append step announces items: sharded pub/sub on a cluster."""
        return "SPUBLISH" if self.cluster else "PUBLISH"

    # -- the boundary --------------------------------------------------------------------

    @contextlib.contextmanager
    def io(
        self, what: str, command: str | None = None, *, within: float | None = None
    ) -> Iterator[None]:
        """Translate failures to Unavailable (:func:`map_exceptions`), bound the call
        (``within`` seconds, default :attr:`timeout`) and time the command (if named).

        A call with the default bound is shielded from its caller's cancellation: it
        ends (answered, failed or timed out) within the bound, and only then does the
        cancellation take effect.  redis-py drops a connection whose command was
        cancelled in flight (its reply state is unknown), so without the shield every
        client that leaves while its history is being read, which is most reconnects,
        costs the pool a connection and the next caller a connect and a handshake.
        Blocking reads (``within`` given) wait for producers and stay cancellable.
        """
        # A failed command alone is no reason to verify everything: a restart or a
        # failover shows as a new run_id (_on_connect) or a lost listener.
        started = time.perf_counter()
        bound = self.timeout if within is None else within
        try:
            with map_exceptions(what):
                try:
                    with anyio.fail_after(bound, shield=within is None):
                        yield
                except TimeoutError as exc:
                    raise Unavailable(f"redis did not answer {what} within {bound:g} s") from exc
        finally:
            if command is not None:
                self.observe(command, time.perf_counter() - started)

    def observe(self, command: str, seconds: float) -> None:
        series = self.command_seconds(command)
        if series is not None:
            series.observe(seconds)

    def command_seconds(self, command: str) -> Bins | None:
        """The ``gateway_redis_command_seconds`` series of ``command`` (None without
        metrics); a caller that times it on every call (the append step) keeps it."""
        if self.metrics is None:
            return None
        return self.metrics.redis_command_seconds.labels(command)

    def metrics_rotation(self, reason: str, lost: int) -> None:
        if self.metrics is not None:
            self.metrics.epoch_rotations.labels(reason=reason).inc()
            if lost:
                self.metrics.lost_items.inc(lost)

    def metrics_unreplicated(self) -> None:
        if self.metrics is not None:
            self.metrics.unreplicated_appends.inc()

    async def ping(self) -> None:
        """The server answers (on a cluster: every master that serves slots)."""
        if not self.cluster:
            with self.io("ping", "ping"):
                await self.client.ping()
            return
        await self.topology()
        try:
            with self.io("ping", "ping"):
                await self.client.ping(target_nodes=self.servers.primaries())
        except Unavailable:
            # A shard master may have failed over: learn the new map for the next ping.
            with contextlib.suppress(Unavailable):
                await self.refresh_topology()
            raise

    async def aclose(self) -> None:
        if self._pipelined is not None:
            self._pipelined.close()
        with contextlib.suppress(Exception):
            await self.client.aclose()
        await self.servers.aclose()
