"""Connection costs: idle WebSocket subscribers, and reconnect churn.

    flock /tmp/bench.lock uv run python bench/conns.py idle             # 5,000 on 1,000 feeds
    flock /tmp/bench.lock uv run python bench/conns.py idle -n 5000 -c 1000 --window 20
    flock /tmp/bench.lock uv run python bench/conns.py idle --ping-interval 3600   # no pings
    flock /tmp/bench.lock uv run python bench/conns.py churn            # 1,000 steady + 200
    flock /tmp/bench.lock uv run python bench/conns.py churn --churners 200 --duration 8
    flock /tmp/bench.lock uv run python bench/conns.py churn --alone --duration 25
    flock /tmp/bench.lock uv run python bench/conns.py churn --alone --transport sse

``idle``: starts ``bench/run.py``'s stack (Redis on CPU 1, ``gateway serve`` on CPU 0,
authentication and metrics on), creates the feeds, opens ``-n`` WebSocket
subscriptions over ``-c`` feeds from a client process on CPU 1, publishes nothing and
reports the gateway's CPU over ``--window`` seconds as a fraction of a core.  The
client answers the gateway's pings (every ``GATEWAY_WS_PING_INTERVAL``, 20 s), so
they are part of the figure.

``churn``: runs ``bench/run.py``'s ``ws-1k-max`` shape (1,000 subscribers on one feed, as fast
as they keep up) twice on fresh stacks, without and with ``--churners`` clients that
reconnect in a loop to the same feed (open, upgrade with the bearer subprotocol,
``subscribe``, wait for ``subscribed``, close handshake, again; with ``--transport sse``
and ``--alone``: ``GET`` the team feed with a bearer token, wait for the ``200`` head,
drop the connection, again).  Reports deliveries
per server CPU-second for both, the reconnect rate, and the gateway CPU per reconnect
two ways: the extra CPU of the churn run over what its deliveries cost at the
no-churn rate, and a third run with the churners alone (no load generator, nothing
published).

``client`` is the worker both use (one process, pinned to CPU 1): it prints
``ready`` when its connections are up, runs until SIGTERM (or ``--max-seconds``),
then prints one JSON line of counts.  A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import anyio
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as gw
from publish import proc_cpu

# ---------------------------------------------------------------- the client worker


class Counts:
    def __init__(self) -> None:
        self.subscribed = 0
        self.pings = 0
        self.reconnects = 0
        self.errors = 0
        self.error_sample = ""


class _Conn(asyncio.Protocol):
    """What both subscribers share: ``subscribed`` (the join answered) and ``lost``."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        loop = asyncio.get_running_loop()
        self.subscribed: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.subscribed.done():
            self.subscribed.set_exception(ConnectionError("closed before subscribed"))
        if not self.lost.done():
            self.lost.set_result(None)


class WSConn(_Conn):
    """A WebSocket subscriber on websockets' sans-I/O protocol (it answers pings)."""

    def __init__(self, url: str, token: str, feed: str, counts: Counts) -> None:
        super().__init__(counts)
        self.proto = ClientProtocol(
            parse_uri(url), subprotocols=[Subprotocol("gateway.v1"), Subprotocol("bearer." + token)]
        )
        self.subscribe = json.dumps({"type": "subscribe", "feed": feed}).encode()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.proto.send_request(self.proto.connect())
        self.flush()

    def flush(self) -> None:
        assert self.transport is not None
        for chunk in self.proto.data_to_send():
            if chunk:
                self.transport.write(chunk)
            else:
                self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.proto.receive_data(data)
        for event in self.proto.events_received():
            if isinstance(event, Response):
                if event.status_code == 101:
                    self.proto.send_text(self.subscribe)
                elif not self.subscribed.done():
                    self.subscribed.set_exception(ConnectionError(f"HTTP {event.status_code}"))
            elif isinstance(event, Frame):
                if event.opcode is Opcode.PING:
                    self.counts.pings += 1
                elif event.opcode is Opcode.TEXT and not self.subscribed.done():
                    if b'"subscribed"' in event.data:
                        self.subscribed.set_result(None)
                    elif b'"error"' in event.data:
                        self.subscribed.set_exception(ConnectionError(bytes(event.data).decode()))
        self.flush()

    def close(self) -> None:
        self.proto.send_close(1000)
        self.flush()


class SSEConn(_Conn):
    """An SSE subscriber of a team feed on a raw socket: ``GET`` with a bearer token;
    the ``200`` head is its "subscribed" (what follows is read and dropped); closing
    drops the connection, as a browser's ``EventSource.close()`` does."""

    def __init__(self, port: int, token: str, feed: str, counts: Counts) -> None:
        super().__init__(counts)
        team = feed.split("/", 1)[1]
        self.request = (
            f"GET /v1/teams/{team}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
        self.head = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if self.subscribed.done():
            return
        self.head += data
        if b"\r\n\r\n" in self.head:
            status = self.head.split(b" ", 2)[1]
            if status == b"200":
                self.subscribed.set_result(None)
            else:
                self.subscribed.set_exception(ConnectionError(f"HTTP {status.decode()}"))
        elif len(self.head) > 65536:
            self.subscribed.set_exception(ConnectionError("no end of the response head"))

    def close(self) -> None:
        assert self.transport is not None
        self.transport.close()


async def open_conn(ns: argparse.Namespace, feed: str, counts: Counts) -> WSConn | SSEConn:
    loop = asyncio.get_running_loop()
    port = parse_uri(ns.url.replace("http://", "ws://", 1)).port

    def make() -> WSConn | SSEConn:
        if ns.url.startswith("http://"):
            return SSEConn(port, ns.token, feed, counts)
        return WSConn(ns.url, ns.token, feed, counts)

    _, conn = await asyncio.wait_for(loop.create_connection(make, "127.0.0.1", port), 10)
    await asyncio.wait_for(conn.subscribed, 10)
    return conn


async def client(ns: argparse.Namespace) -> dict[str, object]:
    counts = Counts()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    feeds = [f"team/{gw.CHANNEL_FMT.format(ch=i % ns.channels)}" for i in range(ns.n)]
    started = time.monotonic()
    if ns.mode == "hold":
        sem = asyncio.Semaphore(100)

        async def one(feed: str) -> WSConn | SSEConn | None:
            async with sem:
                try:
                    conn = await open_conn(ns, feed, counts)
                    counts.subscribed += 1
                    return conn
                except (TimeoutError, OSError) as exc:
                    counts.errors += 1
                    counts.error_sample = counts.error_sample or repr(exc)
                    return None

        conns = [c for c in await asyncio.gather(*(one(f) for f in feeds)) if c]
        print("ready", flush=True)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), ns.max_seconds)
        for conn in conns:
            assert conn.transport is not None
            conn.transport.abort()
    else:
        times: list[float] = []

        async def churner(feed: str) -> None:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    conn = await open_conn(ns, feed, counts)
                    conn.close()
                    await asyncio.wait_for(conn.lost, 5)
                    counts.reconnects += 1
                    times.append(time.monotonic() - t0)
                except (TimeoutError, OSError) as exc:
                    counts.errors += 1
                    counts.error_sample = counts.error_sample or repr(exc)
                    await asyncio.sleep(0.1)  # do not spin on a refusing server

        print("ready", flush=True)
        tasks = [asyncio.create_task(churner(f)) for f in feeds]
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), ns.max_seconds)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 20)
    elapsed = time.monotonic() - started
    cpu = os.times()
    return {
        "mode": ns.mode,
        "connections": ns.n,
        "subscribed": counts.subscribed,
        "reconnects": counts.reconnects,
        "reconnects_per_s": round(counts.reconnects / elapsed, 1),
        "pings": counts.pings,
        "errors": counts.errors,
        "error_sample": counts.error_sample,
        "elapsed_s": round(elapsed, 2),
        "client_cpu_s": round(cpu.user + cpu.system, 2),
    }


# ---------------------------------------------------------------- orchestration


class Worker:
    """A ``client`` process on CPU 1; :meth:`stop` ends it and returns its counts."""

    def __init__(
        self, stack: gw.Stack, mode: str, n: int, channels: int, transport: str = "ws"
    ) -> None:
        url = (
            f"ws://127.0.0.1:{stack.gw_port}/v1/ws"
            if transport == "ws"
            else f"http://127.0.0.1:{stack.gw_port}"
        )
        args = [
            "taskset",
            "-c",
            "1",
            gw.PYTHON,
            __file__,
            "client",
            "--mode",
            mode,
            "--url",
            url,
            "--token",
            gw.token(),
            "-n",
            str(n),
            "-c",
            str(channels),
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE)
        stack.procs.append(self.proc)  # stopped with the stack whatever happens
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()  # bounded by the client's own timeouts
        if line != b"ready":
            raise RuntimeError(f"client did not get ready: {line!r}")
        self.started = time.monotonic()

    def stop(self) -> dict[str, object]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
        return result


def new_stack(name: str, env: dict[str, str] | None = None) -> tuple[gw.Stack, Path]:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-conns-{name}-"))
    stack = gw.Stack(workdir, env)
    stack.start()
    return stack, workdir


def idle(ns: argparse.Namespace) -> int:
    env = {} if ns.ping_interval is None else {"GATEWAY_WS_PING_INTERVAL": str(ns.ping_interval)}
    stack, workdir = new_stack("idle", env)
    try:
        anyio.run(gw.create_feeds, stack.redis_url, ns.channels)
        worker = Worker(stack, "hold", ns.n, ns.channels)
        time.sleep(ns.settle)
        cpu0, redis0, t0 = proc_cpu(stack.gateway.pid), proc_cpu(stack.redis.pid), time.monotonic()
        time.sleep(ns.window)
        cpu1, redis1, wall = (
            proc_cpu(stack.gateway.pid),
            proc_cpu(stack.redis.pid),
            time.monotonic() - t0,
        )
        counts = worker.stop()
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    gw_cpu = cpu1[0] - cpu0[0]
    print(json.dumps({"client": counts, "gateway_env": env}))
    print(
        "| connections | feeds | window s | gateway CPU-s | gateway cores | kernel share "
        "| Redis cores | pings answered (whole run) | connect errors |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    print(
        f"| {counts['subscribed']} | {ns.channels} | {wall:.1f} | {gw_cpu:.2f} "
        f"| {gw_cpu / wall:.4f} | {(cpu1[1] - cpu0[1]) / gw_cpu if gw_cpu else 0:.2f} "
        f"| {(redis1[0] - redis0[0]) / wall:.4f} | {counts['pings']} | {counts['errors']} |"
    )
    return 0


def churn_alone(
    churners: int, duration: float, transport: str = "ws"
) -> tuple[dict[str, object], float, float]:
    """The churners alone on a fresh stack (nothing published, no steady subscribers):
    their counts, the gateway CPU-s and the wall seconds of the window."""
    stack, workdir = new_stack("churn-alone")
    try:
        anyio.run(gw.create_feeds, stack.redis_url, 1)
        worker = Worker(stack, "churn", churners, 1, transport)
        time.sleep(1.0)
        cpu0, t0 = proc_cpu(stack.gateway.pid), time.monotonic()
        time.sleep(duration)
        cpu1, wall = proc_cpu(stack.gateway.pid), time.monotonic() - t0
        return worker.stop(), cpu1[0] - cpu0[0], wall
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def churn(ns: argparse.Namespace) -> int:
    if ns.alone:
        alone, cpu, wall = churn_alone(ns.churners, ns.duration, ns.transport)
        rate = float(str(alone["reconnects"])) / float(str(alone["elapsed_s"]))
        print(json.dumps({"alone_client": alone}))
        print(f"{ns.churners} reconnecting alone ({ns.transport}): ", end="")
        print(f"gateway {cpu / wall:.2f} cores, ", end="")
        print(f"{rate:,.0f} reconnects/s, {cpu / (rate * wall) * 1e6:,.0f} us per reconnect")
        return 0
    if ns.transport != "ws":
        raise SystemExit("--transport sse: with --alone (the steady feed is a WebSocket one)")
    out = Path(ns.out)
    sc = gw.Scenario("ws-1k-max", "ws", ns.steady, duration=ns.duration)
    plain = gw.run(sc, out, keep=False)
    counts: dict[str, object] = {}

    @contextlib.contextmanager
    def churners(stack: gw.Stack) -> Iterator[None]:
        worker = Worker(stack, "churn", ns.churners, 1)
        try:
            yield
        finally:
            counts.update(worker.stop())

    sc_churn = gw.Scenario("ws-1k-max+churn", "ws", ns.steady, duration=ns.duration)
    churned = gw.run(sc_churn, out, keep=False, during=churners)
    alone, alone_cpu, wall = churn_alone(ns.churners, ns.duration)

    def f(r: dict[str, object], key: str) -> float:
        value = r.get(key)
        return float(value) if isinstance(value, int | float) else float("nan")

    rate = f(counts, "reconnects_per_s")
    # the load generator's measured span (publish start to last delivery), from its own figures.
    span = f(churned, "server_cpu_s") / f(churned, "server_cpu_util")
    in_window = rate * span
    expected_cpu = f(churned, "deliveries") / f(plain, "deliveries_per_server_cpu_s")
    extra_us = (f(churned, "server_cpu_s") - expected_cpu) / in_window * 1e6
    alone_rate = f(alone, "reconnects") / f(alone, "elapsed_s")
    alone_us = alone_cpu / (alone_rate * wall) * 1e6
    print(json.dumps({"churn_client": counts, "alone_client": alone}))
    print(
        "| run | deliveries/s | deliveries/server CPU-s | server CPU | reconnects/s "
        "| gateway us/reconnect | latency ms p50 / p99 / max | gaps / dups |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    for name, r, reconnects, us in (
        (f"{ns.steady} steady", plain, "-", "-"),
        (
            f"{ns.steady} steady + {ns.churners} reconnecting",
            churned,
            f"{rate:,.0f}",
            f"{extra_us:,.0f}",
        ),
    ):
        print(
            f"| {name} | {gw.num(r.get('deliveries_per_s'), ',.0f')} "
            f"| {gw.num(r.get('deliveries_per_server_cpu_s'), ',.0f')} "
            f"| {gw.num(r.get('server_cpu_util'), '.2f')} | {reconnects} | {us} "
            f"| {gw.latency_and_gaps(r)} |"
        )
    print(
        f"| {ns.churners} reconnecting alone | - | - | {alone_cpu / wall:.2f} "
        f"| {alone_rate:,.0f} | {alone_us:,.0f} | - | - |"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_idle = sub.add_parser("idle", help="idle subscribers, nothing published")
    p_idle.add_argument("-n", type=int, default=5000, help="connections")
    p_idle.add_argument("-c", "--channels", type=int, default=1000, help="feeds")
    p_idle.add_argument("--window", type=float, default=20.0)
    p_idle.add_argument("--settle", type=float, default=2.0, help="s after connecting")
    p_idle.add_argument(
        "--ping-interval", type=float, help="GATEWAY_WS_PING_INTERVAL (default: the gateway's)"
    )
    p_churn = sub.add_parser("churn", help="steady fan-out with and without reconnect churn")
    p_churn.add_argument("--steady", type=int, default=1000)
    p_churn.add_argument("--churners", type=int, default=200)
    p_churn.add_argument("--duration", type=float, default=8.0)
    p_churn.add_argument("--out", default=str(gw.ROOT / "bench" / "results.jsonl"))
    p_churn.add_argument("--alone", action="store_true", help="only the churners (to profile)")
    p_churn.add_argument(
        "--transport",
        choices=["ws", "sse"],
        default="ws",
        help="how the churners reconnect (sse: GET the team feed, drop it after the head)",
    )
    p_client = sub.add_parser("client", help="the worker process (used by the others)")
    p_client.add_argument("--mode", choices=["hold", "churn"], required=True)
    p_client.add_argument("--url", required=True)
    p_client.add_argument("--token", required=True)
    p_client.add_argument("-n", type=int, required=True)
    p_client.add_argument("-c", "--channels", type=int, default=1)
    p_client.add_argument("--max-seconds", type=float, default=300.0, help="hard bound")
    ns = parser.parse_args()
    if ns.command == "client":
        import uvloop

        print(json.dumps(uvloop.run(client(ns))), flush=True)
        return 0
    return idle(ns) if ns.command == "idle" else churn(ns)


if __name__ == "__main__":
    sys.exit(main())
