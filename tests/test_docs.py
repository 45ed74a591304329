"""The README documents every setting and every metric the code defines; every contract
rule the code cites is in docs/contract.md."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.config import ENV_ONLY, SETTINGS_HELP, env_name, flag_name
from gateway.metrics import Metrics

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def test_every_setting_is_in_the_readme() -> None:
    for name in SETTINGS_HELP:
        assert name in ENV_ONLY or f"`{flag_name(name)}`" in README, name
        assert f"`{env_name(name)}`" in README, name


def test_every_metric_is_in_the_readme() -> None:
    names = {m.name for m in Metrics().registry.collect()}
    assert names, "no metrics defined"
    for name in names:
        # prometheus_client reports counters without _total and info without _info.
        documented = (
            f"`{name}`" in README or f"`{name}_total`" in README or f"`{name}_info`" in README
        )
        assert documented, name


def test_settings_table_is_generated_from_the_code() -> None:
    import importlib.util

    path = Path(__file__).parent.parent / "scripts" / "gen_settings_doc.py"
    spec = importlib.util.spec_from_file_location("gen_settings_doc", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render(README) == README


def _contract_rules() -> set[str]:
    """Every rule of docs/contract.md: ``D7b``, and ``D7b.3`` for its third item."""
    rules: set[str] = set()
    section = None
    for line in (ROOT / "docs" / "contract.md").read_text().splitlines():
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
        for match in re.finditer(r"\bD\d+b?(?:\.\d+)?\b", path.read_text()):
            cited.setdefault(match.group(0), []).append(str(path.relative_to(ROOT)))
    assert cited, "the code cites the contract"
    missing = {rule: where for rule, where in cited.items() if rule not in rules}
    assert missing == {}
