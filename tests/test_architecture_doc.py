"""docs/architecture.md cites only code that exists: every backquoted module path
(``fanout/hub.py``, ``wire/format``, ``agui/``), module name of the layer table
(``h1``, ``pipelined``), class or constant (``SocketWriter``, ``RUN_A2UI_WS``) and dotted
citation (``store/hold.HoldPolicy``, ``Hub.on_items``, ``resume.plan``) names a file under
gateway/ and, when dotted, a name defined there (not merely imported).

The patterns resolved are the ones the document uses; other backquoted text (routes,
commands, settings, frame and format names) is not code and is passed over.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gateway"
DOC = ROOT / "docs" / "architecture.md"

#: Backquoted text shaped like a citation that names no code of the gateway: the
#: protocol's name, an HTTP field, a socket option.
NOT_CODE = frozenset({"gateway.v1", "Authorization", "SO_RCVLOWAT"})
_IDENT = r"[A-Za-z_]\w*"
_DOTTED = re.compile(rf"{_IDENT}(?:\.{_IDENT})+")
_PATH = re.compile(rf"(?:{_IDENT}/)+(?:{_IDENT}(?:\.{_IDENT})*)?")
_CONSTANT_OR_CLASS = re.compile(r"[A-Z]\w*")


class _Index:
    """What gateway/ defines: its files, modules by base name, and the names each
    module and class defines."""

    def __init__(self) -> None:
        self.modules: dict[str, list[Path]] = defaultdict(list)
        self.classes: dict[str, list[set[str]]] = defaultdict(list)
        self.module_names: dict[Path, set[str]] = {}
        for path in sorted(PACKAGE.rglob("*.py")):
            self.modules[path.stem].append(path)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            self.module_names[path] = _defined(tree.body)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    self.classes[node.name].append(_members(node))
        self.packages = {p.name for p in PACKAGE.rglob("*") if p.is_dir()}

    def module_file(self, dotted_path: str) -> Path | None:
        """``wire/format`` or ``fanout/hub.py`` as gateway/'s file (a package's
        ``__init__``), or None."""
        base = PACKAGE / dotted_path
        for candidate in (base, base.with_name(base.name + ".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def path_exists(self, path: str) -> bool:
        """``store/redis/feed.lua``, ``agui/``: a file or package under gateway/; a
        package path cited inside its parent's parentheses (``client/`` of
        ``store/redis/``) may start from any package."""
        relative = path.rstrip("/")
        return any(
            (base / relative).exists()
            for base in (PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir()))
        )


def _defined(body: list[ast.stmt]) -> set[str]:
    """The names a module or class body defines (functions, classes, assignments)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _members(cls: ast.ClassDef) -> set[str]:
    """A class's members: its body's names, its ``__slots__`` and the attributes its
    methods assign on ``self``."""
    names = _defined(cls.body)
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names.update(
                e.value
                for e in ast.walk(node.value)
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                names.add(target.attr)
    return names


@cache
def index() -> _Index:
    return _Index()


def _name_defined(owner: str, name: str) -> bool:
    """``name`` is defined by the module whose base name is ``owner`` (``resume``,
    ``websocket``) or by a class named ``owner`` (``Hub``)."""
    found = index()
    if any(name in found.module_names[path] for path in found.modules.get(owner, [])):
        return True
    return any(name in members for members in found.classes.get(owner, []))


def _resolves(citation: str, in_table: bool) -> bool | None:
    """Whether a backquoted citation names existing code; None when it is not a
    citation of code (a route, a command, a frame's name)."""
    found = index()
    text = citation.split("(", 1)[0]  # ``FoldCache.prelude(..., kind)``
    if text in NOT_CODE or text.startswith(("docs/", "/")) or " " in text or "=" in text:
        return None
    if (ROOT / text).is_file() and "/" not in text:
        return True  # a file of the repository's root (pyproject.toml, hatch_build.py)
    if "/" in text:
        if _PATH.fullmatch(text) is None:
            return None
        if found.path_exists(text) or found.module_file(text) is not None:
            return True
        # ``store/hold.HoldPolicy``: a module, then a name it defines.
        head, _, last = text.rpartition("/")
        module, _, name = last.partition(".")
        path = found.module_file(f"{head}/{module}")
        return path is not None and bool(name) and name in found.module_names[path]
    if text.endswith(".py"):
        stem = text.removesuffix(".py")
        return stem in found.modules if re.fullmatch(_IDENT, stem) else None
    if _DOTTED.fullmatch(text):
        owner, _, rest = text.partition(".")
        return _name_defined(owner, rest.split(".")[0])
    if re.fullmatch(_IDENT, text) is None:
        return None
    if _CONSTANT_OR_CLASS.fullmatch(text):
        if text in found.classes:
            return True
        return any(text in names for names in found.module_names.values())
    if in_table:
        # The layer table's module column: a module or a package of gateway/.
        return text in found.modules or text in found.packages
    return None


def false_citations(markdown: str) -> list[str]:
    """The backquoted citations of code in ``markdown`` that name nothing in gateway/."""
    false: list[str] = []
    for line in markdown.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        table_modules = line.startswith("|") and len(cells) == 3 and cells[0] != "layer"
        for span in re.findall(r"`([^`\n]+)`", line):
            in_table = table_modules and f"`{span}`" in cells[1]
            if _resolves(span, in_table) is False:
                false.append(span)
    return false


def test_every_citation_of_architecture_md_names_existing_code() -> None:
    assert false_citations(DOC.read_text(encoding="utf-8")) == []


def test_the_document_cites_code_of_every_pattern() -> None:
    """The patterns above are the document's: each resolves at least once (a pattern
    that resolves nothing would check nothing)."""
    text = DOC.read_text(encoding="utf-8")
    spans = re.findall(r"`([^`\n]+)`", text)
    for example in (
        "fanout/hub.py",
        "wire/format",
        "agui/",
        "store/hold.HoldPolicy",
        "Hub.on_items",
        "LiveFeed.read_new",
        "resume.plan",
        "SocketWriter",
    ):
        assert example in spans
        assert _resolves(example, in_table=False) is True


GOOD_ROW = "| pure core | `wire/` (`format`, `messages`), `validate` | formats |"


@pytest.mark.parametrize(
    ("text", "false"),
    [
        ("read in `fanout/hub.py` and `store/redis/feed.lua`", []),
        ("read in `fanout/nosuch.py`", ["fanout/nosuch.py"]),
        ("the package `nosuch/`", ["nosuch/"]),
        ("the module `wire/nosuch`", ["wire/nosuch"]),
        ("policy `store/hold.HoldPolicy`", []),
        ("policy `store/hold.NoSuchPolicy`", ["store/hold.NoSuchPolicy"]),
        ("policy `store/nosuch.HoldPolicy`", ["store/nosuch.HoldPolicy"]),
        ("`Hub.on_items` and `Format.frame` and `FoldCache.prelude(..., kind)`", []),
        ("`Hub.no_such_method`", ["Hub.no_such_method"]),
        ("`NoSuchClass.run`", ["NoSuchClass.run"]),
        ("`resume.plan` and `websocket.TERMS`", []),
        ("`resume.no_such_plan`", ["resume.no_such_plan"]),
        ("`SocketWriter` and `RUN_A2UI_WS`", []),
        ("`NoSuchWriter`", ["NoSuchWriter"]),
        ("`session.py` and `pyproject.toml`", []),
        ("`nosuch.py`", ["nosuch.py"]),
        (GOOD_ROW, []),
        (GOOD_ROW.replace("`messages`", "`ws`"), ["ws"]),
        (GOOD_ROW.replace("`validate`", "`nosuch`"), ["nosuch"]),
        # Not code: routes, commands, the protocol's name, a frame's name in prose.
        ("`POST /v1/ws`, `gateway serve`, `gateway.v1`, `subscribed`", []),
    ],
)
def test_false_citations_are_found(text: str, false: list[str]) -> None:
    assert false_citations(text) == false
