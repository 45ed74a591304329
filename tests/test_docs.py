"""The docs say what the code does, and hold together.

The reference under ``docs/`` documents every setting, route, error code and metric the
code defines, and nothing the code no longer has; every contract rule the code cites is
in docs/contract.md; README.md stays a front door that links to the reference; relative
links and repository paths in the docs resolve; code examples parse and import what
exists; and product docs speak of the product, not of its development history.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import shutil
import subprocess
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from gateway import errors
from gateway.config import ENV_ONLY, SETTINGS_HELP, env_name, flag_name
from gateway.http.routes import ROUTES
from gateway.metrics import Metrics
from gateway.store.redis.settings import PARAMETERS

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
#: The front door's budget: what it is, how to run it, one example per client, links.
README_MAX_BYTES = 12 * 1024


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def all_docs() -> list[Path]:
    """Every Markdown document of the repository a reader is pointed at."""
    found = [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]
    found += [ROOT / "deploy" / "README.md", ROOT / "helm" / "gateway" / "README.md"]
    return found


def product_docs() -> list[Path]:
    """README.md and docs/**/*.md but the benchmark log: what describes the product."""
    return [README, *(p for p in sorted(DOCS.rglob("*.md")) if p.name != "benchmarks.md")]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def without_code(markdown: str) -> str:
    """``markdown`` with fenced blocks and inline code blanked (links in code are not links)."""
    markdown = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "``", markdown)


def code_blocks(markdown: str, languages: Iterable[str]) -> Iterator[str]:
    wanted = "|".join(re.escape(lang) for lang in languages)
    for found in re.finditer(rf"^```(?:{wanted})\n(.*?)^```", markdown, flags=re.S | re.M):
        yield found.group(1)


def table_rows(markdown: str) -> Iterator[list[str]]:
    """The cells of every Markdown table row (``\\|`` inside a cell is kept as ``|``)."""
    for line in markdown.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            yield [c.strip().replace("\\|", "|") for c in cells]


# ---------------------------------------------------------------------------
# Settings


def gen_settings_doc() -> ModuleType:
    path = ROOT / "scripts" / "gen_settings_doc.py"
    spec = importlib.util.spec_from_file_location("gen_settings_doc", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_is_in_the_settings_doc() -> None:
    doc = text(DOCS / "settings.md")
    for name in SETTINGS_HELP:
        assert name in ENV_ONLY or f"`{flag_name(name)}`" in doc, name
        assert f"`{env_name(name)}`" in doc, name


def test_settings_table_is_generated_from_the_code() -> None:
    module = gen_settings_doc()
    assert module.TARGET == DOCS / "settings.md"
    doc = text(DOCS / "settings.md")
    assert module.BEGIN in doc and module.END in doc
    assert module.render(doc) == doc, "stale: run uv run python scripts/gen_settings_doc.py"


def test_every_redis_url_parameter_is_documented() -> None:
    doc = text(DOCS / "settings.md")
    section = doc[doc.index("### Query parameters") :]
    section = section[: section.index("\n#")]
    documented = {m.group(1) for row in table_rows(section) if (m := re.match(r"`(\w+)=", row[0]))}
    assert documented == set(PARAMETERS)


# ---------------------------------------------------------------------------
# Metrics


def test_every_metric_is_documented_and_nothing_else() -> None:
    doc = text(DOCS / "metrics.md")
    names = {m.name for m in Metrics().registry.collect()}
    assert names, "no metrics defined"
    for name in names:
        # prometheus_client reports counters without _total and info without _info.
        documented = f"`{name}`" in doc or f"`{name}_total`" in doc or f"`{name}_info`" in doc
        assert documented, name
    exported = names | {f"{n}_total" for n in names} | {f"{n}_info" for n in names}
    for row in table_rows(doc):
        for name in re.findall(r"`(gateway_\w+)`", row[0]):
            assert name in exported, f"docs/metrics.md documents {name}, which is gone"


def test_the_route_label_lists_every_route() -> None:
    doc = text(DOCS / "metrics.md")
    row = next(r for r in table_rows(doc) if r[0] == "`gateway_http_requests_total`")
    listed = set(re.findall(r"`(\w+)`", row[2]))
    assert {r.name for r in ROUTES} | {"other"} <= listed
    assert listed - {"route", "status"} <= {r.name for r in ROUTES} | {"other"}


# ---------------------------------------------------------------------------
# Routes

SCOPES = {"`subscribe`", "`publish`", "none"}


def documented_routes() -> dict[tuple[str, str], str]:
    """``(method, path) -> scope`` of every row of docs/routes.md's route table."""
    routes: dict[tuple[str, str], str] = {}
    for row in table_rows(text(DOCS / "routes.md")):
        found = re.fullmatch(r"`([A-Z]+) (/\S*)`", row[0])
        if found:
            key = (found.group(1), found.group(2))
            assert key not in routes, f"documented twice: {key}"
            routes[key] = row[1]
    return routes


def test_every_route_is_documented_and_nothing_else() -> None:
    served = {(method, route.template) for route in ROUTES for method in route.methods}
    assert served, "no routes"
    assert set(documented_routes()) == served


def test_every_route_says_its_scope() -> None:
    public = {route.template for route in ROUTES if route.public}
    for (method, path), scope in documented_routes().items():
        assert scope in SCOPES, (method, path, scope)
        assert (scope == "none") == (path in public), (method, path, scope)
        if scope == "`publish`":
            assert method == "POST", (method, path)


# ---------------------------------------------------------------------------
# Errors


def error_classes() -> list[type[errors.GatewayError]]:
    found: list[type[errors.GatewayError]] = []
    todo: list[type[errors.GatewayError]] = [errors.GatewayError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def documented_errors() -> set[tuple[int, str]]:
    rows = set()
    for row in table_rows(text(DOCS / "errors.md")):
        if re.fullmatch(r"\d{3}", row[0]) and (code := re.fullmatch(r"`(\w+)`", row[1])):
            rows.add((int(row[0]), code.group(1)))
    return rows


def test_every_error_code_is_documented_with_its_status() -> None:
    documented = documented_errors()
    codes = {code for _, code in documented}
    assert codes == {str(code) for code in errors.ErrorCode}
    for cls in error_classes():
        assert (cls.status, str(cls.code)) in documented, cls.__name__


def test_every_close_code_the_gateway_sends_is_in_the_protocol() -> None:
    table = {
        row[0] for row in table_rows(text(DOCS / "protocol.md")) if re.fullmatch(r"\d{4}", row[0])
    }
    sent = set()
    for path in (ROOT / "gateway").rglob("*.py"):
        sent |= set(re.findall(r"\bCloseCode\.([A-Z_]+)\b", text(path)))
    assert sent, "the gateway sends close codes"
    for name in sent:
        assert str(errors.CloseCode[name].value) in table, name


# ---------------------------------------------------------------------------
# The contract


def _contract_rules() -> set[str]:
    """Every rule of docs/contract.md: ``D7b``, and ``D7b.3`` for its third item."""
    rules: set[str] = set()
    section = None
    for line in text(DOCS / "contract.md").splitlines():
        heading = re.match(r"^## (D\d+b?)\. ", line)
        if heading:
            section = heading.group(1)
            rules.add(section)
            continue
        item = re.match(r"^(\d+)\. ", line)
        if item and section is not None:
            rules.add(f"{section}.{item.group(1)}")
    return rules


def test_every_rule_the_code_cites_is_in_the_contract() -> None:
    rules = _contract_rules()
    assert {"D1.1", "D9.5", "D11"} <= rules  # the parser reads the document's shape
    cited: dict[str, list[str]] = {}
    for path in sorted((ROOT / "gateway").rglob("*")):
        if path.suffix not in {".py", ".lua", ".js"}:
            continue
        for match in re.finditer(r"\bD\d+b?(?:\.\d+)?\b", text(path)):
            cited.setdefault(match.group(0), []).append(rel(path))
    assert cited, "the code cites the contract"
    missing = {rule: where for rule, where in cited.items() if rule not in rules}
    assert missing == {}


# ---------------------------------------------------------------------------
# The README


def test_the_readme_is_a_front_door() -> None:
    readme = text(README)
    size = len(readme.encode())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes (at most {README_MAX_BYTES})"
    for heading in ("## Quick start", "## Reference"):
        assert heading in readme, heading


def test_the_readme_links_every_reference_doc() -> None:
    linked = set(re.findall(r"\]\(([^)#\s]+)", without_code(text(README))))
    for path in sorted(DOCS.rglob("*.md")):
        assert rel(path) in linked, f"README.md does not link {rel(path)}"
    assert "CONTRIBUTING.md" in linked


# ---------------------------------------------------------------------------
# Links and paths


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to -."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M).splitlines():
        heading = re.match(r"^#{1,6} (.+)$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_slug_follows_github() -> None:
    assert slug("7. Connection limits") == "7-connection-limits"
    assert slug("1. No `(epoch, offset)` with 2 payloads") == "1-no-epoch-offset-with-2-payloads"
    assert slug("Publish and follow: curl") == "publish-and-follow-curl"
    assert slug("2.2 Server to client") == "22-server-to-client"
    assert slug("D4. Publishing") == "d4-publishing"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def links(markdown: str) -> Iterator[str]:
    for found in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", without_code(markdown)):
        yield found.group(1)


@pytest.mark.parametrize("doc", all_docs(), ids=rel)
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in links(text(doc)):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        resolved = (doc.parent / path).resolve() if path else doc
        if not resolved.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor:
            if resolved.suffix != ".md":
                broken.append(f"{target}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(text(resolved)):
                broken.append(f"{target}: no such heading")
    assert broken == [], f"{rel(doc)}: {broken}"


#: A repository path in backticks: ``gateway/...``, ``tests/...``, ...
REPO_PATH = re.compile(
    r"`((?:gateway|tests|scripts|bench|deploy|helm|grafana|docs)/[\w./-]*?)(?:::\w+)?`"
)


#: Paths a document names that a run creates (not in a fresh clone).
MADE_BY_RUNS = {"bench/results.jsonl"}


@pytest.mark.parametrize("doc", all_docs(), ids=rel)
def test_repository_paths_exist(doc: Path) -> None:
    # From the repository's root, or (deploy/README.md) from the document's directory.
    gone = [
        p
        for p in REPO_PATH.findall(text(doc))
        if not (ROOT / p).exists() and not (doc.parent / p).exists() and p not in MADE_BY_RUNS
    ]
    assert gone == [], f"{rel(doc)} names paths that do not exist: {gone}"


# ---------------------------------------------------------------------------
# Code examples


def python_blocks() -> Iterator[tuple[Path, str]]:
    for doc in all_docs():
        for block in code_blocks(text(doc), ["python"]):
            yield doc, block


def test_python_examples_parse_and_import_what_exists() -> None:
    blocks = list(python_blocks())
    assert any(doc == README for doc, _ in blocks), "the README has a Python example"
    for doc, block in blocks:
        tree = compile(block, rel(doc), "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gateway"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{rel(doc)}: {node.module}.{alias.name}"


def test_javascript_examples_parse(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None, "Node 20+ is needed (scripts/test installs it)"
    blocks = [(doc, b) for doc in all_docs() for b in code_blocks(text(doc), ["js"])]
    assert any(doc == README for doc, _ in blocks), "the README has JavaScript examples"
    for i, (doc, block) in enumerate(blocks):
        path = tmp_path / f"example{i}.mjs"
        path.write_text(block)
        checked = subprocess.run(
            [node, "--check", str(path)], capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 0, f"{rel(doc)}:\n{block}\n{checked.stderr}"


# ---------------------------------------------------------------------------
# No development history in product docs

#: What development history looks like where the product should speak: issue and pull
#: request references, and work sessions, waves, sprints or dates of development.
HISTORY = [
    re.compile(r"\b(?:issues?|PRs?|pull requests?|tickets?)\s*#?\d+", re.I),
    re.compile(r"(?<![\w&/#])#\d+\b(?![-\w])"),
    re.compile(r"\b(?:sessions?|sprints?|waves?)\s+\d+\b", re.I),
    re.compile(
        r"\b(?:this|last|previous|next|earlier|later|current|today's|yesterday's)\s+"
        r"(?:session|sprint|wave)\b",
        re.I,
    ),
    re.compile(r"\b(?:first|second|third|fourth|fifth|sixth)\s+(?:session|sprint|wave)\b", re.I),
    re.compile(r"\bsession\s+(?:of|on)\s+\d", re.I),
    re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    re.compile(
        r"\b(?:as of|since|until|in|on)\s+(?:\d{1,2}\s+)?(?:January|February|March|April|May|"
        r"June|July|August|September|October|November|December)\s+(?:\d{1,2},?\s+)?20\d\d\b"
    ),
]


def history_references(source: str) -> list[str]:
    """The passages of ``source`` that read as development history, not product text.

    Works on any text (Markdown, or a Python module's comments and docstrings)."""
    found: list[str] = []
    for pattern in HISTORY:
        found += [m.group(0) for m in pattern.finditer(source)]
    return found


@pytest.mark.parametrize(
    ("passage", "history"),
    [
        ("the linger's bound (issue 17)", True),
        ("see #42 for the reasoning", True),
        ("fixed in PR 12", True),
        ("measured this session", True),
        ("what changed in session 3", True),
        ("the second wave of fixes", True),
        ("wave 2 of the rewrite", True),
        ("the numbers of 2025-06-18", True),
        ("as of March 2025 the gateway", True),
        ("the WebSocket session and its frames", False),
        ("a session's state machine", False),
        ("RFC 6455 §4.2 and RFC 9112", False),
        ("a cursor `1796063418870:1`", False),
        ("[errors](errors.md#4-retries)", False),
        ("`Retry-After` in whole seconds", False),
        ("the seed's Phase 2 text", False),
        ("retried by the next round", False),
        ("pipelined publishes ran in lock-step waves", False),
        ("see (#12)", True),
        ("[the limits](#7-connection-limits)", False),
    ],
)
def test_history_detector(passage: str, history: bool) -> None:
    assert bool(history_references(passage)) == history, passage


def commentary(source: str) -> str:
    """The comments and docstrings of a Python module's ``source``, one per line: what
    :func:`history_references` reads in code (string literals are data, not prose)."""
    parts = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                parts.append(doc)
    return "\n".join(parts)


def gateway_sources() -> list[Path]:
    """The package's modules, for checking their commentary like the product docs:
    ``history_references(commentary(text(path)))`` for each."""
    return sorted((ROOT / "gateway").rglob("*.py"))


def test_commentary_is_comments_and_docstrings() -> None:
    source = (
        '"""A module (issue 3)."""\n'
        "KEY = '#12'  # a data value above, a comment here (session 4)\n"
        "def f() -> None:\n"
        '    """Does f, this session."""\n'
    )
    found = history_references(commentary(source))
    assert found == ["issue 3", "session 4", "this session"], found
    assert gateway_sources(), "the package has modules"


def code_sources() -> list[Path]:
    """The modules whose commentary must speak of the product: the package, the tests,
    the scripts and the benchmarks."""
    return gateway_sources() + sorted(
        path
        for folder in ("tests", "scripts", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if "node_modules" not in path.parts  # npm packages installed for the JS tests, peers
    )


@pytest.mark.parametrize("source", code_sources(), ids=rel)
def test_code_speaks_of_the_product(source: Path) -> None:
    assert history_references(commentary(text(source))) == []


@pytest.mark.parametrize("doc", product_docs(), ids=rel)
def test_product_docs_speak_of_the_product(doc: Path) -> None:
    assert history_references(text(doc)) == []


def test_docs_are_checked_where_they_are() -> None:
    """The lists the tests above walk are the files that exist (a moved doc is noticed)."""
    for doc in all_docs():
        assert doc.is_file(), rel(doc)
    assert (DOCS / "protocol.md").is_file() and (DOCS / "dialects").is_dir()
