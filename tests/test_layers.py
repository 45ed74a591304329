"""The module graph of ``gateway/`` has no cycle, and the layers import-linter checks
(pyproject.toml, run by CI) are the layers docs/architecture.md draws, every module in one."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph("gateway")
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            # ``gateway`` itself (the package's __init__) only holds the version.
            if imported == "gateway" or imported == module:
                continue
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycles.append((module, *back))
    assert cycles == []


def _table_rows() -> list[tuple[str, set[str]]]:
    """The layers of docs/architecture.md's table: each row's name and the top-level
    modules and packages its modules column names (outside parentheses)."""
    rows = []
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "---") or not line.startswith("|"):
            continue
        column = re.sub(r"\([^()]*(?:\([^()]*\)[^()]*)*\)", "", cells[1])
        names = {token.split("/")[0] for token in re.findall(r"`([^`]+)`", column)}
        rows.append((cells[0], names))
    return rows


def _contract_rows() -> list[set[str]]:
    """The rows of pyproject.toml's layers contract, as top-level names under gateway."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [layers] = [
        c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"
    ]
    return [
        {name.strip().removeprefix("gateway.") for name in re.split(r"[:|]", row)} for row in layers
    ]


def test_the_layer_contract_is_the_architecture_table() -> None:
    table = _table_rows()
    assert 0 < len(table) <= 10, [name for name, _ in table]
    assert [names for _, names in table] == _contract_rows()


def test_every_top_level_module_is_in_a_layer() -> None:
    top = {
        path.stem if path.is_file() else path.name
        for path in (ROOT / "gateway").iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        # A package of code; console/ and schemas/ hold only files the code serves.
        or (path.is_dir() and any(p.stem != "__init__" for p in path.glob("*.py")))
    }
    layered = set().union(*_contract_rows())
    assert top == layered


def test_store_modules_reach_redis_through_the_client_package_alone() -> None:
    """The Redis store modules import ``gateway.store.redis.client`` (``RedisClient`` and
    the names the package exports), none of its modules, and neither redis-py nor
    hiredis: they meet replies and Unavailable, never RESP or the error map.
    ``connection`` is exempt: it builds the client's parts (the pool, the boundary that
    maps every failure, the dial, the pipelined connection)."""
    graph = grimp.build_graph("gateway", include_external_packages=True)
    client = "gateway.store.redis.client"
    store = {
        module
        for module in graph.modules
        if module.startswith("gateway.store.redis.")
        and module != client
        and not module.startswith(client + ".")
        and module != "gateway.store.redis.connection"
    }
    assert "gateway.store.redis.live" in store and "gateway.store.redis.feeds" in store
    reached = sorted(
        (module, imported)
        for module in store
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith(client + ".") or imported.split(".")[0] in ("redis", "hiredis")
    )
    assert reached == []
