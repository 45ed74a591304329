"""What the tenant's shared publish rate costs a publish, on one Redis and on a cluster.

    uv run python bench/rate_cost.py                       # both topologies, 3 rounds
    uv run python bench/rate_cost.py --topology cluster --rounds 5 --publishes 3000

Starts its own ``redis-server`` on a free port, or a Redis Cluster of three masters
(``tests/support/redis_cluster.py``), and publishes one-item team bodies through
``Publisher.publish_team`` (validation, encoding, the Lua append step over the node's
pipelined connection) in two modes, alternating round by round so that the shared
machine's noise hits both alike:

- ``none``: no publish rate (``rate=None``: what the inbox and the producer do, and
  the append step's cost before the rate moved into it);
- ``rate``: the HTTP routes' way, a :class:`~gateway.limits.PublishRate` far above the
  load, so every append takes from the tenant's bucket and none is refused.  On one
  Redis the take is inside the append step; on a cluster it is a call of its own
  before the append (docs/storage.md, "The publish rate").

Each mode publishes one at a time (latency: mean and p99 of one publish) and then with
``--concurrency`` publishes in flight (throughput), over 100 teams (so on a cluster the
feeds are on every shard).  Per sequential publish it also prints the script calls
(``EVALSHA``: each its own round trip), the time Redis spent running them
(``commandstats``: the least noisy figure here) and the Redis CPU (``INFO cpu``, every
master's on a cluster: the whole process, its network I/O and background work too).  A
benchmark, not a test: it prints what it measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gateway.fanout.foldcache import FoldCache
from gateway.limits import PublishRate
from gateway.metrics import Metrics
from gateway.publisher import Publisher, Via
from gateway.store.redis import redis_backend
from tests.support import events as ev
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer

TENANT = "bench"
TEAMS = 100


def counters(ports: list[int]) -> tuple[int, int, float]:
    """Script calls the servers ran so far (each a round trip of its own, the append
    step's and the take's), the microseconds they spent running them (the scripts'
    inner commands included), and the CPU seconds the servers used (``INFO cpu``)."""
    calls, usec, cpu = 0, 0, 0.0
    for port in ports:
        with redis.Redis(port=port) as client:
            stats = client.info("commandstats")
            for command in ("evalsha", "eval"):
                calls += int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
                usec += int(stats.get(f"cmdstat_{command}", {}).get("usec", 0))
            usage = client.info("cpu")
            cpu += float(usage["used_cpu_user"]) + float(usage["used_cpu_sys"])
    return calls, usec, cpu


async def case(
    url: str, ports: list[int], cluster: bool, prefix: str, mode: str, n: int, concurrency: int
) -> dict[str, float]:
    backend = redis_backend(url, prefix=prefix, cluster=cluster)
    metrics = Metrics()
    publisher = Publisher(
        backend.feeds,
        backend.live,
        FoldCache(backend.feeds, backend.folds),
        metrics,
        team_retention=10_000,
    )
    rate = None if mode == "none" else PublishRate(1e9, 10**9)
    teams = [ev.team_id() for _ in range(TEAMS)]
    latencies: list[float] = []
    try:

        async def one(i: int) -> None:
            await publisher.publish_team(
                TENANT, teams[i % TEAMS], ev.item(), via=Via.HTTP, rate=rate
            )

        for i in range(TEAMS):  # every feed exists before the timing
            await one(i)
        before = counters(ports)
        started = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter()
            await one(i)
            latencies.append(time.perf_counter() - t0)
        sequential = time.perf_counter() - started
        after = counters(ports)

        async def worker(count: int, publish: Callable[[int], Awaitable[None]]) -> None:
            for i in range(count):
                await publish(i)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker, n // concurrency, one)
        concurrent = time.perf_counter() - started
    finally:
        await backend.aclose()
    latencies.sort()
    return {
        "seq_per_s": n / sequential,
        "mean_us": statistics.fmean(latencies) * 1e6,
        "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
        "conc_per_s": (n // concurrency * concurrency) / concurrent,
        "calls": (after[0] - before[0]) / n,
        "script_us": (after[1] - before[1]) / n,
        "redis_us": (after[2] - before[2]) / n * 1e6,
    }


async def topology(
    name: str, url: str, ports: list[int], cluster: bool, rounds: int, n: int, concurrency: int
) -> None:
    results: dict[str, list[dict[str, float]]] = {"none": [], "rate": []}
    print(f"\n{name}: {n} publishes per mode and round, {rounds} alternating rounds")
    print(
        f"{'round':>5} {'mode':>5} {'seq pub/s':>9} {'mean µs':>8} {'p99 µs':>8} "
        f"{'x{0} pub/s':>10} {'scripts':>8} {'script µs':>9} {'Redis µs':>8}".format(concurrency)
    )
    for r in range(rounds):
        order = ("none", "rate") if r % 2 == 0 else ("rate", "none")
        for mode in order:
            row = await case(url, ports, cluster, f"bench:{mode}:{r}", mode, n, concurrency)
            results[mode].append(row)
            print(
                f"{r:>5} {mode:>5} {row['seq_per_s']:>9.0f} {row['mean_us']:>8.0f} "
                f"{row['p99_us']:>8.0f} {row['conc_per_s']:>10.0f} {row['calls']:>8.2f} "
                f"{row['script_us']:>9.1f} {row['redis_us']:>8.1f}"
            )
    for mode, rows in results.items():
        m = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
        print(
            f"{'med':>5} {mode:>5} {m['seq_per_s']:>9.0f} {m['mean_us']:>8.0f} "
            f"{m['p99_us']:>8.0f} {m['conc_per_s']:>10.0f} {m['calls']:>8.2f} "
            f"{m['script_us']:>9.1f} {m['redis_us']:>8.1f}"
        )


async def main(which: str, rounds: int, n: int, concurrency: int) -> None:
    if which in ("single", "both"):
        with RedisServer() as server:
            await topology("one Redis", server.url, [server.port], False, rounds, n, concurrency)
    if which in ("cluster", "both"):
        async with RedisCluster(3, 0) as cluster:
            ports = [m.port for m in cluster.masters()]
            await topology(
                "Redis Cluster, 3 masters", cluster.seed_url, ports, True, rounds, n, concurrency
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", choices=("single", "cluster", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--publishes", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    anyio.run(main, args.topology, args.rounds, args.publishes, args.concurrency)
