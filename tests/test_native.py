"""The compiled kernel (gateway/native.py): used where built and current, else Python.

CI runs the whole suite twice: with the compiled wheel installed (``GATEWAY_EXPECT_NATIVE=1``,
so this file fails if its kernel is not in use) and with ``GATEWAY_PURE_PYTHON=1``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway import native
from tests.support.env import without_settings
from tests.support.project import compiled_modules, pyproject

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


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _build(tmp_path: Path, *, home: bool = False) -> tuple[dict[str, Any], Path, Path]:
    """An install with a two-file package and, beside it, a build of one of them: the
    manifest, the native directory and the package directory.  ``home``: an editable
    build (made from the checkout the package is in, installed elsewhere)."""
    site = tmp_path / "site"
    package = site / "gateway"
    (package / "fanout").mkdir(parents=True)
    (package / "__init__.py").write_bytes(b"")
    (package / "fanout" / "hub.py").write_bytes(b"compiled = 1\n")
    native_dir = (tmp_path / "elsewhere" if home else site) / "gateway_native"
    (native_dir / "gateway" / "fanout").mkdir(parents=True)
    (native_dir / "gateway" / "fanout" / f"hub{SUFFIX}").write_bytes(b"shim")
    (native_dir / f"rt__mypyc{SUFFIX}").write_bytes(b"runtime")
    manifest: dict[str, Any] = {
        "suffix": SUFFIX,
        "home": str(site) if home else None,
        "sources": {
            "gateway/__init__.py": _sha(b""),
            "gateway/fanout/hub.py": _sha(b"compiled = 1\n"),
        },
        "modules": {
            "gateway.fanout.hub": {"file": f"gateway/fanout/hub{SUFFIX}", "sha256": _sha(b"shim")}
        },
        "runtime": [
            {"name": "rt__mypyc", "file": f"rt__mypyc{SUFFIX}", "sha256": _sha(b"runtime")}
        ],
    }
    return manifest, native_dir, package


@pytest.mark.parametrize("home", [False, True], ids=["wheel", "editable"])
def test_plan_loads_the_build_of_unchanged_sources(tmp_path: Path, home: bool) -> None:
    manifest, native_dir, package = _build(tmp_path, home=home)
    assert native.plan(manifest, native_dir, package) == {
        "gateway.fanout.hub": native_dir / "gateway" / "fanout" / f"hub{SUFFIX}",
        "rt__mypyc": native_dir / f"rt__mypyc{SUFFIX}",
    }


def test_a_wheels_build_serves_a_checkout_of_the_very_sources(tmp_path: Path) -> None:
    # The tests run from the checkout against the installed wheel: the checkout's
    # package comes first on sys.path, the wheel's build is found beside the wheel's.
    manifest, native_dir, package = _build(tmp_path)
    checkout = tmp_path / "checkout" / "gateway"
    shutil.copytree(package, checkout)
    assert native.plan(manifest, native_dir, checkout) == {
        "gateway.fanout.hub": native_dir / "gateway" / "fanout" / f"hub{SUFFIX}",
        "rt__mypyc": native_dir / f"rt__mypyc{SUFFIX}",
    }
    (checkout / "fanout" / "hub.py").write_bytes(b"compiled = 2\n")
    assert "gateway/fanout/hub.py changed" in str(native.plan(manifest, native_dir, checkout))


def _spoil_source(m: dict[str, Any], d: Path, p: Path) -> None:
    (p / "fanout" / "hub.py").write_bytes(b"compiled = 2\n")


def _spoil_other_source(m: dict[str, Any], d: Path, p: Path) -> None:
    # Not compiled, but imported by what is: its types and constants are in the build.
    (p / "__init__.py").write_bytes(b"LIMIT = 2\n")


def _add_source(m: dict[str, Any], d: Path, p: Path) -> None:
    (p / "fanout" / "new.py").write_bytes(b"")


def _truncate(m: dict[str, Any], d: Path, p: Path) -> None:
    (d / f"rt__mypyc{SUFFIX}").write_bytes(b"runt")


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (_spoil_source, "gateway/fanout/hub.py changed"),
        (_spoil_other_source, "gateway/__init__.py changed"),
        (_add_source, "gateway/fanout/new.py added or removed"),
        (_truncate, "compiled file of rt__mypyc is not the one built"),
        (lambda m, d, p: (d / "gateway" / "fanout" / f"hub{SUFFIX}").unlink(), "missing"),
        (lambda m, d, p: m.update(suffix=".cpython-399-x.so"), "another interpreter"),
        (lambda m, d, p: m.update(home="/somewhere/else"), "another checkout"),
        (lambda m, d, p: m.update(modules={}), "no compiled modules"),
    ],
)
@pytest.mark.parametrize("home", [False, True], ids=["wheel", "editable"])
def test_plan_refuses_what_it_cannot_vouch_for(
    tmp_path: Path, spoil: Callable[[dict[str, Any], Path, Path], None], reason: str, home: bool
) -> None:
    manifest, native_dir, package = _build(tmp_path, home=home)
    spoil(manifest, native_dir, package)
    planned = native.plan(manifest, native_dir, package)
    assert isinstance(planned, str)
    assert reason in planned


def test_the_installed_build_is_of_the_modules_pyproject_lists() -> None:
    listed = _pyproject_modules()
    directory = native.native_dir()
    if directory is None:  # built without GATEWAY_BUILD_NATIVE=1, or the compile failed
        assert not native.active()
        return
    manifest = json.loads((directory / "manifest.json").read_text())
    assert sorted(manifest["modules"]) == sorted(
        m.removesuffix(".py").replace("/", ".") for m in listed
    )
    if native.active():  # then from these very sources
        for name, digest in manifest["sources"].items():
            assert hashlib.sha256((ROOT / name).read_bytes()).hexdigest() == digest


def _pyproject_modules() -> list[str]:
    keys = pyproject()["tool"]["uv"]["cache-keys"]
    # uv rebuilds the install when the switch changes, not on every edit of a source (an
    # edited source runs as Python: the finder checks them all).
    assert {"env": "GATEWAY_BUILD_NATIVE"} in keys
    assert not any(k.get("file", "").startswith("gateway/") for k in keys)
    return compiled_modules()
