"""Side by side: this gateway, Socket.IO and soketi under the same load-generator scenarios.

    (cd bench/peers && npm ci)                            # the pinned peers, once
    uv run python bench/peers.py                          # every scenario below, all three
    uv run python bench/peers.py ws-100x10-max --only socketio,gateway
    uv run python bench/peers.py agent                    # the fixed-rate agent scenarios

The peers are pinned in ``bench/peers/package.json`` and its lock file, each started by a
small script there (``socketio.js``, ``soketi.js``).  Every system runs pinned to CPU 0,
the load generator ``bench/loadgen.py`` (and Redis, and the publisher) on CPU 1, with the
same subscriber counts, channels, rates, window and 128-byte payloads as
``bench/run.py``.  What differs is each system's own protocol and publish path:

- gateway: ``bench/run.py``'s stack (WebSocket ``gateway.v1`` with a JWT, TeamItems,
  publishing through the producer API: validation and the atomic append step);
- Socket.IO 4.8 with ``@socket.io/redis-streams-adapter``: the load generator ``XADD``s
  each event to a Redis stream the server reads (``io.to(key).emit``);
- soketi 1.6 (uWebSockets.js, Pusher protocol): the load generator publishes with its
  signed HTTP batch API (``bench/soketi_pub.py``, 10 events per request).

A benchmark, not a test: it prints what it measured (and appends the JSON lines to
``bench/results.jsonl``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as gw

SCENARIOS = [
    "ws-1k-max",
    "ws-5k-max",
    "ws-100x10-max",
    "ws-1000x5-max",
    "ws-1k-50eps",
    "ws-1k-200eps",
    *gw.AGENT_SCENARIOS,
]
SYSTEMS = ("gateway", "socketio", "soketi")


def wait_port(port: int, what: str, timeout: float = 30.0) -> None:
    def check() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    gw.wait_for(check, what, timeout)


@contextlib.contextmanager
def process(args: list[str], log: Path, **kw: object) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, **kw)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


PEERS = gw.ROOT / "bench" / "peers"


def common_args(sc: gw.Scenario, out: Path) -> list[str]:
    return [
        "taskset",
        "-c",
        "1",
        gw.PYTHON,
        str(gw.LOADGEN),
        "-n",
        str(sc.subscribers),
        "-c",
        str(sc.channels),
        "--rate",
        str(sc.rate),
        "--window",
        str(sc.window),
        "--duration",
        str(sc.duration),
        "--payload-bytes",
        "128",
        "--max-wall",
        "240",
        "--out",
        str(out),
    ]


def loadgen(
    args: list[str], out: Path, label: str, env: dict[str, str] | None = None
) -> dict[str, object]:
    before = out.read_text().count("\n") if out.exists() else 0
    proc = subprocess.run(
        [*args, "--label", label], capture_output=True, timeout=300, check=False, env=env
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace")[-3000:])
        raise RuntimeError(f"the load generator failed for {label}")
    lines = out.read_text().splitlines()
    assert len(lines) > before, "the load generator wrote no result"
    result: dict[str, object] = json.loads(lines[-1])
    return result


def run_socketio(sc: gw.Scenario, out: Path, workdir: Path) -> dict[str, object]:
    rport, port = gw.free_port(), gw.free_port()
    with process(gw.redis_command(rport, workdir), workdir / "redis.log") as redis:
        wait_port(rport, "redis")
        env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{rport}", "PORT": str(port)}
        node = ["taskset", "-c", "0", "node", "socketio.js"]
        with process(node, workdir / "socketio.log", cwd=PEERS, env=env) as server:
            wait_port(port, "socket.io")
            args = [
                *common_args(sc, out),
                "--server-pid",
                str(server.pid),
                "--pid",
                f"redis={redis.pid}",
                "--sub",
                "socketio",
                "--url",
                f"ws://127.0.0.1:{port}/socket.io/?EIO=4&transport=websocket",
                "--subscribe-msg",
                '42["subscribe","{channel}"]',
                "--pub",
                "redis",
                "--redis-url",
                f"redis://127.0.0.1:{rport}",
            ]
            return loadgen(args, out, f"socketio:{sc.name}")


def run_soketi(sc: gw.Scenario, out: Path, workdir: Path) -> dict[str, object]:
    port, metrics_port = gw.free_port(), gw.free_port()
    env = {**os.environ, "PORT": str(port), "SOKETI_METRICS_SERVER_PORT": str(metrics_port)}
    node = ["taskset", "-c", "0", "node", "soketi.js"]
    with process(node, workdir / "soketi.log", cwd=PEERS, env=env) as server:
        wait_port(port, "soketi")
        args = [
            *common_args(sc, out),
            "--server-pid",
            str(server.pid),
            "--sub",
            "pusher",
            "--url",
            f"ws://127.0.0.1:{port}/app/app-key?protocol=7",
            "--channel-fmt",
            "fan-{ch}",
            "--subscribe-msg",
            '{"event":"pusher:subscribe","data":{"channel":"{channel}"}}',
            "--pub",
            f"py:{gw.ROOT / 'bench' / 'soketi_pub.py'}:make",
        ]
        pub_env = {**os.environ, "PUSHER_URL": f"http://127.0.0.1:{port}"}
        return loadgen(args, out, f"soketi:{sc.name}", pub_env)


def row(system: str, sc: gw.Scenario, r: dict[str, object]) -> str:
    num = gw.num
    return (
        f"| {sc.name} | {system} | {num(r.get('deliveries_per_s'), ',.0f')} "
        f"| {num(r.get('deliveries_per_server_cpu_s'), ',.0f')} "
        f"| {num(r.get('server_cpu_util'), '.2f')} | {num(gw.us_per_event(r), ',.0f')} "
        f"| {num(r.get('client_cpu_util'), '.2f')} "
        f"| {gw.latency_and_gaps(r)} | {num(r.get('server_rss_per_idle_conn_kb'), '.1f')} |"
    )


HEADER = (
    "| scenario | system | deliveries/s | deliveries/server CPU-s | server CPU "
    "| server us/event | client CPU | latency ms p50 / p99 / max | gaps / dups "
    "| RSS KiB per idle conn |\n|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "scenarios",
        nargs="*",
        help=f"default: {' '.join(SCENARIOS)}; 'agent': the fixed-rate agent scenarios",
    )
    parser.add_argument("--only", default=",".join(SYSTEMS), help="systems, comma-separated")
    parser.add_argument("--duration", type=float, help="override every scenario's duration")
    parser.add_argument("--out", default=str(gw.ROOT / "bench" / "results.jsonl"))
    ns = parser.parse_args()
    systems = [s for s in ns.only.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems: {sorted(unknown)}")
    names = [
        n
        for name in ns.scenarios or SCENARIOS
        for n in (gw.AGENT_SCENARIOS if name == "agent" else [name])
    ]
    by_name = {sc.name: sc for sc in gw.SCENARIOS}
    if unknown := [n for n in names if n not in by_name or by_name[n].transport != "ws"]:
        parser.error(f"not a WebSocket scenario of bench/run.py: {unknown}")
    if set(systems) - {"gateway"} and not (PEERS / "node_modules").is_dir():
        parser.error(f"the peers are not installed: cd {PEERS} && npm ci")
    out = Path(ns.out)
    rows = []
    for name in names:
        sc = by_name[name]
        if ns.duration:
            sc.duration = ns.duration
        for system in systems:
            print(f"running {name} on {system} ...", file=sys.stderr, flush=True)
            if system == "gateway":
                result = gw.run(sc, out, keep=False)
            else:
                with tempfile.TemporaryDirectory(prefix=f"peer-{system}-") as tmp:
                    runner = run_socketio if system == "socketio" else run_soketi
                    result = runner(sc, out, Path(tmp))
            rows.append(row(system, sc, result))
            print(rows[-1], file=sys.stderr, flush=True)
    print(HEADER)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
