"""One node's connection to Redis: the client pool, the key names, the error boundary,
and what every part of the Redis adapter must know about the server it talks to.

Every ``redis.exceptions`` error (and socket error) raised inside :meth:`RedisConnection.io`
becomes :class:`~gateway.errors.Unavailable`, and every call there is bounded by
``timeout`` seconds in all (pool wait, retries and reply): nothing above
``gateway.store.redis`` sees redis-py, and nothing waits out a Redis that hangs.

Every connection is made of the one :class:`~.settings.RedisSettings` (parsed from the
URL once, see :mod:`.settings`): redis-py's pool or cluster client, the lane, the pub/sub
listeners and the Sentinels alike.  ``redis://``, ``rediss://`` and ``unix://`` name one
server (with ``cluster``, seed nodes of a Redis Cluster: the client finds every shard and
follows ``MOVED``/``ASK`` redirects, resharding and failovers by itself);
``redis+sentinel://`` (``rediss+sentinel://`` for TLS to the master) names the Sentinels
that know the master: every new connection asks them where the master is now, so after a
failover the node follows the new master by itself.  Key layout: docs/storage.md.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import redis.asyncio as aioredis
import redis.asyncio.cluster as _redis_cluster
import redis.exceptions
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.maint_notifications import MaintNotificationsConfig

from gateway.errors import Unavailable
from gateway.feed import FeedKey, FeedState
from gateway.loopmetrics import Bins
from gateway.metrics import Metrics
from gateway.store.redis.lane import Lane
from gateway.store.redis.resp import Dial, describe, pack
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


@contextlib.contextmanager
def translate(what: str) -> Iterator[None]:
    """Map redis-py and socket failures to Unavailable (the boundary of the adapter),
    whose message keeps the cause (:func:`describe`): a wrong password, a certificate
    that does not verify, a name that does not resolve each say so."""
    try:
        yield
    except redis.exceptions.ResponseError as exc:
        raise Unavailable(f"redis rejected {what}: {describe(exc)}") from exc
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
        # RedisClusterException: no node serves the key's slot now (a cluster changing).
        raise Unavailable(f"redis unavailable during {what}: {describe(exc)}") from exc
    except RuntimeError as exc:
        # A transport closed under a write (uvloop says so with RuntimeError).
        if "closed" not in str(exc):
            raise
        raise Unavailable(f"redis connection lost during {what}: {describe(exc)}") from exc
    except AttributeError as exc:
        # redis-py's cluster client can close a connection another task has just
        # taken (its writer is then None) while it refreshes the slot map: a lost
        # connection, like any other.  An AttributeError of our own is a bug: raised.
        if not _raised_in_redis(exc):
            raise
        raise Unavailable(f"redis connection lost during {what}: {describe(exc)}") from exc


def _raised_in_redis(exc: BaseException) -> bool:
    """Whether ``exc`` was raised in redis-py's own code (by module: this adapter's
    files live under a ``redis`` directory too)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    return isinstance(module, str) and module.split(".")[0] == "redis"


class _SentinelResolved(Connection):
    """A connection that asks the Sentinels for the master's address each time it
    connects (after a failover the pool's stale connections fail and reconnect here)."""

    def __init__(self, *, resolve: Callable[[], Any], **kwargs: Any) -> None:
        self._resolve = resolve
        super().__init__(**kwargs)

    async def _connect(self) -> None:
        self.host, self.port = await self._resolve()
        await super()._connect()  # type: ignore[no-untyped-call]


class _SentinelResolvedTLS(_SentinelResolved, SSLConnection):
    pass


@dataclass(frozen=True)
class ListenerAddress:
    """Where a raw connection (the lane, a pub/sub listener) goes: the one server, the
    master, or a shard's master; how it connects and greets is the node's
    :attr:`RedisConnection.dial`."""

    host: str
    port: int
    path: str | None = None


class RedisConnection:
    """The pool and the node-wide facts the Redis parts share.

    ``identity`` is the server the node last connected to (``host:port`` as configured,
    or the master's address from the Sentinels): the append step records it with every
    feed and moves a feed last written on another server to a new epoch.  ``suspect``
    is set when the node reaches a different Redis server process (a restart, a
    failover) or its listener was lost: the live reader then verifies every feed it
    follows before reading on.  ``pending_resets`` holds feeds a request moved to a new
    epoch; the reader reports them to the followers.
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
        #: How the raw connections (the lane, the listeners) open and greet: the TLS
        #: context (certificates loaded once, here) and the handshake's commands.
        self.dial = Dial(
            settings.tls.context() if settings.tls is not None else None,
            [pack(command) for command in settings.handshake()],
            settings.connect_timeout,
        )
        tls = settings.tls.redis_py() if settings.tls is not None else {}
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
            # As the lane: a dead peer is found without a write (no such option on a
            # unix socket).
            options["socket_keepalive"] = True
        self._sentinel: Sentinel | None = None
        self._topology_ready = False
        self._topology_lock = anyio.Lock()
        self._configured_identity = settings.identity
        if self.cluster:
            self.client: Any = RedisCluster(
                startup_nodes=[_LastReleasedFirst(host, port) for host, port in settings.hosts],
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
            # The writer's identity is the shard master's own node id, which the append
            # step reads itself (it knows where it runs; a redirect cannot mislead it).
            self._configured_identity = CLUSTER_IDENTITY
        elif settings.kind == SENTINEL:
            self._sentinel = Sentinel(  # type: ignore[no-untyped-call]
                list(settings.hosts),
                sentinel_kwargs=settings.sentinel_kwargs(),
                socket_timeout=settings.timeout,
            )
            pool = aioredis.BlockingConnectionPool(
                connection_class=_SentinelResolvedTLS if tls else _SentinelResolved,
                resolve=self.master_address,
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
        if not self.cluster:
            # redis-py's own annotations are looser than its replies; the adapter owns them.
            self.client = aioredis.Redis(connection_pool=pool)
        self.prefix = prefix
        #: Feed key names already built (see :meth:`feed_keys`), bounded.
        self._feed_keys: dict[FeedKey, tuple[str, str, str]] = {}
        #: Where command durations go (``gateway_redis_command_seconds``).
        self.metrics = metrics
        self.suspect = False
        #: Set by :meth:`wake`; the live reader re-reads its subscriptions when set.
        self.woken = False
        #: Called by :meth:`wake` to interrupt the live reader's wait (set by it).
        self.on_wake: Callable[[], None] | None = None
        self.pending_resets: dict[FeedKey, FeedState] = {}
        #: The server the node writes to (see the class docstring).
        self.identity = self._configured_identity
        # The identity of the Redis server process last connected to (INFO run_id).
        self._run_id: bytes | None = None
        #: How many times this node found itself talking to another Redis process.
        self.server_changes = 0
        self._lane: Lane | None = None

    async def master_address(self) -> tuple[str, int]:
        """The master's address, asked of the Sentinels (Sentinel URLs only)."""
        assert self._sentinel is not None and self.settings.master is not None
        try:
            host, port = await self._sentinel.discover_master(self.settings.master)
        except redis.exceptions.RedisError as exc:
            raise redis.exceptions.ConnectionError(
                f"no master from the sentinels: {describe(exc)}"
            ) from exc
        return str(host), int(port)

    async def _on_connect(self, connection: Any) -> None:
        """Every new connection: the usual handshake, then note which server it reached.

        Commands retried on a fresh connection hide a restart from the callers; the
        server's ``run_id`` does not: when it changes, everything this node follows is
        verified before it reads on (a restored snapshot or a promoted replica may have
        rolled feeds back).
        """
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

    def reached(self, info: bytes, address: str) -> None:
        """A new connection reached the server at ``address`` (``host:port``), whose
        ``INFO server`` reply is ``info``: note which server this node writes to now
        (Sentinel URLs), and whether its ``run_id`` names another process than before
        (see :meth:`_on_connect`)."""
        run_id = None
        for line in info.splitlines():
            if line.startswith(b"run_id:"):
                run_id = line[7:].strip()
        if self._sentinel is not None:
            self.identity = address
        if run_id != self._run_id:
            if self._run_id is not None:
                self.suspect = True
                self.server_changes += 1
            self._run_id = run_id

    async def topology(self) -> None:
        """Learn the cluster's shards (once; redirects keep it current afterwards).

        Single-flight: redis-py's cluster client set up by several first commands at
        once loses some of their connections (``'NoneType' object has no attribute
        'writelines'``), so concurrent first callers wait for one initialisation."""
        if self.cluster and not self._topology_ready:
            async with self._topology_lock:
                if not self._topology_ready:
                    with self.io("cluster topology"):
                        await self.client.initialize()
                    self._topology_ready = True

    async def refresh_topology(self) -> None:
        """Ask the cluster again who serves which slots (after a listener was refused or
        lost: a failover or a migration)."""
        if self.cluster:
            with self.io("cluster topology"):
                await self.client.nodes_manager.initialize()
            self._topology_ready = True

    def shard_of(self, key: bytes) -> ListenerAddress:
        """Where a key's shard master is (cluster only; :meth:`topology` first)."""
        node = self.client.get_node_from_key(key)
        return ListenerAddress(str(node.host), int(node.port))

    async def listener_address(self) -> ListenerAddress:
        """Where the node's raw connections (the lane, the pub/sub listener) must go now
        (not a cluster): the one server, or the master the Sentinels name."""
        settings = self.settings
        if settings.kind == SENTINEL:
            with self.io("sentinel"):
                host, port = await self.master_address()
            return ListenerAddress(host, port)
        if settings.kind == UNIX:
            return ListenerAddress("localhost", 0, settings.path)
        host, port = settings.hosts[0]
        return ListenerAddress(host, port)

    def lane(self) -> Lane | None:
        """The node's one lane for the append step (:mod:`.lane`), made on first use;
        None on a cluster, whose keys live on their own shards."""
        if self.cluster:
            return None
        if self._lane is None:
            self._lane = Lane(self)
        return self._lane

    # -- key names ---------------------------------------------------------------------

    #: Feeds whose key names :meth:`feed_keys` remembers at most.
    FEED_KEYS_KEPT = 65_536

    def feed_keys(self, feed: FeedKey) -> tuple[str, str, str]:
        """The feed's metadata hash, stream and idempotency-key hash.

        Remembered (the tenant's percent-encoding in the hash tag costs ~1.4 us, once per
        append and read otherwise); forgotten all at once past ``FEED_KEYS_KEPT``.
        """
        keys = self._feed_keys.get(feed)
        if keys is None:
            if len(self._feed_keys) >= self.FEED_KEYS_KEPT:
                self._feed_keys.clear()
            base = f"{self.prefix}:{feed.tag()}"
            keys = self._feed_keys[feed] = (base + ":m", base + ":s", base + ":i")
        return keys

    def fold_key(self, feed: FeedKey) -> str:
        """The run's fold hash, beside the feed's other keys (same hash slot)."""
        return f"{self.prefix}:{feed.tag()}:f"

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

    @property
    def publish_command(self) -> str:
        """How the append step announces items: sharded pub/sub on a cluster."""
        return "SPUBLISH" if self.cluster else "PUBLISH"

    # -- the boundary --------------------------------------------------------------------

    @contextlib.contextmanager
    def io(
        self, what: str, command: str | None = None, *, within: float | None = None
    ) -> Iterator[None]:
        """Translate failures to Unavailable, bound the call (``within`` seconds, default
        :attr:`timeout`) and time the command (if named).

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
            with translate(what):
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

    async def wake(self) -> None:
        """Make this node's live reader return from its wait and re-read its feeds."""
        self.woken = True
        if self.on_wake is not None:
            self.on_wake()

    async def ping(self) -> None:
        """The server answers (on a cluster: every master that serves slots)."""
        if not self.cluster:
            with self.io("ping", "ping"):
                await self.client.ping()
            return
        await self.topology()
        try:
            with self.io("ping", "ping"):
                primaries = {
                    nodes[0].name: nodes[0]
                    for nodes in self.client.nodes_manager.slots_cache.values()
                    if nodes
                }
                await self.client.ping(target_nodes=list(primaries.values()))
        except Unavailable:
            # A shard master may have failed over: learn the new map for the next ping.
            with contextlib.suppress(Unavailable):
                await self.refresh_topology()
            raise

    async def aclose(self) -> None:
        if self._lane is not None:
            self._lane.close()
        with contextlib.suppress(Exception):
            await self.client.aclose()
        if self._sentinel is not None:
            with contextlib.suppress(Exception):
                await self._sentinel.aclose()
