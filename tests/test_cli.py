"""``gateway token`` and ``gateway serve`` (D5, D8), run as real subprocesses.

The CLI runs as ``python -m gateway.cli`` with the test interpreter (``uv run gateway``
would re-resolve the environment every time).  Each child gets an environment without
any ``GATEWAY_*`` variable of the caller, every wait has a deadline, and a server that
is still running when a test ends is killed.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.auth import Authenticator, mint
from gateway.config import ENV_ONLY, SETTINGS_HELP, Settings, env_name, flag_name
from gateway.errors import Unauthenticated
from tests.support import events as ev
from tests.support.env import clean_env
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "gateway.cli"]
SECRET = "cli-test-secret-of-at-least-32-bytes-long"
READY_DEADLINE = 30.0
STOP_DEADLINE = 15.0


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=clean_env() if env is None else env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def squash(text: str) -> str:
    """Text without any whitespace (argparse wraps help lines, also after hyphens)."""
    return "".join(text.split())


# --------------------------------------------------------------------------- token


def test_token_is_accepted_by_the_authenticator() -> None:
    team = str(uuid.uuid4())
    before = time.time()
    result = run(
        "token",
        "--tenant",
        "acme",
        "--scope",
        "subscribe publish",
        "--teams",
        team,
        "--ttl",
        "60",
        env=clean_env(GATEWAY_JWT_SECRET=SECRET),
    )
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert result.stdout == token + "\n"  # exactly one line: usable as $(gateway token ...)
    principal = Authenticator(SECRET).verify(token)
    assert principal.tenant == "acme"
    assert principal.scopes == frozenset({"subscribe", "publish"})
    assert principal.teams == frozenset({team})
    assert principal.threads is None
    assert before + 60 - 2 <= principal.expires_at <= time.time() + 60 + 2
    # A token from another secret is not accepted.
    with pytest.raises(Unauthenticated):
        Authenticator(SECRET + "-other").verify(token)


def test_token_with_several_teams_and_one_scope() -> None:
    teams = [str(uuid.uuid4()), str(uuid.uuid4())]
    result = run(
        "token",
        "--tenant",
        "globex",
        "--scope",
        "subscribe",
        "--teams",
        *teams,
        env=clean_env(GATEWAY_JWT_SECRET=SECRET),
    )
    assert result.returncode == 0, result.stderr
    principal = Authenticator(SECRET).verify(result.stdout.strip())
    assert (principal.tenant, principal.scopes) == ("globex", frozenset({"subscribe"}))
    assert principal.teams == frozenset(teams)


def test_token_without_a_secret_fails_naming_the_variable() -> None:
    result = run("token", "--tenant", "acme", env=clean_env())
    assert result.returncode != 0
    assert result.stdout == ""
    assert "GATEWAY_JWT_SECRET" in result.stderr


def test_without_a_command_prints_usage() -> None:
    result = run()
    assert result.returncode != 0
    assert "serve" in result.stderr and "token" in result.stderr


# --------------------------------------------------------------------------- serve --help


def test_serve_help_lists_every_setting_with_flag_and_variable() -> None:
    result = run("serve", "--help")
    assert result.returncode == 0, result.stderr
    text = squash(result.stdout)
    defaults = Settings()
    names = [n for n in SETTINGS_HELP if n not in ENV_ONLY]
    for name in ENV_ONLY:  # secrets have no flag; the epilog lists them
        epilog = text[text.find(squash("environment only")) :]
        assert squash(f"{env_name(name)} {SETTINGS_HELP[name]}") in epilog, name
        assert squash(f"[env {env_name(name)}; default {getattr(defaults, name)!r}]") in epilog
    anchors = [squash(f"{flag_name(n)} {n.upper()}") for n in names]
    positions = [text.find(a, text.find("options:")) for a in anchors]
    assert all(p >= 0 for p in positions), [
        a for a, p in zip(anchors, positions, strict=True) if p < 0
    ]
    assert positions == sorted(positions)
    for i, name in enumerate(names):
        end = positions[i + 1] if i + 1 < len(names) else len(text)
        entry = text[positions[i] : end]
        assert squash(SETTINGS_HELP[name]) in entry, name
        assert squash(f"[env {env_name(name)}; default {getattr(defaults, name)!r}]") in entry, name
    # The settings D8 names are all there.
    for name in (
        "host",
        "port",
        "redis_url",
        "jwt_secret",
        "keepalive_seconds",
        "team_retention",
        "run_retention",
        "max_body_bytes",
    ):
        assert name in SETTINGS_HELP


# --------------------------------------------------------------------------- serve


def _sigint_default() -> None:
    # A child of a non-interactive shell's background job inherits SIGINT ignored, and
    # Python then never raises KeyboardInterrupt; give the server the normal disposition.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """``gateway serve`` with no Redis URL and no secret, on a free port; killed at the end."""
    with _serve(tmp_path, clean_env()) as running:
        yield running


@contextlib.contextmanager
def _serve(
    tmp_path: Path, env: dict[str, str]
) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            preexec_fn=_sigint_default,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url, log_path)
        yield proc, url, log_path
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=STOP_DEADLINE)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + READY_DEADLINE
    with httpx.Client(base_url=url, timeout=2) as client:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"gateway serve exited {proc.returncode}:\n{log_path.read_text()}")
            try:
                if client.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                log = log_path.read_text()
                pytest.fail(f"gateway serve not ready in {READY_DEADLINE}s:\n{log}")
            time.sleep(0.05)  # polling interval, with a deadline


def _stop(proc: subprocess.Popen[bytes], sig: signal.Signals) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=STOP_DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"gateway serve did not stop within {STOP_DEADLINE}s of {sig.name}")


def test_serve_without_redis_runs_embedded_and_stops_on_sigint(
    server: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    proc, url, log_path = server
    team = str(uuid.uuid4())
    with httpx.Client(base_url=url, timeout=5) as client:
        r = client.get("/healthz")
        assert r.status_code == 200
        # No secret configured: every /v1 route is 401, whatever the token.
        for headers in ({}, {"Authorization": f"Bearer {mint(SECRET, tenant='acme')}"}):
            r = client.get(f"/v1/teams/{team}/events", headers=headers)
            assert r.status_code == 401, r.text
            assert r.json()["error"]["code"] == "unauthenticated"
            r = client.post(f"/v1/teams/{team}/events", json={}, headers=headers)
            assert r.status_code == 401, r.text
    rc = _stop(proc, signal.SIGINT)
    assert rc in (0, 130), rc
    log = log_path.read_text()
    assert "nothing is durable" in log.lower(), log
    # It also says how to configure an authenticator (D5).
    assert "GATEWAY_JWT_SECRET" in log
    assert "Traceback" not in log, log


def test_serve_stops_on_sigterm(server: tuple[subprocess.Popen[bytes], str, Path]) -> None:
    proc, _, log_path = server
    rc = _stop(proc, signal.SIGTERM)
    assert rc >= 0, f"killed by signal {-rc} instead of draining (D8)"
    assert "Traceback" not in log_path.read_text()


def test_sigterm_drains_open_sse_streams(tmp_path: Path) -> None:
    team = ev.team_id()
    token = mint(SECRET, tenant="acme")
    headers = {"Authorization": f"Bearer {token}"}
    item = ev.item(ev.message("drain me"))
    env = clean_env(GATEWAY_JWT_SECRET=SECRET, GATEWAY_DRAIN_SECONDS="1")
    with _serve(tmp_path, env) as (proc, url, _):
        with httpx.Client(base_url=url, timeout=STOP_DEADLINE) as client:
            r = client.post(f"/v1/teams/{team}/events", json=item, headers=headers)
            assert r.status_code == 200, r.text
            with client.stream("GET", f"/v1/teams/{team}/events", headers=headers) as response:
                assert response.status_code == 200
                lines = response.iter_lines()
                assert next(lines).startswith("id: ")
                proc.send_signal(signal.SIGTERM)
                rest = list(lines)  # a drained stream ends cleanly; a killed one raises
            assert all(not line.startswith("id: ") for line in rest)
        rc = proc.wait(timeout=STOP_DEADLINE)
        assert rc >= 0, f"killed by signal {-rc}"


# --------------------------------------------------------------------------- bad settings


def _error_line(stderr: str) -> str:
    """argparse's error line (the usage above it names every flag anyway)."""
    lines = [line for line in stderr.splitlines() if re.match(r"^gateway serve: error:", line)]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "env", "setting"),
    [
        (["--port", "-1"], {}, "port"),
        (["--port", "70000"], {}, "port"),
        ([], {"GATEWAY_PORT": "0"}, "port"),
        ([], {"GATEWAY_KEEPALIVE_SECONDS": "-5"}, "keepalive_seconds"),
        ([], {"GATEWAY_UVLOOP": "maybe"}, "uvloop"),
        (["--log-format", "xml"], {}, "log_format"),
        ([], {"GATEWAY_PORT": "abc"}, "port"),
        (["--team-retention", "many"], {}, "team_retention"),
    ],
)
def test_invalid_setting_exits_naming_it(
    args: list[str], env: dict[str, str], setting: str
) -> None:
    result = run("serve", *args, env=clean_env(**env))
    assert result.returncode != 0
    line = _error_line(result.stderr)
    names = (setting, flag_name(setting), env_name(setting))
    assert any(n in line for n in names), line
    assert "Traceback" not in result.stderr


def test_serve_tunes_the_garbage_collector() -> None:
    # gateway serve freezes what start-up built and collects less often than
    # CPython's default (700, 10, 10); see cli._tune_gc for the measurements.
    import gc

    from gateway import cli

    before = gc.get_threshold()
    try:
        cli._tune_gc()
        assert gc.get_threshold() == (5_000, 20, 10)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
