"""Late-join benchmark: the cost of joining a long AG-UI run anywhere but its start.

    uv run python bench/late_join.py                 # a 100,000-event run
    uv run python bench/late_join.py --events 20000

Starts its own ``redis-server`` (CPU 1) and a ``gateway serve`` node (CPU 0) like
``bench/run.py``, publishes one run of N AG-UI events through the producer API (text
messages of 128-byte deltas, tool calls with arguments and results, state deltas), then
joins it over real SSE with ``Last-Event-ID`` and measures, per join, the time until the
first event after the prelude arrived, the prelude's size, and the node's CPU time:

- the first join at the head on a node that never folded the run (it reads and folds the
  whole run from Redis, and leaves checkpoints every 1000 items);
- a second join at the head (served from the checkpoint it left);
- joins at random cursors (nearest checkpoint, then at most 1000 items);
- 50 joins at once at the same random cursor (one computation, shared).

This is a benchmark, not a test: it asserts nothing and prints what it measured.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import TENANT, Stack, token

THREAD, RUN = "bench-thread", "bench-run"
PATH = f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui"
DELTA = "x" * 128


def run_events(n: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN}]
    events.append({"type": "STATE_SNAPSHOT", "snapshot": {"turn": 0, "notes": []}})
    turn = 0
    while len(events) < n - 1:
        turn += 1
        mid, tid = f"m{turn}", f"t{turn}"
        events.append({"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"})
        events += [
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": DELTA} for _ in range(20)
        ]
        events.append(
            {
                "type": "TOOL_CALL_START",
                "toolCallId": tid,
                "toolCallName": "search",
                "parentMessageId": mid,
            }
        )
        events += [{"type": "TOOL_CALL_ARGS", "toolCallId": tid, "delta": '{"q":"x"}'}] * 5
        events.append({"type": "TOOL_CALL_END", "toolCallId": tid})
        events.append({"type": "TEXT_MESSAGE_END", "messageId": mid})
        events.append(
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"r{turn}",
                "toolCallId": tid,
                "content": "result " * 10,
            }
        )
        events.append(
            {
                "type": "STATE_DELTA",
                "delta": [
                    {"op": "replace", "path": "/turn", "value": turn},
                    {"op": "add", "path": "/notes/-", "value": f"note {turn}"},
                ],
            }
        )
    return events[: n - 1]  # left open: the run is still going


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def publish(stack: Stack, events: list[dict[str, Any]]) -> list[str]:
    from gateway.producer import Producer

    producer = Producer.connect(stack.redis_url, run_retention=len(events) + 10)
    cursors: list[str] = []
    try:
        for start in range(0, len(events), 1000):
            got = await producer.publish_run(TENANT, THREAD, RUN, events[start : start + 1000])
            cursors += [str(c) for c in got]
    finally:
        await producer.aclose()
    return cursors


async def join(client: httpx.AsyncClient, cursor: str) -> tuple[float, int, int]:
    """Seconds until the first event after the prelude; prelude events and bytes."""
    started = time.perf_counter()
    events = size = 0
    headers = {"Authorization": f"Bearer {token()}", "Last-Event-ID": cursor}
    async with client.stream("GET", PATH, headers=headers) as response:
        assert response.status_code == 200, response.status_code
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                return time.perf_counter() - started, events, size
            if line.startswith("data: "):
                events += 1
                size += len(line)
    raise RuntimeError("the stream ended before the first event after the prelude")


async def measure(stack: Stack, n: int) -> list[tuple[str, str, str, str, str]]:
    events = run_events(n)
    t0 = time.perf_counter()
    cursors = await publish(stack, events)
    publish_s = time.perf_counter() - t0
    # One more event so that a join at the head has an event after its prelude.
    pid = stack.gateway.pid
    rows: list[tuple[str, str, str, str, str]] = []
    rng = random.Random(7)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.gw_port}", timeout=120) as c:
        head = cursors[-2]

        async def one(label: str, cursor: str) -> None:
            cpu = cpu_seconds(pid)
            seconds, count, size = await join(c, cursor)
            rows.append(
                (
                    label,
                    f"{seconds * 1000:.1f}",
                    f"{(cpu_seconds(pid) - cpu) * 1000:.0f}",
                    str(count),
                    f"{size / 1024:.0f}",
                )
            )

        await one("first join at the head (cold: folds the whole run)", head)
        await one("second join at the head (checkpoint)", head)
        samples: list[float] = []
        cpu = cpu_seconds(pid)
        picks = [cursors[rng.randrange(1000, len(cursors) - 2)] for _ in range(20)]
        for cursor in picks:
            seconds, _, _ = await join(c, cursor)
            samples.append(seconds)
        used = (cpu_seconds(pid) - cpu) / len(picks)
        rows.append(
            (
                "20 joins at random cursors: p50",
                f"{statistics.median(samples) * 1000:.1f}",
                f"{used * 1000:.0f} (mean)",
                "",
                "",
            )
        )
        rows.append(("20 joins at random cursors: max", f"{max(samples) * 1000:.1f}", "", "", ""))
        cursor = cursors[rng.randrange(1000, len(cursors) - 2)]
        cpu = cpu_seconds(pid)
        t1 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(join, c, cursor)
        rows.append(
            (
                "50 joins at once, one new cursor: all served",
                f"{(time.perf_counter() - t1) * 1000:.1f}",
                f"{(cpu_seconds(pid) - cpu) * 1000:.0f} (total)",
                "",
                "",
            )
        )
    print(f"run: {n} events published in {publish_s:.1f} s through the producer API")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp))
        stack.start()
        try:
            rows = anyio.run(measure, stack, args.events)
        finally:
            stack.stop()
    header = ("join", "ms to first live event", "node CPU ms", "prelude events", "prelude KiB")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(5)]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
