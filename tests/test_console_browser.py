"""The console page in headless Chromium, fed by the demo, across a node restart.

A node runs on Redis with the console on; the demo (gateway.demo.run_demo) publishes into
it; the page, served by the node at ``/console/``, signs in with the token from its URL
fragment, lists the active feeds (``GET /v1/feeds``), watches a team and a run over one
WebSocket, and shows their items.  Then the node stops and starts again on
the same Redis and port while the demo goes on: the page shows the reconnect and each
feed's resume from its cursor, and in the end has received every item the demo
published to the watched feeds, in order, none twice.  Page errors and console errors
fail the test.  Screenshots (wide, phone width, dark) go to an artefact directory whose
path the test prints.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.app import Gateway
from gateway.demo import Published, run_demo
from tests.support import events as ev
from tests.support.jsprocess import Duplex, duplex, js_packages, node_executable, require_chromium
from tests.support.node import auth, start_node, token
from tests.support.redis_server import RedisServer, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.browser]

Json = dict[str, Any]
TEST_TIMEOUT = 90
WAIT_MS = 20_000
#: The demo's pace: slow enough that a run spans the restart, fast enough to be quick.
RATE = 10.0


class Story:
    """What the demo published, per feed."""

    def __init__(self) -> None:
        self.by_feed: dict[str, list[tuple[str, Json]]] = {}
        self.count = 0
        #: Set once there is a team and a run.
        self.ready = anyio.Event()

    def __call__(self, published: Published) -> None:
        feed = published.publish.feed
        rows = self.by_feed.setdefault(feed, [])
        rows.extend(zip(published.cursors, published.publish.body, strict=True))
        self.count += 1
        if self.team() is not None and self.newest_run() is not None:
            self.ready.set()

    def newest_run(self) -> str | None:
        """The run that started last (so it is likely still going)."""
        started = [
            feed
            for feed, rows in self.by_feed.items()
            if feed.startswith("run/") and rows[0][1]["type"] == "RUN_STARTED"
        ]
        return started[-1] if started else None

    def team(self) -> str | None:
        teams = [f for f in self.by_feed if f.startswith("team/")]
        return teams[-1] if teams else None


# Page-side functions (called with one JSON argument by the driver's eval/waitFor).
SNAPSHOT = "window.gatewayConsole.snapshot()"
WATCHING = """({team, run}) => {
  const f = window.gatewayConsole.snapshot().feeds;
  return f[team]?.count >= 2 && f[run]?.count >= 4 &&
    f[team].status === "live" && f[run].status === "live";
}"""
RESUMED = """({team, run, down}) => {
  const c = window.gatewayConsole.snapshot();
  const f = c.feeds;
  return c.state === "open" &&
    f[team].notes.includes("resumed from " + down.feeds[team].cursor) &&
    f[run].notes.includes("resumed from " + down.feeds[run].cursor) &&
    f[team].count > down.feeds[team].count &&
    f[team].status === "live" && f[run].status === "live";
}"""
NOTES = """(feed) =>
  [...document.querySelectorAll(`.card[data-feed="${feed}"] .notes li`)].map((e) => e.textContent)
"""
CAUGHT_UP = """(heads) => {
  const f = window.gatewayConsole.snapshot().feeds;
  return Object.entries(heads).every(([feed, cursor]) => f[feed].cursor === cursor);
}"""
SHOWN = """({team, run}) => {
  const card = (feed) => document.querySelector(`.card[data-feed="${feed}"]`);
  const t = card(team);
  const r = card(run);
  const texts = (root, selector) => [...root.querySelectorAll(selector)].map((e) => e.textContent);
  return {
    conn: document.getElementById("conn-state").textContent,
    detail: document.getElementById("conn-detail").textContent,
    teamCursor: t.querySelector(".cursor").textContent,
    runCursor: r.querySelector(".cursor").textContent,
    teamItems: t.querySelectorAll(".item").length,
    teamSources: texts(t, ".item .source"),
    notes: [...texts(t, ".notes li"), ...texts(r, ".notes li")],
    messages: [...r.querySelectorAll(".msg")].map((e) => e.dataset.role),
    calls: r.querySelectorAll(".call").length,
    state: r.querySelector("details.state pre")?.textContent ?? null,
  };
}"""


async def wait_js(page: Duplex, expr: str, arg: Any = None, timeout_ms: int = WAIT_MS) -> None:
    await page.call("waitFor", expr=expr, arg=arg, timeout_ms=timeout_ms)


def errors_of(page: Duplex) -> list[Json]:
    """Page errors and console errors (a failed request, a CSP violation included)."""
    return [
        m
        for m in page.lines
        if m["kind"] == "pageerror" or (m["kind"] == "console" and m["type"] in ("error", "assert"))
    ]


async def wait_for_story(story: Story) -> tuple[str, str]:
    """A team and a run the demo has published to (the run: the newest)."""
    await story.ready.wait()
    team, run = story.team(), story.newest_run()
    assert team is not None and run is not None
    return team, run


async def sign_in_and_watch(page: Duplex, node: Gateway, jwt: str, team: str, run: str) -> None:
    """Sign in from the fragment (the token leaves the address bar), watch from the list."""
    await flush_index(node)
    await page.call("goto", url=f"{node.url}/console/#token={jwt}")
    has = "(selector) => !!document.querySelector(selector)"
    await wait_js(page, has, f'#list-team li[data-feed="{team}"]')
    await wait_js(page, has, f'#list-run li[data-feed="{run}"]')
    assert jwt not in await page.call("eval", expr="location.href")
    assert await page.call("eval", expr="document.getElementById('token').value") == jwt
    await page.call("click", selector=f'#list-team li[data-feed="{team}"] button')
    await page.call("click", selector=f'#list-run li[data-feed="{run}"] button')
    await wait_js(page, WATCHING, {"team": team, "run": run})


async def flush_index(node: Gateway) -> None:
    """Write what the node noted for the feed index now, not at its next round (so the
    page's first listing has it)."""
    activity = node.publisher.activity
    assert activity is not None
    await activity.flush()


async def look(page: Duplex, artefacts: Path) -> tuple[int, str, str]:
    """Phone width and dark mode: screenshots, the page width, both backgrounds."""
    await page.call("viewport", width=360, height=800)
    await page.call("screenshot", path=str(artefacts / "3-phone.png"), fullPage=True)
    width: int = await page.call("eval", expr="document.documentElement.scrollWidth")
    background = "getComputedStyle(document.body).backgroundColor"
    light: str = await page.call("eval", expr=background)
    await page.call("colorScheme", value="dark")
    await page.call("screenshot", path=str(artefacts / "4-dark.png"), fullPage=True)
    dark: str = await page.call("eval", expr=background)
    return width, light, dark


async def test_console_follows_a_team_and_a_run_across_a_node_restart(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    chromium = require_chromium()
    node_exe = node_executable()
    js_packages()
    artefacts = tmp_path / "console-artefacts"
    artefacts.mkdir()
    print(f"\nconsole screenshots: {artefacts}")
    jwt = token()
    story = Story()
    stop, demo_done = anyio.Event(), anyio.Event()
    port = free_port()
    shot = {"fullPage": True}

    async def demo() -> None:
        try:
            base = f"http://127.0.0.1:{port}"
            await run_demo(base, jwt, rate=RATE, seed=16, on_published=story, stop=stop)
        finally:
            demo_done.set()

    with anyio.fail_after(TEST_TIMEOUT):
        async with (
            anyio.create_task_group() as tg,
            duplex(node_exe, "console_browser.mjs", {"chromium": str(chromium)}) as page,
        ):
            first_node = contextlib.AsyncExitStack()
            node = await first_node.enter_async_context(
                start_node(redis_url, redis_prefix, port=port, console=True)
            )
            try:
                tg.start_soon(demo)
                team, run = await wait_for_story(story)
                await sign_in_and_watch(page, node, jwt, team, run)
                await page.call("screenshot", path=str(artefacts / "1-watching.png"), **shot)
                # The node stops (its sockets close without a close frame) and comes back
                # on the same Redis and port; the demo goes on, retrying meanwhile.
                await first_node.aclose()
                await wait_js(page, "() => window.gatewayConsole.client.state !== 'open'")
                down = await page.call("eval", expr=SNAPSHOT)
            finally:
                await first_node.aclose()  # (a no-op once closed above)
            async with start_node(redis_url, redis_prefix, port=port, console=True):
                await wait_js(page, RESUMED, {"team": team, "run": run, "down": down})
                await page.call("screenshot", path=str(artefacts / "2-resumed.png"), **shot)
                stop.set()  # the demo finishes the publish under way and returns
                await demo_done.wait()
                heads = {f: story.by_feed[f][-1][0] for f in (team, run)}
                await wait_js(page, CAUGHT_UP, heads)
                final = await page.call("eval", expr=SNAPSHOT)
                shown = await page.call("eval", expr=SHOWN, arg={"team": team, "run": run})
                width, light, dark = await look(page, artefacts)
                await page.call("close")
            tg.cancel_scope.cancel()

    # Every item the demo published to the watched feeds, in order, once, across the restart.
    for feed in (team, run):
        got = [r for r in final["feeds"][feed]["received"] if not r["prelude"]]
        published = story.by_feed[feed]
        assert [r["cursor"] for r in got] == [c for c, _ in published], feed
        if feed == team:
            assert [r["id"] for r in got] == [item["event"]["event_id"] for _, item in published]
        else:
            assert [r["type"] for r in got] == [event["type"] for _, event in published]
    # The run was resumed past its start: its prelude came at the cursor it had.
    prelude = [r for r in final["feeds"][run]["received"] if r["prelude"]]
    assert prelude and {r["cursor"] for r in prelude} == {down["feeds"][run]["cursor"]}
    assert prelude[0]["type"] == "RUN_STARTED"
    assert final["stats"]["duplicates"] == 0
    assert final["stats"]["connects"] == 2 and final["stats"]["reconnects"] == 1

    # What the page shows.
    assert shown["conn"] == "connected" and "reconnects: 1" in shown["detail"]
    assert shown["teamCursor"] == heads[team] and shown["runCursor"] == heads[run]
    assert shown["teamItems"] == len(story.by_feed[team])
    assert {"member: lead", "team"} <= set(shown["teamSources"])
    assert f"resumed from {down['feeds'][team]['cursor']}" in shown["notes"]
    assert f"resumed from {down['feeds'][run]['cursor']}" in shown["notes"]
    assert shown["messages"][:2] == ["user", "reasoning"] and shown["calls"] >= 1
    assert json.loads(shown["state"])["task"]
    assert width <= 360, f"the page is {width} px wide at a 360 px viewport"
    assert light != dark
    # While the node is down the browser may try to reconnect before the new one listens;
    # Chromium logs that refused attempt as a console error whatever the page does, so it
    # is the only kind of error allowed here (and only against this node's WebSocket
    # route).
    refused = f"WebSocket connection to 'ws://127.0.0.1:{port}/v1/ws' failed: "
    unexpected = [
        m
        for m in errors_of(page)
        if not (
            m["kind"] == "console"
            and m["text"].startswith(refused)
            and m["text"].endswith("net::ERR_CONNECTION_REFUSED")
        )
    ]
    assert unexpected == []
    for name in ("1-watching", "2-resumed", "3-phone", "4-dark"):
        assert (artefacts / f"{name}.png").stat().st_size > 0


@pytest.mark.redis_admin
async def test_console_shows_epoch_restarted_when_redis_lost_its_data() -> None:
    """Watched from the fragment (``#watch=``); Redis restarts empty and the feed goes on
    in a new epoch: the card says so."""
    chromium = require_chromium()
    node_exe = node_executable()
    js_packages()
    jwt = token()
    team = ev.team_id()
    feed = f"team/{team}"
    port = free_port()
    with RedisServer(persistence=False) as server, anyio.fail_after(TEST_TIMEOUT):
        async with (
            start_node(server.url, "gwtest:console", port=port, console=True) as node,
            httpx.AsyncClient(base_url=node.url, timeout=10) as http,
            duplex(node_exe, "console_browser.mjs", {"chromium": str(chromium)}) as page,
        ):
            old = await publish_team(http, team, 2)
            await flush_index(node)
            await page.call("goto", url=f"{node.url}/console/#token={jwt}&watch={feed}")
            counted = "([feed, n]) => window.gatewayConsole.snapshot().feeds[feed]?.count === n"
            await wait_js(page, counted, [feed, 2])
            has = "(selector) => !!document.querySelector(selector)"
            await wait_js(page, has, f'#list-team li[data-feed="{feed}"]')
            listing = await page.call(
                "eval", expr="document.getElementById('feeds-status').textContent"
            )
            await anyio.to_thread.run_sync(server.stop)
            await anyio.to_thread.run_sync(server.start)  # same port, empty
            new = await publish_team(http, team, 1)
            await wait_js(page, counted, [feed, 3])
            shown = await page.call(
                "eval",
                expr=NOTES,
                arg=feed,
            )
            final = await page.call("eval", expr=SNAPSHOT)
            await page.call("close")
    new_epoch = new[0].split(":")[0]
    restarted = f"epoch_restarted: resuming from {new_epoch}:0 (was at {old[-1]};"
    assert any(note.startswith(restarted) for note in shown), shown
    assert [r["cursor"] for r in final["feeds"][feed]["received"]] == old + new
    assert final["stats"]["restarts"] == 1 and final["stats"]["duplicates"] == 0
    # The node lists the feed (GET /v1/feeds): the list is shown, not an error.
    assert listing.startswith("updated "), listing
    assert errors_of(page) == []


async def publish_team(http: httpx.AsyncClient, team: str, n: int) -> list[str]:
    """Publish ``n`` items (a 503 right after a Redis restart is retried, bounded)."""
    items = [ev.item() for _ in range(n)]
    for _ in range(30):
        r = await http.post(f"/v1/teams/{team}/events", json=items, headers=auth())
        if r.status_code != 503:
            break
    assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    return cursors
