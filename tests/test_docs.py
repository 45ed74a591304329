"""The README documents every setting and every metric the code defines."""

from __future__ import annotations

from pathlib import Path

from gateway.config import ENV_ONLY, SETTINGS_HELP, env_name, flag_name
from gateway.metrics import Metrics

README = (Path(__file__).parent.parent / "README.md").read_text()


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
