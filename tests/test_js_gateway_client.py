"""gateway/console/gateway-client.js on Node (the `ws` package) against real nodes.

The client runs in ``tests/js/gateway_client_driver.mjs``, which prints every event it
delivers and every client event (state, subscribed, restart, duplicate, error, token) as
a JSON line and takes commands on stdin (tests/support/jsprocess.py).  Every test
compares what the client delivered with what was published, item by item: nothing
missing, nothing repeated, in order, across whatever the test breaks (a node restart on
the same Redis and port, a drain behind a balancer, token expiry, a Redis that lost its
data).  The pure parts (backoff, prelude, duplicate counting) are unit-tested in
``tests/js/gateway_client.test.mjs`` (run by the last test here).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from typing import Any

import anyio
import httpx
import pytest

from gateway.agui.fold import RunFold
from gateway.app import Gateway
from gateway.auth import mint
from tests.agui import runs
from tests.support import events as ev
from tests.support.balancer import Balancer
from tests.support.jsprocess import JS_DIR, Duplex, duplex, js_packages, node_executable
from tests.support.node import SECRET, auth, start_node, token
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Json = dict[str, Any]
#: Bound on each test.
TEST_TIMEOUT = 40
FAST_BACKOFF = {"minMs": 50, "maxMs": 500}


@pytest.fixture(scope="module")
def node_exe() -> str:
    exe = node_executable()
    js_packages()
    return exe


class Published:
    """What was published, per feed, in order: ``[(cursor, data), ...]`` where ``data`` is
    the team item's ``{"source", "event"}`` or the AG-UI event."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.by_feed: dict[str, list[tuple[str, Json]]] = {}

    async def team(self, team: str, n: int = 1) -> list[str]:
        items = [ev.item() for _ in range(n)]
        cursors = await self._post(f"/v1/teams/{team}/events", items)
        self.by_feed.setdefault(f"team/{team}", []).extend(zip(cursors, items, strict=True))
        return cursors

    async def run(self, thread: str, run: str, events: list[Json]) -> list[str]:
        cursors = await self._post(f"/v1/threads/{thread}/runs/{run}/ui/ag-ui", events)
        self.by_feed.setdefault(f"run/{thread}/{run}", []).extend(zip(cursors, events, strict=True))
        return cursors

    async def _post(self, path: str, body: list[Json]) -> list[str]:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=10) as http:
            r = await http.post(path, json=body, headers=auth())
        assert r.status_code == 200, r.text
        cursors: list[str] = r.json()["cursors"]
        return cursors

    def count(self, feeds: list[str] | None = None) -> int:
        return sum(len(v) for k, v in self.by_feed.items() if feeds is None or k in feeds)

    def head(self, feed: str) -> str:
        return self.by_feed[feed][-1][0]


def delivered(lines: list[Json], feed: str, *, prelude: bool = False) -> list[tuple[str, Json]]:
    """(cursor, data) of the events the client delivered for ``feed`` (team items as
    ``{"source", "event"}``, checked against their cursor), prelude frames left out unless
    ``prelude``."""
    rows = []
    for line in lines:
        if line["kind"] != "event" or line["feed"] != feed or line["prelude"] != prelude:
            continue
        data = line["data"]
        if feed.startswith("team/"):
            epoch, offset = (int(x) for x in line["cursor"].split(":"))
            assert data["kind"] == "event" and data["cursor"] == {"epoch": epoch, "offset": offset}
            data = {"source": data["source"], "event": data["event"]}
        rows.append((line["cursor"], data))
    return rows


def event_count(js: Duplex, feeds: list[str]) -> int:
    return sum(
        1 for m in js.lines if m["kind"] == "event" and not m["prelude"] and m["feed"] in feeds
    )


async def until_events(js: Duplex, feeds: list[str], n: int) -> None:
    """Read until the client delivered ``n`` (non-prelude) events of ``feeds``."""
    while event_count(js, feeds) < n:
        await js.line()


async def until_subscribed(js: Duplex, feeds: list[str], since: int = 0) -> list[Json]:
    """Read until every feed got a ``subscribed`` after line ``since``; return them."""

    def answered() -> dict[str, Json]:
        return {m["feed"]: m for m in js.lines[since:] if m["kind"] == "subscribed"}

    while not set(feeds) <= answered().keys():
        await js.line()
    return [answered()[f] for f in feeds]


def assert_exact(js: Duplex, pub: Published, feeds: list[str]) -> None:
    for feed in feeds:
        assert delivered(js.lines, feed) == pub.by_feed[feed], feed
    assert not js.of_kind("duplicate")


def driver(node_exe: str, config: Json) -> contextlib.AbstractAsyncContextManager[Duplex]:
    return duplex(node_exe, "gateway_client_driver.mjs", config)


def driver_config(url: str, feeds: list[str], **kw: Any) -> Json:
    return {
        "url": url,
        "token": token(),
        "feeds": [{"feed": f} for f in feeds],
        "backoff": FAST_BACKOFF,
        "timeout_ms": TEST_TIMEOUT * 1000,
        **kw,
    }


RUN_HALF = len(runs.NESTED) // 2


def run_events(thread: str, run: str) -> list[Json]:
    """tests/agui/runs.py's NESTED run, renamed to ``thread``/``run``."""
    out = []
    for event in runs.NESTED:
        e = dict(event)
        if "threadId" in e:
            e["threadId"], e["runId"] = thread, run
        if e["type"] == "RUN_STARTED":
            e["input"] = {**e["input"], "threadId": thread, "runId": run}
        out.append(e)
    return out


# ---------------------------------------------------------------------------
# many feeds over one socket
# ---------------------------------------------------------------------------


async def test_many_feeds_over_one_socket(node: Gateway, node_exe: str) -> None:
    pub = Published(node.url)
    teams = [ev.team_id() for _ in range(3)]
    thread, run = "t-many", "r-1"
    events = run_events(thread, run)
    feeds = [f"team/{t}" for t in teams] + [f"run/{thread}/{run}"]
    with anyio.fail_after(TEST_TIMEOUT):
        for team in teams:
            await pub.team(team, 3)
        await pub.run(thread, run, events[:RUN_HALF])
        async with driver(node_exe, driver_config(node.url, feeds)) as js:
            subscribed = await until_subscribed(js, feeds)
            assert [s["head"] for s in subscribed] == [pub.head(f) for f in feeds]
            assert all(s["after"] is None and not s["resumed"] for s in subscribed)
            # Live, interleaved over the feeds.
            for team in teams:
                await pub.team(team, 2)
            await pub.run(thread, run, events[RUN_HALF:])
            await until_events(js, feeds, pub.count())
            assert len(node.context.connections.timed()) == 1  # one socket for every feed
            status = await js.call("close")
    assert_exact(js, pub, feeds)
    assert not any(m["prelude"] for m in js.of_kind("event"))  # joined at the start
    assert status["cursors"] == {f: pub.head(f) for f in feeds}
    assert status["stats"]["connects"] == 1 and status["stats"]["reconnects"] == 0
    assert status["stats"]["duplicates"] == 0
    assert {f["feed"]: f["status"] for f in status["feeds"]} == dict.fromkeys(feeds, "live")
    assert [m["state"] for m in js.of_kind("state")] == ["connecting", "open", "closed"]


async def test_cursors_resume_a_new_client(node: Gateway, node_exe: str) -> None:
    pub = Published(node.url)
    team = ev.team_id()
    feed = f"team/{team}"
    with anyio.fail_after(TEST_TIMEOUT):
        await pub.team(team, 3)
        async with driver(node_exe, driver_config(node.url, [feed])) as js:
            await until_events(js, [feed], 3)
            cursors = (await js.call("close"))["cursors"]
        assert cursors == {feed: pub.head(feed)}
        await pub.team(team, 2)
        config = driver_config(node.url, [], cursors=cursors)
        async with driver(node_exe, config) as js2:
            await js2.call("subscribe", feed=feed)
            [sub] = await until_subscribed(js2, [feed])
            await until_events(js2, [feed], 2)
            await js2.call("close")
    assert sub["after"] == cursors[feed]
    assert delivered(js2.lines, feed) == pub.by_feed[feed][3:]


# ---------------------------------------------------------------------------
# resume across disconnects
# ---------------------------------------------------------------------------


async def test_resume_after_the_node_restarts_on_the_same_redis_and_port(
    redis_url: str, redis_prefix: str, node_exe: str
) -> None:
    teams = [ev.team_id() for _ in range(2)]
    thread, run = "t-restart", "r-1"
    events = run_events(thread, run)
    feeds = [f"team/{t}" for t in teams] + [f"run/{thread}/{run}"]
    with anyio.fail_after(TEST_TIMEOUT):
        async with contextlib.AsyncExitStack() as outer:
            first_node = contextlib.AsyncExitStack()
            first = await first_node.enter_async_context(start_node(redis_url, redis_prefix))
            port = first.port
            pub = Published(first.url)
            for team in teams:
                await pub.team(team, 3)
            await pub.run(thread, run, events[:RUN_HALF])
            js = await outer.enter_async_context(driver(node_exe, driver_config(first.url, feeds)))
            await until_events(js, feeds, pub.count())
            before = dict((await js.call("status"))["cursors"])
            # The node stops: its sockets close without a close frame, as in a crash.
            await first_node.aclose()
            closed = await js.until(lambda m: m["kind"] == "close")
            # Published while the client is disconnected, through another node.
            async with start_node(redis_url, redis_prefix) as other:
                pub.base_url = other.url
                for team in teams:
                    await pub.team(team, 2)
                await pub.run(thread, run, events[RUN_HALF : RUN_HALF + 4])
            mark = len(js.lines)
            async with start_node(redis_url, redis_prefix, port=port) as again:
                pub.base_url = again.url
                resumed = await until_subscribed(js, feeds, since=mark)
                for team in teams:
                    await pub.team(team, 1)
                await pub.run(thread, run, events[RUN_HALF + 4 :])
                await until_events(js, feeds, pub.count())
                status = await js.call("close")
    assert closed["code"] == 1006  # no close frame
    assert_exact(js, pub, feeds)
    # Each feed resumed after exactly the cursor it had before the restart.
    assert {s["feed"]: s["after"] for s in resumed} == before
    assert all(s["resumed"] for s in resumed)
    # The run was resumed past its start: its prelude restates it at the joined cursor.
    run_feed = feeds[-1]
    prelude = delivered(js.lines, run_feed, prelude=True)
    assert [d["type"] for _, d in prelude][:3] == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "MESSAGES_SNAPSHOT",
    ]
    assert {c for c, _ in prelude} == {before[run_feed]}
    assert status["cursors"] == {f: pub.head(f) for f in feeds}
    assert status["stats"]["connects"] == 2 and status["stats"]["duplicates"] == 0


async def test_drain_1012_reconnects_promptly_to_another_node(
    redis_url: str, redis_prefix: str, node_exe: str
) -> None:
    teams = [ev.team_id() for _ in range(2)]
    feeds = [f"team/{t}" for t in teams]
    backoff = {"minMs": 400, "maxMs": 5000}
    with anyio.fail_after(TEST_TIMEOUT):
        async with (
            start_node(redis_url, redis_prefix) as a,
            start_node(redis_url, redis_prefix) as b,
            Balancer([a.port, b.port]) as lb,
        ):
            pub = Published(b.url)
            for team in teams:
                await pub.team(team, 2)
            config = driver_config(lb.url, feeds, backoff=backoff)
            async with driver(node_exe, config) as js:
                await until_events(js, feeds, pub.count())
                assert len(a.context.connections.timed()) == 1  # round robin: the first went to a
                lb.mark_down(a.port)
                mark = len(js.lines)
                await a.drain(0.05)
                closed = await js.until(lambda m: m["kind"] == "close")
                waiting = await js.until(lambda m: m["kind"] == "state")
                await until_subscribed(js, feeds, since=mark)
                for team in teams:
                    await pub.team(team, 2)
                await until_events(js, feeds, pub.count())
                assert len(b.context.connections.timed()) == 1
                await js.call("close")
    assert closed["code"] == 1012
    assert waiting["state"] == "waiting" and waiting["code"] == 1012
    # Promptly: within the first backoff step, whatever the attempt count.
    assert waiting["delayMs"] < backoff["minMs"]
    assert_exact(js, pub, feeds)


# ---------------------------------------------------------------------------
# tokens
# ---------------------------------------------------------------------------


def short_token(seconds: int) -> tuple[str, float]:
    """A subscribe token that expires ``seconds`` (whole seconds) from now, and its exp."""
    exp = int(time.time()) + seconds
    return (
        mint(SECRET, tenant="acme", subject="tester", scopes=["subscribe"], ttl_seconds=seconds),
        float(exp),
    )


async def test_token_refresh_on_the_open_socket_outlives_the_first_token(
    node: Gateway, node_exe: str
) -> None:
    pub = Published(node.url)
    team = ev.team_id()
    feed = f"team/{team}"
    short, exp = short_token(3)
    config = driver_config(node.url, [feed], tokens=[short, token()])
    del config["token"]
    with anyio.fail_after(TEST_TIMEOUT):
        await pub.team(team, 1)
        async with driver(node_exe, config) as js:
            await until_events(js, [feed], 1)
            refreshed = await js.until(lambda m: m["kind"] == "token")
            assert time.time() < exp  # sent before the first token expired
            # The server closes a socket whose token expired within a second of exp.
            await anyio.sleep(max(0.0, exp + 2.0 - time.time()))
            await pub.team(team, 1)
            await until_events(js, [feed], 2)
            status = await js.call("close")
    assert refreshed["expiresAt"] > exp * 1000
    assert status["stats"]["connects"] == 1 and status["stats"]["refreshes"] == 1
    assert not js.of_kind("close")
    assert [m["call"] for m in js.of_kind("getToken")] == [1, 2]
    assert_exact(js, pub, [feed])


async def test_4001_without_a_new_token_stops_until_set_token(node: Gateway, node_exe: str) -> None:
    pub = Published(node.url)
    team = ev.team_id()
    feed = f"team/{team}"
    short, _ = short_token(2)
    with anyio.fail_after(TEST_TIMEOUT):
        await pub.team(team, 2)
        config = driver_config(node.url, [feed], token=short)
        async with driver(node_exe, config) as js:
            await until_events(js, [feed], 2)
            closed = await js.until(lambda m: m["kind"] == "close")
            stopped = await js.until(lambda m: m["kind"] == "state")
            await pub.team(team, 2)  # while the client waits for a token
            mark = len(js.lines)
            await js.call("setToken", token=token())
            [resumed] = await until_subscribed(js, [feed], since=mark)
            await until_events(js, [feed], 4)
            status = await js.call("close")
    assert closed["code"] == 4001
    assert stopped["state"] == "unauthenticated"
    assert resumed["after"] == pub.by_feed[feed][1][0]
    assert status["stats"]["connects"] == 2
    assert_exact(js, pub, [feed])


async def test_a_refused_token_refresh_keeps_the_socket(node: Gateway, node_exe: str) -> None:
    pub = Published(node.url)
    team = ev.team_id()
    feed = f"team/{team}"
    intruder = token(subject="someone-else")
    with anyio.fail_after(TEST_TIMEOUT):
        await pub.team(team, 1)
        async with driver(node_exe, driver_config(node.url, [feed])) as js:
            await until_events(js, [feed], 1)
            await js.call("setToken", token=intruder)
            error = await js.until(lambda m: m["kind"] == "error")
            await pub.team(team, 1)
            await until_events(js, [feed], 2)
            status = await js.call("close")
    assert error["code"] == "unauthenticated" and "feed" not in error
    assert status["stats"]["connects"] == 1
    assert_exact(js, pub, [feed])


# ---------------------------------------------------------------------------
# epoch_restarted
# ---------------------------------------------------------------------------


@pytest.mark.redis_admin
async def test_epoch_restarted_after_redis_lost_its_data(node_exe: str) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    with RedisServer(persistence=False) as server:
        async with start_node(server.url, "gwtest:jsclient", read_block_ms=200) as node:
            pub = Published(node.url)
            with anyio.fail_after(TEST_TIMEOUT):
                await pub.team(team, 3)
                async with duplex(
                    node_exe, "gateway_client_driver.mjs", driver_config(node.url, [feed])
                ) as js:
                    await until_events(js, [feed], 3)
                    old = pub.head(feed)
                    await anyio.to_thread.run_sync(server.stop)
                    await anyio.to_thread.run_sync(server.start)  # same port, empty
                    new = await _publish_retrying(pub, team, 2)
                    restart = await js.until(lambda m: m["kind"] == "restart")
                    await until_events(js, [feed], 5)
                    status = await js.call("close")
    old_epoch, new_epoch = int(old.split(":")[0]), int(new[0].split(":")[0])
    assert new_epoch > old_epoch
    assert restart["previous"] == old
    assert restart["cursor"] == f"{new_epoch}:0"
    assert_exact(js, pub, [feed])
    assert status["cursors"] == {feed: new[-1]}
    assert status["stats"]["restarts"] == 1


async def _publish_retrying(pub: Published, team: str, n: int) -> list[str]:
    """Publish to a node whose Redis just restarted: a 503 is retried (bounded)."""
    items = [ev.item() for _ in range(n)]
    async with httpx.AsyncClient(base_url=pub.base_url, timeout=10) as http:
        for _ in range(30):
            r = await http.post(f"/v1/teams/{team}/events", json=items, headers=auth())
            if r.status_code != 503:
                break
        assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    pub.by_feed[f"team/{team}"].extend(zip(cursors, items, strict=True))
    return cursors


# ---------------------------------------------------------------------------
# the unit tests of the client (fake socket), on Node's test runner
# ---------------------------------------------------------------------------


def _expected_folds() -> dict[str, Json]:
    """tests/agui/runs.py's runs with what the gateway's own fold makes of them, for the
    console's fold (folds.js) to agree with."""
    out = {}
    for name, events in runs.ALL_RUNS.items():
        fold = RunFold()
        for event in events:
            fold.apply(event)
        texts = [m.get("content") or "" for m in fold.messages if m["role"] == "assistant"]
        terminal = fold.terminal["type"] if fold.terminal else None
        status = {"RUN_FINISHED": "finished", "RUN_ERROR": "error"}.get(terminal, "running")
        expected = {"assistant_text": "|".join(t for t in texts if t), "state": fold.state}
        out[name] = {"events": events, "expected": {**expected, "status": status}}
    return out


def test_js_unit_tests_pass(node_exe: str) -> None:
    """gateway_client.test.mjs (the client on a fake socket) and folds.test.mjs (the
    console's folds, cross-checked with gateway.agui.fold on tests/agui/runs.py)."""
    done = subprocess.run(
        [node_exe, "--test", "gateway_client.test.mjs", "folds.test.mjs"],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RUNS_JSON": json.dumps(_expected_folds())},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# fail 0" in done.stdout and "# skipped 0" in done.stdout, done.stdout
