"""The compiled hot path: mypyc builds of a few of the gateway's own modules.

The build (``hatch_build.py``) compiles the modules of the fan-out's hot path (the hub,
subscriptions, outboxes, the Redis live path) with mypyc and installs them, with a
manifest of the sources they were compiled from, in a ``gateway_native`` directory
beside the package.  :func:`install`, run when the package is first imported, puts a
finder in front of the import system that loads those modules from the compiled files
instead of their ``.py`` sources, if:

- ``GATEWAY_PURE_PYTHON`` is not ``1`` (an import-time switch, so it is read here and
  not in :mod:`gateway.config`, which is built after these modules are imported), and
- every compiled module's source is byte-identical to the one it was compiled from.
  All or none: compiled modules call into each other's classes directly, so a changed
  source (a developer's edit not yet rebuilt) makes the whole set run as Python.

The ``.py`` sources are the fallback and the only source of truth: the compiled files
are that same code, and CI runs every test both ways.  This module imports nothing of
the gateway.
"""

from __future__ import annotations

import hashlib
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


def plan(manifest: dict[str, Any], native_dir: Path, package: Path) -> dict[str, Path] | str:
    """The files to load by module name, or why none: a pure function of the manifest
    and the files it names."""
    suffix = manifest.get("suffix")
    if suffix not in importlib.machinery.EXTENSION_SUFFIXES:
        return f"built for another interpreter ({suffix})"
    files: dict[str, Path] = {}
    modules: dict[str, dict[str, str]] = manifest.get("modules", {})
    if not modules:
        return "no compiled modules"
    for name, entry in modules.items():
        source = package.parent / entry["source"]
        try:
            digest = hashlib.sha256(source.read_bytes()).hexdigest()
        except OSError:
            return f"source of {name} not found"
        if digest != entry["sha256"]:
            return f"{entry['source']} changed since it was compiled (uv sync rebuilds it)"
        files[name] = native_dir / entry["file"]
    for runtime in manifest.get("runtime", []):
        files[runtime["name"]] = native_dir / runtime["file"]
    missing = [name for name, file in files.items() if not file.is_file()]
    if missing:
        return f"compiled file missing for {missing[0]}"
    return files


def native_dir() -> Path | None:
    """Where the compiled build is installed (the first ``gateway_native`` with a
    manifest on ``sys.path``), if anywhere."""
    for entry in sys.path:
        candidate = Path(entry or ".") / "gateway_native"
        if (candidate / "manifest.json").is_file():
            return candidate
    return None


def install() -> None:
    """Put the compiled modules in front of the import system, if they may be used.
    Idempotent; must run before any of them is imported."""
    global _status, _finder
    if _finder is not None:
        return
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        _status = f"off ({PURE_PYTHON_ENV}=1)"
        return
    directory = native_dir()
    if directory is None:
        _status = "not installed"
        return
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
        planned = plan(manifest, directory, _PACKAGE)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        planned = f"unreadable manifest ({exc})"
    if isinstance(planned, str):
        _status = f"off: {planned}"
        return
    if any(name in sys.modules for name in planned):
        _status = "off: imported before the finder was installed"
        return
    _finder = _Finder(planned)
    sys.meta_path.insert(0, _finder)
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
