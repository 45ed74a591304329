"""The soak: the fault suite's mix, for minutes, with one verdict at the end.

    uv run python -m tests.fault.soak --minutes 5

Starts a ``redis-server`` of its own, :data:`sizes.NODES` ``gateway serve`` nodes behind
HAProxy (:class:`tests.fault.rig.Rig`), WebSocket and SSE followers and a producer that
publishes all along; every ``--fault-every`` seconds it injects the next fault of
:data:`FAULTS` in turn (a reconnect storm, a node killed with SIGKILL and restarted, a
node drained with SIGTERM and restarted, Redis client connections killed, Redis hung
with SIGSTOP for a few seconds, Redis restarted empty, twenty clients that stop
reading for a while).  It samples every node's RSS on a period; node faults rotate
over every node but the first, which lives the whole soak: its memory is the leak
check.  At the end it stops publishing, lets every follower catch up, runs the
delivery checker and prints the lost / duplicated / reused / out-of-order / gap /
phantom counts (all must be zero), how many items were announced lost with
``epoch_restarted`` (Redis restarted empty), the gateway logs that hold a traceback,
memory over time and whether the long-lived node's RSS stayed flat
(:func:`rss_verdict`).  Exit status 0 when every count is zero,
no gateway logged a traceback and the RSS is flat; 1 otherwise.

Bounded: ``--minutes`` (at most :data:`MAX_MINUTES`) plus the final catch-up
(:data:`sizes.SETTLE`); everything it started is stopped on the way out.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import redis

from tests.fault import sizes
from tests.fault.rig import Rig
from tests.support.gateway_process import GatewayProcess, tracebacks
from tests.support.redis_server import RedisServer
from tests.support.stalled import StalledClient, open_stalled_sse, open_stalled_ws

MAX_MINUTES = 120.0
#: Seconds between two RSS samples.
RSS_PERIOD = 10.0
#: Seconds Redis stays hung (SIGSTOP) in the hang fault, and the stalled clients stay.
SHORT_FAULT = 3.0
#: How long the soak waits for nodes to come back after a fault.
RECOVER = 60.0
#: The RSS verdict: samples from the first this many seconds (at least) are warm-up
#: (caches, pools and buffers filling), not growth.
RSS_WARMUP = 120.0
#: Flat: the median RSS of the last fifth of the measured samples is at most the first
#: fifth's times this, plus :data:`RSS_SLACK` bytes.
RSS_GROWTH = 1.05
RSS_SLACK = 4 * 2**20

Fault = Callable[["Soak"], Awaitable[None]]


class Soak:
    def __init__(self, rig: Rig, server: RedisServer) -> None:
        self.rig = rig
        self.server = server
        self.rss: list[tuple[float, dict[str, int | None]]] = []
        self.started = time.monotonic()
        self.log: list[str] = []
        self.faults = 0

    def next_node(self) -> GatewayProcess:
        """The node the next node fault hits: round robin over every node but the
        first, which lives the whole soak (its memory is the leak check)."""
        self.faults += 1
        others = self.rig.nodes[1:]
        return others[self.faults % len(others)]

    def say(self, what: str) -> None:
        line = f"[{time.monotonic() - self.started:7.1f}s] {what}"
        self.log.append(line)
        print(line, flush=True)

    async def sample_rss(self) -> None:
        while True:
            self.rss.append((time.monotonic() - self.started, self.rig.fleet.rss()))
            await anyio.sleep(RSS_PERIOD)  # a sampling period

    async def all_up(self) -> None:
        await self.rig.haproxy.wait_states({n.name: "UP" for n in self.rig.nodes}, RECOVER)


async def storm(soak: Soak) -> None:
    for node in soak.rig.nodes:
        soak.rig.haproxy.shutdown_sessions(node.name)


async def kill_node(soak: Soak) -> None:
    node = soak.next_node()
    node.kill()
    await soak.rig.haproxy.wait_states({node.name: "DOWN"}, RECOVER)
    await node.restart()
    await soak.all_up()


async def drain_node(soak: Soak) -> None:
    node = soak.next_node()
    node.terminate()
    await node.wait_exit()
    await node.restart()
    await soak.all_up()


async def kill_redis_connections(soak: Soak) -> None:
    def kill() -> None:
        with redis.Redis(host="127.0.0.1", port=soak.server.port, socket_timeout=5) as r:
            r.client_kill_filter(_type="normal", skipme=True)
            r.client_kill_filter(_type="pubsub", skipme=True)

    await anyio.to_thread.run_sync(kill)


async def hang_redis(soak: Soak) -> None:
    soak.server.pause()
    try:
        await anyio.sleep(SHORT_FAULT)  # the hang's duration
    finally:
        soak.server.resume()
    await soak.all_up()


async def restart_redis_empty(soak: Soak) -> None:
    await anyio.to_thread.run_sync(soak.server.stop)
    await anyio.to_thread.run_sync(soak.server.start)
    await soak.all_up()


async def stall_clients(soak: Soak) -> None:
    node = soak.rig.nodes[0]
    stalled: list[StalledClient] = []
    try:
        for i in range(sizes.STALLED_CLIENTS):
            if i % 2:
                stalled.append(await open_stalled_sse(node.host, node.port, soak.rig.feeds[0]))
            else:
                stalled.append(await open_stalled_ws(node.host, node.port, soak.rig.feeds))
        await anyio.sleep(SHORT_FAULT)  # how long they stall
    finally:
        for s in stalled:
            s.close()


FAULTS: list[tuple[str, Fault]] = [
    ("reconnect storm", storm),
    ("node killed (SIGKILL) and restarted", kill_node),
    ("Redis client connections killed", kill_redis_connections),
    ("node drained (SIGTERM) and restarted", drain_node),
    ("twenty stalled clients", stall_clients),
    ("Redis hung (SIGSTOP)", hang_redis),
    ("Redis restarted empty", restart_redis_empty),
]


async def run(minutes: float, fault_every: float, log_dir: Path) -> int:
    deadline = time.monotonic() + minutes * 60
    with RedisServer() as server:
        async with Rig(log_dir, server.url) as rig, anyio.create_task_group() as tg:
            soak = Soak(rig, server)
            tg.start_soon(soak.sample_rss)
            await rig.create_feeds()
            rig.follow(ws=sizes.WS_CLIENTS, sse=sizes.SSE_CLIENTS)
            await rig.wait_received(1)
            rig.start_publishing()
            soak.say(f"running {minutes} min; nodes {[n.url for n in rig.nodes]}")
            i = 0
            while time.monotonic() + fault_every < deadline:
                await anyio.sleep(fault_every)  # the time between faults: load only
                name, fault = FAULTS[i % len(FAULTS)]
                soak.say(f"fault: {name} ({rig.pub.summary()})")
                await fault(soak)
                i += 1
            report = await rig.report()
            tg.cancel_scope.cancel()
        print_summary(soak, report_text=report.summary(), counts=report.counts())
        if not report.clean:
            print(report.message())
        crashes = tracebacks(log_dir)
        print(f"   tracebacks: {len(crashes)} {crashes}")
        lived = soak.rig.nodes[0].name
        flat, why = rss_verdict([(t, rss.get(lived)) for t, rss in soak.rss])
        print(f"     RSS flat: {'yes' if flat else 'NO'} ({lived}, alive throughout: {why})")
        print(f"node logs: {log_dir}")
        return 0 if report.clean and not crashes and flat else 1


def _median(values: list[int]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return (
        float(ordered[middle]) if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    )


def rss_verdict(samples: list[tuple[float, int | None]]) -> tuple[bool, str]:
    """Whether one process's RSS stayed flat: ``samples`` are ``(seconds, bytes)``
    (None: the process was not running).  Past the warm-up (:data:`RSS_WARMUP`, or the
    first third of the run if longer), the median of the last fifth of the samples
    must be at most :data:`RSS_GROWTH` times the first fifth's plus :data:`RSS_SLACK`.
    Not flat either when the process was down at any sample or too few samples were
    taken to judge (fewer than ten past the warm-up)."""
    if any(rss is None for _, rss in samples):
        return False, "the process was not running at every sample"
    if not samples:
        return False, "no samples"
    warmup = max(RSS_WARMUP, samples[-1][0] / 3)
    measured = [rss for t, rss in samples if t >= warmup and rss is not None]
    if len(measured) < 10:
        return False, f"{len(measured)} samples past the {warmup:.0f} s warm-up: too few"
    fifth = len(measured) // 5
    first, second = _median(measured[:fifth]), _median(measured[-fifth:])
    flat = second <= first * RSS_GROWTH + RSS_SLACK
    mib = 2**20
    return flat, (
        f"median {first / mib:.1f} MiB then {second / mib:.1f} MiB over "
        f"{len(measured)} samples after {warmup:.0f} s"
    )


def print_summary(soak: Soak, *, report_text: str, counts: dict[str, int]) -> None:
    print("\n== soak result ==")
    for kind in ("lost", "duplicated", "reused", "out_of_order", "gap", "phantom"):
        print(f"{kind:>13}: {counts[kind]}")
    print(f"     delivery: {report_text}")
    print(f"    publisher: {soak.rig.pub.summary()}")
    print("\n== RSS over time (MiB) ==")
    names = [n.name for n in soak.rig.nodes]
    print("     t  " + "  ".join(f"{n:>7}" for n in names))
    for t, rss in soak.rss:
        cells = [f"{b / 2**20:7.1f}" if (b := rss.get(n)) else "      -" for n in names]
        print(f"{t:6.0f}  " + "  ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0, help="how long (default 5)")
    parser.add_argument(
        "--fault-every", type=float, default=20.0, help="seconds between faults (default 20)"
    )
    parser.add_argument("--log-dir", type=Path, default=None, help="where node logs go")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= MAX_MINUTES:
        parser.error(f"--minutes must be in (0, {MAX_MINUTES}]")
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="gwsoak-"))
    with contextlib.suppress(KeyboardInterrupt):
        return anyio.run(run, args.minutes, args.fault_every, log_dir)
    return 130


if __name__ == "__main__":
    sys.exit(main())
