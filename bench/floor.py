"""The floor under the gateway at agent rates: a fan-out node that does nothing else.

    flock /tmp/bench.lock uv run python bench/floor.py              # the agent shapes, 4 readers
    uv run python bench/floor.py --shapes 1000x5@4000 --readers c,py-hold --seconds 8

The agent target is 50 us of gateway CPU per event (five deliveries) at 1-20 events/s
per feed, and five times the better peer.  This tool measures what the same shape
costs a reader that does only the unavoidable part, on the same machine, so a gateway
figure can be read against it:

- ``c``: ``bench/floor_reader.c`` (compiled here with ``cc -O2``): epoll on one Redis
  pub/sub connection subscribed to every feed's channel, one ``read`` per wake-up, and
  each message's payload written as it is to the feed's subscriber sockets, one
  ``write`` each.  No cursors, no framing, no checks.
- ``c-hold``: the same, holding like the gateway: after a read that brought messages the
  socket is not watched for ``--hold-ms`` (what is published meanwhile waits in the
  kernel), then read at once.
- ``py`` and ``py-hold``: the same two in Python as the gateway runs it (uvloop, a
  hiredis reader in ``data_received``, ``transport.write`` per subscriber;
  ``pause_reading`` and a ``call_later`` for the hold).
- ``py-lowat``: ``py-hold`` holding as the gateway's listener does on Linux: the
  socket's ``SO_RCVLOWAT`` raised for the hold instead of the transport paused (libuv
  leaves a paused socket in epoll until its first message wakes the loop).

The reader runs on CPU 0; ``redis-server``, the sink (one uvloop process that accepts
every subscriber connection and reads and discards, as the load generator's clients read their
frames) and the publisher (this process: ``PUBLISH`` at a fixed rate, channel k % feeds,
pipelined per millisecond tick) on CPU 1.  Reported per shape and reader: messages per
second reached, the reader's CPU (the scheduler's run time, ``/proc/<pid>/task/*/
schedstat``) per message and per delivery, and reads (wake-ups with data) per second.
(No kernel share: at these loads the kernel's tick-sampled user/system split of a few
dozen ticks is noise.)  A benchmark,
not a test: it prints what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as gw

HERE = Path(__file__).resolve().parent
READERS = ("c", "c-hold", "py", "py-hold", "py-lowat")
SHAPES = ("1000x5@1000", "1000x5@4000", "100x5@2000", "1x1@50")


# -- the parts that run in their own processes ----------------------------------------


def sink_main(port: int) -> None:
    """Accept subscriber connections on ``port`` and read and discard what they get."""
    import uvloop

    class Drain(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            pass

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Drain, "127.0.0.1", port, backlog=4096)
        print("ready", flush=True)
        await server.serve_forever()

    uvloop.run(serve())


def py_reader_main(
    redis_port: int, sink_port: int, feeds: int, subs: int, hold_us: int, lowat: int = 0
) -> None:
    """``floor_reader.c`` in Python, as the gateway would write it (see the docstring)."""
    import hiredis
    import uvloop

    class Sink(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            pass

    class Reader(asyncio.Protocol):
        def __init__(self, sinks: list[list[asyncio.Transport]], hold: float) -> None:
            self.parser = hiredis.Reader()
            self.sinks = sinks
            self.hold = hold
            self.confirmed = 0
            self.messages = 0
            self.reads = 0
            self.ready = asyncio.get_running_loop().create_future()
            self.transport: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]
            self.sock = transport.get_extra_info("socket")

        def data_received(self, data: bytes) -> None:
            self.reads += 1
            parser = self.parser
            parser.feed(data)
            sinks = self.sinks
            got = 0
            while (reply := parser.gets()) is not False:
                if reply[0] == b"message":
                    payload = reply[2]
                    for transport in sinks[int(reply[1][1:])]:
                        transport.write(payload)
                    got += 1
                elif reply[0] == b"subscribe":
                    self.confirmed += 1
                    if self.confirmed == len(sinks):
                        self.ready.set_result(None)
            self.messages += got
            if got and self.hold and self.transport is not None:
                if lowat:
                    sock = self.sock
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 64 * 1024)
                    asyncio.get_running_loop().call_later(self.hold, self.release, sock)
                else:
                    self.transport.pause_reading()
                    asyncio.get_running_loop().call_later(self.hold, self.transport.resume_reading)

        def release(self, sock: socket.socket) -> None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sinks: list[list[asyncio.Transport]] = []
        for _ in range(feeds):
            row = []
            for _ in range(subs):
                transport, _ = await loop.create_connection(Sink, "127.0.0.1", sink_port)
                row.append(transport)
            sinks.append(row)
        _, reader = await loop.create_connection(
            lambda: Reader(sinks, hold_us / 1e6), "127.0.0.1", redis_port
        )
        assert reader.transport is not None
        for start in range(0, feeds, 1000):
            names = [b"f%d" % k for k in range(start, min(feeds, start + 1000))]
            reader.transport.write(hiredis.pack_command((b"SUBSCRIBE", *names)))
        await reader.ready
        reader.messages = reader.reads = 0
        print("ready", flush=True)
        stop = loop.create_future()
        loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
        await stop
        print(f"messages {reader.messages} reads {reader.reads}", flush=True)

    uvloop.run(main())


# -- the driver -----------------------------------------------------------------------


def run_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` so far, from the scheduler's nanosecond
    counters (``/proc/<pid>/task/*/schedstat``): utime and stime are counted in ticks,
    too coarse for a reader using a few milliseconds a second."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def wait_ready(proc: subprocess.Popen[str], what: str, within: float = 60.0) -> None:
    """Block until ``proc`` prints its ``ready`` line (bounded)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + within
    os.set_blocking(proc.stdout.fileno(), False)
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip() == "ready":
            os.set_blocking(proc.stdout.fileno(), True)
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        time.sleep(0.05)  # polling a child's output, bounded by the deadline
    raise RuntimeError(f"{what} was not ready within {within}s")


def publish(redis_port: int, feeds: int, rate: float, seconds: float, payload: bytes) -> int:
    """PUBLISH ``rate`` messages a second for ``seconds`` (channel k % feeds), paced as
    bench/loadgen.py paces its publisher (sleep until the next one is due; those due meanwhile
    go in one pipeline); returns how many were sent."""
    client = redis.Redis(port=redis_port)
    names = [b"f%d" % k for k in range(feeds)]
    start = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            return sent
        due = int((now - start) * rate) + 1 - sent
        if due <= 0:
            time.sleep(max(0.0, start + sent / rate - now))  # until the next is due
            continue
        pipe = client.pipeline(transaction=False)
        for k in range(sent, sent + min(due, 50)):
            pipe.publish(names[k % feeds], payload)
        pipe.execute()
        sent += min(due, 50)


def parse_shape(text: str) -> tuple[int, int, float]:
    size, _, rate = text.partition("@")
    feeds, _, subs = size.partition("x")
    return int(feeds), int(subs), float(rate)


def measure(
    args: argparse.Namespace, binary: Path, shape: str, reader: str, workdir: Path
) -> dict[str, object]:
    feeds, subs, rate = parse_shape(shape)
    redis_port, sink_port = gw.free_port(), gw.free_port()
    procs: list[subprocess.Popen[str]] = []
    try:
        redis_log = ["--logfile", str(workdir / "redis.log")]
        procs.append(
            subprocess.Popen([*gw.redis_command(redis_port, workdir), *redis_log], text=True)
        )
        gw.wait_for(redis.Redis(port=redis_port).ping, "redis")
        me = [sys.executable, str(Path(__file__).resolve())]
        sink = subprocess.Popen(
            ["taskset", "-c", "1", *me, "--sink", str(sink_port)], stdout=subprocess.PIPE, text=True
        )
        procs.append(sink)
        wait_ready(sink, "sink")
        hold_us = int(args.hold_ms * 1000) if reader.endswith(("-hold", "-lowat")) else 0
        lowat = int(reader.endswith("-lowat"))
        common = [str(redis_port), str(sink_port), str(feeds), str(subs), str(hold_us)]
        if not reader.startswith("c"):
            common.append(str(lowat))
        command = (
            [str(binary), *common] if reader.startswith("c") else [*me, "--py-reader", *common]
        )
        proc = subprocess.Popen(["taskset", "-c", "0", *command], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        wait_ready(proc, reader)
        payload = b"x" * args.payload
        publish(redis_port, feeds, rate, args.warmup, payload)
        cpu0 = run_seconds(proc.pid)
        t0 = time.monotonic()
        sent = publish(redis_port, feeds, rate, args.seconds, payload)
        elapsed = time.monotonic() - t0
        cpu1 = run_seconds(proc.pid)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        counts = dict(zip(out.split()[::2], map(int, out.split()[1::2]), strict=True))
        cpu = cpu1 - cpu0
        return {
            "shape": shape,
            "reader": reader,
            "rate": sent / elapsed,
            "cpu": cpu / elapsed,
            "us_msg": cpu / sent * 1e6,
            "us_delivery": cpu / (sent * subs) * 1e6,
            # Over warm-up and window together: the reader counts from "ready".
            "reads_s": counts["reads"] / (args.warmup + elapsed),
            "per_read": counts["messages"] / max(1, counts["reads"]),
        }
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def row(r: dict[str, object]) -> str:
    f = r.__getitem__
    return (
        f"| {f('shape')} | {f('reader')} | {f('rate'):,.0f} | {f('cpu'):.3f} | "
        f"{f('us_msg'):.1f} | {f('us_delivery'):.1f} | "
        f"{f('reads_s'):,.0f} | {f('per_read'):.1f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="FEEDSxSUBS@RATE,...")
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=1.5)
    parser.add_argument("--hold-ms", type=float, default=2.0)
    parser.add_argument("--payload", type=int, default=300, help="bytes per message")
    parser.add_argument("--sink", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--py-reader", nargs=6, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sink is not None:
        sink_main(args.sink)
        return 0
    if args.py_reader is not None:
        py_reader_main(*args.py_reader)
        return 0
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("floor.py needs a C compiler (cc) for the C reader", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {1})
    with tempfile.TemporaryDirectory(prefix="floor-") as tmp:
        workdir = Path(tmp)
        binary = workdir / "floor_reader"
        subprocess.run([cc, "-O2", "-o", str(binary), str(HERE / "floor_reader.c")], check=True)
        print(
            "| shape (feeds x subscribers @ messages/s) | reader | messages/s | reader CPU | "
            "us/message | us/delivery | reads/s | messages per read |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for shape in args.shapes.split(","):
            for reader in args.readers.split(","):
                print(row(measure(args, binary, shape, reader, workdir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
