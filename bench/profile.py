"""py-spy profiles of the gateway under the agent loads, and their breakdown.

    uv pip install py-spy                       # measurement only, not in the lock
    flock /tmp/bench.lock uv run python bench/profile.py publish --raw /tmp/pub.txt
    flock /tmp/bench.lock uv run python bench/profile.py scenario ws-1000x5-4000eps --raw /tmp/s.txt
    uv run python bench/profile.py summary /tmp/pub.txt --kind request
    uv run python bench/profile.py summary /tmp/s.txt --kind event

``publish`` runs ``bench/publish.py`` (one row, single-event requests, 16 connections)
and, after its warm-up, ``py-spy record --native -r 250 -d 15 -f raw`` on the gateway
(py-spy on CPU 1).  ``scenario`` runs one ``bench/run.py`` scenario with a longer
publish phase and starts the same recording ``--delay`` seconds after the load generator (once
its subscribers are connected and publishing has begun).  py-spy records only busy
samples (a thread waiting in ``epoll_wait`` with a timeout is idle and not recorded).

``summary`` reads a raw (collapsed-stack) file and puts each sample in the first
category, in the order listed in :data:`REQUEST` / :data:`EVENT`, that one of its
frames matches, and also splits samples by their leaf frame: a kernel entry (a
syscall wrapper of libc) against Python or native user code.  A benchmark aid, not a
test.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as gw

PYSPY = str(Path(gw.PYTHON).parent / "py-spy")

#: anyio frames, but not its run() at the root of every stack.
ANYIO = r"^(?!AsyncIOBackend\.run |run \(anyio/).*\(anyio/"

#: Per publish request.  A sample goes to the category of the frame nearest its leaf
#: that matches one of the specific categories (so the asyncio timeout redis-py enters
#: counts as redis-py, the handler's call into the validator as validation); only a
#: sample with no specific frame goes to the generic event loop.  For a frame that
#: matches several, the first listed wins.
REQUEST: list[tuple[str, str]] = [
    ("metrics (prometheus_client)", r"prometheus_client|gateway/metrics\.py"),
    (
        "auth (JWT verify, principal)",
        r"gateway/auth\.py|\(jwt/|principal \(gateway/http/route_context",
    ),
    ("rate limit", r"gateway/limits\.py"),
    ("RFC 8785 encode", r"gateway/canonical\.py|rfc8785"),
    ("validation (schema)", r"gateway/validate\.py|jsonschema"),
    ("Redis round trip (redis-py)", r"\(redis/|gateway/store/redis"),
    ("JSON decode of the body", r"decode_body"),
    (
        "route, publisher, feed bookkeeping",
        r"gateway/store/|gateway/feed\.py|gateway/publisher\.py|gateway/http/(publish|teams)\.py",
    ),
    ("anyio (task per request, cancel scopes)", ANYIO),
    (
        "HTTP parse / respond (server, h11 or h1)",
        r"\(h11/|gateway/http/server\.py|gateway/http/h1\.py|gateway/http/router\.py",
    ),
]

#: Per event and delivery (a syscall leaf first goes to its own row, see SYSCALL_ROWS).
EVENT: list[tuple[str, str]] = [
    ("metrics (prometheus_client)", r"prometheus_client|gateway/metrics\.py"),
    ("encode (frames, TeamItems)", r"gateway/wire/|gateway/canonical\.py"),
    (
        "pub/sub read + parse (redis-py, listener, continuity)",
        r"\(redis/|gateway/store/",
    ),
    ("WebSocket protocol", r"\(websockets/|gateway/http/websocket\.py|gateway/session\.py"),
    ("hub (offer loop, outboxes, linger)", r"gateway/fanout/"),
    ("HTTP / connections", r"gateway/http/"),
    ("anyio (tasks, cancel scopes)", ANYIO),
]

#: Generic: only when no specific frame is in the stack.
GENERIC = ("event loop (asyncio, uvloop)", re.compile(r"asyncio|uvloop|loop\.c|\buv_|\buv__"))

#: A leaf frame in one of these is the kernel's time (the syscall itself).
SYSCALL = re.compile(
    r"^(__libc_|__GI___|__)?(write|writev|send|sendto|sendmsg|recv|recvfrom|recvmsg|read|readv|"
    r"epoll_wait|epoll_ctl|epoll_pwait|clock_gettime|futex|getpid|close|accept4?|shutdown|"
    r"syscall|ioctl)$"
)
#: For events: syscall leaves that get their own row whatever called them.
SYSCALL_ROWS: list[tuple[str, re.Pattern[str]]] = [
    ("socket write syscall (write/send)", re.compile(r"^(__libc_)?(write|writev|send|sendmsg)$")),
    ("epoll", re.compile(r"^epoll")),
    ("socket read syscall (read/recv)", re.compile(r"^(__libc_)?(read|recv|recvfrom|readv)$")),
    ("getpid (asyncio.get_running_loop on 3.11)", re.compile(r"^getpid$")),
]


def leaf_name(frame: str) -> str:
    return frame.split(" (")[0]


def category(frames: list[str], cats: list[tuple[str, re.Pattern[str]]]) -> str:
    for frame in reversed(frames):
        for name, rx in cats:
            if rx.search(frame):
                return name
    if any(GENERIC[1].search(frame) for frame in frames):
        return GENERIC[0]
    return "other"


def summarise(path: Path, kind: str, top: int) -> str:
    cats = [(name, re.compile(rx)) for name, rx in (REQUEST if kind == "request" else EVENT)]
    rows = SYSCALL_ROWS if kind == "event" else []
    by_cat: Counter[str] = Counter()
    kernel_by_cat: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    kernel = 0
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_s)
        total += count
        frames = stack.split(";")
        leaf = leaf_name(frames[-1])
        leaves[frames[-1]] += count
        name = next((n for n, rx in rows if rx.search(leaf)), None) or category(frames, cats)
        by_cat[name] += count
        if SYSCALL.search(leaf):
            kernel += count
            kernel_by_cat[name] += count
    order = [n for n, _ in rows] + [n for n, _ in cats] + [GENERIC[0], "other"]
    lines = [
        f"{total} busy samples in {path}",
        "",
        "| step | share of busy samples | of which in a syscall |",
        "|---|---|---|",
    ]
    for name in order:
        if by_cat[name]:
            lines.append(
                f"| {name} | {100 * by_cat[name] / total:.1f}% "
                f"| {100 * kernel_by_cat[name] / total:.1f}% |"
            )
    lines += [
        "",
        f"leaf frame a syscall (kernel time): {100 * kernel / total:.1f}%; "
        f"Python and native user code: {100 * (total - kernel) / total:.1f}%",
        "",
        "| top leaf frames | share |",
        "|---|---|",
    ]
    for leaf, n in leaves.most_common(top):
        lines.append(f"| `{leaf[:110]}` | {100 * n / total:.1f}% |")
    return "\n".join(lines)


def spy_args(pid: int, raw: Path | str, seconds: int, native: bool, rate: int) -> list[str]:
    """The py-spy command that records ``pid`` into ``raw`` (collapsed stacks)."""
    mode = "--native" if native else "--nonblocking"
    args = [PYSPY, "record", mode, "-r", str(rate), "-d", str(seconds)]
    return [*args, "-f", "raw", "-o", str(raw), "-p", str(pid)]


def record(
    pid: int, raw: Path, seconds: int, native: bool = True, rate: int = 250
) -> subprocess.Popen[bytes]:
    args = ["taskset", "-c", "1", *spy_args(pid, raw, seconds, native, rate)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish(spy: subprocess.Popen[bytes], seconds: int) -> None:
    try:
        _, err = spy.communicate(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()
        raise
    if spy.returncode != 0:
        raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-2000:]}")


def profile_publish(ns: argparse.Namespace) -> int:
    pid_file = Path(ns.raw).with_suffix(".pid")
    pid_file.unlink(missing_ok=True)
    load = subprocess.Popen(
        [
            gw.PYTHON,
            str(gw.ROOT / "bench" / "publish.py"),
            "--rows",
            ns.rows,
            "--duration",
            str(ns.seconds + 8),
            "--warmup",
            "3",
            "--pid-file",
            str(pid_file),
        ],
    )
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline and load.poll() is None:
            time.sleep(0.2)  # polling for the stack, bounded by the deadline
        if not pid_file.exists():
            raise RuntimeError("publish.py did not start its gateway")
        time.sleep(5)  # connections open, warm-up done
        spy = record(int(pid_file.read_text()), Path(ns.raw), ns.seconds, ns.native, ns.rate)
        finish(spy, ns.seconds)
        load.wait(timeout=ns.seconds + 120)
    finally:
        if load.poll() is None:
            load.terminate()
            load.wait(timeout=30)
    print(summarise(Path(ns.raw), "request", ns.top))
    return 0


def profile_scenario(ns: argparse.Namespace) -> int:
    by_name = {sc.name: sc for sc in gw.SCENARIOS}
    sc = by_name[ns.name]
    sc.duration = ns.delay + ns.seconds + 8
    spies: list[subprocess.Popen[bytes]] = []

    @contextlib.contextmanager
    def spy_later(stack: gw.Stack) -> Iterator[None]:
        spy = spy_args(stack.gateway.pid, ns.raw, ns.seconds, ns.native, ns.rate)
        args = ["sh", "-c", f"sleep {ns.delay} && exec {shlex.join(spy)}"]
        spy = subprocess.Popen(["taskset", "-c", "1", *args], stderr=subprocess.PIPE)
        spies.append(spy)
        try:
            yield
        finally:
            finish(spy, ns.delay + ns.seconds)

    result = gw.run(sc, Path(ns.out), keep=False, during=spy_later)
    print(gw.HEADER)
    print(gw.row({**result, "scenario": f"{sc.name} (profiled)"}))
    print()
    print(summarise(Path(ns.raw), "event", ns.top))
    return 0


NO_NATIVE = (
    "Python frames only, sampled without stopping the process (py-spy --nonblocking): "
    "no native frames, and syscalls are not over-weighted"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_pub = sub.add_parser("publish")
    p_pub.add_argument("--raw", required=True)
    p_pub.add_argument("--rows", default="1x1")
    p_pub.add_argument("--seconds", type=int, default=15)
    p_pub.add_argument("--top", type=int, default=15)
    p_sc = sub.add_parser("scenario")
    p_sc.add_argument("name")
    p_sc.add_argument("--raw", required=True)
    p_sc.add_argument("--seconds", type=int, default=15)
    p_sc.add_argument("--delay", type=float, default=14.0, help="s after the load generator starts")
    p_sc.add_argument("--top", type=int, default=15)
    for p in (p_pub, p_sc):
        p.add_argument("--no-native", dest="native", action="store_false", help=NO_NATIVE)
        p.add_argument("--rate", type=int, default=250, help="samples per second")
    p_sc.add_argument("--out", default=str(gw.ROOT / "bench" / "results.jsonl"))
    p_sum = sub.add_parser("summary")
    p_sum.add_argument("raw")
    p_sum.add_argument("--kind", choices=["request", "event"], required=True)
    p_sum.add_argument("--top", type=int, default=15)
    ns = parser.parse_args()
    if ns.command == "summary":
        print(summarise(Path(ns.raw), ns.kind, ns.top))
        return 0
    return profile_publish(ns) if ns.command == "publish" else profile_scenario(ns)


if __name__ == "__main__":
    sys.exit(main())
