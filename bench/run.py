"""Fan-out benchmark: starts Redis and the gateway, drives the load generator, prints a table.

    uv run python bench/run.py                       # every scenario
    uv run python bench/run.py ws-1k-max sse-1k-max  # some of them
    uv run python bench/run.py --list
    uv run python bench/run.py agent                 # the fixed-rate agent scenarios

Each scenario starts its own ``redis-server`` (pinned to CPU 1, no persistence) and a
``gateway serve`` process pinned to CPU 0 with authentication and metrics on, creates
the team feeds, and runs the load generator ``bench/loadgen.py`` pinned to CPU 1: its
subscribers connect from that separate process over WebSocket (``gateway.v1`` with a
bearer subprotocol) or SSE, and it publishes through ``bench/gateway_pub.py``, the
gateway's own producer API (schema validation and the atomic append step).  The
subscribers receive the real frames (TeamItems on team feeds).

This is a benchmark, not a test: it asserts nothing and prints what it measured.
Results and commands go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parent.parent


LOADGEN = ROOT / "bench" / "loadgen.py"
PYTHON = sys.executable
SECRET = "bench-secret-" + "x" * 32
TENANT = "bench"
#: Team ids: the load generator formats {ch} into this (a lowercase UUID per channel).
CHANNEL_FMT = "00000000-0000-4000-8000-{ch:012d}"


@dataclass
class Scenario:
    name: str
    transport: str  # ws | sse
    subscribers: int
    channels: int = 1
    rate: float = 0.0  # 0: as fast as delivery allows (loadgen --window)
    duration: float = 10.0
    window: int = 20
    extra: list[str] = field(default_factory=list)
    note: str = ""
    #: Subscribers (of the first feed) that subscribe and then never read.
    stalled: int = 0


SCENARIOS = [
    Scenario("ws-1k-max", "ws", 1000, note="target >= 600k/CPU-s"),
    Scenario("ws-5k-max", "ws", 5000, note="target >= 600k/CPU-s"),
    Scenario("sse-1k-max", "sse", 1000, note="target >= 400k/CPU-s"),
    Scenario("sse-5k-max", "sse", 5000, note="target >= 400k/CPU-s"),
    Scenario("ws-100x10-max", "ws", 1000, channels=100, note="target >= 150k/CPU-s"),
    Scenario("ws-1000x5-max", "ws", 5000, channels=1000, note="target >= 150k/CPU-s"),
    Scenario("ws-1k-50eps", "ws", 1000, rate=50, note="target p99 <= 15 ms"),
    Scenario("ws-1k-200eps", "ws", 1000, rate=200, note="target p99 <= 50 ms"),
    Scenario("ws-5k-10eps", "ws", 5000, rate=10, note="target p99 <= 75 ms"),
    Scenario("ws-1k-100eps-30s", "ws", 1000, rate=100, duration=30, note="baseline for below"),
    Scenario(
        "ws-1k-100eps-20stalled",
        "ws",
        1000,
        rate=100,
        duration=30,
        stalled=20,
        note="20 of 1000 stop reading: p99 within 1.2x of the baseline; RSS bounded",
    ),
    Scenario("sse-1k-50eps", "sse", 1000, rate=50, note="SSE latency"),
    Scenario("ws-1-50eps", "ws", 1, rate=50, duration=5, note="one subscriber: the floor"),
    # Agent traffic: many small feeds at fixed rates.  The load generator sends event k
    # to channel k % channels, so each feed gets rate / channels events per second.
    Scenario(
        "ws-1000x5-1000eps",
        "ws",
        5000,
        channels=1000,
        rate=1000,
        duration=8,
        note="1 ev/s per feed: target <= 50 us/event, p99 <= 20 ms",
    ),
    Scenario(
        "ws-1000x5-4000eps",
        "ws",
        5000,
        channels=1000,
        rate=4000,
        duration=8,
        note="4 ev/s per feed: target <= 50 us/event, p99 <= 20 ms",
    ),
    Scenario(
        "ws-1000x5-500eps",
        "ws",
        5000,
        channels=1000,
        rate=500,
        duration=8,
        note="0.5 ev/s per feed: below the agent range (1-20 ev/s); too sparse for a hold",
    ),
    Scenario(
        "ws-100x5-2000eps",
        "ws",
        500,
        channels=100,
        rate=2000,
        duration=8,
        note="20 ev/s per feed: target <= 50 us/event, p99 <= 20 ms",
    ),
]

#: The fixed-rate agent scenarios (``bench/peers.py`` runs them too).
AGENT_SCENARIOS = ["ws-1000x5-1000eps", "ws-1000x5-4000eps", "ws-100x5-2000eps", "ws-1-50eps"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def token() -> str:
    from gateway.auth import mint

    return mint(SECRET, tenant=TENANT, subject="bench", ttl_seconds=24 * 3600)


def wait_for(check: object, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except (OSError, httpx.HTTPError):
            pass
        time.sleep(0.05)  # polling interval, bounded by the deadline
    raise RuntimeError(f"{what} did not come up within {timeout}s")


def redis_command(port: int, workdir: Path) -> list[str]:
    """A benchmark's own ``redis-server`` on CPU 1 (the load side), nothing persisted."""
    return [
        "taskset",
        "-c",
        "1",
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
    ]


class Stack:
    """Redis and one gateway node, pinned; stopped on exit."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        #: Extra gateway settings (e.g. ``GATEWAY_PUBLISH_RATE``) over the ones below.
        self.env = env or {}
        self.redis_port = free_port()
        self.gw_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def start(self) -> None:
        logfile = ["--logfile", str(self.workdir / "redis.log")]
        redis = subprocess.Popen([*redis_command(self.redis_port, self.workdir), *logfile])
        self.procs.append(redis)
        self.redis = redis
        import redis as redis_lib

        client = redis_lib.Redis(port=self.redis_port)
        wait_for(client.ping, "redis")
        gateway = start_gateway(
            gateway_env(self.redis_url, self.gw_port, **self.env), self.workdir / "gateway.log"
        )
        self.procs.append(gateway)
        self.gateway = gateway

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(
                proc,
                signal.SIGKILL
                if proc is self.redis
                else signal.SIGINT
                if proc is self.gateway
                else signal.SIGTERM,
            )


def gateway_env(redis_url: str, port: int, **settings: str) -> dict[str, str]:
    """The environment of one benchmark node: ``settings`` are more ``GATEWAY_*`` values."""
    return {
        **os.environ,
        "GATEWAY_JWT_SECRET": SECRET,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_PORT": str(port),
        "GATEWAY_LOG_FORMAT": "json",
        "GATEWAY_LOG_LEVEL": "warning",
        # One tenant holds every subscriber here: lift the per-node and per-tenant
        # connection limits (defaults 10,000 and 1,000) above the scenarios' counts.
        "GATEWAY_MAX_CONNECTIONS": "100000",
        "GATEWAY_MAX_TENANT_CONNECTIONS": "100000",
        **settings,
    }


def start_gateway(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """``gateway serve`` pinned to CPU 0, once its ``/readyz`` answers 200."""
    log = open(log_path, "wb")  # noqa: SIM115 - lives with the process
    gateway = subprocess.Popen(
        ["taskset", "-c", "0", PYTHON, "-m", "gateway.cli", "serve"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(
            lambda: httpx.get(f"http://127.0.0.1:{env['GATEWAY_PORT']}/readyz").status_code == 200,
            "gateway",
        )
    except BaseException:
        stop_process(gateway, signal.SIGKILL)
        raise
    return gateway


def stop_process(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send ``sig`` to a child still running and wait for it (15 s, then SIGKILL)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def create_feeds(redis_url: str, channels: int, cluster: bool = False) -> None:
    """A feed exists from its first item: publish one per channel before subscribing."""
    sys.path.insert(0, str(ROOT / "bench"))
    from gateway_pub import team_event  # type: ignore[import-not-found, unused-ignore]

    from gateway.producer import Producer

    producer = Producer.connect(redis_url, cluster=cluster)
    try:
        for ch in range(channels):
            team = CHANNEL_FMT.format(ch=ch)
            await producer.publish_team(
                TENANT, team, {"kind": "team"}, team_event("feed created", 1)
            )
    finally:
        await producer.aclose()


def scrape(port: int) -> dict[str, float]:
    """The gateway's own counters after the run (slow-consumer actions, buffered bytes)."""
    wanted = (
        "gateway_slow_consumer_actions_total",
        "gateway_buffered_bytes",
        "gateway_items_read_total",
        "gateway_disconnects_total",
    )
    out: dict[str, float] = {}
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    for line in text.splitlines():
        if line.startswith(wanted):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def loadgen_args(sc: Scenario, stack: Stack, out: Path) -> list[str]:
    return loadgen_command(sc, stack.gw_port, [stack.gateway.pid], {"redis": stack.redis.pid}, out)


def loadgen_command(
    sc: Scenario, port: int, server_pids: list[int], pids: dict[str, int], out: Path
) -> list[str]:
    """The load generator's command line: subscribers to 127.0.0.1:``port``, the CPU of
    ``server_pids`` summed as the server's, ``pids`` (name: pid) reported one by one."""
    jwt = token()
    args = ["taskset", "-c", "1", PYTHON, str(LOADGEN)]
    for pid in server_pids:
        args += ["--server-pid", str(pid)]
    for name, pid in pids.items():
        args += ["--pid", f"{name}={pid}"]
    args += [
        "-n",
        str(sc.subscribers - sc.stalled),
        "-c",
        str(sc.channels),
        "--channel-fmt",
        CHANNEL_FMT,
        "--rate",
        str(sc.rate),
        "--window",
        str(sc.window),
        "--duration",
        str(sc.duration),
        "--payload-bytes",
        "128",
        "--pub",
        f"py:{ROOT / 'bench' / 'gateway_pub.py'}:make",
        "--max-wall",
        "240",
        "--label",
        sc.name,
        "--out",
        str(out),
    ]
    if sc.transport == "ws":
        args += [
            "--sub",
            "ws",
            "--url",
            f"ws://127.0.0.1:{port}/v1/ws",
            "--sub-proto",
            f"gateway.v1,bearer.{jwt}",
            "--subscribe-msg",
            '{"type":"subscribe","feed":"team/{channel}"}',
        ]
    else:
        args += [
            "--sub",
            "sse",
            "--url",
            f"http://127.0.0.1:{port}/v1/teams/{{channel}}/events",
            "--ws-header",
            f"Authorization: Bearer {jwt}",
        ]
    return args + sc.extra


def run(
    sc: Scenario,
    out: Path,
    keep: bool,
    during: Callable[[Stack], contextlib.AbstractContextManager[object]] | None = None,
) -> dict[str, object]:
    """One scenario on a fresh stack.  ``during``, if given, is entered once the feeds
    exist and exited after the load generator (extra load next to it: ``bench/conns.py churn``)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{sc.name}-"))
    stack = Stack(workdir)
    extra = contextlib.ExitStack()
    try:
        stack.start()
        anyio.run(create_feeds, stack.redis_url, sc.channels)
        if during is not None:
            extra.enter_context(during(stack))
        env = {**os.environ, "BENCH_REDIS_URL": stack.redis_url, "BENCH_TENANT": TENANT}
        before = out.read_text().count("\n") if out.exists() else 0
        if sc.stalled:
            stalled = subprocess.Popen(
                [
                    "taskset",
                    "-c",
                    "1",
                    PYTHON,
                    str(ROOT / "bench" / "stalled.py"),
                    "--url",
                    f"ws://127.0.0.1:{stack.gw_port}/v1/ws",
                    "--token",
                    token(),
                    "--feed",
                    "team/" + CHANNEL_FMT.format(ch=0),
                    "-n",
                    str(sc.stalled),
                ],
                stdout=subprocess.PIPE,
            )
            stack.procs.append(stalled)
            assert stalled.stdout is not None
            if stalled.stdout.readline().strip() != b"ready":
                raise RuntimeError("stalled subscribers did not connect")
        proc = subprocess.run(
            loadgen_args(sc, stack, out), env=env, capture_output=True, timeout=300, check=False
        )
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr.decode(errors="replace")[-3000:])
            raise RuntimeError(f"the load generator failed for {sc.name}")
        lines = out.read_text().splitlines()
        assert len(lines) > before, "the load generator wrote no result"
        result: dict[str, object] = json.loads(lines[-1])
        result["scenario"] = sc.name
        result["note"] = sc.note
        result["gateway_metrics"] = scrape(stack.gw_port)
        extra.close()
        return result
    finally:
        extra.close()
        stack.stop()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def num(value: object, fmt: str) -> str:
    """A table cell for a number the load generator may have left out."""
    return format(value, fmt) if isinstance(value, int | float) else "-"


def us_per_event(r: dict[str, object]) -> float | None:
    """Gateway CPU microseconds per published event (its deliveries included)."""
    cpu, events = r.get("server_cpu_s"), r.get("events_published")
    if isinstance(cpu, int | float) and isinstance(events, int) and events:
        return cpu / events * 1e6
    return None


def latency_and_gaps(r: dict[str, object]) -> str:
    """The cells ``p50 / p99 / max | gaps / dups`` of a load generator result."""
    lat = r.get("latency_ms") or {}
    assert isinstance(lat, dict)
    return (
        f"{num(lat.get('p50'), '.1f')} / {num(lat.get('p99'), '.1f')} / "
        f"{num(lat.get('max'), '.1f')} | {r.get('gaps', '-')} / {r.get('duplicates', '-')}"
    )


def row(r: dict[str, object]) -> str:
    rss = r.get("server_rss_mb") or {}
    assert isinstance(rss, dict)
    return (
        f"| {r['scenario']} | {num(r.get('deliveries_per_s'), ',.0f')} "
        f"| {num(r.get('deliveries_per_server_cpu_s'), ',.0f')} "
        f"| {num(r.get('server_cpu_util'), '.2f')} | {num(us_per_event(r), ',.0f')} "
        f"| {latency_and_gaps(r)} "
        f"| {num(r.get('server_rss_per_idle_conn_kb'), '.1f')} "
        f"| {num(rss.get('connected_idle'), '.0f')} / {num(rss.get('peak'), '.0f')} "
        f"| {r.get('note', '')}{slow_note(r)} |"
    )


def slow_note(r: dict[str, object]) -> str:
    metrics = r.get("gateway_metrics")
    if not isinstance(metrics, dict):
        return ""
    catch_up = metrics.get('gateway_slow_consumer_actions_total{action="catch_up"}', 0)
    disconnect = metrics.get('gateway_slow_consumer_actions_total{action="disconnect"}', 0)
    if not catch_up and not disconnect:
        return ""
    return f" (slow consumers: {catch_up:.0f} catch-ups, {disconnect:.0f} disconnects)"


HEADER = (
    "| scenario | deliveries/s | deliveries/server CPU-s | server CPU | server us/event "
    "| latency ms p50 / p99 / max | gaps / dups | RSS KiB per idle conn | RSS MB idle / peak "
    "| target |\n|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", help="names (default: all)")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--duration", type=float, help="override every scenario's duration")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results.jsonl"))
    parser.add_argument("--keep", action="store_true", help="keep logs in /tmp")
    ns = parser.parse_args()
    if ns.list:
        for sc in SCENARIOS:
            print(f"{sc.name:16} {sc.note}")
        return 0
    wanted = [n for name in ns.scenarios for n in (AGENT_SCENARIOS if name == "agent" else [name])]
    chosen = [sc for sc in SCENARIOS if not wanted or sc.name in wanted]
    if not chosen:
        parser.error("no such scenario (see --list)")
    out = Path(ns.out)
    results = []
    for sc in chosen:
        if ns.duration:
            sc.duration = ns.duration
        print(f"running {sc.name} ...", file=sys.stderr, flush=True)
        results.append(run(sc, out, ns.keep))
        print(row(results[-1]), file=sys.stderr, flush=True)
    print(HEADER)
    for r in results:
        print(row(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
