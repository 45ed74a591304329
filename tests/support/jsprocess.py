"""JavaScript programs under ``tests/js`` as subprocesses that speak JSON lines both ways.

``node_executable()`` and ``js_packages()`` find Node.js 20+ and install the pinned npm
packages (``npm ci``) when ``tests/js/node_modules`` is missing or stale;
``require_chromium()`` finds the system Chromium.  Each fails the test (never skips: CI
installs them) with what to install.

:func:`duplex` starts a program, writes its config as the first stdin line, and yields a
:class:`Duplex`: :meth:`Duplex.until` reads its stdout lines until one matches,
:meth:`Duplex.call` sends a command ``{"id", "cmd", ...}`` and returns the ``value`` of
the matching ``{"kind": "reply"}`` line.  Every read is bounded by the caller's
``anyio.fail_after``; lines are kept in :attr:`Duplex.lines` for assertions.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

JS_DIR = Path(__file__).parent.parent / "js"
CHROMIUM = Path("/usr/bin/chromium")
JS_PACKAGES = ("ws", "playwright-core", "typescript")
#: Longest JSON line a program may print (a status with many events).
MAX_LINE = 1 << 26

Json = dict[str, Any]


def node_executable() -> str:
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


def js_packages() -> Path:
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
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the browser test needs headless Chromium; run "
            "`apt-get update && apt-get install -y chromium`"
        )
    return CHROMIUM


class Duplex:
    """A running program: send commands, read its JSON lines as they come."""

    def __init__(self, process: anyio.abc.Process, stderr: Any) -> None:
        assert process.stdout is not None and process.stdin is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._stderr = stderr
        self._ids = itertools.count(1)
        self.lines: list[Json] = []

    def stderr(self) -> str:
        self._stderr.seek(0)
        return str(self._stderr.read().decode("utf-8", "replace"))

    async def send(self, message: Json) -> None:
        await self._stdin.send(json.dumps(message).encode() + b"\n")

    async def line(self) -> Json:
        try:
            raw = await self._stdout.receive_until(b"\n", MAX_LINE)
        except (anyio.IncompleteRead, anyio.EndOfStream):
            await self.process.wait()
            raise AssertionError(
                f"the program ended (exit {self.process.returncode}); last lines: "
                f"{self.lines[-20:]}\nstderr:\n{self.stderr()}"
            ) from None
        message: Json = json.loads(raw)
        self.lines.append(message)
        if message.get("kind") == "fatal":
            raise AssertionError(f"the program gave up: {message}\nstderr:\n{self.stderr()}")
        return message

    async def until(self, predicate: Callable[[Json], bool]) -> Json:
        """Read lines until one satisfies ``predicate``; return it."""
        while True:
            message = await self.line()
            if predicate(message):
                return message

    async def call(self, cmd: str, **fields: Any) -> Any:
        """Send a command and return the ``value`` of its reply (fails on ``ok: false``)."""
        ident = next(self._ids)
        await self.send({"id": ident, "cmd": cmd, **fields})
        reply = await self.until(lambda m: m.get("kind") == "reply" and m.get("id") == ident)
        if not reply["ok"]:
            raise AssertionError(f"{cmd} failed: {reply.get('error')}")
        return reply.get("value")

    def of_kind(self, kind: str) -> list[Json]:
        return [m for m in self.lines if m.get("kind") == kind]


@contextlib.asynccontextmanager
async def duplex(node_exe: str, script: str, config: Json) -> AsyncIterator[Duplex]:
    """Start ``tests/js/<script>`` with ``config`` as its first line; killed on the way
    out if it is still running."""
    with tempfile.TemporaryFile() as stderr:
        process = await anyio.open_process(
            [node_exe, str(JS_DIR / script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=JS_DIR,
        )
        try:
            program = Duplex(process, stderr)
            await program.send(config)
            yield program
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                with anyio.move_on_after(5):
                    await process.wait()
                await process.aclose()


__all__ = [
    "CHROMIUM",
    "JS_DIR",
    "Duplex",
    "duplex",
    "js_packages",
    "node_executable",
    "require_chromium",
]
