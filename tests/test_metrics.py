"""The metrics of gateway/metrics.py, observed on real nodes (embedded log and Redis).

Each test drives a real node over real sockets (httpx, httpx-sse, websockets) and reads
the node's own registry.  Waits are bounded (``until``); nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection

from gateway import __version__
from gateway.app import Gateway
from gateway.fanout.subscription import SubState
from gateway.feed import team_feed
from gateway.loopmetrics import (
    MAX_SERIES,
    OVERFLOW,
    LoopCounter,
    LoopGauge,
    LoopHistogram,
)
from gateway.metrics import DISCONNECT_REASONS, LoopCollector, Metrics
from tests.support import events as ev
from tests.support.node import auth, metric, open_ws, start_node, token
from tests.support.wait import until

pytestmark = pytest.mark.anyio


async def publish(client: httpx.AsyncClient, team: str, n: int = 1) -> list[str]:
    r = await client.post(
        f"/v1/teams/{team}/events", json=[ev.item() for _ in range(n)], headers=auth()
    )
    assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    return cursors


async def recv(ws: ClientConnection) -> tuple[str, dict[str, Any]]:
    with anyio.fail_after(5):
        raw = await ws.recv()
    assert isinstance(raw, str)
    frame: dict[str, Any] = json.loads(raw)
    return raw, frame


def subs(node: Gateway, transport: str) -> float:
    return metric(node, "gateway_subscriptions", transport=transport, kind="team")


async def test_a_live_delivery_is_measured_once_per_batch(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    [first] = await publish(client, team)
    feed = team_feed("acme", team)
    async with (
        open_ws(node) as ws,
        aconnect_sse(client, "GET", f"/v1/teams/{team}/events", headers=auth()) as source,
    ):
        events = source.aiter_sse()
        # SSE without a cursor replays the first item; WebSocket joins at the head.
        with anyio.fail_after(5):
            replayed = await anext(events)
        assert replayed.id == first
        await ws.send(json.dumps({"type": "subscribe", "feed": f"team/{team}", "after": first}))
        assert (await recv(ws))[1]["type"] == "subscribed"
        await until(
            lambda: (
                feed in node.hub.audiences
                and len(node.hub.audiences[feed].subs) == 2
                and all(s.state is SubState.LIVE for s in node.hub.audiences[feed].subs)
            ),
            5,
            "both subscriptions live",
        )
        assert subs(node, "sse") == 1 and subs(node, "ws") == 1
        assert metric(node, "gateway_connects_total", transport="sse") == 1
        assert metric(node, "gateway_connects_total", transport="ws") == 1
        # One join replayed one item, the other none.
        assert metric(node, "gateway_replay_items_count") == 2
        assert metric(node, "gateway_replay_items_sum") == 1
        assert metric(node, "gateway_frames_sent_total", transport="sse") == 1
        assert metric(node, "gateway_delivery_lag_seconds_count") == 0

        [second] = await publish(client, team)
        raw, frame = await recv(ws)
        assert frame["type"] == "event" and frame["cursor"] == second
        with anyio.fail_after(5):
            live = await anext(events)
        assert live.id == second

        # The batch reached two sockets: measured once, counted per transport.
        assert metric(node, "gateway_fanout_seconds_count") == 1
        assert metric(node, "gateway_delivery_lag_seconds_count") == 1
        assert metric(node, "gateway_delivery_lag_seconds_sum") >= 0
        assert metric(node, "gateway_frames_sent_total", transport="sse") == 2
        assert metric(node, "gateway_frames_sent_total", transport="ws") == 1
        # A WebSocket frame is its payload plus a 2- or 4-byte header.
        ws_bytes = metric(node, "gateway_bytes_sent_total", transport="ws")
        assert len(raw.encode()) + 2 <= ws_bytes <= len(raw.encode()) + 4
        sse_bytes = metric(node, "gateway_bytes_sent_total", transport="sse")
        assert sse_bytes > len(replayed.data) + len(live.data)
    # Both clients went away.
    await until(lambda: subs(node, "sse") == 0 and subs(node, "ws") == 0, 5, "subscriptions end")
    await until(
        lambda: (
            metric(node, "gateway_connections", transport="sse") == 0
            and metric(node, "gateway_connections", transport="ws") == 0
        ),
        5,
        "connections end",
    )
    for transport in ("sse", "ws"):
        assert metric(node, "gateway_disconnects_total", transport=transport, reason="client") == 1
        for reason in DISCONNECT_REASONS:
            if reason != "client":
                labels = {"transport": transport, "reason": reason}
                assert metric(node, "gateway_disconnects_total", **labels) == 0


async def test_redis_commands_are_timed(redis_url: str, redis_prefix: str) -> None:
    async with (
        start_node(redis_url, redis_prefix) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        team = ev.team_id()
        # Past the join's first page (read with its state), so that history is also
        # read on its own (XRANGE).
        cursors = await publish(client, team, 40)
        async with aconnect_sse(
            client, "GET", f"/v1/teams/{team}/events", headers=auth()
        ) as source:
            got: list[str] = []
            with anyio.fail_after(5):
                async for sse in source.aiter_sse():
                    got.append(sse.id)
                    if len(got) == len(cursors):
                        break
        assert got == cursors
        assert (await client.get("/readyz")).status_code == 200
        # (Waking the reader is no Redis command: it is in-process.)
        for command in ("append", "state", "xrange", "ping"):
            count = metric(node, "gateway_redis_command_seconds_count", command=command)
            assert count >= 1, command
        # The reader's first read of a new feed is an XREAD.
        await until(
            lambda: metric(node, "gateway_redis_command_seconds_count", command="xread") >= 1,
            10,
            "an XREAD",
        )


async def test_sse_stream_ended_by_epoch_restarted_counts_as_reset(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    [cursor] = await publish(client, team)
    old = f"{int(cursor.split(':')[0]) - 1}:7"
    with anyio.fail_after(10):
        async with aconnect_sse(
            client, "GET", f"/v1/teams/{team}/events", headers={**auth(), "Last-Event-ID": old}
        ) as source:
            got = [sse async for sse in source.aiter_sse()]  # the server ends it
    assert '"kind":"epoch_restarted"' in got[-1].data
    await until(
        lambda: metric(node, "gateway_disconnects_total", transport="sse", reason="reset") == 1,
        5,
        "the reset is counted",
    )
    assert metric(node, "gateway_disconnects_total", transport="sse", reason="client") == 0
    assert metric(node, "gateway_connects_total", transport="sse") == 1


async def test_drained_sse_stream_counts_as_shutdown_and_ready_goes_to_zero(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    [cursor] = await publish(client, team)
    assert (await client.get("/readyz")).status_code == 200
    assert metric(node, "gateway_ready") == 1
    async with aconnect_sse(client, "GET", f"/v1/teams/{team}/events", headers=auth()) as source:
        events = source.aiter_sse()
        with anyio.fail_after(5):
            assert (await anext(events)).id == cursor
        with anyio.fail_after(5):
            await node.drain(0.01)
            assert [sse async for sse in events] == []  # the server ends the stream
    await until(
        lambda: metric(node, "gateway_disconnects_total", transport="sse", reason="shutdown") == 1,
        5,
        "the drain is counted",
    )
    # The node no longer listens: ask the check behind /readyz directly.
    assert await node.context.ready() == (False, "draining")
    assert metric(node, "gateway_ready") == 0


async def test_build_info_and_exposition(node: Gateway, client: httpx.AsyncClient) -> None:
    assert metric(node, "gateway_build_info", version=__version__) == 1
    text = (await client.get("/metrics")).text
    names = {family.name for family in text_string_to_metric_families(text)}
    for name in (
        "gateway_build_info",
        "gateway_connects",
        "gateway_subscriptions",
        "gateway_frames_sent",
        "gateway_bytes_sent",
        "gateway_delivery_lag_seconds",
        "gateway_fanout_seconds",
        "gateway_redis_command_seconds",
        "gateway_replay_items",
        "gateway_ready",
    ):
        assert name in names, name
    # The token never reaches a label.
    assert token() not in text


def test_loop_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = LoopHistogram("h_seconds", "help", (0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0):
        h.observe(value)
    family = h.family()
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert samples[("h_seconds_bucket", "0.1")] == 2  # le is inclusive
    assert samples[("h_seconds_bucket", "1.0")] == 4
    assert samples[("h_seconds_bucket", "+Inf")] == 5
    assert samples[("h_seconds_count", None)] == 5
    assert samples[("h_seconds_sum", None)] == pytest.approx(8.65)


def test_series_are_remembered_and_counted_in_the_registry() -> None:
    m = Metrics()
    first = m.published.labels("team", "http")
    assert m.published.labels("team", "http") is first  # one series, made once
    assert m.published.labels(kind="team", path="http") is first  # by name as well
    first.inc(2)
    m.published.labels("team", "http").inc()
    m.http_requests.labels("publish_team", "200").inc()
    m.connections.labels("ws").inc()
    m.connections.labels("ws").inc()
    m.connections.labels("ws").dec()
    m.redis_command_seconds.labels("append").observe(0.002)
    m.redis_errors.inc()
    text = generate_latest(m.registry).decode()
    assert 'gateway_published_items_total{kind="team",path="http"} 3.0' in text
    assert 'gateway_http_requests_total{route="publish_team",status="200"} 1.0' in text
    assert 'gateway_connections{transport="ws"} 1.0' in text
    assert 'gateway_redis_command_seconds_bucket{command="append",le="0.0025"} 1.0' in text
    assert 'gateway_redis_command_seconds_bucket{command="append",le="0.001"} 0.0' in text
    assert 'gateway_redis_command_seconds_count{command="append"} 1.0' in text
    assert "gateway_redis_errors_total 1.0" in text
    assert "gateway_replay_items_count 0.0" in text  # unlabelled: there from the start


def test_an_unlabelled_metric_s_series_kept_aside_is_the_one_exposed() -> None:
    m = Metrics()
    # The hub keeps these and updates them directly (Hub.__init__).
    m.items_read.series().value += 4
    m.fanout_seconds.series().observe(0.5)
    m.items_read.inc()
    text = generate_latest(m.registry).decode()
    assert "gateway_items_read_total 5.0" in text
    assert "gateway_fanout_seconds_count 1.0" in text
    with pytest.raises(KeyError):
        m.published.series()  # labelled: no one series


def test_loop_metrics_expose_what_prometheus_client_does() -> None:
    """The same samples as prometheus_client's own counter, gauge and histogram (its
    ``_created`` series aside)."""
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    lc = LoopCounter("x_total", "help", ["a", "b"])
    lg = LoopGauge("y", "help", ["a"])
    lh = LoopHistogram("z_seconds", "help", (0.1, 1.0, 1e6), ["a"])
    ours.register(LoopCollector([lc, lg, lh], {}))
    pc = Counter("x_total", "help", ["a", "b"], registry=theirs)
    pg = Gauge("y", "help", ["a"], registry=theirs)
    ph = Histogram("z_seconds", "help", ["a"], buckets=(0.1, 1.0, 1e6), registry=theirs)
    lc.labels("1", "2").inc(3)
    pc.labels("1", "2").inc(3)
    lc.labels(a="1", b="3").inc()
    pc.labels(a="1", b="3").inc()
    for gauge in (lg, pg):
        gauge.labels("1").inc(5)
        gauge.labels("1").dec(2)
        gauge.labels("2").set(7)
    for value in (0.05, 0.1, 0.5, 7.0):
        lh.labels("q").observe(value)
        ph.labels("q").observe(value)

    def samples(registry: CollectorRegistry) -> set[tuple[str, str, float]]:
        return {
            (s.name, repr(sorted(s.labels.items())), s.value)
            for family in registry.collect()
            for s in family.samples
            if not s.name.endswith("_created")
        }

    assert samples(ours) == samples(theirs)
    assert len(samples(ours)) == 2 + 2 + 6  # counters, gauges, 4 buckets, count, sum
    kinds = {(f.name, f.type) for f in ours.collect() if f.name in ("x", "y", "z_seconds")}
    assert kinds == {(f.name, f.type) for f in theirs.collect()}


def test_loop_metric_labels_are_checked_and_their_series_bounded() -> None:
    counter = LoopCounter("x_total", "help", ["a"])
    with pytest.raises(ValueError):
        counter.labels("1", "2")
    with pytest.raises(ValueError):
        counter.labels(b="1")
    with pytest.raises(ValueError):
        counter.labels()
    for n in range(MAX_SERIES + 10):
        counter.labels(str(n)).inc()
    family = counter.family()
    assert len(family.samples) == MAX_SERIES + 1  # the bound, and the overflow series
    overflow = [s for s in family.samples if s.labels == {"a": OVERFLOW}]
    assert overflow and overflow[0].value == 10
    assert counter.labels("3").value == 1  # a kept series is still itself
    counter.labels(3).inc()  # type: ignore[arg-type]  # a value given as an int: the same
    assert counter.labels("3").value == 2 and overflow[0].value == 10
