"""Dev mode (``gateway dev``, ``gateway serve --dev``, D11) and ``gateway demo``.

The commands run as ``python -m gateway.cli`` subprocesses (as in tests/test_cli.py),
in an environment without the caller's ``GATEWAY_*`` variables, each wait bounded, and
a server still running at the end is killed.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from gateway import devmode
from gateway.auth import mint
from gateway.config import Settings
from tests.support.env import clean_env
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "gateway.cli"]
DEADLINE = 30.0
URL_LINE = re.compile(r"^http://127\.0\.0\.1:(\d+)/console/#token=([\w.-]+)$")


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # see tests/test_cli.py


class Dev:
    """A running dev-mode node: its process, the URL line, and what it said on stderr."""

    def __init__(self, proc: subprocess.Popen[bytes], line: str, log: Path) -> None:
        self.proc = proc
        self.line = line
        self.log = log
        found = URL_LINE.match(line)
        assert found, line
        self.url = f"http://127.0.0.1:{found[1]}"
        self.token = found[2]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def _read_line(proc: subprocess.Popen[bytes], log: Path, within: float) -> str:
    """The first line of the child's stdout, within ``within`` seconds."""
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + within
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            pytest.fail(f"no URL line (exit {proc.poll()}):\n{data!r}\n{log.read_text()}")
        if selector.select(timeout=left):
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            data += chunk
    return data.decode().splitlines()[0] if data else ""


@contextlib.contextmanager
def dev(
    tmp_path: Path, *args: str, command: tuple[str, ...] = ("dev",), **env: str
) -> Iterator[Dev]:
    log = tmp_path / "dev.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*CLI, *command, "--port", str(free_port()), *args],
            stdout=subprocess.PIPE,
            stderr=err,
            env=clean_env(**env),
            cwd=ROOT,
            preexec_fn=_sigint_default,
        )
    try:
        yield Dev(proc, _read_line(proc, log, DEADLINE), log)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=15)
        assert proc.stdout is not None
        proc.stdout.close()


def listed(client: httpx.Client, node: Dev, kind: str) -> list[str]:
    r = client.get("/v1/feeds", params={"kind": kind}, headers=node.headers())
    assert r.status_code == 200, r.text
    return [f["feed"] for f in r.json()["feeds"]]


def wait_listed(client: httpx.Client, node: Dev, kind: str, within: float = 20) -> list[str]:
    """The listing of ``kind`` once it is not empty (the demo publishes; bounded)."""
    deadline = time.monotonic() + within
    while not (found := listed(client, node, kind)):
        if time.monotonic() > deadline:
            pytest.fail(f"no {kind} feed listed within {within}s:\n{node.log.read_text()}")
        time.sleep(0.1)  # polling a subprocess, with a deadline
    return found


# --------------------------------------------------------------------------- the node


@pytest.mark.slow
def test_dev_mode_prints_the_console_url_with_a_token_and_runs_the_demo(tmp_path: Path) -> None:
    with dev(tmp_path, GATEWAY_JWT_SECRET="a-secret-someone-left-in-the-environment") as node:
        assert node.proc.stdout is not None
        with httpx.Client(base_url=node.url, timeout=5) as client:
            # The console is on, served from the package.
            page = client.get("/console/")
            assert page.status_code == 200
            assert page.content == (ROOT / "gateway" / "console" / "index.html").read_bytes()
            # The token has both scopes, for the demo tenant; the demo is publishing.
            teams = wait_listed(client, node, "team")
            runs = wait_listed(client, node, "run")
            assert teams and runs
            claims = msgspec.json.decode(_payload(node.token))
            assert claims["tenant"] == devmode.TENANT
            assert set(claims["scope"].split()) == {"subscribe", "publish"}
            assert claims["exp"] - claims["iat"] == devmode.CONSOLE_TOKEN_TTL
            r = client.post(f"/v1/teams/{teams[0][5:]}/events", json=[], headers=node.headers())
            assert r.status_code == 400  # publish scope: the body is checked (and empty)
            # A random secret made at start-up: the environment's is not accepted.
            other = mint("a-secret-someone-left-in-the-environment", tenant="demo")
            r = client.get("/v1/feeds", params={"kind": "team"}, headers=_bearer(other))
            assert r.status_code == 401
        node.proc.send_signal(signal.SIGINT)
        assert node.proc.wait(timeout=15) in (0, 130)
        rest = node.proc.stdout.read().decode()
    log = node.log.read_text()
    # One line on stdout; the loud notice on stderr.
    assert rest == ""
    assert "GATEWAY DEV MODE: for development only, NEVER for production." in log
    assert "NOTHING IS DURABLE" in log
    assert "demo: " in log  # the demo's progress
    assert "Traceback" not in log


def _payload(token: str) -> bytes:
    import base64

    part = token.split(".")[1]
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.slow
def test_serve_dev_is_dev_mode_and_gateway_demo_points_at_it(tmp_path: Path) -> None:
    with (
        dev(tmp_path, command=("serve", "--dev")) as node,
        httpx.Client(base_url=node.url, timeout=5) as client,
    ):
        assert client.get("/console/").status_code == 200
        before = set(wait_listed(client, node, "team"))
        # `gateway demo` with the printed token: another story, into the same tenant.
        demo = subprocess.run(
            [*CLI, "demo", "--url", node.url, "--rate", "50", "--duration", "1.5", "--seed", "7"],
            env=clean_env(GATEWAY_TOKEN=node.token),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert demo.returncode == 0, demo.stderr
        assert "(stopped)" in demo.stderr
        assert set(listed(client, node, "team")) - before  # its new teams are listed


def test_serve_without_dev_mode_keeps_the_console_off(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*CLI, "serve", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            cwd=ROOT,
            preexec_fn=_sigint_default,
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2) as client:
            deadline = time.monotonic() + DEADLINE
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)  # polling a subprocess, with a deadline
            assert client.get("/console/").status_code == 404
            assert client.get("/v1/feeds", params={"kind": "team"}).status_code == 401
    finally:
        proc.kill()
        proc.wait(timeout=15)
    assert "DEV MODE" not in log.read_text()


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["dev", "--host", "0.0.0.0"], "--dev-allow-remote"),
        (["serve", "--dev", "--host", "192.0.2.1"], "--dev-allow-remote"),
        (["serve", "--dev-allow-remote"], "only in dev mode"),
        (["dev", "--dev", "--port", "1"], "unrecognized arguments: --dev"),
    ],
)
def test_refusals(args: list[str], expected: str) -> None:
    result = subprocess.run(
        [*CLI, *args],
        env=clean_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_dev_and_demo_have_their_own_help() -> None:
    for command, words in (
        ("dev", ["dev mode", "--dev-allow-remote", "--redis-url"]),
        ("demo", ["--url", "--token", "--rate", "--seed", "--duration", "--tenant"]),
    ):
        result = subprocess.run(
            [*CLI, command, "--help"],
            env=clean_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        for word in words:
            assert word in result.stdout, (command, word)
    usage = subprocess.run([*CLI], capture_output=True, text=True, timeout=60, check=False)
    assert all(c in usage.stderr for c in ("serve", "dev", "demo", "token"))


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert devmode.is_loopback(host) is loopback


def test_dev_settings() -> None:
    base = Settings(jwt_secret="configured", port=9000)
    first = devmode.dev_settings(base)
    second = devmode.dev_settings(base)
    assert first.console and first.port == 9000
    assert first.jwt_secret not in (None, "configured")
    assert first.jwt_secret != second.jwt_secret  # made anew at every start
    assert len(first.jwt_secret or "") >= 32
    with pytest.raises(ValueError, match="--dev-allow-remote"):
        devmode.dev_settings(Settings(host="0.0.0.0"))
    remote = devmode.dev_settings(Settings(host="0.0.0.0"), allow_remote=True)
    assert remote.host == "0.0.0.0" and remote.console
