"""The package's declared dependencies are the ones its code imports.

Every third-party module that ``gateway/`` imports belongs to a distribution named in
``pyproject.toml`` (``dependencies``, or an extra for the optional parts), and every
runtime dependency is imported: a dependency that only a tool or a test needs belongs
to the ``dev`` group.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys

from tests.support.project import ROOT, pyproject


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return _normal(match.group())


def imported_modules(sources: dict[str, str]) -> dict[str, set[str]]:
    """The top-level modules ``sources`` (path to text) import absolutely, each with the
    paths that import it: the standard library's and the gateway's own left out."""
    found: dict[str, set[str]] = {}
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top != "gateway" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(path)
    return found


def _gateway_imports() -> dict[str, set[str]]:
    return imported_modules(
        {
            path.relative_to(ROOT).as_posix(): path.read_text()
            for path in sorted((ROOT / "gateway").rglob("*.py"))
        }
    )


def test_imported_modules_finds_absolute_third_party_imports() -> None:
    source = "import os, a.b\nfrom c.d import e\nfrom . import f\nfrom gateway import g\n"
    assert imported_modules({"x.py": source}) == {"a": {"x.py"}, "c": {"x.py"}}


def test_every_imported_distribution_is_declared() -> None:
    project = pyproject()["project"]
    declared = {_requirement_name(r) for r in project["dependencies"]}
    for extra in project.get("optional-dependencies", {}).values():
        declared |= {_requirement_name(r) for r in extra}
    owners = importlib.metadata.packages_distributions()
    undeclared = {}
    for module, paths in _gateway_imports().items():
        distributions = {_normal(d) for d in owners.get(module, [])}
        assert distributions, f"{module} (imported by {sorted(paths)}) is not installed"
        if not distributions & declared:
            undeclared[module] = sorted(paths)
    assert undeclared == {}


def test_every_runtime_dependency_is_imported() -> None:
    owners = importlib.metadata.packages_distributions()
    imported = {_normal(d) for module in _gateway_imports() for d in owners.get(module, [])}
    unused = [
        r for r in pyproject()["project"]["dependencies"] if _requirement_name(r) not in imported
    ]
    assert unused == []
