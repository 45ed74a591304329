"""The compiled hot path (gateway/native.py): used where built and current, else Python.

CI runs the whole suite twice: with the compiled modules (``GATEWAY_EXPECT_NATIVE=1``,
so this file fails if they were not in use) and with ``GATEWAY_PURE_PYTHON=1``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import native
from tests.support.env import without_settings

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def test_the_build_in_use_is_the_one_expected() -> None:
    import gateway.fanout.hub as hub

    expected = os.environ.get("GATEWAY_EXPECT_NATIVE")
    if os.environ.get(native.PURE_PYTHON_ENV) == "1" or expected == "0":
        assert not native.active()
    elif expected == "1":
        assert native.active(), native.status()
    # Whatever was expected: the hub is the compiled file exactly when the finder is on.
    assert hub.__file__ is not None
    assert hub.__file__.endswith(SUFFIX) == native.active()
    if native.active():
        assert native.status() == "on"
        assert "gateway.fanout.hub" in native.compiled_modules()


def test_a_child_process_can_be_told_to_run_pure_python() -> None:
    code = "import gateway.native as n, gateway.fanout.hub as h; print(n.status(), h.__file__)"
    env = without_settings()
    env[native.PURE_PYTHON_ENV] = "1"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    status, _, file = out.stdout.strip().partition(" ")
    assert status == "off", out.stdout
    assert file.endswith("hub.py")


def _manifest(tmp_path: Path, source: bytes) -> tuple[dict[str, object], Path, Path]:
    """A package with one module and a native dir holding its compiled file."""
    package = tmp_path / "pkg" / "gateway"
    (package / "fanout").mkdir(parents=True)
    (package / "fanout" / "hub.py").write_bytes(source)
    native_dir = tmp_path / "native"
    (native_dir / "gateway" / "fanout").mkdir(parents=True)
    (native_dir / "gateway" / "fanout" / f"hub{SUFFIX}").write_bytes(b"")
    (native_dir / f"rt__mypyc{SUFFIX}").write_bytes(b"")
    manifest: dict[str, object] = {
        "suffix": SUFFIX,
        "modules": {
            "gateway.fanout.hub": {
                "file": f"gateway/fanout/hub{SUFFIX}",
                "source": "gateway/fanout/hub.py",
                "sha256": hashlib.sha256(b"compiled = 1\n").hexdigest(),
            }
        },
        "runtime": [{"name": "rt__mypyc", "file": f"rt__mypyc{SUFFIX}"}],
    }
    return manifest, native_dir, package


def test_plan_loads_the_compiled_files_of_unchanged_sources(tmp_path: Path) -> None:
    manifest, native_dir, package = _manifest(tmp_path, b"compiled = 1\n")
    planned = native.plan(manifest, native_dir, package)
    assert planned == {
        "gateway.fanout.hub": native_dir / "gateway" / "fanout" / f"hub{SUFFIX}",
        "rt__mypyc": native_dir / f"rt__mypyc{SUFFIX}",
    }


def test_plan_refuses_an_edited_source(tmp_path: Path) -> None:
    manifest, native_dir, package = _manifest(tmp_path, b"compiled = 2\n")
    planned = native.plan(manifest, native_dir, package)
    assert isinstance(planned, str)
    assert "gateway/fanout/hub.py changed" in planned


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda m, d: m.update(suffix=".cpython-399-x.so"), "another interpreter"),
        (lambda m, d: (d / "gateway" / "fanout" / f"hub{SUFFIX}").unlink(), "missing"),
        (lambda m, d: (d / f"rt__mypyc{SUFFIX}").unlink(), "missing"),
        (lambda m, d: m.update(modules={}), "no compiled modules"),
    ],
)
def test_plan_refuses_what_cannot_be_loaded(tmp_path: Path, spoil: object, reason: str) -> None:
    manifest, native_dir, package = _manifest(tmp_path, b"compiled = 1\n")
    spoil(manifest, native_dir)  # type: ignore[operator]
    planned = native.plan(manifest, native_dir, package)
    assert isinstance(planned, str)
    assert reason in planned


def test_the_installed_build_is_of_the_modules_pyproject_lists() -> None:
    listed = _pyproject_modules()
    directory = native.native_dir()
    if directory is None:  # built with GATEWAY_BUILD_NATIVE=0, or the compile failed
        assert not native.active()
        return
    manifest = json.loads((directory / "manifest.json").read_text())
    assert sorted(e["source"] for e in manifest["modules"].values()) == sorted(listed)
    if native.active():  # then from these very sources
        for entry in manifest["modules"].values():
            digest = hashlib.sha256((ROOT / entry["source"]).read_bytes()).hexdigest()
            assert digest == entry["sha256"]


def _pyproject_modules() -> list[str]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hook = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["custom"]
    keys = {k["file"] for k in config["tool"]["uv"]["cache-keys"] if "file" in k}
    # uv rebuilds the install when any compiled module changes.
    assert set(hook["modules"]) <= keys
    return list(hook["modules"])
