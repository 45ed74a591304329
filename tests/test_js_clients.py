"""Real JavaScript clients against a real node: `ws` on Node, and headless Chromium (D5, D6).

The clients live in ``tests/js`` (``ws_client.mjs``, ``browser_ws.html`` + ``browser_ws.mjs``)
and run as subprocesses; the node runs in the test's event loop (``start_node``).  Both
programs print JSON lines on stdout (``open``, ``frame``, ``ready`` when every feed answered,
and a final ``result``), so a test follows them as they go: it publishes live items only after
the client said it is subscribed, and kills a client after it reported k events.

Needs Node.js 20+ with npm (the packages pinned in ``tests/js/package-lock.json`` are installed
with ``npm ci`` when ``tests/js/node_modules`` is missing or stale) and, for the browser test,
``/usr/bin/chromium`` (``apt-get install -y chromium``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from gateway.app import Gateway
from gateway.auth import mint
from tests.support import events as ev
from tests.support.node import SECRET, auth, token, ws_url

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JS_DIR = Path(__file__).parent / "js"
CHROMIUM = Path("/usr/bin/chromium")
JS_PACKAGES = ("ws", "playwright-core", "eventsource")
#: Bound on each client program (it enforces this itself), and on each test.
CLIENT_TIMEOUT_MS = 10_000
TEST_TIMEOUT = 30

Json = dict[str, Any]


# ---------------------------------------------------------------------------
# Node.js, the npm packages and Chromium
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_exe() -> str:
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        pytest.fail("Node.js 20+ and npm are needed for tests/js: install them (e.g. NodeSource)")
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.fail(f"tests/js needs Node.js 20 or later, found {version}")
    return node


def _npm_install_needed() -> bool:
    modules = JS_DIR / "node_modules"
    installed_lock = modules / ".package-lock.json"
    if not installed_lock.exists():
        return True
    if (JS_DIR / "package-lock.json").stat().st_mtime > installed_lock.stat().st_mtime:
        return True
    return any(not (modules / name / "package.json").exists() for name in JS_PACKAGES)


@pytest.fixture(scope="module")
def js_packages(node_exe: str) -> Path:
    """``tests/js/node_modules`` as pinned by package-lock.json (``npm ci`` if needed)."""
    if _npm_install_needed():
        npm = shutil.which("npm")
        assert npm is not None
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=JS_DIR,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci in {JS_DIR} failed:\n{done.stdout}\n{done.stderr}")
    return JS_DIR / "node_modules"


def require_chromium() -> Path:
    """Fail (never skip: CI installs it) when the system Chromium is missing."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the browser test needs headless Chromium; run "
            "`apt-get update && apt-get install -y chromium`"
        )
    return CHROMIUM


# ---------------------------------------------------------------------------
# A node, publishing, and the client programs
# ---------------------------------------------------------------------------


class Published:
    """What was published to each team, in order: ``[(cursor, item), ...]`` per feed name."""

    def __init__(self) -> None:
        self.by_feed: dict[str, list[tuple[str, Json]]] = {}

    async def publish(self, client: httpx.AsyncClient, team: str, n: int = 1) -> list[str]:
        items = [ev.item() for _ in range(n)]
        r = await client.post(f"/v1/teams/{team}/events", json=items, headers=auth())
        assert r.status_code == 200, r.text
        cursors: list[str] = r.json()["cursors"]
        self.by_feed.setdefault(f"team/{team}", []).extend(zip(cursors, items, strict=True))
        return cursors

    def expected(self, feed: str, after: str | None = None) -> list[tuple[str, Json, Json]]:
        """(cursor, source, event) of the feed's items after ``after`` (an own cursor)."""
        rows = [(c, item["source"], item["event"]) for c, item in self.by_feed[feed]]
        if after is not None:
            rows = rows[[c for c, _, _ in rows].index(after) + 1 :]
        return rows

    def head(self, feed: str) -> str:
        return self.by_feed[feed][-1][0]


def received(events: list[Json], feed: str) -> list[tuple[str, Json, Json]]:
    """(cursor, source, event) of the event frames for ``feed``, checking each frame."""
    rows = []
    for frame in events:
        if frame["feed"] != feed:
            continue
        assert sorted(frame) == ["cursor", "data", "feed", "type"]
        data = frame["data"]
        epoch, offset = (int(x) for x in frame["cursor"].split(":"))
        assert data["kind"] == "event"
        assert data["cursor"] == {"epoch": epoch, "offset": offset}
        rows.append((frame["cursor"], data["source"], data["event"]))
    return rows


class JsProgram:
    """A running client program: read its JSON lines as they come."""

    def __init__(self, process: anyio.abc.Process, stderr: Any) -> None:
        assert process.stdout is not None
        self.process = process
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._stderr = stderr
        self.lines: list[Json] = []

    def stderr(self) -> str:
        self._stderr.seek(0)
        return str(self._stderr.read().decode("utf-8", "replace"))

    async def line(self) -> Json:
        try:
            raw = await self._stdout.receive_until(b"\n", 1 << 26)
        except (anyio.IncompleteRead, anyio.EndOfStream):
            await self.process.wait()
            raise AssertionError(
                f"the client ended (exit {self.process.returncode}) without a result; "
                f"stdout so far: {self.lines}\nstderr:\n{self.stderr()}"
            ) from None
        message: Json = json.loads(raw)
        self.lines.append(message)
        return message

    async def until(self, predicate: Callable[[Json], bool]) -> Json:
        while True:
            message = await self.line()
            if predicate(message):
                return message
            if message["kind"] == "result":
                raise AssertionError(f"the client finished early: {message}\n{self.stderr()}")

    async def ready(self) -> list[Json]:
        """Wait until every feed answered; the frames received so far."""
        await self.until(lambda m: m["kind"] == "ready")
        return [m["frame"] for m in self.lines if m["kind"] == "frame"]

    async def result(self) -> Json:
        """The final line, after the program exited (``exit`` holds its exit code)."""
        while True:
            message = await self.line()
            if message["kind"] == "result":
                break
        await self.process.wait()
        message["exit"] = self.process.returncode
        if self.stderr().strip():
            message["stderr"] = self.stderr()
        return message

    def events_so_far(self) -> list[Json]:
        return [
            m["frame"] for m in self.lines if m["kind"] == "frame" and m["frame"]["type"] == "event"
        ]


@contextlib.asynccontextmanager
async def run_js(node_exe: str, script: str, config: Json) -> AsyncIterator[JsProgram]:
    """Start ``tests/js/<script>`` with ``config`` on stdin; killed on the way out if running."""
    with tempfile.TemporaryFile() as stderr:
        process = await anyio.open_process(
            [node_exe, str(JS_DIR / script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=JS_DIR,
        )
        try:
            assert process.stdin is not None
            await process.stdin.send(json.dumps(config).encode())
            await process.stdin.aclose()
            yield JsProgram(process, stderr)
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                with anyio.move_on_after(5):
                    await process.wait()
                await process.aclose()


def ws_config(node: Gateway, feeds: list[Json], **kw: Any) -> Json:
    return {
        "url": ws_url(node),
        "token": token(),
        "feeds": feeds,
        "timeout_ms": CLIENT_TIMEOUT_MS,
        **kw,
    }


def assert_ok(result: Json) -> None:
    assert result["ok"] and result["exit"] == 0, result
    assert result["protocol"] == "gateway.v1"


# ---------------------------------------------------------------------------
# Node `ws`
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("auth_mode", ["header", "subprotocol"])
async def test_ws_history_then_live_on_several_feeds(
    node: Gateway, client: httpx.AsyncClient, js_packages: Path, node_exe: str, auth_mode: str
) -> None:
    teams = [ev.team_id() for _ in range(3)]
    feeds = [f"team/{t}" for t in teams]
    pub = Published()
    with anyio.fail_after(TEST_TIMEOUT):
        for team in teams:
            await pub.publish(client, team, 3)
        heads = {feed: pub.head(feed) for feed in feeds}
        config = ws_config(
            node, [{"feed": f} for f in feeds], auth=auth_mode, stop={"event": 3 * 3 + 3 * 2}
        )
        async with run_js(node_exe, "ws_client.mjs", config) as js:
            frames = await js.ready()
            # Live: published after every subscription is in place, interleaved.
            for _ in range(2):
                for team in teams:
                    await pub.publish(client, team)
            result = await js.result()
    assert_ok(result)
    assert js.lines[0] == {"kind": "open", "protocol": "gateway.v1"}
    subscribed = [f for f in frames if f["type"] == "subscribed"]
    # `subscribed` names the head at subscribe time.
    assert sorted((f["feed"], f["cursor"]) for f in subscribed) == sorted(heads.items())
    assert {f["type"] for f in result["frames"]} == {"subscribed", "event"}
    for feed in feeds:
        assert received(result["events"], feed) == pub.expected(feed)
    assert result["close"] == {"code": 1000, "reason": "done", "by": "client"}


async def test_ws_resume_across_forced_disconnect(
    node: Gateway, client: httpx.AsyncClient, js_packages: Path, node_exe: str
) -> None:
    teams = [ev.team_id() for _ in range(2)]
    feeds = [f"team/{t}" for t in teams]
    pub = Published()
    k = 5
    with anyio.fail_after(TEST_TIMEOUT):
        for team in teams:
            await pub.publish(client, team, 6)
        # The first client is killed (SIGKILL: no close frame) after it reported k events.
        config = ws_config(node, [{"feed": f} for f in feeds], stop={})
        async with run_js(node_exe, "ws_client.mjs", config) as js:
            while len(js.events_so_far()) < k:
                await js.line()
            js.process.kill()
            first = js.events_so_far()
        assert len(first) == k
        last = {f["feed"]: f["cursor"] for f in first}
        # Published while nobody is connected.
        for team in teams:
            await pub.publish(client, team, 3)
        total = sum(len(pub.by_feed[f]) for f in feeds)
        live = 2 * len(teams)
        resume = [{"feed": f, "after": last.get(f)} for f in feeds]
        config = ws_config(node, resume, stop={"event": total - k + live})
        async with run_js(node_exe, "ws_client.mjs", config) as js:
            await js.ready()
            for _ in range(2):
                for team in teams:
                    await pub.publish(client, team)
            result = await js.result()
    assert_ok(result)
    for feed in feeds:
        seen = received(first, feed) + received(result["events"], feed)
        # Every item once, in order: nothing lost, nothing repeated across the disconnect.
        assert seen == pub.expected(feed)
        assert received(result["events"], feed) == pub.expected(feed, last.get(feed))


async def test_ws_error_frame_names_the_feed_and_ends_only_it(
    node: Gateway, client: httpx.AsyncClient, js_packages: Path, node_exe: str
) -> None:
    malformed, past_head, good = (ev.team_id() for _ in range(3))
    pub = Published()
    with anyio.fail_after(TEST_TIMEOUT):
        for team in (malformed, past_head, good):
            [cursor] = await pub.publish(client, team)
        epoch = cursor.split(":")[0]
        feeds = [
            {"feed": f"team/{malformed}", "after": "not-a-cursor"},
            {"feed": f"team/{past_head}", "after": f"{epoch}:99"},
            {"feed": f"team/{good}"},
        ]
        config = ws_config(node, feeds, stop={"error": 2, "event": 2})
        async with run_js(node_exe, "ws_client.mjs", config) as js:
            await js.ready()
            await pub.publish(client, good)  # the socket is still serving the good feed
            result = await js.result()
    assert_ok(result)
    errors = sorted((f["feed"], f["code"]) for f in result["frames"] if f["type"] == "error")
    assert errors == sorted(
        [(f"team/{malformed}", "invalid_cursor"), (f"team/{past_head}", "invalid_cursor")]
    )
    for frame in result["frames"]:
        if frame["type"] == "error":
            assert sorted(frame) == ["code", "feed", "message", "type"]
            assert frame["message"]
    assert [f["feed"] for f in result["frames"] if f["type"] == "subscribed"] == [f"team/{good}"]
    assert received(result["events"], f"team/{good}") == pub.expected(f"team/{good}")
    assert result["close"]["by"] == "client"


async def test_ws_token_expiry_closes_4001(
    node: Gateway, client: httpx.AsyncClient, js_packages: Path, node_exe: str
) -> None:
    team = ev.team_id()
    feed = f"team/{team}"
    pub = Published()
    # exp is whole seconds: this token expires 2 to 3 seconds from now.
    short = mint(SECRET, tenant="acme", subject="tester", scopes=["subscribe"], ttl_seconds=3)
    with anyio.fail_after(TEST_TIMEOUT):
        await pub.publish(client, team)
        config = ws_config(
            node, [{"feed": feed}], token=short, auth="subprotocol", until_close=True
        )
        async with run_js(node_exe, "ws_client.mjs", config) as js:
            await js.ready()
            await pub.publish(client, team)
            result = await js.result()
    assert_ok(result)
    assert result["close"]["code"] == 4001, result
    assert result["close"]["by"] == "server"
    assert received(result["events"], feed) == pub.expected(feed)


# ---------------------------------------------------------------------------
# Headless Chromium
# ---------------------------------------------------------------------------


@pytest.mark.browser
async def test_browser_receives_two_feeds(
    node: Gateway,
    client: httpx.AsyncClient,
    js_packages: Path,
    node_exe: str,
) -> None:
    chromium = require_chromium()
    teams = [ev.team_id() for _ in range(2)]
    feeds = [f"team/{t}" for t in teams]
    pub = Published()
    with anyio.fail_after(TEST_TIMEOUT + 10):
        for team in teams:
            await pub.publish(client, team, 2)
        config = {
            "url": ws_url(node),
            "token": token(),
            "feeds": feeds,
            "events": 2 * 2 + 2 * 2,
            "timeout_ms": 20_000,
            "chromium": str(chromium),
        }
        async with run_js(node_exe, "browser_ws.mjs", config) as js:
            await js.until(lambda m: m["kind"] == "ready")
            for _ in range(2):
                for team in teams:
                    await pub.publish(client, team)
            result = await js.result()
    assert_ok(result)
    assert result["gateway"]["open"] and result["gateway"]["close"] is None, result
    assert sorted(result["gateway"]["subscribed"]) == sorted(feeds)
    assert result["page_errors"] == []
    for feed in feeds:
        assert received(result["events"], feed) == pub.expected(feed)
