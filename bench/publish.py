"""HTTP publish load: a raw-socket client for ``POST /v1/teams/{team}/events``.

    flock /tmp/bench.lock uv run python bench/publish.py                # default rows
    flock /tmp/bench.lock uv run python bench/publish.py --rows 1x1,10x1,1x8 -k 16 --duration 8
    uv run python bench/publish.py --help

Starts its own ``redis-server`` (CPU 1) and ``gateway serve`` (CPU 0) with
authentication and metrics on (``bench/run.py``'s :class:`Stack`), and pins itself to
CPU 1.  The tenant's publish rate limit stays on but is raised far above the load
(``GATEWAY_PUBLISH_RATE``), so every request pays the token bucket and none is refused.

Each row ``BxP`` is B seed ``team_message`` events per request (B > 1: an array body)
and P requests in flight per connection (P > 1: HTTP/1.1 pipelining).  ``-k``
keep-alive connections (default 16) send closed-loop: each answer sends the next
request.  Requests go round-robin over ``--teams`` teams (default 100).  The request
bytes are built once per team; per request only the fixed-width counters inside the
events' ``event_id`` change (every event is new: none is a duplicate).  The client
parses only the status line, ``content-length`` and the cursor count of each answer,
and counts every answer that is not 200/201 with one cursor per event as an error.

Reported per row, over the measurement window (after ``--warmup`` seconds): requests
and events per second, gateway CPU (utime + stime from ``/proc/<pid>/stat``) per
request and per event, the kernel's share of it, the client's own CPU per request (so
the tool's cost is known), Redis CPU, and request latency p50 / p99 (send to answer,
pipelining queueing included).  A benchmark, not a test: it prints what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as gw
from gateway_pub import team_event

#: Width of the counter written into each event_id (the id's last UUID group).
ID_DIGITS = 12
#: Stands for the counter in the body template until requests are built.
ID_SLOT = b"#" * ID_DIGITS
TEXT = '{"fb":"publish-bench","pad":"' + "x" * 90 + '"}'  # ~128 bytes, like bench/loadgen.py's
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> tuple[float, float]:
    """(user + system, system) CPU seconds of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    user, system = int(fields[11]), int(fields[12])
    return (user + system) / CLK_TCK, system / CLK_TCK


def self_cpu() -> float:
    times = os.times()
    return times.user + times.system


class Requests:
    """Pre-built request bytes: one head per team, one body template, fresh ids."""

    def __init__(self, token: str, teams: int, batch: int, host: str, first_id: int) -> None:
        items = []
        for k in range(batch):
            event = team_event(TEXT, k + 1)
            event["event_id"] = "00000000-0000-4000-8000-" + ID_SLOT.decode()
            items.append({"source": {"kind": "team"}, "event": event})
        body = json.dumps(items[0] if batch == 1 else items, separators=(",", ":")).encode()
        self.parts = body.split(ID_SLOT)
        assert len(self.parts) == batch + 1
        self.heads = [
            (
                f"POST /v1/teams/{gw.CHANNEL_FMT.format(ch=t)}/events HTTP/1.1\r\n"
                f"Host: {host}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            for t in range(teams)
        ]
        self.batch = batch
        self.teams = teams
        self.sent = 0
        #: The next event_id counter: never reused on one stack (a reused id is a 409).
        self.ids = first_id
        self.size = len(self.heads[0]) + len(body)

    def next(self) -> bytes:
        team = self.sent % self.teams
        self.sent += 1
        parts = self.parts
        first = self.ids
        self.ids = first + self.batch
        if self.batch == 1:
            return b"".join((self.heads[team], parts[0], b"%012d" % first, parts[1]))
        pieces = [self.heads[team], parts[0]]
        for k in range(self.batch):
            pieces.append(b"%012d" % (first + k))
            pieces.append(parts[k + 1])
        return b"".join(pieces)


@dataclass
class Tally:
    """What the answers said; ``measuring`` gates what counts for the window."""

    batch: int
    measuring: bool = False
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    error_sample: str = ""
    latencies: list[int] = field(default_factory=list)

    def answer(self, status: int, body: bytes, latency_ns: int) -> None:
        good = (
            status in (200, 201)
            and body.startswith(b'{"cursors":["')
            and body.count(b":") == 1 + self.batch
        )
        if not self.measuring:
            return
        if good:
            self.ok += 1
            self.latencies.append(latency_ns)
        else:
            self.errors[str(status)] += 1
            if not self.error_sample:
                self.error_sample = body[:300].decode(errors="replace")


class Conn(asyncio.Protocol):
    """One keep-alive connection: keeps ``depth`` requests in flight while running."""

    def __init__(self, requests: Requests, tally: Tally, depth: int) -> None:
        self.requests = requests
        self.tally = tally
        self.depth = depth
        self.buf = bytearray()
        self.sent_at: deque[int] = deque()
        self.running = True
        self.transport: asyncio.Transport | None = None
        self.idle = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        for _ in range(self.depth):
            self.send_one()

    def send_one(self) -> None:
        assert self.transport is not None
        self.sent_at.append(time.perf_counter_ns())
        self.transport.write(self.requests.next())

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        start = 0
        while True:
            end_head = buf.find(b"\r\n\r\n", start)
            if end_head < 0:
                break
            head = bytes(buf[start:end_head]).lower()
            at = head.find(b"\r\ncontent-length:")
            length = 0
            if at >= 0:
                eol = head.find(b"\r\n", at + 2)
                length = int(head[at + 17 : eol if eol >= 0 else len(head)])
            end = end_head + 4 + length
            if len(buf) < end:
                break
            status = int(head[9:12])
            self.tally.answer(
                status,
                bytes(buf[end_head + 4 : end]),
                time.perf_counter_ns() - self.sent_at.popleft(),
            )
            start = end
            if self.running:
                self.send_one()
        if start:
            del buf[:start]
        if not self.running and not self.sent_at and not self.idle.done():
            self.idle.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.sent_at:
            self.tally.errors["connection lost"] += len(self.sent_at)
            self.sent_at.clear()
        if not self.idle.done():
            self.idle.set_result(None)


@dataclass
class Row:
    batch: int
    depth: int


def pct(values: list[int], p: float) -> float:
    """The p-th percentile of nanosecond values, in milliseconds."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] / 1e6


async def measure(
    stack: gw.Stack, row: Row, ns: argparse.Namespace, token: str, first_id: int
) -> tuple[dict[str, object], int]:
    """One row on ``stack``; returns its figures and the next unused event_id counter."""
    loop = asyncio.get_running_loop()
    requests = Requests(token, ns.teams, row.batch, f"127.0.0.1:{stack.gw_port}", first_id)
    tally = Tally(row.batch)
    conns: list[Conn] = []
    for _ in range(ns.connections):
        _, conn = await asyncio.wait_for(
            loop.create_connection(
                lambda: Conn(requests, tally, row.depth), "127.0.0.1", stack.gw_port
            ),
            10,
        )
        conns.append(conn)
    await asyncio.sleep(ns.warmup)
    gw0, redis0, me0, sent0 = (
        proc_cpu(stack.gateway.pid),
        proc_cpu(stack.redis.pid),
        self_cpu(),
        requests.sent,
    )
    t0 = time.monotonic()
    tally.measuring = True
    await asyncio.sleep(ns.duration)
    tally.measuring = False
    wall = time.monotonic() - t0
    gw1, redis1, me1 = proc_cpu(stack.gateway.pid), proc_cpu(stack.redis.pid), self_cpu()
    for conn in conns:
        conn.running = False
    await asyncio.wait_for(asyncio.gather(*(c.idle for c in conns)), 10)
    for conn in conns:
        assert conn.transport is not None
        conn.transport.close()
    done = tally.ok + sum(tally.errors.values())
    gw_cpu, gw_sys = gw1[0] - gw0[0], gw1[1] - gw0[1]
    events = tally.ok * row.batch
    result: dict[str, object] = {
        "batch": row.batch,
        "depth": row.depth,
        "connections": ns.connections,
        "teams": ns.teams,
        "request_bytes": requests.size,
        "window_s": round(wall, 3),
        "requests": done,
        "requests_sent": requests.sent - sent0,
        "ok": tally.ok,
        "errors": dict(tally.errors),
        "error_sample": tally.error_sample,
        "requests_per_s": round(tally.ok / wall, 1),
        "events_per_s": round(events / wall, 1),
        "gateway_cpu_s": round(gw_cpu, 3),
        "gateway_cores": round(gw_cpu / wall, 3),
        "gateway_sys_share": round(gw_sys / gw_cpu, 3) if gw_cpu else None,
        "gateway_us_per_request": round(gw_cpu / tally.ok * 1e6, 1) if tally.ok else None,
        "gateway_us_per_event": round(gw_cpu / events * 1e6, 1) if events else None,
        "client_cpu_s": round(me1 - me0, 3),
        "client_us_per_request": round((me1 - me0) / tally.ok * 1e6, 1) if tally.ok else None,
        "redis_cores": round((redis1[0] - redis0[0]) / wall, 3),
        "latency_ms": {
            "p50": round(pct(tally.latencies, 50), 2),
            "p99": round(pct(tally.latencies, 99), 2),
            "max": round(pct(tally.latencies, 100), 2),
        },
    }
    return result, requests.ids


HEADER = (
    "| events/request x pipeline | requests/s | events/s | gateway CPU | gateway us/request "
    "| gateway us/event | kernel share | client us/request | Redis CPU "
    "| latency ms p50 / p99 | errors |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def table_row(r: dict[str, object]) -> str:
    num = gw.num
    lat = r["latency_ms"]
    assert isinstance(lat, dict)
    errors = r["errors"]
    assert isinstance(errors, dict)
    return (
        f"| {r['batch']} x {r['depth']} | {num(r['requests_per_s'], ',.0f')} "
        f"| {num(r['events_per_s'], ',.0f')} | {num(r['gateway_cores'], '.2f')} "
        f"| {num(r['gateway_us_per_request'], ',.0f')} | {num(r['gateway_us_per_event'], ',.0f')} "
        f"| {num(r['gateway_sys_share'], '.2f')} | {num(r['client_us_per_request'], ',.0f')} "
        f"| {num(r['redis_cores'], '.2f')} | {num(lat['p50'], '.2f')} / {num(lat['p99'], '.2f')} "
        f"| {sum(errors.values()) or 0} |"
    )


def parse_rows(spec: str) -> list[Row]:
    rows = []
    for part in spec.split(","):
        batch, _, depth = part.strip().partition("x")
        rows.append(Row(int(batch), int(depth or 1)))
    return rows


async def main_async(ns: argparse.Namespace, stack: gw.Stack) -> list[dict[str, object]]:
    from gateway.auth import mint

    token = mint(gw.SECRET, tenant=gw.TENANT, subject="publish-bench", scopes=("publish",))
    results = []
    next_id = 0
    for row in parse_rows(ns.rows):
        print(f"measuring {row.batch} x {row.depth} ...", file=sys.stderr, flush=True)
        result, next_id = await measure(stack, row, ns, token, next_id)
        result["gateway_pid"] = stack.gateway.pid
        results.append(result)
        print(table_row(result), file=sys.stderr, flush=True)
        if result["error_sample"]:
            print(f"  first bad answer: {result['error_sample']}", file=sys.stderr)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", default="1x1,10x1,1x4", help="comma-separated BxP: B events/request, P deep"
    )
    parser.add_argument("-k", "--connections", type=int, default=16)
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--duration", type=float, default=8.0, help="measurement window, s")
    parser.add_argument("--warmup", type=float, default=1.5, help="load before the window, s")
    parser.add_argument("--out", help="append each row's JSON to this file")
    parser.add_argument("--keep", action="store_true", help="keep the logs in /tmp")
    parser.add_argument(
        "--pid-file", help="write the gateway's pid here once it is up (for a profiler)"
    )
    ns = parser.parse_args()
    os.sched_setaffinity(0, {1})
    workdir = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    stack = gw.Stack(
        workdir, env={"GATEWAY_PUBLISH_RATE": "10000000", "GATEWAY_PUBLISH_BURST": "10000000"}
    )
    try:
        stack.start()
        if ns.pid_file:
            Path(ns.pid_file).write_text(f"{stack.gateway.pid}\n")
        import uvloop  # a gateway dependency

        results = uvloop.run(main_async(ns, stack))
    finally:
        stack.stop()
        if not ns.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if ns.out:
        with open(ns.out, "a") as out:
            for r in results:
                out.write(json.dumps(r) + "\n")
    print(
        f"{ns.connections} keep-alive connections, {ns.teams} teams, "
        f"{ns.duration:g} s window after {ns.warmup:g} s warm-up"
    )
    print(HEADER)
    for r in results:
        print(table_row(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
