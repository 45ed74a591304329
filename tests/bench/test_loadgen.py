"""The load generator's pure parts: percentiles, the publish schedule, frame splitting and
the delivery counts (bench/loadgen.py; no sockets, no servers)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from websockets.frames import Frame, Opcode

LOADGEN = Path(__file__).resolve().parents[2] / "bench" / "loadgen.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_loadgen", LOADGEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


lg = load()


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert lg.percentile(values, 50) == 50.0
    assert lg.percentile(values, 99) == 99.0
    assert lg.percentile(values, 100) == 100.0
    assert lg.percentile(values, 0) == 1.0
    assert lg.percentile([7.0], 99) == 7.0
    assert lg.percentile([], 50) is None


def test_latency_summary_sorts_and_names_the_percentiles() -> None:
    summary = lg.latency_summary([5.0, 1.0, 3.0, 2.0, 4.0])
    assert summary == {"p50": 3.0, "p90": 5.0, "p99": 5.0, "max": 5.0}
    assert lg.latency_summary([]) == {"p50": None, "p90": None, "p99": None, "max": None}


def test_channel_names_and_templates() -> None:
    assert lg.channel_name("fan:{ch}", 7) == "fan:7"
    assert lg.channel_name("00000000-0000-4000-8000-{ch:012d}", 42).endswith("000000000042")
    template = '{"type":"subscribe","feed":"team/{channel}"}'
    assert lg.fill(template, 3, "t-3") == '{"type":"subscribe","feed":"team/t-3"}'


def test_event_body_is_padded_json_carrying_the_marker() -> None:
    body = lg.event_body(2, 9, 123456789, 128)
    assert len(body) == 128
    match = lg.MARKER.search(body.encode())
    assert match is not None and match.groups() == (b"2", b"9", b"123456789")


def test_schedule_hands_out_what_is_due_round_the_channels() -> None:
    schedule = lg.Schedule(rate=10, channels=3, duration=1)
    assert schedule.total == 10
    assert schedule.due(0.0) == [(0, 1)]  # event 0 is due at once
    assert schedule.next_at() == pytest.approx(0.1)
    assert schedule.due(0.45) == [(1, 1), (2, 1), (0, 2), (1, 2)]  # events 1-4
    assert schedule.due(0.45) == []
    assert schedule.due(5.0) == [(2, 2), (0, 3), (1, 3), (2, 3), (0, 4)]  # never past total
    assert schedule.done()


def test_schedule_caps_a_batch() -> None:
    schedule = lg.Schedule(rate=1000, channels=1, duration=1)
    first = schedule.due(0.5)
    assert len(first) == lg.MAX_BATCH
    assert first[0] == (0, 1) and first[-1] == (0, lg.MAX_BATCH)
    assert schedule.due(0.5)[0] == (0, lg.MAX_BATCH + 1)


def test_deliveries_owed_follow_the_connected_subscribers_of_each_channel() -> None:
    # 5 subscribers on 2 channels: channel 0 has subscribers 0, 2, 4; channel 1 has 1, 3.
    listeners = lg.listeners_per_channel([i % 2 for i in range(5)], channels=2)
    assert listeners == [3, 2]
    assert lg.deliveries_owed([2, 3], listeners) == 2 * 3 + 3 * 2
    # Subscriber 4 could not connect: it is owed nothing.
    assert lg.deliveries_owed([2, 3], lg.listeners_per_channel([0, 1, 0, 1], 2)) == 10
    assert lg.deliveries_owed([4, 0, 1], [0, 0, 0]) == 0


def marked(ch: int, seq: int, sent_ns: int = 1_000_000) -> bytes:
    return lg.event_body(ch, seq, sent_ns, 64).encode()


def test_tally_counts_deliveries_duplicates_order_and_latency() -> None:
    totals = lg.Totals()
    tally = lg.Tally(totals, ch=1, sample=True)
    read = marked(1, 1) + marked(1, 3) + marked(1, 2) + marked(1, 3)
    end = tally.scan(read, now_ns=3_000_000)
    assert read[:end].endswith(b"FB1|1|3|1000000|") and end > len(read) - 64  # the last one
    assert (totals.delivered, totals.duplicates, totals.out_of_order) == (3, 1, 1)
    assert tally.count == 3
    assert list(tally.latencies or []) == [2.0, 2.0, 2.0]
    assert totals.last_rx_ns == 3_000_000


def test_tally_probes_mark_ready_and_other_channels_are_counted_apart() -> None:
    totals = lg.Totals()
    tally = lg.Tally(totals, ch=0, sample=False)
    assert not tally.ready
    tally.scan(marked(0, 0) + marked(5, 1), now_ns=0)
    assert tally.ready
    assert (totals.delivered, totals.wrong_channel) == (0, 1)
    assert tally.latencies is None


def test_tally_grows_its_bitmap() -> None:
    totals = lg.Totals()
    tally = lg.Tally(totals, ch=0, sample=False)
    tally.scan(marked(0, 5000) + marked(0, 5000), now_ns=0)
    assert (totals.delivered, totals.duplicates) == (1, 1)


def server_frame(opcode: Opcode, payload: bytes) -> bytes:
    return Frame(opcode, payload).serialize(mask=False)


def test_split_frames_handles_every_length_form_and_keeps_a_partial_frame() -> None:
    small, medium, large = b"a" * 10, b"b" * 300, b"c" * 70_000
    wire = (
        server_frame(Opcode.TEXT, small)
        + server_frame(Opcode.PING, b"p")
        + server_frame(Opcode.TEXT, medium)
        + server_frame(Opcode.TEXT, large)
    )
    spans, end = lg.split_frames(wire)
    assert end == len(wire)
    assert [(op, wire[b:e]) for op, b, e in spans] == [
        (Opcode.TEXT, small),
        (Opcode.PING, b"p"),
        (Opcode.TEXT, medium),
        (Opcode.TEXT, large),
    ]
    for cut in (1, 3, 9, len(wire) - 1):
        spans, end = lg.split_frames(wire[:cut])
        assert end <= cut and all(e <= end for _, _, e in spans)
    partial = server_frame(Opcode.TEXT, small) + server_frame(Opcode.TEXT, medium)[:5]
    spans, end = lg.split_frames(partial)
    assert len(spans) == 1 and end == 12


def test_split_frames_refuses_a_masked_frame() -> None:
    with pytest.raises(ValueError, match="masked"):
        lg.split_frames(Frame(Opcode.TEXT, b"x").serialize(mask=True))
