"""Settings: one frozen struct, built from flags and ``GATEWAY_*`` variables here only.

Nothing below :func:`load` reads the environment; the :class:`Settings` value is
passed down explicitly.  Every setting has a flag, an environment variable and a
default, and :data:`SETTINGS_HELP` documents each (it feeds ``gateway serve --help``
and the README table).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from gateway.run_lease import DEFAULT_LEASE_SECONDS, check_lease_setting


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8080
    #: A second port for /metrics, /healthz and /readyz only (then not on ``port``);
    #: ``None``: they are served on ``port``.
    internal_port: int | None = None
    #: The internal port's address; ``None``: ``host``.
    internal_host: str | None = None
    #: ``None`` runs on the embedded in-memory log (nothing durable).
    redis_url: str | None = None
    #: Prefix of every Redis key the gateway owns.
    redis_prefix: str = "gw"
    #: Redis connections one node opens at most (callers wait for a free one).
    redis_max_connections: int = 32
    #: GATEWAY_REDIS_URL is a seed node of a Redis Cluster.
    redis_cluster: bool = False
    #: Streams each inbox is spread over (each on its own slot on a cluster).
    redis_inbox_shards: int = 1
    #: Every Redis call's bound in seconds: past it the call fails (503 ``unavailable``).
    redis_timeout_seconds: float = 3.0
    #: Appends wait for this many replicas to acknowledge them (WAIT); 0: do not wait.
    redis_min_replicas: int = 0
    #: How long an append waits for those replicas, in milliseconds.
    redis_replica_timeout_ms: int = 500
    #: How long a lost feed that a node recreated empty lives without new items.
    redis_tombstone_seconds: float = 86_400.0
    #: The Sentinels' own ACL user and password (a Sentinel URL's are the master's).
    redis_sentinel_username: str | None = None
    redis_sentinel_password: str | None = None
    #: Connect to the Sentinels with TLS too (the URL's ssl_* parameters).
    redis_sentinel_tls: bool = False
    jwt_secret: str | None = None
    #: PEM file with an RSA (RS256) or P-256 EC (ES256) public key; reloaded on change.
    jwt_public_key_file: str | None = None
    #: JWKS JSON file of RS256/ES256 public keys, selected by ``kid``; reloaded on change.
    jwt_jwks_file: str | None = None
    #: If set, tokens need an ``aud`` claim that contains it.
    jwt_audience: str | None = None
    #: Comma-separated ``iss`` allow-list; empty accepts any issuer.
    jwt_issuers: str = ""
    #: Clock skew tolerated on exp/nbf/iat, in seconds.
    jwt_leeway_seconds: float = 5.0
    keepalive_seconds: float = 15.0
    team_retention: int = 10_000
    run_retention: int = 100_000
    #: Seconds a run feed is kept after its RUN_FINISHED or RUN_ERROR (0: until trimmed).
    run_finished_ttl_seconds: float = 3600.0
    #: Seconds a live run holds its lease unless its producer asks for another (within
    #: gateway.run_lease's bounds); every publish to the run renews it.
    run_lease_seconds: float = DEFAULT_LEASE_SECONDS
    #: Validate published AG-UI events against the whole AG-UI 1.0 schema.
    agui_strict: bool = False
    max_body_bytes: int = 1_048_576
    #: Items per history page when a client resumes from a cursor.
    history_page: int = 500
    #: Outbound bytes one connection may have queued before it counts as slow.
    max_queue_bytes: int = 1_048_576
    #: A client that takes nothing from its socket for this long is disconnected.
    slow_client_timeout: float = 30.0
    #: Outbound bytes the whole node may hold for clients that are behind.
    max_node_buffer_bytes: int = 268_435_456
    #: Max items the node reads from Redis per feed per read.
    read_batch: int = 1_000
    #: The longest the reader lingers, in milliseconds, after a read that fanned out to
    #: few subscribers per item (many small feeds), so that one read takes several
    #: items (on Redis: shorter while messages come fast, none while they are sparse).
    #: It is also the most an event waits for company, so 2 ms by default; a
    #: longer one saves wake-ups at 1-5 events a second per feed (docs/benchmarks.md).
    fanout_linger_ms: float = 2.0
    #: How long a blocking Redis read waits before it reports progress anyway.
    read_block_ms: int = 1_000
    #: /readyz fails when a read loop has not completed a read for this long (beyond
    #: ``read_block_ms``).
    ready_stall_seconds: float = 15.0
    #: Consumer name of this node in the inbox consumer groups (default: host-pid).
    node_id: str | None = None
    #: Pending inbox messages idle this long are claimed from dead nodes.
    inbox_claim_ms: int = 30_000
    #: WebSocket: subscriptions one socket may hold.
    ws_max_subscriptions: int = 100
    #: WebSocket: seconds between server pings, and how long a pong may take.
    ws_ping_interval: float = 20.0
    ws_ping_timeout: float = 20.0
    #: WebSocket: largest client message in bytes (1009 beyond it).
    ws_max_message_bytes: int = 65_536
    #: WebSocket: invalid client messages tolerated (each answered with an error frame)
    #: before the socket is closed with 1008.
    ws_max_bad_messages: int = 10
    #: WebSocket: comma-separated Origin allow-list; empty allows any origin (tokens,
    #: not cookies, authenticate, so a cross-site page cannot borrow a session).
    ws_origins: str = ""
    #: Open streams (SSE streams and WebSocket sockets) one node serves at most.
    max_connections: int = 10_000
    #: Open streams one tenant may hold on one node.
    max_tenant_connections: int = 1_000
    #: Items per second one tenant may publish over HTTP (token bucket refill rate).
    publish_rate: float = 1_000.0
    #: Items one tenant may publish over HTTP at once (token bucket size).
    publish_burst: int = 2_000
    #: Comma-separated origins allowed to follow SSE routes from a browser (CORS); empty
    #: (the default) sends no CORS headers; "*" allows any origin.
    cors_origins: str = ""
    #: On SIGTERM, open streams are ended spread over this many seconds.
    drain_seconds: float = 10.0
    log_format: str = "auto"
    log_level: str = "info"
    uvloop: bool = True
    #: Serve the console page and the JavaScript client at /console/ (D11).
    console: bool = False


SETTINGS_HELP: dict[str, str] = {
    "host": "Address to listen on.",
    "port": "TCP port for HTTP, SSE and WebSocket.",
    "internal_port": "TCP port for /metrics, /healthz and /readyz only; when set, those "
    "three answer 404 on GATEWAY_PORT (/openapi.json stays there: it documents the public "
    "API). Unset: they are served on GATEWAY_PORT.",
    "internal_host": "Address the internal port listens on (e.g. 127.0.0.1 for a sidecar "
    "scraper). Unset: GATEWAY_HOST.",
    "redis_url": "Redis URL: redis://[[user]:password@]host[:port][/db] for one server "
    "(rediss:// with TLS); unix://[[user]:password@]/path/to/socket[?db=N]; "
    "redis+sentinel://[[user]:password@]host:port[,host:port...]/<master>[/db] (rediss+"
    "sentinel:// for TLS to the master) to follow the master the Sentinels name, the URL's "
    "credentials being the master's; with GATEWAY_REDIS_CLUSTER, redis[s]://host:port"
    "[,host:port...] seed nodes. Query parameters, as in redis-py (any other is refused at "
    "start-up): db=N (instead of /N); ssl_ca_certs=<PEM file of CAs that verify the "
    "server>; ssl_certfile=<client certificate PEM> and ssl_keyfile=<its key PEM>; "
    "ssl_cert_reqs=required|optional|none (verification of the server, default required); "
    "ssl_check_hostname=true|false (the certificate names the host, default true, off with "
    "ssl_cert_reqs=none); socket_connect_timeout=<seconds to open a connection, default "
    "GATEWAY_REDIS_TIMEOUT_SECONDS up to 5>; client_name=<name> (CLIENT SETNAME of every "
    "connection, default gateway:<node id>). Every connection (pool, pipelined append "
    "connection, pub/sub listeners, Sentinels) uses them (docs/storage.md, Connecting to "
    "Redis). Unset: embedded in-memory log, nothing durable.",
    "redis_prefix": "Prefix of every Redis key the gateway owns.",
    "redis_max_connections": "Most Redis connections one node opens; callers wait for one.",
    "redis_cluster": "GATEWAY_REDIS_URL (redis:// or rediss://) names a node of a Redis "
    "Cluster, or several (redis://[user:pass@]h1:p1,h2:p2: any one that answers will do) "
    "(true/false): each feed's keys share a hash tag (one slot), live items go over "
    "sharded pub/sub on the feed's shard, and redirects, resharding and failovers are "
    "followed without a restart.",
    "redis_inbox_shards": "Streams each Redis inbox is spread over: 1 is <prefix>:inbox:<name>; "
    "N > 1 is <prefix>:inbox:{<name>:<n>} for n in 0..N-1 (producers pick one, e.g. by "
    "hashing the feed), each read by every node's consumer group, each on its own slot.",
    "redis_timeout_seconds": "Bound on every Redis call in seconds (pool wait, retries and "
    "reply): a publish or subscribe during a Redis hang answers 503 unavailable after it.",
    "redis_min_replicas": "Appends wait (WAIT) for this many replicas to have them; fewer "
    "in time: 503 unavailable (the items may be there: retry with the same keys). 0: no "
    "wait. Guards acknowledged writes against an asynchronous failover.",
    "redis_replica_timeout_ms": "How long an append waits for GATEWAY_REDIS_MIN_REPLICAS, in "
    "milliseconds.",
    "redis_tombstone_seconds": "How long a feed whose data was lost, recreated empty in a "
    "new epoch by a node that remembers it (so old cursors get epoch_restarted, not 404), "
    "lives without new items; also how long a deleted run stays marked as deleted.",
    "redis_sentinel_username": "ACL user the gateway authenticates as to the Sentinels "
    "(needs GATEWAY_REDIS_SENTINEL_PASSWORD); only with a Sentinel URL.",
    "redis_sentinel_password": "Password the gateway authenticates with to the Sentinels (as "
    "the default user, or as GATEWAY_REDIS_SENTINEL_USERNAME); only with a Sentinel URL.",
    "redis_sentinel_tls": "Connect to the Sentinels with TLS too, verified as the URL's "
    "ssl_* parameters say (true/false); only with a Sentinel URL.",
    "jwt_secret": "HS256 secret for bearer tokens. With no secret, public key or JWKS "
    "configured, every /v1 route answers 401.",
    "jwt_public_key_file": "PEM file with an RSA (RS256) or P-256 EC (ES256) public key for "
    "bearer tokens; reloaded when it changes.",
    "jwt_jwks_file": "JWKS file of RS256/ES256 public keys for bearer tokens, picked by the "
    "token's kid; reloaded when it changes.",
    "jwt_audience": "If set, tokens must carry this audience in their aud claim.",
    "jwt_issuers": "Comma-separated allow-list of token issuers (iss); empty accepts any.",
    "jwt_leeway_seconds": "Clock skew tolerated on token exp, nbf and iat, in seconds (0-300).",
    "keepalive_seconds": "Seconds between ': keepalive' comments on idle SSE streams.",
    "team_retention": "Items kept per team feed; older ones are trimmed.",
    "run_retention": "Items kept per run feed; older ones are trimmed.",
    "run_finished_ttl_seconds": "Seconds a run feed is kept after its RUN_FINISHED or "
    "RUN_ERROR, then deleted (404); 0 keeps it until count retention trims it.",
    "run_lease_seconds": "Seconds a live run's lease lasts unless its producer asks for "
    "another (5 to 3600); every publish and heartbeat renews it, and a run whose lease runs "
    "out is ended with RUN_ERROR producer_lost.",
    "agui_strict": "Validate every published AG-UI event against the whole AG-UI 1.0 "
    "schema of the OpenAPI seed (true/false); off: type and required fields only.",
    "max_body_bytes": "Largest accepted publish body in bytes (413 beyond).",
    "history_page": "Items per history page read when a client resumes.",
    "max_queue_bytes": "Outbound bytes buffered per connection before it is treated as slow.",
    "slow_client_timeout": "Seconds a client may take nothing from a full socket before it "
    "is disconnected as too slow (SSE: stream ends; WebSocket: 4008).",
    "max_node_buffer_bytes": "Outbound bytes the whole node may buffer for clients that are "
    "behind; past it, connections with buffered bytes are treated as slow.",
    "read_batch": "Most items read from Redis per feed per read.",
    "fanout_linger_ms": "Longest the reader waits, in milliseconds, after a read whose "
    "items went to few subscribers each (many small feeds), to take more items per read "
    "(on Redis the listeners stop reading meanwhile, for less while messages come fast "
    "and not at all while they are sparse, so a lone event waits at most this long); 0 "
    "disables.",
    "read_block_ms": "Longest a blocking Redis read waits before it returns empty.",
    "ready_stall_seconds": "/readyz answers 503 when the node's feed or inbox reader has "
    "not completed a read (an empty one counts) for this many seconds beyond "
    "GATEWAY_READ_BLOCK_MS.",
    "node_id": "This node's consumer name in the inbox consumer groups (default host-pid).",
    "inbox_claim_ms": "Inbox messages pending this long on a dead node are claimed "
    "(looked for every tenth of it).",
    "ws_max_subscriptions": "WebSocket: most subscriptions one socket may hold.",
    "ws_ping_interval": "WebSocket: seconds between server pings.",
    "ws_ping_timeout": "WebSocket: seconds a pong may take before the socket is closed.",
    "ws_max_message_bytes": "WebSocket: largest client message in bytes (close 1009 beyond).",
    "ws_max_bad_messages": "WebSocket: invalid client messages answered with error frames "
    "before the socket is closed with 1008.",
    "ws_origins": "WebSocket: comma-separated Origin allow-list; empty allows any origin.",
    "max_connections": "Open streams (SSE streams plus WebSocket sockets) one node serves; "
    "past it new ones are refused with 429 rate_limited.",
    "max_tenant_connections": "Open streams one tenant may hold on one node; past it that "
    "tenant's new ones are refused with 429 rate_limited.",
    "publish_rate": "Items per second one tenant may publish through HTTP, across every "
    "node on the same Redis (one token bucket per tenant in Redis; per node on the embedded "
    "store; the Redis inbox and the Python producer are not limited).",
    "publish_burst": "Items one tenant may publish through HTTP at once (token bucket size); "
    "a request over the limit is refused whole with 429 and Retry-After.",
    "cors_origins": "Comma-separated origins allowed to follow SSE routes from a browser "
    "(CORS); empty (default) sends no CORS headers; '*' allows any origin.",
    "drain_seconds": "On SIGTERM, seconds over which open streams are ended (a second "
    "signal exits at once).",
    "log_format": "Log format: json, console or auto (console on a terminal).",
    "log_level": "Log level: debug, info, warning or error.",
    "uvloop": "Run on uvloop when it is installed (true/false).",
    "console": "Serve the console page and the JavaScript client at /console/ (true/false); "
    "off: 404. Dev mode turns it on.",
}


def env_name(field: str) -> str:
    return "GATEWAY_" + field.upper()


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _field_types() -> dict[str, Any]:
    info = msgspec.inspect.type_info(Settings)
    assert isinstance(info, msgspec.inspect.StructType)
    return {f.name: f.type for f in info.fields}


#: Secrets are read from the environment only: a flag would show them in ``ps``.
ENV_ONLY = frozenset({"jwt_secret", "redis_sentinel_password"})


def env_only_help() -> str:
    """The ``--help`` epilog listing the settings that have no flag."""
    defaults = Settings()
    lines = ["environment only (no flag, so secrets stay out of 'ps'):"]
    for name in sorted(ENV_ONLY):
        lines.append(
            f"  {env_name(name)}  {SETTINGS_HELP[name]} "
            f"[env {env_name(name)}; default {getattr(defaults, name)!r}]"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting; defaults are left ``None`` so that env vars can apply."""
    defaults = Settings()
    for name, help_text in SETTINGS_HELP.items():
        if name in ENV_ONLY:
            continue
        default = getattr(defaults, name)
        parser.add_argument(
            flag_name(name),
            dest=name,
            default=None,
            metavar=name.upper(),
            help=f"{help_text} [env {env_name(name)}; default {default!r}]",
        )


def _coerce(name: str, raw: str, kind: Any) -> Any:
    try:
        return _coerce_value(name, raw, kind)
    except ValueError as exc:
        if str(exc).startswith(f"{name}:"):
            raise
        raise ValueError(f"{name}: cannot read {raw!r} as {_kind_name(kind)}") from exc


def _kind_name(kind: Any) -> str:
    if isinstance(kind, msgspec.inspect.UnionType):
        return _kind_name(_optional(kind))
    if isinstance(kind, msgspec.inspect.IntType):
        return "an integer"
    if isinstance(kind, msgspec.inspect.FloatType):
        return "a number"
    return "a value"


def _optional(kind: msgspec.inspect.UnionType) -> Any:
    """The type of an optional setting beside None (``int`` of ``int | None``)."""
    (inner,) = [t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)]
    return inner


def _coerce_value(name: str, raw: str, kind: Any) -> Any:
    text = raw.strip()
    if isinstance(kind, msgspec.inspect.BoolType):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name}: expected true or false, got {raw!r}")
    if isinstance(kind, msgspec.inspect.UnionType):
        # Optional settings: an empty value means "unset"; any other is read as the
        # type beside None.
        return _coerce_value(name, text, _optional(kind)) if text else None
    if isinstance(kind, msgspec.inspect.IntType):
        return int(text)
    if isinstance(kind, msgspec.inspect.FloatType):
        return float(text)
    return text


def load(args: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Build the settings: a flag wins over its ``GATEWAY_*`` variable, which wins over the default.

    Raises ``ValueError`` naming the setting when a value does not parse or is out of range.
    """
    args = args or {}
    env = os.environ if env is None else env
    types = _field_types()
    values: dict[str, Any] = {}
    for name in SETTINGS_HELP:
        raw = args.get(name)
        if raw is None:
            raw = env.get(env_name(name))
        if raw is None:
            continue
        values[name] = _coerce(name, str(raw), types[name]) if isinstance(raw, str) else raw
    settings = Settings(**values)
    _check(settings)
    return settings


#: Upper bound of ``jwt_leeway_seconds``: more would make ``exp`` meaningless.
MAX_LEEWAY_SECONDS = 300


def _check(s: Settings) -> None:
    positive = (
        "port",
        "redis_max_connections",
        "team_retention",
        "run_retention",
        "max_body_bytes",
        "history_page",
        "max_queue_bytes",
        "max_node_buffer_bytes",
        "ws_max_subscriptions",
        "ws_max_message_bytes",
        "ws_max_bad_messages",
        "read_batch",
        "read_block_ms",
        "inbox_claim_ms",
        "max_connections",
        "max_tenant_connections",
        "publish_burst",
    )
    for name in positive:
        if getattr(s, name) <= 0:
            raise ValueError(f"{name} must be positive")
    if not 1 <= s.redis_inbox_shards <= 256:
        raise ValueError("redis_inbox_shards must be between 1 and 256")
    if s.redis_cluster and s.redis_url is None:
        raise ValueError("redis_cluster needs redis_url (a seed node of the cluster)")
    if (
        s.redis_cluster
        and s.redis_url is not None
        and not s.redis_url.startswith(("redis://", "rediss://"))
    ):
        raise ValueError("redis_cluster: the seed URL must be redis:// or rediss://")
    if s.redis_cluster and s.redis_min_replicas:
        raise ValueError("redis_min_replicas is not available on a Redis Cluster")
    if not 0 < s.redis_timeout_seconds <= 10:
        raise ValueError("redis_timeout_seconds must be above 0 and at most 10")
    if s.redis_min_replicas < 0:
        raise ValueError("redis_min_replicas must be 0 or more")
    if not 0 < s.redis_replica_timeout_ms <= 10_000:
        raise ValueError("redis_replica_timeout_ms must be between 1 and 10000")
    if not s.redis_tombstone_seconds > 0 or math.isinf(s.redis_tombstone_seconds):
        raise ValueError("redis_tombstone_seconds must be a positive number of seconds")
    if s.redis_url is not None:
        _check_redis_url(s.redis_url)
    if not s.fanout_linger_ms >= 0 or s.fanout_linger_ms > 1000:
        raise ValueError("fanout_linger_ms must be between 0 and 1000")
    for name in (
        "keepalive_seconds",
        "drain_seconds",
        "ready_stall_seconds",
        "ws_ping_interval",
        "ws_ping_timeout",
        "slow_client_timeout",
    ):
        value = getattr(s, name)
        # "not >" also rejects NaN; infinity is no interval either.
        if not value > 0 or math.isinf(value):
            raise ValueError(f"{name} must be a positive number of seconds")
    if not s.run_finished_ttl_seconds >= 0 or math.isinf(s.run_finished_ttl_seconds):
        raise ValueError("run_finished_ttl_seconds must be 0 or a positive number of seconds")
    check_lease_setting(s.run_lease_seconds)
    if not s.publish_rate > 0 or math.isinf(s.publish_rate):
        raise ValueError("publish_rate must be a positive number of items per second")
    if s.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ValueError("log_level must be debug, info, warning or error")
    if s.log_format not in ("json", "console", "auto"):
        raise ValueError("log_format must be json, console or auto")
    if s.port > 65535:
        raise ValueError("port must be at most 65535")
    if s.internal_port is not None:
        if not 0 < s.internal_port <= 65535:
            raise ValueError("internal_port must be between 1 and 65535")
        if s.internal_port == s.port:
            raise ValueError("internal_port must differ from port")
    elif s.internal_host is not None:
        raise ValueError("internal_host needs internal_port")
    if not 0 <= s.jwt_leeway_seconds <= MAX_LEEWAY_SECONDS:
        raise ValueError(f"jwt_leeway_seconds must be between 0 and {MAX_LEEWAY_SECONDS}")
    for name in ("jwt_public_key_file", "jwt_jwks_file"):
        path = getattr(s, name)
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"{name}: no such file: {path!r}")


def _check_redis_url(url: str) -> None:
    """Refuse, at start-up, a Redis URL no backend can use (ValueError naming it)."""
    scheme = url.partition("://")[0].lower()
    if scheme in ("redis+sentinel", "rediss+sentinel"):
        hosts, _, path = url.partition("://")[2].partition("/")
        names = [p for p in path.split("/") if p]
        if not hosts.rpartition("@")[2] or not names:
            raise ValueError(
                "redis_url: a Sentinel URL is redis+sentinel://host:port[,host:port]/<master>"
            )
    elif scheme not in ("redis", "rediss", "unix"):
        raise ValueError(
            "redis_url: the scheme must be redis, rediss, unix, redis+sentinel or rediss+sentinel"
        )


def issuers(s: Settings) -> tuple[str, ...]:
    """The ``jwt_issuers`` allow-list; empty means any issuer."""
    return tuple(part.strip() for part in s.jwt_issuers.split(",") if part.strip())


def serve_parser() -> argparse.ArgumentParser:
    """The argument parser of ``gateway serve`` (every setting, env-only ones in the epilog)."""
    parser = argparse.ArgumentParser(
        prog="gateway serve",
        description="Run the gateway. Every setting is a flag or a GATEWAY_* variable; "
        "a flag wins over its variable.",
        epilog=env_only_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


def parse_serve_args(argv: Sequence[str] | None, env: Mapping[str, str] | None = None) -> Settings:
    ns = serve_parser().parse_args(argv)
    return load(vars(ns), env)
