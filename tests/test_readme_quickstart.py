"""The README's first command, on a fresh machine, prints the console's URL within a minute.

"Fresh": a copy of the repository as a clone of it would hold it (the tracked files and
the new ones git does not ignore, so that the test checks this tree, not the last
commit), a new virtual environment as the ``python3`` it finds (so that ``pip install``
works and nothing lands in the test's own Python), and empty pip and uv caches: pip
downloads uv and uv downloads every dependency from PyPI.  ``UV_PROJECT_ENVIRONMENT``
puts the project's environment in the temporary directory too, so the repository's own
``.venv`` is never touched; ``UV_PYTHON_DOWNLOADS=never`` keeps uv on the local Python
(it would otherwise be allowed to fetch one, which the README does not rely on).  The
port comes from ``GATEWAY_PORT`` (the README's 8080 may be taken here).

Then: the page and the listing answer with the printed token, the command stops on
SIGINT, and the environment holds the runtime dependencies of ``uv.lock`` and nothing
of the dev group.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
WITHIN = 60.0
URL_LINE = re.compile(r"^http://127\.0\.0\.1:(\d+)/console/#token=([\w.-]+)$")

pytestmark = pytest.mark.slow


def first_command(readme: str) -> str:
    """The first command of the README's Quick start (its trailing comment removed)."""
    section = readme[readme.index("## Quick start") :]
    block = section[section.index("```sh\n") + len("```sh\n") :]
    line = block.splitlines()[0]
    return line.split("   #", 1)[0].strip()


def copy_tree(into: Path) -> None:
    """The repository's files as a fresh clone of this tree would have them."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.split(b"\0")
    for raw in names:
        if not raw:
            continue
        source = ROOT / raw.decode()
        if source.is_file():  # not a file deleted in the work tree
            target = into / raw.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_closure(lock: dict[str, Any], roots: list[dict[str, Any]]) -> set[str]:
    """Every package ``roots`` (uv.lock dependency entries) need, markers ignored (a
    superset of what any one platform installs)."""
    packages = {p["name"]: p for p in lock["package"]}
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        entry = todo.pop()
        package = packages[entry["name"]]
        for extra in entry.get("extra", []):
            todo.extend(package.get("optional-dependencies", {}).get(extra, []))
        if entry["name"] not in seen:
            seen.add(entry["name"])
            todo.extend(package.get("dependencies", []))
    return {normalise(n) for n in seen}


def test_the_first_command_prints_the_console_url_within_a_minute(tmp_path: Path) -> None:
    command = first_command((ROOT / "README.md").read_text())
    assert "--no-dev" in command and command.endswith("gateway dev"), command
    clone = tmp_path / "clone"
    copy_tree(clone)
    python = tmp_path / "python"
    subprocess.run([sys.executable, "-m", "venv", str(python)], check=True, timeout=120)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GATEWAY_", "UV_", "VIRTUAL_ENV", "PYTHONPATH", "PIP_CACHE"))
    }
    port = free_port()
    project_env = tmp_path / "env"
    env.update(
        PATH=f"{python / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        PIP_CACHE_DIR=str(tmp_path / "pip-cache"),
        UV_CACHE_DIR=str(tmp_path / "uv-cache"),
        UV_PROJECT_ENVIRONMENT=str(project_env),
        UV_PYTHON_DOWNLOADS="never",
        GATEWAY_PORT=str(port),
    )
    log = tmp_path / "stderr.log"
    started = time.monotonic()
    with log.open("wb") as err:
        proc = subprocess.Popen(
            ["sh", "-c", command],
            cwd=clone,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,  # its own process group: pip, uv and the gateway
        )
    try:
        line = read_line(proc, log, started + WITHIN)
        elapsed = time.monotonic() - started
        found = URL_LINE.match(line)
        assert found, line
        print(f"\nthe README's first command printed the console URL after {elapsed:.1f} s")
        assert int(found[1]) == port
        token = found[2]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            assert client.get("/console/").status_code == 200
            r = client.get(
                "/v1/feeds",
                params={"kind": "team"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert r.status_code == 200, r.text
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole group
        # The shell may die of the signal itself; the gateway must have stopped cleanly.
        assert proc.wait(timeout=20) in (0, 130, -signal.SIGINT), log.read_text()
        assert '"event": "stopped"' in log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()

    # What was installed: the runtime closure of uv.lock, nothing of the dev group.
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    project = next(p for p in lock["package"] if p["name"] == "agent-gateway")
    runtime = lock_closure(lock, project["dependencies"])
    dev = lock_closure(lock, [d for group in project["dev-dependencies"].values() for d in group])
    listing = subprocess.run(
        [
            str(project_env / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] "
            "for d in m.distributions()))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    installed = {normalise(n) for n in listing.stdout.split()}
    assert "agent-gateway" in installed and "redis" in installed
    assert installed - {"agent-gateway"} <= runtime, installed - runtime
    assert not installed & (dev - runtime), installed & (dev - runtime)
    assert "pytest" in dev and "pytest" not in installed


def read_line(proc: subprocess.Popen[bytes], log: Path, deadline: float) -> str:
    """The first line the command writes to stdout, before ``deadline``."""
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            pytest.fail(
                f"no console URL within {WITHIN:.0f} s (exit {proc.poll()}): {data!r}\n"
                + log.read_text(errors="replace")[-4000:]
            )
        if selector.select(timeout=left):
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            data += chunk
    return data.decode().splitlines()[0] if data else ""
