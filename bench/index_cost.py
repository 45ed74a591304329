"""What keeping the feed index (GET /v1/feeds) costs a publisher.

    uv run python bench/index_cost.py              # 5,000 publishes per case, 3 runs
    uv run python bench/index_cost.py --events 20000 --reps 5

Starts its own ``redis-server`` on a free port (no persistence) and publishes AG-UI run
events one request at a time (``Publisher.publish_run``: validation, encoding, the Lua
append step) the way an agent streaming tokens does, in three modes:

- ``none``: no index (what a publish cost before it existed);
- ``node``: as on a gateway node, the index written by its once-a-second round
  (``FeedActivity.run``), so a publish only notes the feed in memory;
- ``producer``: as in the Python producer, the index written inline at most once per
  feed per second;

each against one feed (one run streaming) and against 1,000 feeds in turn (many agents,
each publishing once every 1,000 events).  It prints the publishes per second, the mean
and p99 latency of one publish, the publisher's CPU time per publish, and Redis's time
and commands per publish (``INFO commandstats``).  A benchmark, not a test: it asserts
nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import anyio
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gateway.activity import FeedActivity
from gateway.fanout.foldcache import FoldCache
from gateway.metrics import Metrics
from gateway.publisher import Publisher, Via
from gateway.store.redis import redis_backend
from tests.support.redis_server import RedisServer


def commands(url: str) -> tuple[int, int]:
    """Commands Redis ran so far, and the microseconds it spent in them."""
    stats = redis.Redis.from_url(url).info("commandstats")
    ours = [v for k, v in stats.items() if k != "cmdstat_info"]
    return sum(int(v["calls"]) for v in ours), sum(int(v["usec"]) for v in ours)


async def case(url: str, prefix: str, mode: str, feeds: int, events: int) -> dict[str, float]:
    backend = redis_backend(url, prefix=prefix)
    assert backend.index is not None
    act = None if mode == "none" else FeedActivity(backend.index)
    publisher = Publisher(
        backend.feeds,
        backend.live,
        FoldCache(backend.feeds, backend.folds),
        Metrics(),
        team_retention=10_000,
        activity=act,
    )
    latencies: list[float] = []
    try:
        async with anyio.create_task_group() as tg:
            if mode == "node":
                assert act is not None
                tg.start_soon(act.run)
            for i in range(feeds):  # each run starts before the timing
                await publisher.publish_run(
                    "bench",
                    f"t{i}",
                    "r",
                    {"type": "RUN_STARTED", "threadId": f"t{i}", "runId": "r"},
                    via=Via.PRODUCER,
                )
            before, before_usec = commands(url)
            cpu = time.process_time()
            started = time.perf_counter()
            for n in range(events):
                i = n % feeds
                event = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x" * 32}
                t0 = time.perf_counter()
                await publisher.publish_run("bench", f"t{i}", "r", event, via=Via.PRODUCER)
                latencies.append(time.perf_counter() - t0)
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu
            calls, usec = commands(url)
            calls, usec = calls - before, usec - before_usec
            tg.cancel_scope.cancel()
    finally:
        await backend.aclose()
    latencies.sort()
    return {
        "rate": events / elapsed,
        "mean_us": statistics.fmean(latencies) * 1e6,
        "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
        "cpu_us": cpu / events * 1e6,
        "redis_us": usec / events,
        "calls": calls / events,
        "writes": 0 if act is None else act.writes,
    }


async def main(events: int, reps: int) -> None:
    with RedisServer() as server:
        print(
            f"{events} publishes per case, one at a time, median of {reps} interleaved runs, "
            f"Redis on 127.0.0.1:{server.port}"
        )
        print(
            f"{'feeds':>6} {'mode':>9} {'pub/s':>8} {'mean µs':>8} {'p99 µs':>8} "
            f"{'CPU µs':>7} {'Redis µs':>8} {'cmds/pub':>9} {'index writes':>12}"
        )
        for feeds in (1, 1000):
            results: dict[str, list[dict[str, float]]] = {}
            for rep in range(reps):  # interleaved, so that noise hits every mode alike
                for mode in ("none", "node", "producer"):
                    prefix = f"bench:{mode}:{feeds}:{rep}"
                    results.setdefault(mode, []).append(
                        await case(server.url, prefix, mode, feeds, events)
                    )
            for mode, runs in results.items():
                r = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
                print(
                    f"{feeds:>6} {mode:>9} {r['rate']:>8.0f} {r['mean_us']:>8.0f} "
                    f"{r['p99_us']:>8.0f} {r['cpu_us']:>7.0f} {r['redis_us']:>8.1f} "
                    f"{r['calls']:>9.3f} {r['writes']:>12.0f}"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    anyio.run(main, args.events, args.reps)
