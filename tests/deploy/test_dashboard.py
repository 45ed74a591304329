"""The Grafana dashboard (grafana/gateway.json) and the chart's alert rules.

* every metric they query is exported by a running gateway node (scraped over HTTP), and
  every label they match or group by is one that metric carries;
* every query is valid PromQL (promql-parser, Prometheus' grammar), once Grafana's
  variables are replaced by values of the right kind;
* the data source is the ``${datasource}`` variable everywhere, so that the same file works
  provisioned (deploy/compose.yaml) and imported by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import promql_parser
import pytest
import yaml
from httpx_sse import aconnect_sse
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import Gateway
from tests.support import events as ev
from tests.support.node import auth, start_node
from tests.support.wait import until

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "grafana" / "gateway.json"
ALERTS = ROOT / "helm" / "gateway" / "files" / "alerts.yaml"

#: Series that Prometheus makes itself, not the gateway.
PROMETHEUS_SERIES = frozenset(
    {
        "up",
        "scrape_duration_seconds",
        "scrape_samples_scraped",
        "scrape_samples_post_metric_relabeling",
        "scrape_series_added",
        "ALERTS",
        "ALERTS_FOR_STATE",
    }
)
#: Labels that the scrape adds (static configs, Kubernetes service discovery).
TARGET_LABELS = frozenset(
    {"job", "instance", "pod", "namespace", "service", "container", "endpoint", "node"}
)
#: Grafana's built-in variables, replaced by a duration when a query is parsed.
GRAFANA_DURATIONS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "__range_s": "3600",
    "__interval_ms": "15000",
    "__range_ms": "3600000",
}
VARIABLE = re.compile(r"\$\{(\w+)(?::[\w]+)?\}|\$(\w+)|\[\[(\w+)(?::[\w]+)?\]\]")
LABEL_VALUES = re.compile(r"^\s*label_values\((?:(.*),)?\s*(\w+)\s*\)\s*$", re.S)

#: What the dashboard must show: losing a panel fails test_dashboard_covers_...
REQUIRED_METRICS = frozenset(
    {
        "gateway_connections",
        "gateway_subscriptions",
        "gateway_published_items_total",
        "gateway_items_read_total",
        "gateway_frames_sent_total",
        "gateway_bytes_sent_total",
        "gateway_delivery_lag_seconds_bucket",
        "gateway_fanout_seconds_bucket",
        "gateway_slow_consumer_actions_total",
        "gateway_buffered_bytes",
        "gateway_resumes_total",
        "gateway_epoch_restarts_total",
        "gateway_redis_command_seconds_bucket",
        "gateway_redis_errors_total",
        "gateway_publish_rejections_total",
        "gateway_limited_total",
        "gateway_ready",
    }
)


# ---------------------------------------------------------------------------
# Reading the dashboard and the rules
# ---------------------------------------------------------------------------


def load_dashboard() -> dict[str, Any]:
    value: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return value


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside (collapsed) rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def variables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = dashboard.get("templating", {}).get("list", [])
    return listed


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable's series selector."""
    queries: list[tuple[str, str]] = []
    for panel in iter_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            where = f"panel {panel.get('title')!r} target {target.get('refId')}"
            queries.append((where, target["expr"]))
    for var in variables(dashboard):
        if var.get("type") != "query":
            continue
        query = var["query"]
        text = query["query"] if isinstance(query, dict) else query
        match = LABEL_VALUES.match(text)
        if match is None:  # a plain PromQL query variable
            queries.append((f"variable {var['name']}", text))
        elif match.group(1):
            queries.append((f"variable {var['name']}", match.group(1)))
    return queries


def alert_rules() -> list[dict[str, Any]]:
    if not ALERTS.exists():
        return []
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alert_queries() -> list[tuple[str, str]]:
    return [
        (f"rule {rule.get('alert') or rule.get('record')}", str(rule["expr"]))
        for rule in alert_rules()
    ]


def all_queries() -> list[tuple[str, str]]:
    return dashboard_queries(load_dashboard()) + alert_queries()


def substitute(expr: str, defined: set[str]) -> str:
    """Replace Grafana variables by values that keep the PromQL well-formed.

    Dashboard variables only appear inside label matchers (``instance=~"$instance"``), where
    any regular expression will do; built-in interval variables become durations.  A
    variable the dashboard does not define raises ``KeyError``.
    """

    def value(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name in GRAFANA_DURATIONS:
            return GRAFANA_DURATIONS[name]
        if name in defined:
            return ".+"
        raise KeyError(f"undefined variable ${name}")

    return VARIABLE.sub(value, expr)


def parse(expr: str, defined: set[str]) -> promql_parser.Expr:
    return promql_parser.parse(substitute(expr, defined))


def selectors(expr: promql_parser.Expr) -> list[promql_parser.VectorSelector]:
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(expr, visit)
    return found


def metric_name(selector: promql_parser.VectorSelector) -> str:
    """The selector's metric name; a regex on ``__name__`` is refused (it cannot be checked)."""
    if selector.name:
        return str(selector.name)
    for matcher in selector.matchers.matchers:
        if matcher.name == "__name__" and matcher.op == promql_parser.MatchOp.Equal:
            return str(matcher.value)
    raise AssertionError(f"selector without a fixed metric name: {selector}")


def defined_variables(dashboard: dict[str, Any]) -> set[str]:
    return {var["name"] for var in variables(dashboard)}


def queried_metrics(queries: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Metric name -> where it is queried, over ``queries`` ((where, PromQL) pairs)."""
    defined = defined_variables(load_dashboard())
    recorded = {rule["record"] for rule in alert_rules() if "record" in rule}
    used: dict[str, list[str]] = {}
    for where, expr in queries:
        for selector in selectors(parse(expr, defined)):
            name = metric_name(selector)
            if name not in recorded:
                used.setdefault(name, []).append(where)
    return used


# ---------------------------------------------------------------------------
# (b) PromQL
# ---------------------------------------------------------------------------


def test_every_query_is_valid_promql() -> None:
    dashboard = load_dashboard()
    defined = defined_variables(dashboard)
    queries = all_queries()
    assert len(queries) >= 20, "the dashboard lost its queries"
    errors = []
    for where, expr in queries:
        try:
            parse(expr, defined)
        except (ValueError, KeyError) as exc:
            errors.append(f"{where}: {exc}\n    {expr}")
    assert not errors, "invalid queries:\n" + "\n".join(errors)


def test_the_variable_substitution_catches_broken_queries() -> None:
    """The parser the tests rely on refuses what Prometheus refuses (and undefined variables)."""
    defined = {"instance"}
    parse('rate(x_total{instance=~"$instance"}[$__rate_interval])', defined)
    for bad in (
        "sum(rate(x_total[$__rate_interval])",  # unbalanced
        "histogram_quantile(0.99, sum by (le) rate(x_bucket[5m]))",  # no parentheses
        'x{instance=~"$pod"}',  # undefined variable
    ):
        with pytest.raises((ValueError, KeyError)):
            parse(bad, defined)


def test_histogram_quantiles_aggregate_by_le() -> None:
    """histogram_quantile over buckets keeps ``le``, or the quantile is silently empty."""
    defined = defined_variables(load_dashboard())
    errors = []
    for where, expr in all_queries():
        tree = parse(expr, defined)

        def visit(node: promql_parser.Expr, where: str = where) -> None:
            if not (
                isinstance(node, promql_parser.Call) and node.func.name == "histogram_quantile"
            ):
                return
            inner = node.args[1]
            if isinstance(inner, promql_parser.AggregateExpr):
                modifier = inner.modifier
                keeps_le = (
                    modifier is not None
                    and modifier.type == promql_parser.AggModifierType.By
                    and "le" in modifier.labels
                )
                if not keeps_le:
                    errors.append(f"{where}: {node}")
            names = [metric_name(s) for s in selectors(inner)]
            if not all(name.endswith("_bucket") for name in names):
                errors.append(f"{where}: histogram_quantile over {names}")

        promql_parser.walk(tree, visit)
    assert not errors, "\n".join(errors)


# ---------------------------------------------------------------------------
# (c) the data source is a variable; the JSON is a well-formed dashboard
# ---------------------------------------------------------------------------


def is_datasource_variable(ds: object) -> bool:
    if isinstance(ds, str):
        return ds in ("${datasource}", "$datasource")
    if isinstance(ds, dict):
        return ds.get("uid") in ("${datasource}", "$datasource") and ds.get("type") in (
            None,
            "prometheus",
        )
    return False


def test_datasource_is_the_variable_everywhere() -> None:
    dashboard = load_dashboard()
    ds_vars = [var for var in variables(dashboard) if var["type"] == "datasource"]
    assert [(v["name"], v["query"]) for v in ds_vars] == [("datasource", "prometheus")]
    assert "__inputs" not in dashboard, "imports must not need a data source mapping"
    errors = []
    for panel in iter_panels(dashboard["panels"]):
        title = panel.get("title")
        if panel["type"] == "row":
            assert not panel.get("targets"), title
            continue
        if not is_datasource_variable(panel.get("datasource")):
            errors.append(f"panel {title!r}: {panel.get('datasource')!r}")
        for target in panel.get("targets", []):
            if not is_datasource_variable(target.get("datasource")):
                errors.append(f"panel {title!r} target: {target.get('datasource')!r}")
    for var in variables(dashboard):
        if var["type"] == "query" and not is_datasource_variable(var.get("datasource")):
            errors.append(f"variable {var['name']}: {var.get('datasource')!r}")
    for annotation in dashboard.get("annotations", {}).get("list", []):
        ds = annotation.get("datasource")
        builtin = annotation.get("builtIn") == 1 and ds == {
            "type": "grafana",
            "uid": "-- Grafana --",
        }
        if not (builtin or is_datasource_variable(ds)):
            errors.append(f"annotation {annotation.get('name')!r}: {ds!r}")
    assert not errors, "hard-coded data sources:\n" + "\n".join(errors)


def test_no_datasource_uid_is_hard_coded_anywhere() -> None:
    """A walk over the whole JSON, so that nested or new places are covered too."""
    found = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            ds = node.get("datasource")
            uid = ds.get("uid") if isinstance(ds, dict) else ds
            if ds is not None and uid not in ("${datasource}", "$datasource", "-- Grafana --"):
                found.append(f"{path}: {ds}")
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(load_dashboard(), "$")
    assert not found, found


def test_dashboard_is_well_formed() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] and dashboard["title"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    names = [var["name"] for var in variables(dashboard)]
    assert len(names) == len(set(names)), names
    assert {"datasource", "job", "instance"} <= set(names)
    panels = list(iter_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        title = panel.get("title", "")
        assert title, f"panel {panel['id']} has no title"
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["y"] >= 0, title
        assert grid["x"] + grid["w"] <= 24, f"{title!r} is wider than the dashboard"
        if panel["type"] != "row":
            targets = panel.get("targets", [])
            assert targets, f"{title!r} has no query"
            refs = [t["refId"] for t in targets]
            assert len(refs) == len(set(refs)), f"{title!r}: refIds repeat"
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                other = cells.setdefault((x, y), title)
                assert other == title, f"{title!r} overlaps {other!r}"


def test_dashboard_covers_what_operators_need() -> None:
    used = queried_metrics(dashboard_queries(load_dashboard()))
    missing = sorted(REQUIRED_METRICS - set(used))
    assert not missing, f"the dashboard no longer shows {missing}"
    exprs = " ".join(expr for _, expr in dashboard_queries(load_dashboard()))
    for q in ("0.5", "0.9", "0.99"):
        assert f"histogram_quantile({q}, sum by (le) (rate(gateway_delivery_lag_seconds_bucket" in (
            exprs
        ), f"delivery lag p{q}"
    assert "sum by (instance) (gateway_connections" in exprs, "per-pod balance"


# ---------------------------------------------------------------------------
# (a) a running gateway exports every queried metric
# ---------------------------------------------------------------------------


def exported_series(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """Series names a scrape offers (families with no sample included), and sample labels."""
    names: set[str] = set()
    for line in text.splitlines():
        match = re.match(r"# TYPE (\S+) (\S+)$", line)
        if match is None:
            continue
        name, kind = match.groups()
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif kind == "summary":
            names |= {name, f"{name}_sum", f"{name}_count"}
        elif kind == "counter" and not name.endswith("_total"):
            names.add(f"{name}_total")
        else:
            names.add(name)
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names.add(sample.name)
            labels.setdefault(sample.name, set()).update(sample.labels)
    return names, labels


async def scrape_after_traffic(node: Gateway) -> str:
    """Publish, fail to publish, get limited, follow and leave a team feed; then scrape."""
    team = ev.team_id()
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        r = await client.post(f"/v1/teams/{team}/events", json=[ev.item()], headers=auth())
        assert r.status_code == 200, r.text
        r = await client.post(f"/v1/teams/{team}/events", json=[{"source": {}}], headers=auth())
        assert r.status_code == 400, r.text
        # Over the burst of 2 (settings below): refused whole with 429.
        items = [ev.item() for _ in range(3)]
        r = await client.post(f"/v1/teams/{team}/events", json=items, headers=auth())
        assert r.status_code == 429, r.text
        with anyio.fail_after(10):
            async with aconnect_sse(
                client, "GET", f"/v1/teams/{team}/events", headers=auth()
            ) as source:
                async for sse in source.aiter_sse():
                    if sse.data:
                        break

        def disconnect_counted() -> bool:
            return any(
                s.name == "gateway_disconnects_total"
                for m in node.metrics.registry.collect()
                for s in m.samples
            )

        await until(disconnect_counted, 10, "the SSE disconnect counted")
        r = await client.get("/metrics")
        assert r.status_code == 200
        return r.text


async def labelled_scrape(
    redis_url: str, redis_prefix: str
) -> tuple[set[str], dict[str, set[str]]]:
    async with start_node(redis_url, redis_prefix, publish_burst=2, publish_rate=0.01) as node:
        text = await scrape_after_traffic(node)
    return exported_series(text)


@pytest.mark.anyio
async def test_every_queried_metric_is_exported_by_a_running_gateway(
    redis_url: str, redis_prefix: str
) -> None:
    exported, labels = await labelled_scrape(redis_url, redis_prefix)
    assert "gateway_build_info" in exported and "gateway_items_read_total" in exported
    used = queried_metrics(all_queries())
    missing = {
        name: sorted(set(where))
        for name, where in used.items()
        if name not in exported and name not in PROMETHEUS_SERIES
    }
    assert not missing, "queried but not exported by the gateway:\n" + "\n".join(
        f"  {name}  ({', '.join(where[:3])}{', ...' if len(where) > 3 else ''})"
        for name, where in sorted(missing.items())
    )
    # The scrape itself is checked: the traffic produced the labelled series it is for.
    assert {"kind", "path"} <= labels["gateway_published_items_total"]
    assert {"code", "path"} <= labels["gateway_publish_rejections_total"]
    assert "limit" in labels["gateway_limited_total"]


@pytest.mark.anyio
async def test_queried_labels_exist_on_the_exported_series(
    redis_url: str, redis_prefix: str
) -> None:
    """Label matchers and ``by (...)`` labels name labels the series carry.

    Checked for series that have samples after the test's traffic (labelled series appear
    only once used); ``le`` and the labels the scrape adds are always allowed.
    """
    _, labels = await labelled_scrape(redis_url, redis_prefix)
    defined = defined_variables(load_dashboard())
    checked = 0
    errors = []
    for where, expr in all_queries():
        tree = parse(expr, defined)
        for selector in selectors(tree):
            name = metric_name(selector)
            if name not in labels:
                continue
            checked += 1
            for matcher in selector.matchers.matchers:
                if matcher.name in TARGET_LABELS | {"__name__"}:
                    continue
                if matcher.name not in labels[name]:
                    errors.append(f"{where}: {name} has no label {matcher.name!r}")

        def visit(node: promql_parser.Expr, where: str = where) -> None:
            if not isinstance(node, promql_parser.AggregateExpr) or node.modifier is None:
                return
            names = [metric_name(s) for s in selectors(node.expr)]
            if not names or not all(n in labels for n in names):
                return
            available = set().union(*(labels[n] for n in names)) | TARGET_LABELS
            for label in node.modifier.labels:
                if label not in available:
                    errors.append(f"{where}: no label {label!r} on {sorted(set(names))}")

        promql_parser.walk(tree, visit)
    assert checked >= 10, f"only {checked} selectors had samples to check"
    assert not errors, "\n".join(errors)
