"""The compiled kernel: mypyc builds of a few of the gateway's own modules.

A build with ``GATEWAY_BUILD_NATIVE=1`` (``hatch_build.py``; CI's wheel and the
container image are built so) compiles the kernel (the fan-out engine, what it calls
per event, and the HTTP/1.1 request parser: the list is in ``pyproject.toml``, the
reasons in CONTRIBUTING.md, "Building and the compiled kernel") with mypyc and
installs it, with a manifest of the sources it was compiled from, in a
``gateway_native`` directory beside the package.  :func:`install`, run when the package
is first imported, puts a finder in front of the import system that loads those modules
from the compiled files instead of their ``.py`` sources, if:

- ``GATEWAY_PURE_PYTHON`` is not ``1`` (an import-time switch, so it is read here and
  not in :mod:`gateway.config`, which is built after these modules are imported),
- the build is this package's (:func:`plan`), and
- every ``.py`` file of the package is byte-identical to the one compiled: the compiled
  code also relies on the types and constants of the modules it imports.  All or none:
  compiled modules call into each other's classes directly, so a changed source (a
  developer's edit not yet rebuilt) makes the whole set run as Python.

The ``.py`` sources are the fallback and the only source of truth: the compiled files
are that same code, and CI runs every test both ways.  This module imports nothing of
the gateway.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

#: Set to ``1`` to run the pure-Python modules even where compiled ones are installed.
PURE_PYTHON_ENV = "GATEWAY_PURE_PYTHON"

#: How a developer rebuilds an editable install's kernel after an edit.
REBUILD = "GATEWAY_BUILD_NATIVE=1 uv sync --reinstall-package agent-gateway rebuilds it"

#: The gateway package's own directory (where the sources of the compiled modules are).
_PACKAGE = Path(__file__).resolve().parent


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules (and mypyc's runtime library) by name."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


#: Why the compiled modules are or are not in use (see :func:`status`).
_status = "not installed"
_finder: _Finder | None = None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def plan(manifest: dict[str, Any], directory: Path, package: Path) -> dict[str, Path] | str:
    """The files to load by module name, or why none: a pure function of the manifest
    and the files it names.

    ``package`` is the ``gateway`` package directory in use.  The build must be this
    package's (beside it in the same install, or made from this checkout for an editable
    install; a wheel's build serves the package beside it, or a checkout of the very
    sources it was built from that comes first on ``sys.path``, as when the tests run
    from the checkout against the installed wheel), every ``.py`` file of the package must
    be as it was compiled (the compiled code also relies on the types and constants of
    what it imports), and every compiled file as it was written."""
    suffix = manifest.get("suffix")
    if suffix not in importlib.machinery.EXTENSION_SUFFIXES:
        return f"built for another interpreter ({suffix})"
    home = manifest.get("home")
    if home is not None and Path(home) != package.parent:
        return f"built from another checkout ({home})"
    sources: dict[str, str] = manifest["sources"]
    present = {path.relative_to(package.parent).as_posix(): path for path in package.rglob("*.py")}
    if set(present) != set(sources):
        changed = sorted(set(present) ^ set(sources))
        return f"{changed[0]} added or removed since the build ({REBUILD})"
    for name, path in sorted(present.items()):
        if _sha256(path) != sources[name]:
            return f"{name} changed since the build ({REBUILD})"
    modules: dict[str, dict[str, str]] = manifest["modules"]
    if not modules:
        return "no compiled modules"
    entries = list(modules.items())
    entries += [(entry["name"], entry) for entry in manifest["runtime"]]
    files: dict[str, Path] = {}
    for name, entry in entries:
        file = directory / entry["file"]
        if not file.is_file():
            return f"compiled file missing for {name}"
        if _sha256(file) != entry["sha256"]:
            return f"compiled file of {name} is not the one built"
        files[name] = file
    return files


def native_dir(package: Path = _PACKAGE) -> Path | None:
    """Where this package's compiled build is installed, if anywhere: beside the
    package, or else the first ``gateway_native`` with a manifest on ``sys.path`` (an
    editable install's, or a wheel's when the package is imported from a checkout)."""
    beside = package.parent / "gateway_native"
    if (beside / "manifest.json").is_file():
        return beside
    for entry in sys.path:
        candidate = Path(entry or ".") / "gateway_native"
        if (candidate / "manifest.json").is_file():
            return candidate
    return None


def install() -> None:
    """Put the compiled modules in front of the import system, if they may be used.
    Idempotent; must run before any of them is imported.  Never raises: whatever goes
    wrong leaves the pure-Python modules in use, and :func:`status` says why."""
    global _status, _finder
    if _finder is not None:
        return
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        _status = f"off ({PURE_PYTHON_ENV}=1)"
        return
    try:
        directory = native_dir()
        if directory is None:
            _status = "not installed"
            return
        manifest = json.loads((directory / "manifest.json").read_text())
        planned = plan(manifest, directory, _PACKAGE)
        if isinstance(planned, str):
            _status = f"off: {planned}"
            return
        if any(name in sys.modules for name in planned):
            _status = "off: imported before the finder was installed"
            return
        finder = _Finder(planned)
        sys.meta_path.insert(0, finder)
        try:
            # The runtime library now, so a build that cannot load fails here, not at
            # the first import of the hot path.
            for name in planned:
                if not name.startswith("gateway."):
                    importlib.import_module(name)
        except BaseException:
            sys.meta_path.remove(finder)
            raise
    except Exception as exc:  # any failure: run the pure-Python modules
        _status = f"off: {type(exc).__name__}: {exc}"
        return
    _finder = finder
    _status = "on"


def status() -> str:
    """``on``, or why the compiled modules are not in use (for the startup log)."""
    return _status


def active() -> bool:
    """Whether the compiled modules are the ones imported."""
    return _finder is not None


def compiled_modules() -> list[str]:
    """The names of the modules loaded from compiled files (none when inactive)."""
    if _finder is None:
        return []
    return sorted(name for name in _finder.files if name.startswith("gateway."))
