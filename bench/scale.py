"""Horizontal scale: 1, 2 and 3 gateway nodes behind HAProxy, on one Redis and on a Cluster.

    flock /tmp/bench.lock uv run python bench/scale.py            # every cell (5-6 min)
    flock /tmp/bench.lock uv run python bench/scale.py --scenarios ws-100x10-1000eps \\
        --stores single --nodes 1,3 --duration 8
    uv run python bench/scale.py --list

Each cell (scenario x store x node count) starts from nothing and stops everything it
started, by pid, also on error:

- the store: one ``redis-server`` (``tests.support.redis_server.RedisServer``, no
  persistence) or a Redis Cluster of three masters without replicas
  (``tests.support.redis_cluster.RedisCluster``: ``redis-server --cluster-enabled yes``
  on free ports joined by ``redis-cli --cluster create ... --cluster-replicas 0``); the
  nodes and the publisher get the cluster as a multi-seed URL
  (``redis://h:p1,h:p2,h:p3``) with ``GATEWAY_REDIS_CLUSTER=true``;
- N ``gateway serve`` nodes (``bench/run.py``'s ``start_gateway``: same secret, metrics
  and authentication on, all pinned to CPU 0);
- a real HAProxy (``tests.support.haproxy``: HTTP mode, ``balance roundrobin``,
  ``/readyz`` health checks, one-hour tunnel timeouts for WebSockets) in front of them;
- the load generator (``bench/run.py``'s ``loadgen_command``): its subscribers connect through
  HAProxy, its publisher (``bench/gateway_pub.py``, the producer API) appends to the
  store directly, as an ingest tier would.  It sums the CPU of every node
  (``--server-pid`` per node) and reports each node, HAProxy and every Redis process
  by name.

This process pins itself to CPU 1 before starting anything, so Redis and HAProxy
(which then runs one thread) inherit CPU 1, with the load generator and the publisher; only the
gateway nodes are on CPU 0.  On two cores more nodes cannot add CPU: the cells show
what spreading costs per delivery and that no node loses or repeats an event (see
docs/benchmarks.md, "Horizontal scale").  A benchmark, not a test: it prints what it
measured and appends the load generator's JSON lines, with this script's additions, to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import run as gw

from tests.support.haproxy import BACKEND, HAProxy
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer, free_port

#: The CPU everything but the gateway nodes shares (``bench/run.py`` pins nodes to CPU 0).
LOAD_CPU = 1
LOADGEN_TIMEOUT = 300.0
#: HAProxy's health checks: the fault suite's (200 ms, down after 2) take a node out
#: when its event loop is busy accepting 100 WebSocket handshakes at a time on a shared
#: core, and HAProxy then refuses subscribers with 503.  Once a second, down after 3.
CHECK_INTERVAL_MS = 1000
CHECK_FALL = 3

SCENARIOS = [
    # 1,000 events/s, not 2,000: on a cluster the publisher's appends are not pipelined
    # (one script call per feed, each on its shard) and on the shared core it reached
    # only ~1,460 events/s of 2,000; every cell gets the same offered load.
    gw.Scenario(
        "ws-100x10-1000eps",
        "ws",
        1000,
        channels=100,
        rate=1000,
        duration=8,
        note="1,000 WebSocket subscribers on 100 feeds, 1,000 events/s",
    ),
    gw.Scenario(
        "ws-1k-50eps",
        "ws",
        1000,
        rate=50,
        duration=8,
        note="1,000 WebSocket subscribers on one feed, 50 events/s",
    ),
    gw.Scenario(
        "ws-1k-max",
        "ws",
        1000,
        duration=8,
        note="1,000 WebSocket subscribers on one feed, as fast as they keep up",
    ),
]
STORES = ("single", "cluster")
NODES = (1, 2, 3)


@dataclass
class Store:
    """Where the events live: a URL for the nodes and the publisher, pids to watch."""

    name: str
    url: str
    cluster: bool
    pids: dict[str, int]
    close: Callable[[], None]
    settings: dict[str, str] = field(default_factory=dict)


def open_store(name: str) -> Store:
    if name == "single":
        server = RedisServer().start()
        assert server.pid is not None
        return Store(name, server.url, False, {"redis": server.pid}, server.close)
    cluster = RedisCluster(masters=3, replicas=0)
    anyio.run(cluster.__aenter__)  # closes what it started if forming the cluster fails
    seeds = ",".join(f"127.0.0.1:{s.port}" for s in cluster.servers)
    pids = {f"redis{i}": s.pid for i, s in enumerate(cluster.servers) if s.pid is not None}
    return Store(
        name,
        f"redis://{seeds}",
        True,
        pids,
        lambda: anyio.run(cluster.aclose),
        {"GATEWAY_REDIS_CLUSTER": "true"},
    )


def haproxy_pid(lb: HAProxy) -> int:
    """HAProxy's pid, from its runtime API (``show info``)."""
    for line in lb.command("show info").splitlines():
        key, _, value = line.partition(":")
        if key == "Pid":
            return int(value)
    raise RuntimeError("haproxy's show info has no Pid")


def sessions_per_node(lb: HAProxy) -> dict[str, int]:
    """Sessions each node was given since HAProxy started (``stot``): the subscribers."""
    rows = csv.DictReader(io.StringIO(lb.command("show stat").lstrip("# ")))
    return {
        row["svname"]: int(row["stot"] or 0)
        for row in rows
        if row.get("pxname") == BACKEND and row.get("svname") not in ("BACKEND", "FRONTEND")
    }


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


@contextlib.contextmanager
def pinned(cpu: int) -> Iterator[None]:
    """This process (and what it starts meanwhile) on ``cpu``; back to ``LOAD_CPU`` after."""
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, {LOAD_CPU})


def run_cell(
    sc: gw.Scenario, store_name: str, nodes: int, out: Path, keep: bool, haproxy_cpu: int
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"scale-{sc.name}-{store_name}-{nodes}-"))
    gateways: list[subprocess.Popen[bytes]] = []
    store: Store | None = None
    lb: HAProxy | None = None
    try:
        store = open_store(store_name)
        anyio.run(gw.create_feeds, store.url, sc.channels, store.cluster)
        ports = [free_port() for _ in range(nodes)]
        for i, port in enumerate(ports):
            env = gw.gateway_env(store.url, port, GATEWAY_NODE_ID=f"gw{i}", **store.settings)
            gateways.append(gw.start_gateway(env, workdir / f"gw{i}.log"))
        lb = HAProxy(
            [(f"gw{i}", port) for i, port in enumerate(ports)],
            check_interval_ms=CHECK_INTERVAL_MS,
            fall=CHECK_FALL,
        )
        with pinned(haproxy_cpu):
            lb.start()
        anyio.run(lb.wait_states, {f"gw{i}": "UP" for i in range(nodes)})
        lb_pid = haproxy_pid(lb)
        pids = {f"gw{i}": g.pid for i, g in enumerate(gateways)}
        pids |= store.pids
        pids["haproxy"] = lb_pid
        affinity = {name: sorted(os.sched_getaffinity(pid)) for name, pid in pids.items()}
        env = {
            **os.environ,
            "BENCH_REDIS_URL": store.url,
            "BENCH_TENANT": gw.TENANT,
            "BENCH_REDIS_CLUSTER": "1" if store.cluster else "0",
        }
        load_before = Path("/proc/loadavg").read_text().split()[0]
        raw = workdir / "loadgen.jsonl"
        command = gw.loadgen_command(sc, lb.port, [g.pid for g in gateways], pids, raw)
        proc = subprocess.run(
            command, env=env, capture_output=True, timeout=LOADGEN_TIMEOUT, check=False
        )
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr.decode(errors="replace")[-3000:])
            raise RuntimeError(f"the load generator failed for {sc.name} / {store_name} / {nodes}")
        if not raw.exists() or not raw.read_text().strip():
            raise RuntimeError("the load generator wrote no result")
        result: dict[str, Any] = json.loads(raw.read_text().splitlines()[-1])
        metrics: dict[str, float] = {}
        for port in ports:
            for name, value in gw.scrape(port).items():
                metrics[name] = metrics.get(name, 0.0) + value
        result.update(
            scenario=sc.name,
            note=sc.note,
            store=store_name,
            nodes=nodes,
            haproxy_cpu=haproxy_cpu,
            sessions=sessions_per_node(lb),
            haproxy_threads=threads(lb_pid),
            affinity=affinity,
            # The machine's 1-minute load before and after: other work shares the 2 cores.
            loadavg=[float(load_before), float(Path("/proc/loadavg").read_text().split()[0])],
            gateway_metrics=metrics,
            nodes_alive=sum(g.poll() is None for g in gateways),
        )
        with out.open("a") as f:  # the load generator's JSON line with what this script added
            f.write(json.dumps(result) + "\n")
        return result
    finally:
        if lb is not None:
            lb.close()
        for g in reversed(gateways):
            gw.stop_process(g, signal.SIGINT)
        if store is not None:
            store.close()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def cores(r: dict[str, Any], cpu_s: float) -> float | None:
    """CPU seconds over the load generator's measuring span (publishing and drain) as cores."""
    total, util = r.get("server_cpu_s"), r.get("server_cpu_util")
    if not isinstance(total, int | float) or not isinstance(util, int | float) or util <= 0:
        return None
    return cpu_s / (total / util)


def other_cpu(r: dict[str, Any], prefix: str) -> float:
    others: dict[str, dict[str, float]] = r.get("other_pids") or {}
    return sum(v["cpu_s"] for k, v in others.items() if k.startswith(prefix))


def row(r: dict[str, Any]) -> str:
    n = int(r["nodes"])
    per_node = [cores(r, other_cpu(r, f"gw{i}")) for i in range(n)]
    cpu_s, deliveries = r.get("server_cpu_s"), r.get("deliveries")
    us = (
        1e6 * cpu_s / deliveries
        if isinstance(cpu_s, int | float) and isinstance(deliveries, int) and deliveries
        else None
    )
    sessions = r.get("sessions") or {}
    alive = "" if r.get("nodes_alive") == n else f" ({r.get('nodes_alive')} of {n} alive)"
    if r.get("connect_errors"):
        alive += f" ({r['connect_errors']} not connected: {r.get('connect_error_sample')})"
    return (
        f"| {r['scenario']} | {r['store']} | {n} | {gw.num(r.get('deliveries_per_s'), ',.0f')} "
        f"| {gw.num(r.get('server_cpu_util'), '.2f')} "
        f"({' / '.join(gw.num(c, '.2f') for c in per_node)}) "
        f"| {gw.num(r.get('deliveries_per_server_cpu_s'), ',.0f')} | {gw.num(us, '.2f')} "
        f"| {gw.num(cores(r, other_cpu(r, 'haproxy')), '.2f')} "
        f"| {gw.num(cores(r, other_cpu(r, 'redis')), '.2f')} "
        f"| {gw.num(r.get('client_cpu_util'), '.2f')} | {gw.latency_and_gaps(r)} "
        f"| {' / '.join(str(sessions.get(f'gw{i}', '-')) for i in range(n))}{alive}"
        f"{gw.slow_note(r)} |"
    )


HEADER = (
    "| scenario | store | nodes | deliveries/s | gateway CPU, cores: sum (per node) "
    "| deliveries / gateway CPU-s | us gateway CPU / delivery | HAProxy CPU | Redis CPU "
    "| client CPU | latency ms p50 / p99 / max | gaps / dups | subscribers per node |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def csv_arg(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (e.g. a timeout around flock) unwinds like Ctrl-C: every cell's
    ``finally`` stops what it started."""
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", type=csv_arg, default=[sc.name for sc in SCENARIOS])
    parser.add_argument("--stores", type=csv_arg, default=list(STORES))
    parser.add_argument("--nodes", type=csv_arg, default=[str(n) for n in NODES])
    parser.add_argument("--duration", type=float, help="publishing seconds of every cell")
    parser.add_argument("--rate", type=float, help="events/s of every cell (0: max)")
    parser.add_argument(
        "--haproxy-cpu", type=int, default=LOAD_CPU, help=f"HAProxy's CPU (default {LOAD_CPU})"
    )
    parser.add_argument("--out", default=str(gw.ROOT / "bench" / "results.jsonl"))
    parser.add_argument("--keep", action="store_true", help="keep the nodes' logs in /tmp")
    parser.add_argument("--list", action="store_true")
    ns = parser.parse_args()
    if ns.list:
        for sc in SCENARIOS:
            print(f"{sc.name:20} {sc.note}")
        return 0
    chosen = [sc for sc in SCENARIOS if sc.name in ns.scenarios]
    if len(chosen) != len(ns.scenarios):
        parser.error("no such scenario (see --list)")
    if not set(ns.stores) <= set(STORES):
        parser.error(f"stores are {', '.join(STORES)}")
    node_counts = [int(n) for n in ns.nodes]
    if shutil.which("haproxy") is None:
        parser.error("haproxy is not installed (apt-get install -y haproxy)")
    signal.signal(signal.SIGTERM, terminate)
    os.sched_setaffinity(0, {LOAD_CPU})  # Redis and HAProxy inherit it
    out = Path(ns.out)
    results = []
    for sc in chosen:
        if ns.duration:
            sc.duration = ns.duration
        if ns.rate is not None:
            sc.rate = ns.rate
        for store in ns.stores:
            for nodes in node_counts:
                print(f"running {sc.name} / {store} / {nodes} node(s) ...", file=sys.stderr)
                results.append(run_cell(sc, store, nodes, out, ns.keep, ns.haproxy_cpu))
                print(row(results[-1]), file=sys.stderr, flush=True)
    print(HEADER)
    for r in results:
        print(row(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
