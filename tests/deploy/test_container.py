"""The container image and the local stack, checked without a Docker engine.

* deploy/Dockerfile, parsed by BuildKit's own parser (the ``dockerfile`` package): stages on
  a pinned base, the lock installed as it is, a numeric non-root user, exec-form entry point;
* deploy/compose.yaml, validated against the Compose Specification's JSON schema (vendored
  by ``check-jsonschema``), and the wiring between its services: gateways to Redis, the
  nginx load balancer (parsed by ``crossplane``) to both gateways, Prometheus to both
  gateways, Grafana to Prometheus and to grafana/gateway.json.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import crossplane
import dockerfile
import jsonschema
import pytest
import yaml

from tests.support.gateway_process import GatewayProcess

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE = DEPLOY / "compose.yaml"
DASHBOARD = ROOT / "grafana" / "gateway.json"

EXACT_VERSION = re.compile(r"\d+\.\d+\.\d+")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
IMAGE = re.compile(r"^(?P<repo>[a-z0-9][a-z0-9._/-]*)(?::(?P<tag>[\w][\w.-]*))?(?P<digest>@.+)?$")
ARG_REF = re.compile(r"\$\{(\w+)\}|\$(\w+)")


# ---------------------------------------------------------------------------
# Dockerfile
# ---------------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    image: str  # ARGs expanded
    commands: list[dockerfile.Command] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)

    def all(self, cmd: str) -> list[dockerfile.Command]:
        return [c for c in self.commands if c.cmd == cmd]

    def last(self, cmd: str) -> dockerfile.Command | None:
        found = self.all(cmd)
        return found[-1] if found else None

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for command in self.all("ENV"):
            pairs = command.value
            values.update(zip(pairs[::2], pairs[1::2], strict=True))
        return values

    def expand(self, text: str) -> str:
        return expand(text, self.args)


def expand(text: str, args: dict[str, str]) -> str:
    return ARG_REF.sub(lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)


def parse_arg(value: str) -> tuple[str, str | None]:
    name, sep, default = value.partition("=")
    return name, (default if sep else None)


def stages() -> list[Stage]:
    """The Dockerfile's stages, ARGs (global defaults, re-declared per stage) expanded."""
    global_args: dict[str, str] = {}
    result: list[Stage] = []
    for command in dockerfile.parse_file(str(DOCKERFILE)):
        if command.cmd == "FROM":
            image = expand(command.value[0], global_args)
            name = command.value[2] if len(command.value) == 3 else str(len(result))
            result.append(Stage(name=name, image=image))
        elif not result:
            assert command.cmd == "ARG", f"{command.cmd} before the first FROM"
            name, default = parse_arg(command.value[0])
            if default is not None:
                global_args[name] = default
        else:
            stage = result[-1]
            stage.commands.append(command)
            if command.cmd == "ARG":
                name, default = parse_arg(command.value[0])
                value = default if default is not None else global_args.get(name)
                if value is not None:
                    stage.args[name] = value
    return result


def image_is_pinned(image: str) -> bool:
    """An exact version tag (X.Y.Z, not latest, not a bare major) or a sha256 digest."""
    match = IMAGE.match(image)
    if match is None:
        return False
    tag, digest = match.group("tag"), match.group("digest")
    if digest is not None:
        return DIGEST.search(image) is not None
    return tag is not None and EXACT_VERSION.search(tag) is not None


def test_image_pinning_rule() -> None:
    pinned = (
        "python:3.12.12-slim-bookworm",
        "python:3.12.12-slim-bookworm@sha256:" + "a" * 64,
        "python@sha256:" + "0" * 64,
        "redis:7.4.6-bookworm",
        "prom/prometheus:v3.1.0",
    )
    loose = (
        "python",
        "python:latest",
        "python:3",
        "python:3.12-slim",
        "python:slim-bookworm",
        "redis:7",
        "python:3.12.12@sha256:short",
        "${PYTHON_IMAGE}",
    )
    assert all(image_is_pinned(i) for i in pinned)
    assert not any(image_is_pinned(i) for i in loose)


def test_dockerfile_has_a_builder_and_a_runtime_on_one_pinned_base() -> None:
    found = stages()
    assert len(found) >= 2, "expected a builder stage and a runtime stage"
    names = [s.name for s in found]
    for stage in found:
        if stage.image in names[: names.index(stage.name)]:
            continue  # FROM an earlier stage
        assert image_is_pinned(stage.image), f"stage {stage.name}: {stage.image} is not pinned"
        assert "slim" in stage.image, f"stage {stage.name}: {stage.image} is not a slim image"
    builder, runtime = found[0], found[-1]
    # The venv built in the builder links to the interpreter of its base image.
    assert runtime.image == builder.image


def test_builder_installs_the_locked_dependencies_with_uv() -> None:
    builder = stages()[0]
    runs = [builder.expand(" ".join(c.value)) for c in builder.all("RUN")]
    syncs = [r for r in runs if re.search(r"\buv sync\b", r)]
    assert syncs, "the builder does not run uv sync"
    for run in syncs:
        assert re.search(r"--(frozen|locked)\b", run), f"not from the lock as it is: {run}"
        assert "--no-dev" in run, f"installs dev dependencies: {run}"
    # The gateway itself is not synced from its source (the source is not in the image):
    # the builder builds its wheel with the compiled kernel, the runtime installs it.
    assert all("--no-install-project" in run for run in syncs)
    builds = [r for r in runs if re.search(r"\buv build\b.*--wheel", r)]
    assert builds and all("GATEWAY_BUILD_NATIVE=1" in r for r in builds), runs
    # uv itself at an exact version.
    uv_pins = [r for r in runs if re.search(r"\buv==\d+\.\d+\.\d+\b", r)] + [
        c
        for c in builder.all("COPY")
        if any(f.startswith("--from=") and "astral-sh/uv:" in f for f in c.flags)
        and image_is_pinned(builder.expand(next(f for f in c.flags if f.startswith("--from="))[7:]))
    ]
    assert uv_pins, "uv is not pinned to an exact version"
    # uv.lock is copied in before the first sync.
    first_sync = next(
        i for i, c in enumerate(builder.commands) if c.cmd == "RUN" and "uv sync" in c.value[0]
    )
    copied = [
        PurePosixPath(src).name
        for c in builder.commands[:first_sync]
        if c.cmd == "COPY" and not c.flags
        for src in c.value[:-1]
    ]
    assert {"pyproject.toml", "uv.lock"} <= set(copied)


def test_runtime_installs_the_builders_wheel_without_dependencies() -> None:
    runtime = stages()[-1]
    installs = [
        c
        for c in runtime.all("RUN")
        if re.search(r"\binstall\b.*--no-deps\b.*\.whl\b", " ".join(c.value))
    ]
    assert len(installs) == 1, "the runtime stage does not install the wheel"
    assert any(f.startswith("--mount=") and "from=builder" in f for f in installs[0].flags)
    # Into the venv the builder made from the lock (copied in before).
    copies = [c for c in runtime.all("COPY") if "--from=builder" in c.flags]
    assert copies and runtime.commands.index(copies[0]) < runtime.commands.index(installs[0])
    assert "/opt/venv/bin/python" in " ".join(installs[0].value)


def test_runtime_runs_as_a_numeric_non_root_user() -> None:
    runtime = stages()[-1]
    user = runtime.last("USER")
    assert user is not None, "the runtime stage runs as root"
    uid, _, gid = user.value[0].partition(":")
    assert uid.isdigit() and int(uid) > 0, f"USER {user.value[0]}: numeric non-root uid needed"
    assert not gid or (gid.isdigit() and int(gid) > 0), f"USER {user.value[0]}: gid"
    assert int(uid) >= 10000, "uid below 10000 may collide with a host user"
    # Nothing runs as root after it.
    after = runtime.commands[runtime.commands.index(user) + 1 :]
    assert not [c for c in after if c.cmd in ("RUN", "USER")], "commands after USER"


def test_runtime_entrypoint_is_exec_form_gateway_serve() -> None:
    runtime = stages()[-1]
    entrypoint, cmd = runtime.last("ENTRYPOINT"), runtime.last("CMD")
    argv: list[str] = []
    for command in (entrypoint, cmd):
        if command is not None:
            assert command.json, f"{command.original}: shell form (signals go to /bin/sh)"
            argv += command.value
    assert argv == ["gateway", "serve"]
    healthcheck = runtime.last("HEALTHCHECK")
    if healthcheck is not None:
        assert healthcheck.json and healthcheck.value[0] == "CMD", healthcheck.original


def test_runtime_listens_on_all_interfaces_on_the_exposed_port() -> None:
    runtime = stages()[-1]
    env = runtime.env()
    assert env.get("GATEWAY_HOST") == "0.0.0.0"
    exposed = [p.split("/")[0] for c in runtime.all("EXPOSE") for p in c.value]
    assert exposed == [env.get("GATEWAY_PORT", "8080")]
    # No internal port by default: /healthz is on the exposed port unless one is set.
    assert "GATEWAY_INTERNAL_PORT" not in env
    healthcheck = runtime.last("HEALTHCHECK")
    assert healthcheck is not None
    command = " ".join(healthcheck.value)
    assert "GATEWAY_INTERNAL_PORT" in command and "GATEWAY_PORT" in command
    assert "/healthz" in command


def healthcheck_argv() -> list[str]:
    """The image's HEALTHCHECK command, run with this interpreter."""
    healthcheck = stages()[-1].last("HEALTHCHECK")
    assert healthcheck is not None
    cmd, program, *args = healthcheck.value
    assert (cmd, program) == ("CMD", "python")
    return [sys.executable, *args]


@pytest.mark.anyio
async def test_the_healthcheck_asks_the_port_that_serves_healthz(tmp_path: Path) -> None:
    """The HEALTHCHECK command, run for real against a real node: on the internal port
    when GATEWAY_INTERNAL_PORT is set (the client port answers 404 there), else on
    GATEWAY_PORT."""
    node = GatewayProcess("health", tmp_path, {}, internal_port=True)
    try:
        await node.start()
        assert node.internal_port is not None

        def check(env: dict[str, str]) -> int:
            return subprocess.run(
                healthcheck_argv(), env=env, capture_output=True, timeout=30
            ).returncode

        base = {"PATH": os.environ.get("PATH", "")}
        both = {**base, "GATEWAY_PORT": str(node.port)}
        assert check({**both, "GATEWAY_INTERNAL_PORT": str(node.internal_port)}) == 0
        assert check(both) != 0  # /healthz is not on the client port of this node
        assert check({**base, "GATEWAY_PORT": str(node.internal_port)}) == 0
    finally:
        node.kill()


def test_runtime_carries_the_builder_venv_on_its_path() -> None:
    found = stages()
    builder, runtime = found[0], found[-1]
    venv = builder.env()["UV_PROJECT_ENVIRONMENT"]
    copies = [
        c.value
        for c in runtime.all("COPY")
        if f"--from={builder.name}" in c.flags and c.value[0].rstrip("/") == venv
    ]
    assert copies, f"the runtime stage does not copy {venv} from {builder.name}"
    assert runtime.env()["PATH"].split(":")[0] == f"{venv}/bin"


def dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = PurePosixPath(path).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        regex = re.escape(pattern.strip("/")).replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        regex = regex.replace(r"\?", "[^/]").replace(".*/", "(.*/)?")
        if any(re.fullmatch(regex, c) for c in candidates):
            excluded = not negate
    return excluded


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_build_context_holds_what_the_dockerfile_copies_and_nothing_else() -> None:
    patterns = dockerignore_patterns()
    for stage in stages():
        for command in stage.all("COPY") + stage.all("ADD"):
            if any(f.startswith("--from=") for f in command.flags):
                continue
            for source in command.value[:-1]:
                assert (ROOT / source).exists(), f"{command.original}: {source} does not exist"
                assert not dockerignore_excludes(source, patterns), f"{source} is .dockerignored"
                if (ROOT / source).is_dir():
                    for file in (ROOT / source).rglob("*.py"):
                        if "__pycache__" not in file.parts:
                            rel = file.relative_to(ROOT).as_posix()
                            assert not dockerignore_excludes(rel, patterns), rel
    for private in (".venv", ".git", "tests", "bench", ".env", "gateway/__pycache__/x.pyc"):
        assert dockerignore_excludes(private, patterns), f"{private} would be sent to the daemon"


# ---------------------------------------------------------------------------
# compose.yaml
# ---------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def compose_schema() -> dict[str, Any]:
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads(vendored.joinpath("compose-spec.json").read_text())
    return schema


def schema_errors(doc: dict[str, Any]) -> list[str]:
    schema = compose_schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    ]


def test_compose_file_matches_the_compose_specification() -> None:
    assert compose_schema()["title"] == "Compose Specification"
    assert schema_errors(compose()) == []


def test_the_compose_schema_check_bites() -> None:
    doc = compose()
    for mutate in (
        lambda d: d["services"]["redis"].__setitem__("depends_on", {"x": {"condition": "nope"}}),
        lambda d: d["services"]["redis"].__setitem__("imagee", "redis:7.4.6"),
        lambda d: d["services"]["lb"].__setitem__("ports", {"8080": 8080}),
    ):
        broken = copy.deepcopy(doc)
        mutate(broken)
        assert schema_errors(broken), "the schema accepted a broken file"


def test_compose_starts_without_any_environment_set() -> None:
    """Every ${VAR} has a default (``:-``), so that ``docker compose up`` needs no .env."""
    text = COMPOSE.read_text()
    refs = re.findall(r"\$\{([^}]*)\}", text)
    assert refs, "no variables: the JWT secret should be overridable"
    for ref in refs:
        assert re.fullmatch(r"\w+:-.*", ref), f"${{{ref}}} has no default"


def gateways(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services built from deploy/Dockerfile."""
    found = {}
    for name, service in doc["services"].items():
        build = service.get("build")
        if isinstance(build, dict):
            context = (DEPLOY / build.get("context", ".")).resolve()
            if (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE:
                found[name] = service
    return found


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def duration_seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    assert parts and "".join(a + b for a, b in parts) == text, f"not a duration: {text}"
    return sum(float(n) * units[u] for n, u in parts)


def exposed_port() -> int:
    return int(stages()[-1].env().get("GATEWAY_PORT", "8080"))


def redis_services(doc: dict[str, Any]) -> set[str]:
    return {n for n, s in doc["services"].items() if str(s.get("image", "")).startswith("redis:")}


def test_two_gateways_built_from_the_dockerfile_wait_for_redis() -> None:
    doc = compose()
    nodes = gateways(doc)
    assert len(nodes) == 2, sorted(nodes)
    redis = redis_services(doc)
    assert len(redis) == 1
    (redis_name,) = redis
    assert doc["services"][redis_name].get("healthcheck"), "redis has no healthcheck to wait on"
    node_ids = set()
    for name, service in nodes.items():
        depends = service.get("depends_on")
        assert isinstance(depends, dict) and redis_name in depends, (
            f"{name} does not wait for redis"
        )
        assert depends[redis_name].get("condition") == "service_healthy", name
        env = environment(service)
        url = urlsplit(env["GATEWAY_REDIS_URL"])
        assert url.scheme == "redis" and url.hostname == redis_name and url.port == 6379, name
        secret = re.fullmatch(r"\$\{GATEWAY_JWT_SECRET:-(.+)\}", env["GATEWAY_JWT_SECRET"])
        assert secret, f"{name}: GATEWAY_JWT_SECRET must come from the environment"
        assert "dev" in secret.group(1) and len(secret.group(1)) >= 32, "dev-only default"
        node_ids.add(env.get("GATEWAY_NODE_ID", name))
        # SIGTERM drains for GATEWAY_DRAIN_SECONDS (default 10) before the stop timeout.
        drain = float(env.get("GATEWAY_DRAIN_SECONDS", "10"))
        assert duration_seconds(service.get("stop_grace_period", "10s")) > drain, name
        assert "ports" not in service, f"{name}: clients go through the load balancer"
    assert len(node_ids) == 2, "both nodes would share one inbox consumer name"


def test_every_image_is_pinned_and_redis_is_7() -> None:
    doc = compose()
    built = gateways(doc)
    for name, service in doc["services"].items():
        if name in built:
            continue
        assert image_is_pinned(service["image"]), f"{name}: {service['image']}"
    (redis_name,) = redis_services(doc)
    assert re.match(r"redis:7\.\d+\.\d+", doc["services"][redis_name]["image"])


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path, for the bind mounts of a service (short syntax)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts[target] = (DEPLOY / source).resolve()
    return mounts


def test_bind_mounted_files_exist() -> None:
    for name, service in compose()["services"].items():
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"


def service_with_image(doc: dict[str, Any], prefix: str) -> tuple[str, dict[str, Any]]:
    found = [
        (n, s) for n, s in doc["services"].items() if str(s.get("image", "")).startswith(prefix)
    ]
    assert len(found) == 1, f"one {prefix} service expected, found {found}"
    return found[0]


def directives(block: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [d for d in block if d["directive"] == name]


def one(block: list[dict[str, Any]], name: str) -> list[str]:
    found = directives(block, name)
    assert len(found) == 1, f"{name}: {len(found)} directives"
    args: list[str] = found[0]["args"]
    return args


def nginx_seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+)(ms|s|m|h|d)?", text)
    return sum(int(n) * units[u or "s"] for n, u in parts)


def test_load_balancer_proxies_streams_to_both_gateways() -> None:
    doc = compose()
    name, lb = service_with_image(doc, "nginx:")
    mounts = bind_mounts(lb)
    assert "/etc/nginx/nginx.conf" in mounts
    conf = crossplane.parse(str(mounts["/etc/nginx/nginx.conf"]), check_ctx=True, check_args=True)
    assert conf["status"] == "ok", conf["errors"]
    http = directives(conf["config"][0]["parsed"], "http")[0]["block"]

    upstreams = {u["args"][0]: u["block"] for u in directives(http, "upstream")}
    nodes = gateways(doc)
    expected = {f"{n}:{exposed_port()}" for n in nodes}
    servers = [d for d in http if d["directive"] == "server"]
    assert len(servers) == 1
    server = servers[0]["block"]
    (listen,) = one(server, "listen")
    published = [p.rsplit(":", 1)[-1] for p in lb["ports"]]
    assert listen in published, f"nginx listens on {listen}, compose publishes {published}"

    locations = directives(server, "location")
    root = next(loc["block"] for loc in locations if loc["args"] == ["/"])
    (proxy_pass,) = one(root, "proxy_pass")
    upstream = urlsplit(proxy_pass).hostname
    assert upstream in upstreams, f"proxy_pass {proxy_pass} names no upstream"
    assert {d["args"][0] for d in directives(upstreams[upstream], "server")} == expected
    assert directives(upstreams[upstream], "least_conn"), "balance long-lived streams by count"

    # SSE: frames pass as they are written; WebSocket: the upgrade is forwarded.
    assert one(root, "proxy_buffering") == ["off"]
    assert one(root, "proxy_http_version") == ["1.1"]
    headers = {d["args"][0].lower(): d["args"][1] for d in directives(root, "proxy_set_header")}
    assert headers["upgrade"] == "$http_upgrade"
    connection = headers["connection"]
    if connection != "upgrade":
        maps = {tuple(d["args"]) for d in directives(http, "map")}
        assert ("$http_upgrade", connection) in maps, f"{connection} is not mapped"
    # Idle streams (keepalives every 15 s, pings every 20 s) are not cut by the proxy.
    assert nginx_seconds(one(root, "proxy_read_timeout")[0]) >= 600
    assert nginx_seconds(one(root, "proxy_send_timeout")[0]) >= 600

    depends = lb.get("depends_on", {})
    assert set(nodes) <= set(depends), f"{name} does not wait for the gateways"


def test_prometheus_scrapes_both_gateways() -> None:
    doc = compose()
    _, prometheus = service_with_image(doc, "prom/prometheus:")
    flags = dict(f.split("=", 1) for f in prometheus.get("command", []) if "=" in f)
    config_path = flags.get("--config.file", "/etc/prometheus/prometheus.yml")
    mounts = bind_mounts(prometheus)
    assert config_path in mounts, f"{config_path} is not mounted"
    config = yaml.safe_load(mounts[config_path].read_text())
    # Each node on its internal port (/metrics is not served on the client port then).
    expected = {
        f"{n}:{environment(s).get('GATEWAY_INTERNAL_PORT') or exposed_port()}"
        for n, s in gateways(doc).items()
    }
    assert all(not t.endswith(f":{exposed_port()}") for t in expected), expected
    jobs = {}
    for job in config["scrape_configs"]:
        targets = {t for sc in job.get("static_configs", []) for t in sc["targets"]}
        jobs[job["job_name"]] = (targets, job.get("metrics_path", "/metrics"))
    scraping = [j for j, (targets, _) in jobs.items() if targets & expected]
    assert len(scraping) == 1, f"gateways scraped by {scraping}"
    targets, path = jobs[scraping[0]]
    assert targets == expected and path == "/metrics"
    interval = config.get("global", {}).get("scrape_interval", "1m")
    assert duration_seconds(interval) <= 15


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    doc = compose()
    prometheus_name, _ = service_with_image(doc, "prom/prometheus:")
    _, grafana = service_with_image(doc, "grafana/grafana")
    mounts = bind_mounts(grafana)
    provisioning = mounts["/etc/grafana/provisioning"]

    sources = []
    for file in sorted((provisioning / "datasources").glob("*.y*ml")):
        sources += yaml.safe_load(file.read_text())["datasources"]
    prom = [s for s in sources if s["type"] == "prometheus"]
    assert len(prom) == 1 and prom[0].get("isDefault"), prom
    url = urlsplit(prom[0]["url"])
    assert url.hostname == prometheus_name and url.port == 9090

    dashboards = {target: source for target, source in mounts.items() if source == DASHBOARD}
    assert len(dashboards) == 1, "grafana/gateway.json is not mounted"
    (mounted,) = dashboards
    providers = []
    for file in sorted((provisioning / "dashboards").glob("*.y*ml")):
        providers += yaml.safe_load(file.read_text())["providers"]
    paths = {PurePosixPath(p["options"]["path"]) for p in providers if p["type"] == "file"}
    assert PurePosixPath(mounted).parent in paths, f"no provider reads {mounted}"
    home = environment(grafana).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    assert home in (None, mounted)
    assert prometheus_name in grafana.get("depends_on", [])


def test_readme_says_how_to_run_the_stack() -> None:
    readme = (DEPLOY / "README.md").read_text()
    assert "docker compose -f deploy/compose.yaml up" in readme
    assert "docker build -f deploy/Dockerfile" in readme
