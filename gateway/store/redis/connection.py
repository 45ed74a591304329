"""One node's connection to Redis: the client pool, the key names, the error boundary,
and what every part of the Redis adapter must know about the server it talks to.

Every ``redis.exceptions`` error (and socket error) raised inside :meth:`RedisConnection.io`
becomes :class:`~gateway.errors.Unavailable`; nothing above ``gateway.store.redis`` sees
redis-py.  Key layout: docs/storage.md.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.maint_notifications import MaintNotificationsConfig

from gateway.errors import Unavailable
from gateway.feed import FeedKey, FeedState
from gateway.metrics import Metrics


@contextlib.contextmanager
def translate(what: str) -> Iterator[None]:
    """Map redis-py and socket failures to Unavailable (the boundary of the adapter)."""
    try:
        yield
    except redis.exceptions.ResponseError as exc:
        raise Unavailable(f"redis rejected {what}: {exc}") from exc
    except (redis.exceptions.RedisError, OSError) as exc:
        raise Unavailable(f"redis unavailable during {what}") from exc


class RedisConnection:
    """The pool and the node-wide facts the Redis parts share.

    ``suspect`` is set when the node reaches a different Redis server process (a
    restart, a failover) or its listener was lost: the live reader then verifies every
    feed it follows before reading on.  ``pending_resets`` holds feeds a request moved
    to a new epoch (a rollback it noticed); the reader reports them to the followers.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "gw",
        node_id: str | None = None,
        max_connections: int = 32,
        metrics: Metrics | None = None,
    ) -> None:
        # A bounded pool that makes callers wait for a connection instead of failing:
        # a thousand clients joining at once share a few dozen connections.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=30,
            decode_responses=False,
            socket_connect_timeout=5,
            socket_keepalive=True,
            health_check_interval=30,
            # No command here blocks for long (reads wait on pub/sub with their own
            # timeout), so a Redis that stops answering fails calls instead of hanging.
            socket_timeout=15,
            protocol=2,
            # After a Redis restart or failover, pooled connections are stale: the
            # pool must notice (its check is skipped while maintenance notifications
            # are on) and a command that meets a dead connection is retried on a new
            # one.  Retrying the append step is safe for keyed items: the retry
            # returns the first attempt's cursor.
            maint_notifications_config=MaintNotificationsConfig(enabled=False),
            retry=Retry(ExponentialBackoff(cap=0.25, base=0.01), 2),
            retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError],
            redis_connect_func=self._on_connect,
        )
        # redis-py's own annotations are looser than its replies; the adapter owns them.
        self.client: Any = aioredis.Redis(connection_pool=pool)
        self.url = url
        self.prefix = prefix
        self.node_id = node_id or f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.wake_channel = f"{prefix}:node:{self.node_id}:wake".encode()
        #: Where command durations go (``gateway_redis_command_seconds``).
        self.metrics = metrics
        self.suspect = False
        #: Set by :meth:`wake`; the live reader re-reads its subscriptions when set.
        self.woken = False
        self.pending_resets: dict[FeedKey, FeedState] = {}
        # The identity of the Redis server process last connected to (INFO run_id).
        self._run_id: bytes | None = None
        #: How many times this node found itself talking to another Redis process.
        self.server_changes = 0

    async def _on_connect(self, connection: Any) -> None:
        """Every new connection: the usual handshake, then note which server it reached.

        Commands retried on a fresh connection hide a restart from the callers; the
        server's ``run_id`` does not: when it changes, everything this node follows is
        verified before it reads on (a restored snapshot or a promoted replica may have
        rolled feeds back).
        """
        await connection.on_connect_check_health(check_health=True)
        await connection.send_command("INFO", "server")
        info = await connection.read_response()
        run_id = None
        for line in bytes(info).splitlines():
            if line.startswith(b"run_id:"):
                run_id = line[7:].strip()
        if run_id != self._run_id:
            if self._run_id is not None:
                self.suspect = True
                self.server_changes += 1
            self._run_id = run_id

    # -- key names ---------------------------------------------------------------------

    def feed_keys(self, feed: FeedKey) -> tuple[str, str, str]:
        """The feed's metadata hash, stream and idempotency-key hash."""
        base = f"{self.prefix}:{feed.tag()}"
        return base + ":m", base + ":s", base + ":i"

    def fold_key(self, feed: FeedKey) -> str:
        """The run's fold hash, beside the feed's other keys (same hash slot)."""
        return f"{self.prefix}:{feed.tag()}:f"

    def inbox_key(self, name: str) -> str:
        return f"{self.prefix}:inbox:{name}"

    # -- the boundary --------------------------------------------------------------------

    @contextlib.contextmanager
    def io(self, what: str, command: str | None = None) -> Iterator[None]:
        """Translate failures to Unavailable and time the command (if named)."""
        # A failed command alone is no reason to verify everything: a restart or a
        # failover shows as a new run_id (_on_connect) or a lost listener.
        started = time.perf_counter()
        try:
            with translate(what):
                yield
        finally:
            if command is not None:
                self.observe(command, time.perf_counter() - started)

    def observe(self, command: str, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.redis_command_seconds.labels(command=command).observe(seconds)

    async def wake(self) -> None:
        """Make this node's live reader return from its wait and re-read its feeds."""
        self.woken = True
        with self.io("wake", "wake"):
            await self.client.publish(self.wake_channel, b"1")

    async def ping(self) -> None:
        with self.io("ping", "ping"):
            await self.client.ping()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.aclose()
