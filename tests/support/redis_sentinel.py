"""A replicated Redis (a master and replicas) watched by Sentinels, for fault tests.

:class:`ReplicatedSet` starts a master and replicas (``--replicaof``), each a
:class:`tests.support.redis_server.RedisServer` of its own.  Every replica replicates as
an ACL user of its own (``masteruser``), which every server of the set knows, so that a
test can cut one replica off its master (:meth:`ReplicatedSet.partition`: the master
turns that user off and closes its connection) while the replica stays reachable, and
answering, for clients and Sentinels.  Not through a proxy: a Sentinel re-points a
replica that replicates from an address other than the master's (``+fix-slave-config``,
a few seconds after it first sees it), and the replica would then bypass the proxy.

:class:`SentinelGroup` starts ``redis-server <config> --sentinel`` processes (a written
configuration each: the master, a quorum, a short ``down-after-milliseconds``) and
waits until every Sentinel knows the master, every replica and every other Sentinel.

**Promoting a replica that lags** (a failover that loses acknowledged writes), the
recipe :func:`promote_lagging_replica` follows, with why each step is needed:

1. wait until the replica has everything (``wait_synced``), so what it misses later is
   exactly what step 3 writes;
2. partition it from the master (the master closes the replication link and refuses
   the replica's user).  SIGSTOP would not do: the Sentinels would see the replica down and never
   promote it, and the kernel would still buffer the stream for it;
3. write more on the master (the caller's ``write_more``): acknowledged, never replicated;
4. SIGKILL the master; the Sentinels agree it is down after ``down-after-milliseconds``
   and promote the only replica they may (a replica's link may have been down for at
   most ten ``down-after`` periods, so step 3 must be short: it is bounded);
5. wait until every Sentinel names the replica as the master.

**Passwords**: ``ReplicatedSet(password=...)`` makes every server of the set require it
(``requirepass``, and ``masterauth`` on the replicas); ``SentinelGroup(username=...,
password=...)`` makes the Sentinels require their own (an ACL user with ``username``,
else the default user's), which they also use among themselves, and gives them the
set's password for the master (``sentinel auth-pass``).

Every wait is bounded; leaving the ``async with`` stops every process it started.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.redis_server import REDIS_SERVER_BINARY, RedisServer, free_port

MASTER_NAME = "gwmaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
#: Seconds for replication links, Sentinel discovery and a failover to settle.
SETTLE_TIMEOUT = 20.0
_POLL = 0.05


def sentinel_url(ports: Sequence[int], master: str = MASTER_NAME, host: str = "127.0.0.1") -> str:
    """The gateway's Redis URL for a master behind Sentinels (GATEWAY_REDIS_URL)."""
    return "redis+sentinel://" + ",".join(f"{host}:{p}" for p in ports) + f"/{master}"


def client(
    port: int,
    timeout: float = 1.0,
    *,
    username: str | None = None,
    password: str | None = None,
) -> redis.Redis:
    """A fail-fast client of one process on 127.0.0.1 (no retries)."""
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
        username=username,
        password=password,
    )


def _ask(port: int, *command: Any, username: str | None = None, password: str | None = None) -> Any:
    with client(port, username=username, password=password) as c:
        return c.execute_command(*command)


def replication(port: int, password: str | None = None) -> dict[str, Any]:
    """``INFO replication`` of one server."""
    with client(port, password=password) as c:
        return dict(c.info("replication"))


async def _poll(what: str, check: Callable[[], bool], within: float) -> None:
    """Run the blocking ``check`` in a thread until it holds; TimeoutError after ``within``."""
    deadline = time.monotonic() + within
    last: BaseException | None = None
    while True:
        try:
            if await anyio.to_thread.run_sync(check):
                return
        except (redis.RedisError, OSError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {within}s (last error: {last!r})")
        await anyio.sleep(_POLL)  # polling other processes, bounded above


class ReplicatedSet:
    """A master and ``replicas`` replicas, each replicating as an ACL user of its own."""

    def __init__(
        self,
        replicas: int = 1,
        *,
        priorities: Sequence[int] | None = None,
        password: str | None = None,
    ) -> None:
        #: The password of every server of the set (None: none).
        self.password = password
        self.priorities = list(priorities) if priorities is not None else [100] * replicas
        if len(self.priorities) != replicas:
            raise ValueError("one priority per replica")
        #: Each replica's ACL user, known to every server of the set (whichever becomes
        #: the master): ``(name, password)``.
        self.replication_users = [
            (f"replica{index}", secrets.token_hex(8)) for index in range(replicas)
        ]
        self.master = RedisServer(password=password, extra_args=self._user_args())
        self.replicas: list[RedisServer] = []

    def _user_args(self) -> list[str]:
        """``redis-server`` arguments that define every replica's ACL user."""
        args: list[str] = []
        for name, secret in self.replication_users:
            args += ["--user", name, "on", f">{secret}", "+@all", "~*", "&*"]
        return args

    async def __aenter__(self) -> Self:
        try:
            await anyio.to_thread.run_sync(self.master.start)
            for priority, (user, secret) in zip(
                self.priorities, self.replication_users, strict=True
            ):
                replica = RedisServer(
                    password=self.password,
                    extra_args=[
                        *self._user_args(),
                        "--replicaof",
                        "127.0.0.1",
                        str(self.master.port),
                        "--replica-priority",
                        str(priority),
                        "--masteruser",
                        user,
                        "--masterauth",
                        secret,
                    ],
                )
                self.replicas.append(replica)
                await anyio.to_thread.run_sync(replica.start)
            await self.wait_synced()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for server in [self.master, *self.replicas]:
            await anyio.to_thread.run_sync(server.close)

    @property
    def servers(self) -> list[RedisServer]:
        return [self.master, *self.replicas]

    def offsets(self) -> dict[int, int]:
        """``{port: replication offset}`` of every running server."""
        out: dict[int, int] = {}
        for server in self.servers:
            if server.running:
                with contextlib.suppress(redis.RedisError, OSError):
                    info = replication(server.port, self.password)
                    out[server.port] = int(info.get("master_repl_offset", 0))
        return out

    async def wait_synced(self, within: float = SETTLE_TIMEOUT) -> None:
        """Until every replica's link is up and its offset equals the master's."""

        def synced() -> bool:
            master = replication(self.master.port, self.password)
            for replica in self.replicas:
                info = replication(replica.port, self.password)
                if info.get("master_link_status") != "up":
                    return False
                if int(info["master_repl_offset"]) != int(master["master_repl_offset"]):
                    return False
            return True

        await _poll("replicas in sync", synced, within)

    async def partition(self, replica: RedisServer) -> None:
        """Cut ``replica`` off its master (it stays reachable); see the module docstring.

        The master turns the replica's user off and closes its connections: the replica
        keeps trying and is refused (its link stays down) until :meth:`heal`."""
        user = self.replication_users[self.replicas.index(replica)][0]

        def cut() -> None:
            with client(self.master.port, password=self.password) as c:
                c.execute_command("ACL", "SETUSER", user, "off")
                c.execute_command("CLIENT", "KILL", "USER", user)

        await anyio.to_thread.run_sync(cut)

        def link_down() -> bool:
            info = replication(replica.port, self.password)
            return bool(info.get("master_link_status") == "down")

        await _poll("replication link down", link_down, SETTLE_TIMEOUT)

    def heal(self, replica: RedisServer) -> None:
        """End :meth:`partition`: the master accepts the replica's user again."""
        user = self.replication_users[self.replicas.index(replica)][0]
        with client(self.master.port, password=self.password) as c:
            c.execute_command("ACL", "SETUSER", user, "on")


class Sentinel:
    """One ``redis-server --sentinel`` process with a configuration file of its own."""

    def __init__(
        self,
        master: RedisServer,
        *,
        name: str,
        quorum: int,
        down_after_ms: int,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.port = free_port()
        self.username = username
        self.password = password
        auth: list[str] = []
        if master.password is not None:
            auth.append(f"sentinel auth-pass {name} {master.password}")
        if password is not None and username is not None:
            auth += [
                f"user {username} on >{password} ~* &* +@all",
                "user default off",
                f"sentinel sentinel-user {username}",
                f"sentinel sentinel-pass {password}",
            ]
        elif password is not None:
            auth += [f"requirepass {password}", f"sentinel sentinel-pass {password}"]
        self.dir = Path(tempfile.mkdtemp(prefix="gwtest-sentinel-"))
        self.config = self.dir / "sentinel.conf"
        self.log = self.dir / "sentinel.log"
        self.config.write_text(
            "\n".join(
                [
                    f"port {self.port}",
                    "bind 127.0.0.1",
                    "daemonize no",
                    f"dir {self.dir}",
                    f"logfile {self.log}",
                    "sentinel resolve-hostnames no",
                    f"sentinel monitor {name} 127.0.0.1 {master.port} {quorum}",
                    f"sentinel down-after-milliseconds {name} {down_after_ms}",
                    f"sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}",
                    f"sentinel parallel-syncs {name} 1",
                    *auth,
                ]
            )
            + "\n"
        )
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [REDIS_SERVER_BINARY, str(self.config), "--sentinel"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def ask(self, *command: Any) -> Any:
        return _ask(self.port, *command, username=self.username, password=self.password)

    def log_tail(self, lines: int = 20) -> str:
        if not self.log.exists():
            return f"--- sentinel {self.port}: no log ---"
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- sentinel {self.port} ---\n" + "\n".join(text)


class SentinelGroup:
    """``n`` Sentinels watching ``rset``'s master under ``name``."""

    def __init__(
        self,
        rset: ReplicatedSet,
        n: int = 3,
        *,
        quorum: int = 2,
        name: str = MASTER_NAME,
        down_after_ms: int = DOWN_AFTER_MS,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.rset = rset
        self.name = name
        self.sentinels = [
            Sentinel(
                rset.master,
                name=name,
                quorum=quorum,
                down_after_ms=down_after_ms,
                username=username,
                password=password,
            )
            for _ in range(n)
        ]

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.sentinels]

    @property
    def url(self) -> str:
        """GATEWAY_REDIS_URL for the gateway (see :func:`sentinel_url`)."""
        return sentinel_url(self.ports, self.name)

    async def __aenter__(self) -> Self:
        try:
            for s in self.sentinels:
                s.start()
            await self.wait_discovered()
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        for s in self.sentinels:
            s.close()

    async def wait_discovered(self, within: float = SETTLE_TIMEOUT) -> None:
        """Until every Sentinel knows every replica and every other Sentinel."""
        replicas = {r.port for r in self.rset.replicas}

        def discovered() -> bool:
            for s in self.sentinels:
                known = {int(r["port"]) for r in s.ask("SENTINEL", "REPLICAS", self.name)}
                others = s.ask("SENTINEL", "SENTINELS", self.name)
                if not replicas <= known or len(others) != len(self.sentinels) - 1:
                    return False
            return True

        await _poll("Sentinel discovery", discovered, within)

    def master_port(self) -> set[int]:
        """The master port each answering Sentinel names (one element when they agree)."""
        ports: set[int] = set()
        for s in self.sentinels:
            with contextlib.suppress(redis.RedisError, OSError):
                addr = s.ask("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name)
                ports.add(int(addr[1]))
        return ports

    async def wait_master(self, port: int, within: float = SETTLE_TIMEOUT) -> None:
        """Until every Sentinel names ``port`` and that server says it is a master."""

        def promoted() -> bool:
            role = replication(port, self.rset.password).get("role")
            return self.master_port() == {port} and role == "master"

        await _poll(f"Sentinels naming {port} as master", promoted, within)

    def diagnostics(self) -> str:
        return "\n".join(s.log_tail() for s in self.sentinels)


async def promote_lagging_replica(
    rset: ReplicatedSet,
    sentinels: SentinelGroup,
    write_more: Callable[[], Awaitable[None]],
    *,
    write_within: float = 5.0,
) -> RedisServer:
    """The recipe of the module docstring; returns the promoted replica."""
    if len(rset.replicas) != 1:
        raise ValueError("the recipe promotes the only replica")
    [replica] = rset.replicas
    await rset.wait_synced()
    await rset.partition(replica)
    with anyio.fail_after(write_within, reason="write_more took too long for Sentinel"):
        await write_more()
    offsets = await anyio.to_thread.run_sync(rset.offsets)
    if offsets[replica.port] >= offsets[rset.master.port]:
        raise AssertionError(f"the replica does not lag: offsets {offsets}")
    await anyio.to_thread.run_sync(rset.master.kill)
    await sentinels.wait_master(replica.port)
    return replica


__all__ = [
    "MASTER_NAME",
    "ReplicatedSet",
    "Sentinel",
    "SentinelGroup",
    "promote_lagging_replica",
    "replication",
    "sentinel_url",
]
