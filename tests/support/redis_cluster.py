"""A Redis Cluster of the test's own: N masters with replicas, killed and resharded.

:class:`RedisCluster` starts ``masters * (1 + replicas)`` ``redis-server`` processes
with ``cluster-enabled yes`` (each a :class:`tests.support.redis_server.RedisServer`
on a free port, its cluster bus on another free port), joins them with
``redis-cli --cluster create ... --cluster-replicas R --cluster-yes`` and waits until
every node reports ``cluster_state:ok``, all agree on who serves every slot, and
every node sees every replica attached to its master with its link up.

Operations, each bounded:

- :meth:`RedisCluster.kill` a node (SIGKILL) and :meth:`RedisCluster.wait_failover`
  until one of its replicas serves its slots (the cluster promotes it by itself after
  ``cluster-node-timeout``);
- migrate one slot while traffic flows, in the three steps of the Redis manual, so a
  test can let traffic run between them: :meth:`begin_migration` (``CLUSTER SETSLOT
  IMPORTING`` on the target, ``MIGRATING`` on the source: from now on, commands on
  keys the source no longer has are redirected with ``ASK``), :meth:`move_keys`
  (``MIGRATE`` of every key still on the source; a multi-key command on a half-moved
  feed gets ``TRYAGAIN``), :meth:`finish_migration` (``SETSLOT NODE`` on the target, the
  source, then every other master: clients now get ``MOVED``);
- :meth:`keys_by_master`: which master holds the keys matching a pattern (a test finds
  where a feed lives from its keys, which carry the feed's id).

How the gateway is pointed at a cluster is :data:`CLUSTER_ENV` plus a seed node's
``redis://`` URL (:meth:`RedisCluster.gateway_env`): one place to change it.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import anyio
import redis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from gateway.feed import team_feed
from tests.support import events as ev
from tests.support.redis_server import RedisServer, free_port

#: What tells ``gateway serve`` that GATEWAY_REDIS_URL is a seed node of a cluster.
CLUSTER_ENV: dict[str, str] = {"GATEWAY_REDIS_CLUSTER": "true"}
SLOTS = 16384
NODE_TIMEOUT_MS = 1000
#: Seconds to form the cluster, to fail over, to agree on a new slot map.
SETTLE_TIMEOUT = 30.0
MIGRATE_TIMEOUT_MS = 5000
_POLL = 0.05


def client(port: int, timeout: float = 2.0) -> redis.Redis:
    """A fail-fast client of one node (no retries, no redirections followed)."""
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )


def ask(port: int, *command: Any) -> Any:
    with client(port) as c:
        return c.execute_command(*command)


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``."""

    id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: tuple[tuple[int, int], ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags and not self.failed

    @property
    def failed(self) -> bool:
        return bool({"fail", "fail?", "noaddr"} & self.flags)

    def serves(self, slot: int) -> bool:
        return any(low <= slot <= high for low, high in self.slots)


def parse_nodes(text: str) -> list[ClusterNode]:
    """Parse ``CLUSTER NODES`` (migration markers ``[slot->-id]`` are left out)."""
    nodes = []
    for line in text.strip().splitlines():
        fields = line.split()
        address = fields[1].split("@")[0]
        slots = []
        for entry in fields[8:]:
            if entry.startswith("["):
                continue
            lo, _, hi = entry.partition("-")
            slots.append((int(lo), int(hi or lo)))
        nodes.append(
            ClusterNode(
                id=fields[0],
                port=int(address.rsplit(":", 1)[1]),
                flags=frozenset(fields[2].split(",")),
                master_id=None if fields[3] == "-" else fields[3],
                slots=tuple(slots),
            )
        )
    return nodes


async def _poll(what: str, check: Callable[[], bool], within: float) -> None:
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


class RedisCluster:
    """See the module docstring."""

    def __init__(self, masters: int = 3, replicas: int = 1) -> None:
        if masters < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        self.masters_wanted = masters
        self.replicas_per_master = replicas
        self.servers = [
            RedisServer(
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(NODE_TIMEOUT_MS),
                    "--cluster-port",
                    str(free_port()),
                ]
            )
            for _ in range(masters * (1 + replicas))
        ]

    # -- lifecycle ---------------------------------------------------------

    async def __aenter__(self) -> Self:
        try:
            for server in self.servers:
                await anyio.to_thread.run_sync(server.start)
            await anyio.to_thread.run_sync(self._create)
            await self.wait_ok()
            await _poll("replicas attached", self._replicas_attached, SETTLE_TIMEOUT)
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
        for server in self.servers:
            await anyio.to_thread.run_sync(server.close)

    def _create(self) -> None:
        addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
        result = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(self.replicas_per_master),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=SETTLE_TIMEOUT,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed:\n{result.stdout}{result.stderr}"
            )

    # -- state -------------------------------------------------------------

    @property
    def running(self) -> list[RedisServer]:
        return [s for s in self.servers if s.running]

    @property
    def seed_url(self) -> str:
        return self.running[0].url

    def gateway_env(self) -> dict[str, str]:
        """The environment that points ``gateway serve`` at this cluster."""
        return {"GATEWAY_REDIS_URL": self.seed_url, **CLUSTER_ENV}

    def nodes(self) -> list[ClusterNode]:
        """``CLUSTER NODES`` as one running node sees it."""
        return parse_nodes(ask(self.running[0].port, "CLUSTER", "NODES"))

    def masters(self) -> list[ClusterNode]:
        return [n for n in self.nodes() if n.is_master and n.slots]

    def keyslot(self, key: str) -> int:
        return int(ask(self.running[0].port, "CLUSTER", "KEYSLOT", key))

    def teams_on_every_shard(self, n: int, tenant: str = "acme") -> list[str]:
        """``n`` team ids whose feeds spread over every master (at least one each,
        round robin), from the slot of each feed's hash tag (``gateway.feed.FeedKey``)."""
        masters = self.masters()
        wanted: list[list[str]] = [[] for _ in masters]
        for _ in range(100_000):  # bounded: each master gets its share quickly
            if sum(len(w) for w in wanted) >= n and all(wanted):
                break
            team = ev.team_id()
            slot = key_slot(team_feed(tenant, team).tag().encode())
            index = next(i for i, m in enumerate(masters) if m.serves(slot))
            if len(wanted[index]) < -(-n // len(masters)):
                wanted[index].append(team)
        return [t for group in wanted for t in group][:n]

    def owner(self, slot: int) -> ClusterNode:
        for node in self.masters():
            if any(lo <= slot <= hi for lo, hi in node.slots):
                return node
        raise LookupError(f"no master serves slot {slot}")

    def keys_by_master(self, pattern: str) -> dict[int, list[str]]:
        """``{master port: keys matching pattern}`` over every master that serves slots."""
        out: dict[int, list[str]] = {}
        for node in self.masters():
            with client(node.port) as c:
                out[node.port] = sorted(c.scan_iter(match=pattern, count=1000))
        return out

    def _agreed(self) -> bool:
        maps = []
        for server in self.running:
            info = ask(server.port, "CLUSTER", "INFO")
            if "cluster_state:ok" not in info:
                return False
            nodes = parse_nodes(ask(server.port, "CLUSTER", "NODES"))
            maps.append(sorted((n.port, n.slots) for n in nodes if n.is_master and n.slots))
        covered = sum(hi - lo + 1 for _, ranges in maps[0] for lo, hi in ranges)
        return covered == SLOTS and all(m == maps[0] for m in maps)

    def _replicas_attached(self) -> bool:
        """Every node sees every replica under a master, and every replica's link is up.

        ``wait_ok`` looks at slots only; a replica that gossip has not yet announced, or
        that has not finished its first sync, cannot be found by :meth:`wait_failover`
        or cannot be promoted (seen in CI: a master killed right after the cluster
        formed had "no replica" in a seed node's view).
        """
        wanted = self.masters_wanted * self.replicas_per_master
        for server in self.running:
            nodes = parse_nodes(ask(server.port, "CLUSTER", "NODES"))
            masters = {n.id for n in nodes if n.is_master and n.slots}
            if sum(1 for n in nodes if n.master_id in masters) != wanted:
                return False
            info = ask(server.port, "INFO", "replication")  # parsed by redis-py
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    async def wait_ok(self, within: float = SETTLE_TIMEOUT) -> None:
        """Until every running node says ``cluster_state:ok`` and all agree on the slots."""
        await _poll("cluster ok and agreed", self._agreed, within)

    # -- faults ------------------------------------------------------------

    def server(self, port: int) -> RedisServer:
        for s in self.servers:
            if s.port == port:
                return s
        raise KeyError(port)

    def kill(self, port: int) -> None:
        self.server(port).kill()

    async def wait_failover(self, old_master: ClusterNode, within: float = SETTLE_TIMEOUT) -> int:
        """Until a former replica of ``old_master`` serves its slots; that replica's port."""
        replicas = {n.id: n.port for n in self.nodes() if n.master_id == old_master.id}
        if not replicas:
            raise LookupError(f"master {old_master.port} has no replica:\n{self.diagnostics()}")
        promoted: list[int] = []

        def taken_over() -> bool:
            if not self._agreed():
                return False
            for node in self.masters():
                if node.id in replicas and set(old_master.slots) <= set(node.slots):
                    promoted.append(node.port)
                    return True
            return False

        await _poll(f"failover of {old_master.port}", taken_over, within)
        return promoted[0]

    def begin_migration(self, slot: int, target_port: int) -> None:
        source = self.owner(slot)
        target_id = ask(target_port, "CLUSTER", "MYID")
        if source.port == target_port:
            raise ValueError(f"slot {slot} is already on {target_port}")
        ask(target_port, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.id)
        ask(source.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)

    def move_keys(self, slot: int, source_port: int, target_port: int, batch: int = 100) -> int:
        """MIGRATE every key of ``slot`` still on the source; how many moved.

        No ``REPLACE``: a key that exists on both sides means a feed's keys were split,
        which the caller must see (``BUSYKEY``), not have overwritten.
        """
        moved = 0
        for _ in range(10_000):  # bounded: each round moves up to ``batch`` keys
            keys = ask(source_port, "CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                return moved
            ask(
                source_port,
                "MIGRATE",
                "127.0.0.1",
                target_port,
                "",
                0,
                MIGRATE_TIMEOUT_MS,
                "KEYS",
                *keys,
            )
            moved += len(keys)
        raise RuntimeError(f"slot {slot} did not empty")

    def finish_migration(self, slot: int, source_port: int, target_port: int) -> None:
        target_id = ask(target_port, "CLUSTER", "MYID")
        ask(target_port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        ask(source_port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        for node in self.masters():
            if node.port not in (source_port, target_port):
                with contextlib.suppress(redis.RedisError):
                    ask(node.port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)

    def diagnostics(self) -> str:
        lines = []
        with contextlib.suppress(redis.RedisError, OSError, IndexError):
            lines.append(ask(self.running[0].port, "CLUSTER", "NODES"))
        lines += [s.log_tail(10) for s in self.servers]
        return "\n".join(lines)


__all__ = ["CLUSTER_ENV", "ClusterNode", "RedisCluster", "parse_nodes"]
