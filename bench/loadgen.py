"""Fan-out load generator: N subscribers over real sockets, one publisher, one JSON result.

    uv run python bench/loadgen.py --url ws://127.0.0.1:8000/v1/ws -n 1000 --rate 50 \\
        --sub-proto 'gateway.v1,bearer.<jwt>' \\
        --subscribe-msg '{"type":"subscribe","feed":"team/{channel}"}' \\
        --pub py:bench/gateway_pub.py:make --server-pid <gateway pid>

``bench/run.py`` and ``bench/peers.py`` build these command lines; this module is the
part they share with any other fan-out server.  What it does:

1. connects ``-n`` subscribers (100 handshakes at a time), subscriber ``i`` on channel
   ``i % -c``: WebSocket (the ``websockets`` sans-I/O client protocol under an asyncio
   protocol: it answers pings and joins fragments), SSE (HTTP/1.1 ``GET``), Socket.IO
   (Engine.IO 4 over a WebSocket) or Pusher (protocol 7);
2. samples the server's RSS before and after connecting (memory per idle connection),
   then publishes warm-up probes (sequence 0) until every subscriber has seen one;
3. publishes for ``--duration`` seconds at ``--rate`` events a second round the
   channels (event ``k`` to channel ``k % c``; events due at the same moment go out as
   one batch), or with ``--rate 0`` as fast as delivery allows: at most ``--window``
   undelivered events per subscriber on average;
4. every event carries the marker ``FB1|<ch>|<seq>|<publish time ns>|``: no quotes or
   backslashes, so it survives any JSON wrapping a server adds, and subscribers find it
   with one regular-expression scan of what they read instead of parsing each frame.
   Each subscriber keeps a bitmap of sequence numbers: gaps, duplicates and reordering
   are exact.  Latency is receive time minus publish time (it includes the publisher's
   round trip to the store);
5. prints one JSON object (and appends it to ``--out``): deliveries per second, per
   server CPU-second (the fair figure on a small machine where this process competes
   for CPU), latency percentiles, gaps, duplicates, CPU and RSS of the server and of
   every ``--pid NAME=PID``.

Publishers: ``--pub redis`` (``XADD <channel> data <event>``, what the Socket.IO peer
reads) or ``--pub py:FILE:FACTORY``: ``FACTORY(args)`` returns an object with
``async many([(ch, channel, data), ...])`` and ``async aclose()``.

A benchmark tool, not a test: it asserts nothing and reports what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import re
import sys
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

MARKER = re.compile(rb"FB1\|(\d+)\|(\d+)\|(\d+)\|")
CHANNEL_FIELD = re.compile(r"\{ch(?::([^{}]*))?\}")
#: A marker split across two reads is at most this long: kept for the next scan.
TAIL = 64
CONNECT_CONCURRENCY = 100
MAX_BATCH = 50


# ---------------------------------------------------------------- pure parts


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile (0-100) of ascending ``sorted_values``;
    None when there are none."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * p // 100))  # ceil(n * p / 100), at least 1
    return sorted_values[min(len(sorted_values), int(rank)) - 1]


def latency_summary(values: Iterable[float]) -> dict[str, float | None]:
    """p50, p90, p99 and max of latencies in milliseconds."""
    ordered = sorted(values)
    return {
        "p50": percentile(ordered, 50),
        "p90": percentile(ordered, 90),
        "p99": percentile(ordered, 99),
        "max": ordered[-1] if ordered else None,
    }


def channel_name(template: str, ch: int) -> str:
    """``{ch}`` becomes the channel index, ``{ch:SPEC}`` ``format(ch, SPEC)``."""
    return CHANNEL_FIELD.sub(lambda m: format(ch, m[1]) if m[1] else str(ch), template)


def fill(template: str, ch: int, channel: str) -> str:
    """A per-subscriber template: ``{ch...}`` and ``{channel}``; JSON braces left alone."""
    return channel_name(template, ch).replace("{channel}", channel)


def event_body(ch: int, seq: int, now_ns: int, size: int) -> str:
    """The published event: a JSON object carrying the marker, padded to ``size`` bytes."""
    head = f'{{"fb":"FB1|{ch}|{seq}|{now_ns}|","pad":"'
    return head + "x" * max(0, size - len(head) - 2) + '"}'


def split_frames(buf: bytes) -> tuple[list[tuple[int, int, int]], int]:
    """The complete server-to-client WebSocket frames at the start of ``buf``, as
    ``(opcode, payload start, payload end)``, and the offset after the last one (the
    rest waits for more bytes).  Raises ValueError on a masked frame (RFC 6455 5.1:
    a server never masks)."""
    spans: list[tuple[int, int, int]] = []
    i, n = 0, len(buf)
    while n - i >= 2:
        if buf[i + 1] & 0x80:
            raise ValueError("masked frame from the server")
        length, head = buf[i + 1] & 0x7F, 2
        if length == 126:
            if n - i < 4:
                break
            length, head = int.from_bytes(buf[i + 2 : i + 4], "big"), 4
        elif length == 127:
            if n - i < 10:
                break
            length, head = int.from_bytes(buf[i + 2 : i + 10], "big"), 10
        if n - i < head + length:
            break
        spans.append((buf[i] & 0x0F, i + head, i + head + length))
        i += head + length
    return spans, i


@dataclass
class Schedule:
    """When each event is due: event ``k`` at ``k / rate`` seconds, to channel
    ``k % channels``.  ``due(elapsed)`` hands out the events due by then, at most
    ``MAX_BATCH`` at a time, as ``(channel, sequence)``; sequences count from 1 per
    channel (0 is the warm-up probe)."""

    rate: float
    channels: int
    duration: float
    sent: int = 0

    @property
    def total(self) -> int:
        return int(self.rate * self.duration)

    def due(self, elapsed: float) -> list[tuple[int, int]]:
        until = min(self.total, int(elapsed * self.rate) + 1)
        batch = [self.event(k) for k in range(self.sent, min(until, self.sent + MAX_BATCH))]
        self.sent += len(batch)
        return batch

    def next_at(self) -> float:
        """Seconds from the start when the next event is due."""
        return self.sent / self.rate

    def event(self, k: int) -> tuple[int, int]:
        return k % self.channels, k // self.channels + 1

    def done(self) -> bool:
        return self.sent >= self.total


@dataclass
class Totals:
    """Counters every subscriber adds to."""

    delivered: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    wrong_channel: int = 0
    closed: int = 0
    last_rx_ns: int = 0


class Tally:
    """One subscriber's deliveries: which sequences it saw (a bitmap), in what order,
    and the latency of each when ``sample`` is set."""

    __slots__ = ("ch", "count", "last", "latencies", "ready", "seen", "totals")

    def __init__(self, totals: Totals, ch: int, sample: bool) -> None:
        self.totals, self.ch = totals, ch
        self.seen = bytearray(1024)
        self.last = self.count = 0
        self.ready = False
        self.latencies: array[float] | None = array("d") if sample else None

    def scan(self, data: bytes, now_ns: int) -> int:
        """Count every marker in ``data``; returns the offset after the last one."""
        totals, end = self.totals, 0
        for m in MARKER.finditer(data):
            end = m.end()
            ch, seq = int(m[1]), int(m[2])
            if ch != self.ch:
                totals.wrong_channel += 1
            elif seq == 0:
                self.ready = True
            else:
                self.record(seq, now_ns, int(m[3]))
        if end:
            totals.last_rx_ns = now_ns
        return end

    def record(self, seq: int, now_ns: int, sent_ns: int) -> None:
        seen, totals = self.seen, self.totals
        if seq >= len(seen):
            seen.extend(bytes(seq + 1024 - len(seen)))
        if seen[seq]:
            totals.duplicates += 1
            return
        seen[seq] = 1
        if seq < self.last:
            totals.out_of_order += 1
        else:
            self.last = seq
        self.count += 1
        totals.delivered += 1
        if self.latencies is not None:
            self.latencies.append((now_ns - sent_ns) / 1e6)


def listeners_per_channel(subscribed: Iterable[int], channels: int) -> list[int]:
    """How many connected subscribers each channel has, from each one's channel."""
    counts = [0] * channels
    for ch in subscribed:
        counts[ch] += 1
    return counts


def deliveries_owed(published: Sequence[int], listeners: Sequence[int]) -> int:
    """Each channel's published events times its connected subscribers."""
    return sum(events * count for events, count in zip(published, listeners, strict=True))


# ---------------------------------------------------------------- process figures

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_stat(pid: int) -> tuple[float, float, int]:
    """(user+system CPU seconds, system CPU seconds, RSS bytes) of ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    user, system = int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS
    return user + system, system, int(fields[21]) * PAGE


def cpu_of(pids: Iterable[int]) -> tuple[float, float]:
    stats = [proc_stat(p) for p in pids]
    return sum(s[0] for s in stats), sum(s[1] for s in stats)


def rss_mb(pids: Iterable[int]) -> float:
    return sum(proc_stat(p)[2] for p in pids) / 2**20


# ---------------------------------------------------------------- subscribers


class Subscriber(asyncio.Protocol):
    """The common part: a tally, the connect future, scanning what arrives."""

    def __init__(self, tally: Tally, ready: asyncio.Future[None]) -> None:
        self.tally, self.ready = tally, ready
        self.transport: asyncio.Transport | None = None
        self.rest = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.start()

    def start(self) -> None:
        raise NotImplementedError

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(str(exc or "closed before ready")))
        else:
            self.tally.totals.closed += 1

    def opened(self) -> None:
        if not self.ready.done():
            self.ready.set_result(None)

    def fail(self, why: str) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(why))
        if self.transport is not None:
            self.transport.close()

    def take(self, data: bytes) -> None:
        """Scan application bytes, keeping a tail that may hold half a marker."""
        buf = self.rest + data if self.rest else data
        end = self.tally.scan(buf, time.time_ns())
        tail = buf[end:]
        self.rest = tail[-TAIL:] if len(tail) > TAIL else tail


class WebSocketSubscriber(Subscriber):
    """An RFC 6455 client.  The ``websockets`` sans-I/O client protocol builds the
    handshake and checks the answer (accept key, subprotocol); frames are then split by
    ``split_frames``, and the markers of a whole read found in one scan.  Pings are
    answered, a close ends the connection.  ``mode``: ``ws`` (send ``subscribe`` once
    open), ``socketio`` (Engine.IO 4 open, Socket.IO connect, then ``subscribe``;
    answers Engine.IO pings), ``pusher`` (subscribe once the server says the connection
    is established; answers ``pusher:ping``)."""

    def __init__(
        self,
        tally: Tally,
        ready: asyncio.Future[None],
        url: str,
        mode: str,
        subscribe: str,
        protocols: list[str],
        headers: list[tuple[str, str]],
    ) -> None:
        super().__init__(tally, ready)
        self.protocol = ClientProtocol(
            parse_uri(url), subprotocols=[Subprotocol(p) for p in protocols] or None
        )
        self.request = self.protocol.connect()
        for name, value in headers:
            self.request.headers[name] = value
        self.mode, self.subscribe, self.is_open = mode, subscribe, False
        self.buf = b""

    def start(self) -> None:
        assert self.transport is not None
        self.protocol.send_request(self.request)
        for chunk in self.protocol.data_to_send():
            self.transport.write(chunk)

    def send(self, text: str, opcode: Opcode = Opcode.TEXT) -> None:
        assert self.transport is not None
        self.transport.write(Frame(opcode, text.encode()).serialize(mask=True))

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        if not self.is_open:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            self.protocol.receive_data(buf[: end + 4])
            self.protocol.events_received()
            if self.protocol.handshake_exc is not None:
                self.fail(f"handshake refused: {self.protocol.handshake_exc}")
                return
            self.is_open, buf = True, buf[end + 4 :]
            if self.mode == "ws":
                self.send(self.subscribe)
                self.opened()
        try:
            spans, end = split_frames(buf)
        except ValueError as exc:
            self.fail(str(exc))
            return
        self.buf = buf[end:]
        if self.mode == "ws":
            if end:
                self.tally.scan(buf[:end] if end < len(buf) else buf, time.time_ns())
            for opcode, begin, stop in spans:
                if opcode >= Opcode.CLOSE:
                    self.control_frame(opcode, buf[begin:stop])
            return
        for opcode, begin, stop in spans:
            if opcode >= Opcode.CLOSE:
                self.control_frame(opcode, buf[begin:stop])
            else:
                self.message(buf[begin:stop])

    def control_frame(self, opcode: int, payload: bytes) -> None:
        assert self.transport is not None
        if opcode == Opcode.PING:
            self.transport.write(Frame(Opcode.PONG, payload).serialize(mask=True))
        elif opcode == Opcode.CLOSE:
            self.transport.write(Frame(Opcode.CLOSE, payload[:2]).serialize(mask=True))
            self.transport.close()

    def message(self, data: bytes) -> None:
        """Socket.IO and Pusher: their handshakes and pings, then deliveries."""
        if self.mode == "socketio":
            if data.startswith(b"42"):
                self.take(data)
            elif data == b"2":
                self.send("3")
            elif data.startswith(b"40"):
                self.send(self.subscribe)
                self.opened()
            elif data.startswith(b"0"):
                self.send("40")
        elif b"pusher:connection_established" in data:
            self.send(self.subscribe)
            self.opened()
        elif b"pusher:ping" in data:
            self.send('{"event":"pusher:pong","data":{}}')
        else:
            self.take(data)


class SSESubscriber(Subscriber):
    """``GET`` over HTTP/1.1 and read the event stream.  Markers are scanned in the raw
    bytes: the server writes whole events, so chunk-size lines fall between them."""

    def __init__(
        self, tally: Tally, ready: asyncio.Future[None], url: str, headers: list[tuple[str, str]]
    ) -> None:
        super().__init__(tally, ready)
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        lines = [f"GET {target} HTTP/1.1", f"Host: {parts.netloc}", "Accept: text/event-stream"]
        lines += [f"{name}: {value}" for name, value in headers]
        self.request = ("\r\n".join(lines) + "\r\n\r\n").encode()
        self.head = b""
        self.is_open = False

    def start(self) -> None:
        assert self.transport is not None
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if not self.is_open:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            status = self.head.split(b"\r\n", 1)[0]
            data, self.head = self.head[end + 4 :], b""
            if b" 200 " not in status + b" ":
                self.fail(status.decode(errors="replace"))
                return
            self.is_open = True
            self.opened()
        if data:
            self.take(data)


# ---------------------------------------------------------------- publishers


class Publisher(Protocol):
    async def many(self, items: list[tuple[int, str, str]]) -> None: ...

    async def aclose(self) -> None: ...


class RedisPublisher:
    """``XADD <channel> * data <event>``: one pipeline per batch."""

    def __init__(self, url: str) -> None:
        import redis.asyncio as redis

        self.client = redis.Redis.from_url(url)

    async def many(self, items: list[tuple[int, str, str]]) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for _, channel, data in items:
                pipe.xadd(channel, {"data": data})
            await pipe.execute()

    async def aclose(self) -> None:
        await self.client.aclose()


def load_publisher(spec: str, args: argparse.Namespace) -> Publisher:
    """``redis`` or ``py:FILE:FACTORY``."""
    if spec == "redis":
        return RedisPublisher(args.redis_url)
    kind, _, rest = spec.partition(":")
    path, _, factory = rest.rpartition(":")
    if kind != "py" or not path or not factory:
        raise SystemExit(f"--pub: expected redis or py:FILE:FACTORY, got {spec!r}")
    module_spec = importlib.util.spec_from_file_location("loadgen_publisher", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    publisher: Publisher = getattr(module, factory)(args)
    return publisher


# ---------------------------------------------------------------- the run


@dataclass
class Run:
    args: argparse.Namespace
    totals: Totals = field(default_factory=Totals)
    tallies: list[Tally] = field(default_factory=list)
    published: list[int] = field(default_factory=list)
    listeners: list[int] = field(default_factory=list)
    #: Subscribers that could not connect or subscribe: how many, and the first reasons.
    connect_errors: int = 0
    error_sample: list[str] = field(default_factory=list)
    #: Deliveries owed so far: the subscribers of each published event's channel.
    owed_count: int = 0

    @property
    def server_pids(self) -> list[int]:
        return list(self.args.server_pid)

    def channel(self, ch: int) -> str:
        return channel_name(self.args.channel_fmt, ch)

    async def connect_all(self) -> None:
        a, loop = self.args, asyncio.get_running_loop()
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
        every = max(1, a.n // a.lat_sample_conns)
        headers = [tuple(h.split(":", 1)) for h in a.ws_header]
        headers = [(k.strip(), v.strip()) for k, v in headers]
        protocols = [p.strip() for p in a.sub_proto.split(",") if p.strip()]
        parts = urlsplit(a.url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80

        async def one(i: int) -> None:
            ch = i % a.channels
            channel = self.channel(ch)
            tally = Tally(self.totals, ch, sample=i % every == 0)
            url = fill(a.url, ch, channel)
            ready: asyncio.Future[None] = loop.create_future()
            if a.sub == "sse":

                def factory() -> Subscriber:
                    return SSESubscriber(tally, ready, url, headers)
            else:
                subscribe = fill(a.subscribe_msg, ch, channel)

                def factory() -> Subscriber:
                    return WebSocketSubscriber(
                        tally, ready, url, a.sub, subscribe, protocols, headers
                    )

            async with gate:
                try:
                    await loop.create_connection(factory, host, port)
                    await asyncio.wait_for(ready, 30)
                except (OSError, TimeoutError) as exc:
                    # A refused subscriber (say, a balancer's 503) is counted, not fatal.
                    self.connect_errors += 1
                    if len(self.error_sample) < 3:
                        self.error_sample.append(repr(exc))
                    return
            self.tallies.append(tally)

        await asyncio.gather(*(one(i) for i in range(a.n)))
        if not self.tallies:
            raise RuntimeError(f"no subscriber connected: {self.error_sample}")
        self.listeners = listeners_per_channel((t.ch for t in self.tallies), a.channels)

    async def warm_up(self, publisher: Publisher) -> None:
        """Probes (sequence 0) to every channel until every subscriber has seen one: a
        subscription still being set up does not show up as a gap."""
        deadline = time.monotonic() + 30
        while not all(t.ready for t in self.tallies):
            if time.monotonic() > deadline:
                missing = sum(not t.ready for t in self.tallies)
                raise RuntimeError(f"{missing} subscribers saw no warm-up probe in 30 s")
            now = time.time_ns()
            size = self.args.payload_bytes
            probes = [
                (ch, self.channel(ch), event_body(ch, 0, now, size))
                for ch in range(self.args.channels)
            ]
            for start in range(0, len(probes), MAX_BATCH):
                await publisher.many(probes[start : start + MAX_BATCH])
            await asyncio.sleep(0.2)  # probe interval while subscriptions settle

    def owed(self) -> int:
        return self.owed_count

    async def publish(self, publisher: Publisher) -> None:
        a = self.args
        self.published = [0] * a.channels
        size = a.payload_bytes
        if a.rate > 0:
            schedule = Schedule(a.rate, a.channels, a.duration)
            start = time.monotonic()
            while not schedule.done():
                batch = schedule.due(time.monotonic() - start)
                if batch:
                    await self.send(publisher, batch, size)
                wait = schedule.next_at() - (time.monotonic() - start)
                if wait > 0:
                    await asyncio.sleep(wait)
            return
        # As fast as delivery allows: at most ``window`` undelivered events per subscriber.
        limit = a.window * len(self.tallies)
        per_event = len(self.tallies) / a.channels
        end, k = time.monotonic() + a.duration, 0
        while time.monotonic() < end:
            room = int((limit - (self.owed() - self.totals.delivered)) / per_event)
            if room < 1:
                await asyncio.sleep(0.001)  # let the subscribers read
                continue
            count = min(room, MAX_BATCH)
            batch = [(j % a.channels, j // a.channels + 1) for j in range(k, k + count)]
            k += count
            await self.send(publisher, batch, size)

    async def send(self, publisher: Publisher, batch: list[tuple[int, int]], size: int) -> None:
        now = time.time_ns()
        await publisher.many(
            [(ch, self.channel(ch), event_body(ch, seq, now, size)) for ch, seq in batch]
        )
        for ch, _ in batch:
            self.published[ch] += 1
            self.owed_count += self.listeners[ch]

    async def drain(self) -> None:
        """Wait until every owed delivery arrived, or ``--drain`` s without progress."""
        owed, last, idle_since = self.owed(), -1, time.monotonic()
        while self.totals.delivered < owed:
            if self.totals.delivered != last:
                last, idle_since = self.totals.delivered, time.monotonic()
            elif time.monotonic() - idle_since > self.args.drain:
                return
            await asyncio.sleep(0.01)  # polling the counters while the last frames arrive


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    run = Run(args)
    pids = run.server_pids
    named = dict(p.split("=", 1) for p in args.pid)
    named_pids = {name: int(pid) for name, pid in named.items()}
    rss_before = rss_mb(pids) if pids else None
    t0 = time.monotonic()
    await run.connect_all()
    connect_s = time.monotonic() - t0
    rss_idle = rss_mb(pids) if pids else None
    publisher = load_publisher(args.pub, args)
    peak = rss_idle or 0.0
    stop_sampling = asyncio.Event()

    async def sample_rss() -> None:
        nonlocal peak
        while not stop_sampling.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop_sampling.wait(), 0.5)
            if pids:
                peak = max(peak, rss_mb(pids))

    try:
        await run.warm_up(publisher)
        sampler = asyncio.create_task(sample_rss())
        server_cpu0, server_sys0 = cpu_of(pids)
        named_cpu0 = {name: proc_stat(pid)[0] for name, pid in named_pids.items()}
        own_cpu0 = time.process_time()
        start_ns = time.time_ns()
        await run.publish(publisher)
        await run.drain()
        end_ns = max(run.totals.last_rx_ns, start_ns + 1)
        span = (end_ns - start_ns) / 1e9
        server_cpu, server_sys = cpu_of(pids)
        own_cpu = time.process_time() - own_cpu0
        named_cpu = {name: proc_stat(pid)[0] - named_cpu0[name] for name, pid in named_pids.items()}
        stop_sampling.set()
        await sampler
    finally:
        await publisher.aclose()
    server_cpu -= server_cpu0
    server_sys -= server_sys0
    owed = deliveries_owed(run.published, run.listeners)
    latencies = [x for t in run.tallies if t.latencies is not None for x in t.latencies]
    result: dict[str, Any] = {
        "label": args.label,
        "transport": args.sub,
        "subscribers": args.n,
        "connect_errors": run.connect_errors,
        "connect_error_sample": run.error_sample,
        "channels": args.channels,
        "rate": args.rate,
        "connect_s": round(connect_s, 2),
        "events_published": sum(run.published),
        "deliveries": run.totals.delivered,
        "deliveries_expected": owed,
        "gaps": owed - run.totals.delivered,
        "duplicates": run.totals.duplicates,
        "out_of_order": run.totals.out_of_order,
        "wrong_channel": run.totals.wrong_channel,
        "closed": run.totals.closed,
        "span_s": round(span, 3),
        "deliveries_per_s": run.totals.delivered / span,
        "latency_ms": latency_summary(latencies),
        "client_cpu_util": own_cpu / span,
    }
    if pids:
        result |= {
            "server_cpu_s": server_cpu,
            "server_cpu_util": server_cpu / span,
            "server_sys_share": server_sys / server_cpu if server_cpu else None,
            "deliveries_per_server_cpu_s": run.totals.delivered / server_cpu
            if server_cpu
            else None,
            "server_rss_mb": {
                "before_connect": rss_before,
                "connected_idle": rss_idle,
                "peak": peak,
                "end": rss_mb(pids),
            },
            "server_rss_per_idle_conn_kb": (
                (rss_idle - rss_before) * 1024 / len(run.tallies)
                if rss_idle is not None and rss_before is not None
                else None
            ),
        }
    result["other_pids"] = {
        name: {"cpu_s": cpu, "cpu_util": cpu / span, "rss_mb": rss_mb([named_pids[name]])}
        for name, cpu in named_cpu.items()
    }
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="subscriber URL; may hold {ch} and {channel}")
    p.add_argument("--sub", choices=["ws", "sse", "socketio", "pusher"], default="ws")
    p.add_argument("-n", type=int, default=1000, help="subscribers")
    p.add_argument("-c", "--channels", type=int, default=1)
    p.add_argument("--channel-fmt", default="fan:{ch}", help="channel name; {ch} or {ch:SPEC}")
    p.add_argument("--subscribe-msg", default="", help="sent once a WebSocket is open")
    p.add_argument("--sub-proto", default="", help="WebSocket subprotocols, comma-separated")
    p.add_argument("--ws-header", action="append", default=[], help="NAME: VALUE")
    p.add_argument("--rate", type=float, default=0.0, help="events/s; 0: as fast as delivered")
    p.add_argument("--window", type=int, default=20, help="undelivered events per subscriber")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of publishing")
    p.add_argument("--drain", type=float, default=5.0, help="s without progress ends the run")
    p.add_argument("--payload-bytes", type=int, default=128)
    p.add_argument("--pub", default="redis", help="redis | py:FILE:FACTORY")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--server-pid", type=int, action="append", default=[])
    p.add_argument("--pid", action="append", default=[], help="NAME=PID: CPU reported too")
    p.add_argument("--lat-sample-conns", type=int, default=1000)
    p.add_argument("--max-wall", type=float, default=240.0, help="s before the run is cut")
    p.add_argument("--label", default="")
    p.add_argument("--out", help="append the JSON result to this file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run

    async def bounded() -> dict[str, Any]:
        return await asyncio.wait_for(measure(args), args.max_wall)

    result = runner(bounded())
    line = json.dumps(result)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
