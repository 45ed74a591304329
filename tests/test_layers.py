"""The module graph of ``gateway/`` has no cycle (the layers themselves are import-linter
contracts in pyproject.toml, run by CI)."""

from __future__ import annotations

import grimp


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
