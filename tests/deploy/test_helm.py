"""The Helm chart (helm/gateway): linted, rendered and checked with Helm's own library.

``helm_python`` (PyPI ``helm-python-sdk``) binds Helm v4's Go SDK through a bundled shared
library, so these tests run without a ``helm`` binary or a cluster. Rendered manifests are
validated against the Kubernetes OpenAPI schemas shipped inside ``kubernetes-validate``
(strict: unknown fields fail). ``kubernetes-validate`` has no schemas for the Prometheus
Operator's CRDs, so ServiceMonitor and PrometheusRule are checked against the structural
subset of those CRDs written out below.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import msgspec
import pytest
import yaml

import gateway
from gateway.config import ENV_ONLY, Settings, env_name, load

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "gateway"
ALERTS_FILE = CHART / "files" / "alerts.yaml"
DASHBOARD_COPY = CHART / "dashboards" / "gateway.json"
DASHBOARD_SOURCE = ROOT / "grafana" / "gateway.json"

RELEASE = "gw"
NAMESPACE = "streams"
FULLNAME = "gw-gateway"

#: The values files under helm/gateway/ci/: the chart's defaults, a production-like HA
#: setup, and everything enabled.
VALUES_SETS = ("default", "ha", "all", "sentinel", "cluster")

#: Oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest that
#: kubernetes-validate ships schemas for.
KUBE_VERSIONS = ("1.27.0", "1.37.0")

#: Settings the chart sets itself rather than through ``config``.
CHART_MANAGED = frozenset(
    {
        "host",
        "redis_url",
        "redis_sentinel_username",
        "redis_sentinel_password",
        "redis_sentinel_tls",
        "jwt_secret",
        "jwt_public_key_file",
        "jwt_jwks_file",
        "node_id",
    }
)

#: Metric names the alert rules may use, with their labels (gateway/metrics.py).
METRICS: dict[str, frozenset[str]] = {
    "gateway_connections": frozenset({"transport"}),
    "gateway_subscriptions": frozenset({"transport", "kind"}),
    "gateway_connects_total": frozenset({"transport"}),
    "gateway_disconnects_total": frozenset({"transport", "reason"}),
    "gateway_items_read_total": frozenset(),
    "gateway_frames_sent_total": frozenset({"transport"}),
    "gateway_bytes_sent_total": frozenset({"transport"}),
    "gateway_redis_errors_total": frozenset(),
    "gateway_resumes_total": frozenset({"outcome"}),
    "gateway_epoch_restarts_total": frozenset(),
    "gateway_slow_consumer_actions_total": frozenset({"action"}),
    "gateway_buffered_bytes": frozenset(),
    "gateway_published_items_total": frozenset({"kind", "path"}),
    "gateway_publish_rejections_total": frozenset({"code", "path"}),
    "gateway_limited_total": frozenset({"limit"}),
    "gateway_connections_refused_total": frozenset({"reason"}),
    "gateway_validation_disagreements_total": frozenset({"type"}),
    "gateway_sockets": frozenset(),
    "gateway_socket_limit": frozenset(),
    "gateway_ready": frozenset(),
    "gateway_build_info": frozenset({"version"}),
    "up": frozenset(),
}
HISTOGRAMS: dict[str, frozenset[str]] = {
    "gateway_delivery_lag_seconds": frozenset(),
    "gateway_fanout_seconds": frozenset(),
    "gateway_redis_command_seconds": frozenset({"command"}),
    "gateway_replay_items": frozenset(),
}
for _name, _labels in HISTOGRAMS.items():
    METRICS[f"{_name}_bucket"] = _labels | {"le"}
    METRICS[f"{_name}_sum"] = _labels
    METRICS[f"{_name}_count"] = _labels
#: Labels Prometheus adds to every scraped series (ServiceMonitor target labels).
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "service", "container", "endpoint"}
)


def metric_labels(name: str) -> frozenset[str] | None:
    """The labels of an allowed metric, or None if the name is not allowed."""
    if name in METRICS:
        return METRICS[name]
    if name.startswith("process_"):  # standard process collector: no labels of its own
        return frozenset()
    return None


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def values_for(name: str) -> dict[str, Any]:
    data = yaml.safe_load((CHART / "ci" / f"{name}-values.yaml").read_text())
    return data or {}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    """Render the chart and parse every manifest (NOTES.txt and empty templates left out)."""
    manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc is not None:
                assert isinstance(doc, dict), f"{path}: not a mapping"
                docs.append(doc)
    return docs


@cache
def _rendered(name: str) -> tuple[dict[str, Any], ...]:
    with helm.Chart.load(CHART) as loaded:
        return tuple(render(loaded, values_for(name)))


@pytest.fixture(params=VALUES_SETS)
def values_set(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def rendered(name: str) -> list[dict[str, Any]]:
    # A fresh parse per call would be slower; hand out deep copies of the cached parse.
    return json.loads(json.dumps(_rendered(name)))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def client_service(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The Service of the client port (the one the Ingress names)."""
    [service] = [d for d in by_kind(docs, "Service") if d["metadata"]["name"] == FULLNAME]
    return service


def internal_services(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The headless Service of the internal port (rendered for the ServiceMonitor)."""
    return [d for d in by_kind(docs, "Service") if d["metadata"]["name"] == f"{FULLNAME}-internal"]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["gateway"]
    result: dict[str, Any] = containers[0]
    return result


def env_of(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    env = container(docs)["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), f"duplicate env vars: {names}"
    return {e["name"]: e for e in env}


# ---------------------------------------------------------------------------
# Lint, render, Kubernetes schemas
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_lint_is_clean(values_set: str, kube_version: str) -> None:
    report = helm.lint(CHART, values_for(values_set), strict=True, kube_version=f"v{kube_version}")
    assert report["total_charts_linted"] == 1
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert problems == []


def test_lint_reports_bad_values() -> None:
    report = helm.lint(CHART, {"replicaCount": -1}, strict=True)
    assert report["errors"], report
    assert any("replicaCount" in e for e in report["errors"])


_BASE_KINDS = ["Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"]
#: The objects each values set renders ("all": two Services, the client port's and the
#: internal port's for the ServiceMonitor).
EXPECTED_KINDS = {
    "default": _BASE_KINDS,
    "ha": [*_BASE_KINDS, "HorizontalPodAutoscaler"],
    "all": [
        *_BASE_KINDS,
        *("Service", "HorizontalPodAutoscaler", "Ingress", "ServiceMonitor"),
        *("PrometheusRule", "ConfigMap"),
    ],
    "sentinel": _BASE_KINDS,
    "cluster": _BASE_KINDS,
}


def test_sentinel_values_give_the_gateway_a_sentinel_url_with_the_password_from_a_secret() -> None:
    [deployment] = [d for d in rendered("sentinel") if d["kind"] == "Deployment"]
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["REDIS_MASTER_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "gateway-redis-password",
        "key": "password",
    }
    # Kubernetes expands $(REDIS_MASTER_PASSWORD), defined before it, into the URL.
    names = list(env)
    assert names.index("REDIS_MASTER_PASSWORD") < names.index("GATEWAY_REDIS_URL")
    url = env["GATEWAY_REDIS_URL"]["value"]
    hosts = ",".join(f"redis-sentinel-{i}.redis-sentinel:26379" for i in range(3))
    assert url == f"redis+sentinel://:$(REDIS_MASTER_PASSWORD)@{hosts}/mymaster/0"
    # The Sentinels' own credentials: a user in clear, the password from a Secret.
    assert env["GATEWAY_REDIS_SENTINEL_USERNAME"]["value"] == "gateway"
    assert env["GATEWAY_REDIS_SENTINEL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "gateway-sentinel-password",
        "key": "password",
    }
    assert "GATEWAY_REDIS_SENTINEL_TLS" not in env
    load(
        {},
        {
            "GATEWAY_REDIS_URL": url.replace("$(REDIS_MASTER_PASSWORD)", "pw"),
            "GATEWAY_REDIS_SENTINEL_USERNAME": "gateway",
            "GATEWAY_REDIS_SENTINEL_PASSWORD": "sentinel-pw",
        },
    )


def test_cluster_values_point_the_gateway_at_a_cluster_seed_from_a_secret() -> None:
    [deployment] = [d for d in rendered("cluster") if d["kind"] == "Deployment"]
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GATEWAY_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "gateway-redis-cluster",
        "key": "url",
    }
    assert env["GATEWAY_REDIS_CLUSTER"]["value"] == "true"
    assert env["GATEWAY_REDIS_INBOX_SHARDS"]["value"] == "6"
    plain = {name: e["value"] for name, e in env.items() if "value" in e}
    settings = load({}, {**plain, "GATEWAY_REDIS_URL": "redis://:pw@redis-cluster:6379"})
    assert settings.redis_cluster and settings.redis_inbox_shards == 6


CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def test_renders_the_expected_objects(values_set: str) -> None:
    docs = rendered(values_set)
    kinds = [d["kind"] for d in docs]
    assert sorted(kinds) == sorted(EXPECTED_KINDS[values_set])
    account = values_for(values_set).get("serviceAccount", {}).get("name") or FULLNAME
    for doc in docs:
        if doc["kind"] == "ServiceAccount":
            assert doc["metadata"]["name"] == account
        else:
            assert doc["metadata"]["name"].startswith(FULLNAME)
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
        if doc["kind"] != "ConfigMap":  # the dashboard may go to Grafana's namespace
            assert doc["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_manifests_validate_against_kubernetes_schemas(values_set: str, kube_version: str) -> None:
    checked = 0
    for doc in rendered(values_set):
        if doc["kind"] in CRD_KINDS:
            continue  # no schema in kubernetes-validate: see test_monitoring_crds_are_well_formed
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {exc.message} at {exc.path}")
        checked += 1
    assert checked == len([k for k in EXPECTED_KINDS[values_set] if k not in CRD_KINDS])


def test_kubernetes_validation_is_not_vacuous() -> None:
    """The strict schemas do reject a misspelt field and a wrong type in our Deployment."""
    deployment = one(rendered("default"), "Deployment")
    kubernetes_validate.validate(deployment, KUBE_VERSIONS[0], strict=True)
    misspelt = json.loads(json.dumps(deployment))
    misspelt["spec"]["template"]["spec"]["terminationGracePeriod"] = 30
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, KUBE_VERSIONS[0], strict=True)
    wrong_type = json.loads(json.dumps(deployment))
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, KUBE_VERSIONS[0], strict=True)


# The parts of the Prometheus Operator CRDs (monitoring.coreos.com/v1) the chart uses;
# additionalProperties: false catches a misspelt field, as kubectl would.
_DURATION = {"type": "string", "pattern": r"^(([0-9]+)(ms|s|m|h|d|w|y))+$"}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace", "labels"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "required": ["matchLabels"],
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "minProperties": 1,
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "jobLabel": {"type": "string"},
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "relabelings": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "action": {"enum": ["replace", "keep", "drop"]},
                                        "sourceLabels": {"type": "array"},
                                        "targetLabel": {"type": "string"},
                                        "replacement": {"type": "string"},
                                        "regex": {"type": "string"},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
PROMETHEUS_RULE_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["groups"],
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "rules": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "required": ["alert", "expr", "labels", "annotations"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "alert": {
                                            "type": "string",
                                            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                                        },
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": _DURATION,
                                        "labels": {
                                            "type": "object",
                                            "required": ["severity"],
                                            "properties": {
                                                "severity": {
                                                    "enum": ["critical", "warning", "info"]
                                                }
                                            },
                                            "additionalProperties": {"type": "string"},
                                        },
                                        "annotations": {
                                            "type": "object",
                                            "required": ["summary", "description"],
                                            "additionalProperties": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_monitoring_crds_are_well_formed() -> None:
    docs = rendered("all")
    [service] = internal_services(docs)
    monitor = one(docs, "ServiceMonitor")
    rule = one(docs, "PrometheusRule")
    jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)
    jsonschema.validate(rule, PROMETHEUS_RULE_SCHEMA)
    # The ServiceMonitor finds the internal port's Service (and not the client one), by
    # its labels, port name and namespace.
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert not selector.items() <= client_service(docs)["metadata"]["labels"].items()
    assert service["spec"]["clusterIP"] == "None"  # headless: every pod is scraped
    assert service["spec"]["ports"] == [
        {"name": "internal", "port": 9091, "targetPort": "internal", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == client_service(docs)["spec"]["selector"]
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "internal"
    assert endpoint["path"] == "/metrics"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    # The job name the alert rules select.
    assert {"action": "replace", "targetLabel": "job", "replacement": "agent-gateway"} in (
        endpoint["relabelings"]
    )
    # values: labels Prometheus selects rules and monitors by.
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    # The rule is files/alerts.yaml as it is.
    assert rule["spec"] == yaml.safe_load(ALERTS_FILE.read_text())


def test_crd_schemas_reject_a_misspelt_field() -> None:
    monitor = one(rendered("all"), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)
    rule = one(rendered("all"), "PrometheusRule")
    del rule["spec"]["groups"][0]["rules"][0]["labels"]["severity"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rule, PROMETHEUS_RULE_SCHEMA)


# ---------------------------------------------------------------------------
# Deployment: probes, drain, security
# ---------------------------------------------------------------------------


def test_probes_point_at_health_routes(values_set: str) -> None:
    docs = rendered(values_set)
    c = container(docs)
    port = values_for(values_set).get("config", {}).get("port", 8080)
    internal = values_for(values_set).get("config", {}).get("internalPort", 9090)
    assert c["ports"] == [
        {"name": "http", "containerPort": port, "protocol": "TCP"},
        {"name": "internal", "containerPort": internal, "protocol": "TCP"},
    ]
    # The probes use the internal port: the client port answers 404 there.
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "internal"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "internal"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "internal"}
    env = env_of(docs)
    assert env["GATEWAY_HOST"]["value"] == "0.0.0.0"
    assert env["GATEWAY_PORT"]["value"] == str(port)
    assert env["GATEWAY_INTERNAL_PORT"]["value"] == str(internal)
    service = client_service(docs)
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def drain_budget(docs: list[dict[str, Any]]) -> tuple[int, float, int]:
    """(preStop pause, drain window, termination grace period) of the rendered pod."""
    c = container(docs)
    command = c["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2
    pause = int(command[1])
    drain = float(env_of(docs)["GATEWAY_DRAIN_SECONDS"]["value"])
    grace = one(docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    return pause, drain, grace


def test_the_internal_port_is_never_exposed_to_clients(values_set: str) -> None:
    """Neither the client Service nor the Ingress carries the internal port: /metrics,
    /healthz and /readyz are not reachable from outside the cluster."""
    docs = rendered(values_set)
    service = client_service(docs)
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    internal = values_for(values_set).get("config", {}).get("internalPort", 9090)
    assert internal not in [p["port"] for p in service["spec"]["ports"]]
    for ingress in by_kind(docs, "Ingress"):
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                assert path["backend"]["service"] == {"name": FULLNAME, "port": {"name": "http"}}
    # The only other Service is the headless one of the ServiceMonitor, with no Ingress.
    for other in by_kind(docs, "Service"):
        if other is not service:
            assert other["spec"]["clusterIP"] == "None"
            assert [p["name"] for p in other["spec"]["ports"]] == ["internal"]


def test_without_an_internal_port_everything_stays_on_the_client_port(chart: helm.Chart) -> None:
    values = values_for("all")
    values["config"]["internalPort"] = None  # Helm: null removes the default
    with pytest.raises(
        helm.HelmRenderError, match=re.escape("internalHost needs config.internalPort")
    ):
        render(chart, values)
    del values["config"]["internalHost"]
    docs = render(chart, values)
    c = container(docs)
    assert [p["name"] for p in c["ports"]] == ["http"]
    for probe in ("livenessProbe", "startupProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["port"] == "http"
    assert "GATEWAY_INTERNAL_PORT" not in env_of(docs)
    assert internal_services(docs) == []
    monitor = one(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= client_service(docs)["metadata"]["labels"].items()


def test_grace_period_outlasts_pre_stop_and_drain(values_set: str) -> None:
    pause, drain, grace = drain_budget(rendered(values_set))
    values = values_for(values_set)
    assert pause == values.get("preStopSleepSeconds", 5)
    assert drain == values.get("config", {}).get("drainSeconds", 10)
    assert grace > pause + drain


@pytest.mark.parametrize(
    ("pause", "drain", "grace", "accepted"),
    [
        (5, 10, 16, True),
        (5, 10, 15, False),  # equal is not enough: the process needs time to exit
        (5, 10, 12, False),
        (0, 29.5, 30, True),
        (0, 30.5, 30, False),
        (20, 10, 30, False),
    ],
)
def test_grace_period_too_short_is_refused(
    chart: helm.Chart, pause: int, drain: float, grace: int, accepted: bool
) -> None:
    values = {
        "preStopSleepSeconds": pause,
        "terminationGracePeriodSeconds": grace,
        "config": {"drainSeconds": drain},
    }
    if accepted:
        assert drain_budget(render(chart, values)) == (pause, drain, grace)
    else:
        with pytest.raises(helm.HelmRenderError, match="terminationGracePeriodSeconds"):
            render(chart, values)


def test_security_context(values_set: str) -> None:
    docs = rendered(values_set)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    sc = container(docs)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # A read-only root needs a writable /tmp.
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert mounts["tmp"] == "/tmp"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["tmp"]
    account = one(docs, "ServiceAccount")
    assert account["metadata"]["name"] == pod["serviceAccountName"]
    assert account["automountServiceAccountToken"] is False


# ---------------------------------------------------------------------------
# Settings and secrets
# ---------------------------------------------------------------------------


def test_schema_config_matches_gateway_settings() -> None:
    """values.config covers every setting the chart does not manage, with the same types."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    config = schema["properties"]["config"]
    assert config["additionalProperties"] is False
    snake = {re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower(): key for key in config["properties"]}
    info = msgspec.inspect.type_info(Settings)
    assert isinstance(info, msgspec.inspect.StructType)
    fields = {f.name: f.type for f in info.fields}
    assert set(snake) == set(fields) - CHART_MANAGED, (
        "add new gateway settings to config in helm/gateway/values.schema.json"
    )
    json_type = {
        msgspec.inspect.IntType: "integer",
        msgspec.inspect.FloatType: "number",
        msgspec.inspect.StrType: "string",
        msgspec.inspect.BoolType: "boolean",
    }
    for name, key in snake.items():
        prop = config["properties"][key]
        kind = fields[name]
        if isinstance(kind, msgspec.inspect.UnionType):  # optional: str | None
            [kind] = [t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)]
        if "enum" in prop:
            assert isinstance(kind, msgspec.inspect.StrType), key
        else:
            assert prop["type"] == json_type[type(kind)], key


def test_environment_is_what_the_gateway_loads(values_set: str, tmp_path: Path) -> None:
    """Every GATEWAY_* variable of the pod is a real setting, and gateway.config loads them."""
    env = env_of(rendered(values_set))
    gateway_vars = {k: v for k, v in env.items() if k.startswith("GATEWAY_")}
    assert set(gateway_vars) <= {env_name(f.name) for f in msgspec.structs.fields(Settings)}
    plain: dict[str, str] = {}
    for name, var in gateway_vars.items():
        if "valueFrom" in var:
            # From a Secret or the pod name: checked in test_secrets_are_only_referenced.
            # A stand-in for the Redis URL (settings such as redisCluster need one).
            if name == "GATEWAY_REDIS_URL":
                plain[name] = "redis://redis.example:6379"
            continue
        value = var["value"]
        if name.endswith("_FILE"):  # a mounted Secret: stand in a file for the existence check
            (tmp_path / name).write_text("x")
            value = str(tmp_path / name)
        plain[name] = value
    settings = load(env=plain)
    assert settings.host == "0.0.0.0"
    values = values_for(values_set).get("config", {})
    for key, expected in values.items():
        field = re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
        got = getattr(settings, field)
        if isinstance(expected, float):
            assert math.isclose(got, expected), key
        else:
            assert got == expected, key


def test_large_whole_numbers_are_not_printed_in_exponent_form(chart: helm.Chart) -> None:
    docs = render(chart, {"config": {"port": 8080, "drainSeconds": 10, "teamRetention": 123456789}})
    assert env_of(docs)["GATEWAY_TEAM_RETENTION"]["value"] == "123456789"
    assert load(env={"GATEWAY_TEAM_RETENTION": "123456789"}).team_retention == 123456789


def test_secrets_are_only_referenced(values_set: str) -> None:
    docs = rendered(values_set)
    assert by_kind(docs, "Secret") == []
    values = values_for(values_set)
    env = env_of(docs)
    redis = values.get("redis", {})
    if redis.get("sentinel", {}).get("enabled"):
        # The URL names the Sentinels; the master's password only from a Secret.
        assert env["REDIS_MASTER_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"]
    else:
        assert env["GATEWAY_REDIS_URL"] == {
            "name": "GATEWAY_REDIS_URL",
            "valueFrom": {
                "secretKeyRef": {
                    "name": redis.get("existingSecret", "gateway-redis"),
                    "key": redis.get("existingSecretKey", "url"),
                }
            },
        }
    assert env["GATEWAY_NODE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    for var in env.values():  # no literal credentials anywhere in the environment
        value = var.get("value", "").replace("$(REDIS_MASTER_PASSWORD)", "")
        assert not re.search(r"://[^/\s]*[^:/\s]@", value), var
    for name in ENV_ONLY:  # GATEWAY_JWT_SECRET: only ever from a Secret
        if env_name(name) in env:
            assert set(env[env_name(name)]) == {"name", "valueFrom"}
            assert "secretKeyRef" in env[env_name(name)]["valueFrom"]


def test_token_keys_come_from_mounted_secrets() -> None:
    docs = rendered("all")
    env = env_of(docs)
    assert env["GATEWAY_JWT_SECRET"]["valueFrom"] == {
        "secretKeyRef": {"name": "gateway-jwt", "key": "secret"}
    }
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container(docs)["volumeMounts"]}
    for var, secret, key in (
        ("GATEWAY_JWT_PUBLIC_KEY_FILE", "gateway-jwt-public-key", "public.pem"),
        ("GATEWAY_JWT_JWKS_FILE", "gateway-jwks", "jwks.json"),
    ):
        path = Path(env[var]["value"])
        assert path.name == key
        mount = mounts[str(path.parent)]
        assert mount["readOnly"] is True
        assert "subPath" not in mount  # a subPath mount would never see a rotated key
        assert volumes[mount["name"]]["secret"] == {
            "secretName": secret,
            "items": [{"key": key, "path": key}],
        }
    # Without them, nothing is mounted or set.
    default_env = env_of(rendered("default"))
    assert not {"GATEWAY_JWT_SECRET", "GATEWAY_JWT_PUBLIC_KEY_FILE", "GATEWAY_JWT_JWKS_FILE"} & set(
        default_env
    )


def test_redis_url_without_secret_and_embedded_log(chart: helm.Chart) -> None:
    plain = render(chart, {"redis": {"existingSecret": "", "url": "redis://redis:6379/0"}})
    assert env_of(plain)["GATEWAY_REDIS_URL"] == {
        "name": "GATEWAY_REDIS_URL",
        "value": "redis://redis:6379/0",
    }
    embedded = render(chart, {"replicaCount": 1, "redis": {"existingSecret": "", "embedded": True}})
    assert "GATEWAY_REDIS_URL" not in env_of(embedded)
    assert one(embedded, "Deployment")["spec"]["replicas"] == 1


# ---------------------------------------------------------------------------
# Ingress, HPA, PDB
# ---------------------------------------------------------------------------

STREAMING_ANNOTATIONS = {
    "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
    "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
    "nginx.ingress.kubernetes.io/proxy-buffering": "off",
    "nginx.ingress.kubernetes.io/proxy-request-buffering": "off",
    "nginx.ingress.kubernetes.io/proxy-http-version": "1.1",
    "nginx.ingress.kubernetes.io/proxy-body-size": "2m",
}


def test_ingress_carries_streaming_annotations(chart: helm.Chart) -> None:
    docs = rendered("all")
    ingress = one(docs, "Ingress")
    annotations = ingress["metadata"]["annotations"]
    assert STREAMING_ANNOTATIONS.items() <= annotations.items()
    assert annotations["cert-manager.io/cluster-issuer"] == "letsencrypt"
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [
        {"secretName": "gateway-tls", "hosts": ["gateway.example.com"]}
    ]
    [rule] = ingress["spec"]["rules"]
    [path] = rule["http"]["paths"]
    assert path["backend"]["service"] == {"name": FULLNAME, "port": {"name": "http"}}
    assert client_service(docs)["metadata"]["name"] == FULLNAME
    assert by_kind(rendered("default"), "Ingress") == []

    # A key the user gives wins; the streaming set can be switched off.
    custom = render(
        chart,
        {
            "ingress": {
                "enabled": True,
                "streamTimeoutSeconds": 86400,
                "annotations": {"nginx.ingress.kubernetes.io/proxy-buffering": "on"},
            }
        },
    )
    annotations = one(custom, "Ingress")["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "86400"
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "on"
    bare = render(chart, {"ingress": {"enabled": True, "nginxStreamingAnnotations": False}})
    assert "annotations" not in one(bare, "Ingress")["metadata"]


@pytest.mark.parametrize("values_name", ["ha", "all"])
def test_hpa_scales_on_cpu_and_connections(values_name: str) -> None:
    docs = rendered(values_name)
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": one(docs, "Deployment")["metadata"]["name"],
    }
    autoscaling = values_for(values_name)["autoscaling"]
    assert hpa["spec"]["minReplicas"] == autoscaling["minReplicas"]
    assert hpa["spec"]["maxReplicas"] == autoscaling["maxReplicas"]
    metrics = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert set(metrics) == {"Resource", "Pods"}
    assert metrics["Resource"]["resource"] == {
        "name": "cpu",
        "target": {
            "type": "Utilization",
            "averageUtilization": autoscaling["targetCPUUtilizationPercentage"],
        },
    }
    pods = metrics["Pods"]["pods"]
    assert pods["metric"]["name"] == "gateway_connections"
    assert metric_labels(pods["metric"]["name"]) is not None
    assert pods["target"] == {
        "type": "AverageValue",
        "averageValue": autoscaling["connectionsPerPod"]["averageValue"],
    }
    # Scale-down drains streams: slowly.
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 60
    # The HPA owns the replica count.
    assert "replicas" not in one(docs, "Deployment")["spec"]


def test_fixed_replicas_without_hpa() -> None:
    docs = rendered("default")
    assert by_kind(docs, "HorizontalPodAutoscaler") == []
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


@pytest.mark.parametrize(
    ("values_name", "budget"),
    [
        ("default", {"maxUnavailable": 1}),
        ("ha", {"minAvailable": 2}),
        ("all", {"maxUnavailable": "25%"}),
    ],
)
def test_pod_disruption_budget(values_name: str, budget: dict[str, Any]) -> None:
    docs = rendered(values_name)
    pdb = one(docs, "PodDisruptionBudget")
    assert {k: v for k, v in pdb["spec"].items() if k != "selector"} == budget
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_topology_spread_selects_the_pods() -> None:
    docs = rendered("ha")
    pod = one(docs, "Deployment")["spec"]["template"]
    constraints = pod["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == [
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    ]
    for c in constraints:
        assert c["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


# ---------------------------------------------------------------------------
# values.schema.json and the template's own refusals
# ---------------------------------------------------------------------------


def test_ci_values_pass_the_schema(chart: helm.Chart, values_set: str) -> None:
    chart.validate_schema(values_for(values_set))


BAD_VALUES = [
    pytest.param({"replicaCount": -1}, "/replicaCount", id="negative-replicas"),
    pytest.param({"replicaCount": "3"}, "/replicaCount", id="replicas-as-string"),
    pytest.param({"replicaCount": 1.5}, "/replicaCount", id="fractional-replicas"),
    pytest.param({"replicas": 3}, "replicas", id="unknown-top-level-key"),
    pytest.param(
        {"config": {"port": 8080, "drainSeconds": 10, "maxConections": 5}},
        "maxConections",
        id="unknown-setting",
    ),
    pytest.param(
        {"config": {"port": "8080", "drainSeconds": 10}}, "/config/port", id="port-as-string"
    ),
    pytest.param(
        {"config": {"port": 70000, "drainSeconds": 10}}, "/config/port", id="port-out-of-range"
    ),
    pytest.param(
        {"config": {"port": 8080, "drainSeconds": 0}}, "/config/drainSeconds", id="zero-drain"
    ),
    pytest.param(
        {"config": {"port": 8080, "drainSeconds": 10, "logLevel": "verbose"}},
        "/config/logLevel",
        id="bad-log-level",
    ),
    pytest.param(
        {"config": {"port": 8080, "drainSeconds": 10, "maxConnections": 0}},
        "/config/maxConnections",
        id="zero-max-connections",
    ),
    pytest.param(
        {"terminationGracePeriodSeconds": -5}, "/terminationGracePeriodSeconds", id="negative-grace"
    ),
    pytest.param({"preStopSleepSeconds": "5"}, "/preStopSleepSeconds", id="pause-as-string"),
    pytest.param(
        {"securityContext": {"runAsNonRoot": False}}, "/securityContext", id="container-as-root"
    ),
    pytest.param(
        {"podSecurityContext": {"runAsNonRoot": True, "runAsUser": 0}},
        "/podSecurityContext/runAsUser",
        id="pod-uid-0",
    ),
    pytest.param(
        {"securityContext": {"allowPrivilegeEscalation": True}},
        "/securityContext/allowPrivilegeEscalation",
        id="privilege-escalation",
    ),
    pytest.param(
        {"securityContext": {"readOnlyRootFilesystem": False}},
        "/securityContext/readOnlyRootFilesystem",
        id="writable-root",
    ),
    pytest.param(
        {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}},
        "/securityContext/capabilities/drop",
        id="caps-not-all-dropped",
    ),
    pytest.param({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy", id="pull-policy"),
    pytest.param({"image": {"digest": "latest"}}, "/image/digest", id="bad-digest"),
    pytest.param({"service": {"port": 0}}, "/service/port", id="service-port-zero"),
    pytest.param({"ingress": {"enabled": "yes"}}, "/ingress/enabled", id="enabled-as-string"),
    pytest.param(
        {
            "ingress": {
                "hosts": [{"host": "a.example", "paths": [{"path": "/", "pathType": "Anything"}]}]
            }
        },
        "pathType",
        id="bad-path-type",
    ),
    pytest.param(
        {"autoscaling": {"targetCPUUtilizationPercentage": 150}},
        "/autoscaling/targetCPUUtilizationPercentage",
        id="cpu-over-100",
    ),
    pytest.param(
        {"autoscaling": {"minReplicas": 0}}, "/autoscaling/minReplicas", id="hpa-min-zero"
    ),
    pytest.param(
        {"podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": 1}},
        "/podDisruptionBudget",
        id="pdb-both",
    ),
    pytest.param({"redis": {"url": "http://redis:6379"}}, "/redis/url", id="redis-url-scheme"),
    pytest.param({"redis": {"embedded": "true"}}, "/redis/embedded", id="embedded-as-string"),
    pytest.param(
        {"auth": {"jwks": {"existingSecret": "jwks", "key": ""}}},
        "/auth/jwks/key",
        id="empty-secret-key",
    ),
    pytest.param(
        {"extraEnv": [{"name": "GATEWAY_REDIS_URL", "value": "redis://x"}]},
        "/extraEnv/0/name",
        id="extra-env-overrides-managed",
    ),
    pytest.param(
        {"serviceMonitor": {"interval": "often"}}, "/serviceMonitor/interval", id="bad-interval"
    ),
    pytest.param(
        {"dashboards": {"labels": {"grafana_dashboard": 1}}},
        "/dashboards/labels/grafana_dashboard",
        id="label-not-string",
    ),
]


@pytest.mark.parametrize(("values", "where"), BAD_VALUES)
def test_schema_rejects_bad_values(chart: helm.Chart, values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError) as validated:
        chart.validate_schema(values)
    assert where in str(validated.value)
    # And rendering (what install and upgrade do) refuses them too.
    with pytest.raises(helm.HelmValuesError):
        render(chart, values)


REFUSED = [
    pytest.param({"redis": {"existingSecret": "", "url": ""}}, "Redis is required", id="no-redis"),
    pytest.param(
        {"redis": {"existingSecret": "s", "url": "redis://redis:6379"}},
        "not both",
        id="two-redis-sources",
    ),
    pytest.param(
        {"redis": {"existingSecret": "", "url": "redis://:hunter2@redis:6379/0"}},
        "carries credentials",
        id="password-in-url",
    ),
    pytest.param(
        {"redis": {"existingSecret": "", "embedded": True}},
        "one pod",
        id="embedded-with-two-replicas",
    ),
    pytest.param(
        {
            "replicaCount": 1,
            "autoscaling": {"enabled": True},
            "redis": {"existingSecret": "", "embedded": True},
        },
        "one pod",
        id="embedded-with-hpa",
    ),
    pytest.param(
        {"config": {"port": 9090, "internalPort": 9090, "drainSeconds": 10}},
        "config.internalPort must differ from config.port",
        id="internal-port-is-the-client-port",
    ),
    pytest.param(
        {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 3}},
        "maxReplicas",
        id="hpa-max-below-min",
    ),
    pytest.param(
        {
            "autoscaling": {
                "enabled": True,
                "targetCPUUtilizationPercentage": None,
                "connectionsPerPod": {"enabled": False},
            }
        },
        "autoscaling needs a metric",
        id="hpa-without-metrics",
    ),
    pytest.param(
        {"autoscaling": {"enabled": True}, "resources": {"requests": {"cpu": None}}},
        "resources.requests.cpu",
        id="hpa-cpu-without-request",
    ),
]


@pytest.mark.parametrize(("values", "message"), REFUSED)
def test_template_refuses_broken_setups(
    chart: helm.Chart, values: dict[str, Any], message: str
) -> None:
    chart.validate_schema(values)  # each is well-typed: the template itself says no
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(chart, values)


# ---------------------------------------------------------------------------
# Alerts and the Grafana dashboard
# ---------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_SELECTOR = re.compile(r"(?<![\w:])([A-Za-z_:][\w:]*)\s*\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", re.IGNORECASE
)
_IDENT = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?")
_PROMQL_WORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    }
)


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords,
    label names (inside {...}, by/without/on/ignoring (...)) or durations."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _PROMQL_WORDS:
            continue
        names.add(name)
    return names


def label_names(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """Label names used in selectors ({metric: labels}) and in grouping clauses."""
    selectors: dict[str, set[str]] = {}
    text = _STRING.sub('""', expr)
    for match in _SELECTOR.finditer(text):
        selectors.setdefault(match.group(1), set()).update(_MATCHER_LABEL.findall(match.group(2)))
    grouping = {
        label.strip() for clause in _GROUPING.findall(text) for label in clause.split(",")
    } - {""}
    return selectors, grouping


def test_promql_helpers_find_names() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (namespace, le) (rate(gateway_x_bucket{job="a", '
        'code=~"5.."}[5m] offset 1h))) > 1e-9 and on (pod) up == 0 unless bogus_total'
    )
    assert metric_names(expr) == {"gateway_x_bucket", "up", "bogus_total"}
    selectors, grouping = label_names(expr)
    assert selectors == {"gateway_x_bucket": {"job", "code"}}
    assert grouping == {"namespace", "le", "pod"}


def alert_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS_FILE.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def test_alert_rules_cover_the_failure_modes() -> None:
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), "duplicate alert names"
    used = {r["alert"]: metric_names(r["expr"]) for r in rules}
    wanted = {
        "gateway_ready": "not ready",
        "gateway_delivery_lag_seconds_bucket": "delivery lag p99",
        "gateway_slow_consumer_actions_total": "slow-consumer disconnects",
        "gateway_redis_errors_total": "Redis errors",
        "gateway_epoch_restarts_total": "epoch restarts",
        "up": "scrape target down",
    }
    for metric, what in wanted.items():
        assert any(metric in names for names in used.values()), f"no alert on {what}"
    lag = next(r for r in rules if "gateway_delivery_lag_seconds_bucket" in used[r["alert"]])
    assert "histogram_quantile(0.99" in lag["expr"].replace(" ", "")


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_uses_only_known_metrics_and_labels(rule: dict[str, Any]) -> None:
    names = metric_names(rule["expr"])
    assert names, rule["expr"]
    unknown = {n for n in names if metric_labels(n) is None}
    assert not unknown, f"{rule['alert']}: unknown metrics {unknown}"
    selectors, grouping = label_names(rule["expr"])
    for metric, labels in selectors.items():
        allowed = metric_labels(metric)
        assert allowed is not None, metric
        assert labels <= allowed | TARGET_LABELS, f"{rule['alert']}: {metric} {labels}"
        # Scoped to the job the chart's ServiceMonitor names.
        assert re.search(metric + r'\s*\{[^}]*job="agent-gateway"', rule["expr"]), metric
    available = set().union(*(metric_labels(n) or set() for n in names)) | TARGET_LABELS
    assert grouping <= available, f"{rule['alert']}: grouping by {grouping - available}"


def test_dashboard_config_map() -> None:
    docs = rendered("all")
    config_map = one(docs, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Gateway"}
    assert set(config_map["data"]) == {"gateway.json"}
    assert config_map["data"]["gateway.json"] == DASHBOARD_COPY.read_text()
    dashboard = json.loads(config_map["data"]["gateway.json"])
    assert isinstance(dashboard, dict) and dashboard.get("panels"), "no panels"
    assert len(json.dumps(config_map).encode()) < 1_000_000  # a ConfigMap holds at most 1 MiB
    assert by_kind(rendered("default"), "ConfigMap") == []


def test_dashboard_copy_matches_grafana_source() -> None:
    if not DASHBOARD_SOURCE.exists():
        pytest.skip(f"{DASHBOARD_SOURCE.relative_to(ROOT)} does not exist yet")
    assert DASHBOARD_COPY.read_bytes() == DASHBOARD_SOURCE.read_bytes(), (
        "helm/gateway/dashboards/gateway.json differs from grafana/gateway.json: "
        "cp grafana/gateway.json helm/gateway/dashboards/gateway.json"
    )


def test_chart_app_version_is_the_gateway_version() -> None:
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart_yaml["appVersion"] == gateway.__version__
    assert chart_yaml["apiVersion"] == "v2"
