"""The Redis connection settings: the URL and the settings beside it, parsed once.

Every connection the Redis adapter opens (redis-py's pool or cluster client, the
pipelined connection, the pub/sub listeners, the Sentinels) is built from one
:class:`RedisSettings`: the address, TLS, credentials, database, client name and
timeouts come from here and nowhere else, so no connection can go out with defaults of
its own. From it are derived the keyword arguments of redis-py (:meth:`TLS.redis_py`,
:meth:`RedisSettings.sentinel_kwargs`), the ``SSLContext`` of the raw connections
(:meth:`TLS.context`) and their handshake (:meth:`RedisSettings.handshake`).

The URL forms (README, "Settings"; docs/storage.md, "Connecting to Redis"):

- ``redis://[[user]:password@]host[:port][/db]`` and ``rediss://`` (TLS): one server;
  with ``redis_cluster``, ``host:port[,host:port...]`` seed nodes of a Redis Cluster
  (database 0 only);
- ``unix://[[user]:password@]/path/to/socket[?db=N]``: one server on a unix socket;
- ``redis+sentinel://[[user]:password@]host:port[,host:port...]/<master>[/db]`` and
  ``rediss+sentinel://`` (TLS to the master): the master the Sentinels name.  The
  URL's credentials are the master's; the Sentinels' own are the settings
  ``redis_sentinel_username`` and ``redis_sentinel_password`` (env only), and
  ``redis_sentinel_tls`` connects to the Sentinels with TLS too.

The query parameters accepted are :data:`PARAMETERS`, each meaning what it means to
redis-py; anything else is refused, as is any combination that could be read two ways
(the database given twice, TLS parameters without TLS, a Sentinel setting without
Sentinels).  Every refusal is a ValueError whose message names the setting and holds no
part of the URL (in a URL whose parts are out of place any part may be the password),
except the name of an unknown parameter that looks like one.  Parsing reads no file and
opens nothing (files are checked to exist); :meth:`TLS.context` loads the certificates.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import ssl
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from gateway.config import Settings

#: One server over TCP (``redis``, ``rediss``), a unix socket, Sentinels, a Cluster.
SERVER, UNIX, SENTINEL, CLUSTER = "server", "unix", "sentinel", "cluster"
SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")
DEFAULT_PORT = 6379

#: The URL query parameters accepted, and what each means (the same as in redis-py).
PARAMETERS: dict[str, str] = {
    "db": "the database number (as the path's /N; give it once)",
    "ssl_ca_certs": "PEM file of the CA certificates that verify the server (besides the system's)",
    "ssl_certfile": "PEM file of the client certificate (and its key, unless ssl_keyfile)",
    "ssl_keyfile": "PEM file of the client certificate's key",
    "ssl_cert_reqs": "verification of the server's certificate: required (default), "
    "optional or none",
    "ssl_check_hostname": "whether the certificate must name the host connected to "
    "(true by default; off with ssl_cert_reqs=none)",
    "socket_connect_timeout": "seconds a connection (TCP, TLS and the handshake) may take "
    "to open (default: GATEWAY_REDIS_TIMEOUT_SECONDS, at most 5)",
    "client_name": "the name every connection gives itself (CLIENT SETNAME; default "
    "gateway:<node id>)",
}
_TLS_PARAMETERS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs",
                   "ssl_check_hostname")  # fmt: skip

#: Parameters redis-py knows that the gateway sets itself: refused, saying where.
_SET_ELSEWHERE = {
    "socket_timeout": "the gateway bounds every call itself: set redis_timeout_seconds",
    "timeout": "the gateway bounds every call itself: set redis_timeout_seconds",
    "max_connections": "set redis_max_connections",
    "username": "give the user in the URL (redis://user:password@host)",
    "password": "give the password in the URL (redis://user:password@host)",
    "protocol": "the gateway speaks RESP2",
}

#: redis-py's words for false (``to_bool``); the gateway accepts these and their
#: opposites only (redis-py reads any other word, "off" too, as true).
_FALSE = ("0", "F", "FALSE", "N", "NO")
_TRUE = ("1", "T", "TRUE", "Y", "YES")
#: What a query parameter's name looks like (a name that does not is not shown).
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
#: A host name or an IPv4 address (an IPv6 address is in brackets).
_HOST = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")
_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class Credentials:
    """An ACL user (or the default user, ``username`` None) and its password."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def auth(self) -> list[str] | None:
        """The ``AUTH`` command's arguments (None without a password)."""
        if self.password is None:
            return None
        if self.username is None:
            return ["AUTH", self.password]
        return ["AUTH", self.username, self.password]

    def redis_py(self) -> dict[str, Any]:
        return {"username": self.username, "password": self.password}


@dataclass(frozen=True)
class TLS:
    """TLS as redis-py's ``ssl_*`` parameters describe it (defaults: redis-py's)."""

    ca_certs: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    cert_reqs: str = "required"
    check_hostname: bool = True

    def redis_py(self) -> dict[str, Any]:
        """redis-py's keyword arguments for this TLS (pool, cluster and Sentinel clients)."""
        return {
            "ssl_ca_certs": self.ca_certs,
            "ssl_certfile": self.certfile,
            "ssl_keyfile": self.keyfile,
            "ssl_cert_reqs": self.cert_reqs,
            "ssl_check_hostname": self.check_hostname,
        }

    def context(self) -> ssl.SSLContext:
        """The context of the raw connections: what redis-py makes of the same
        parameters (the system's CAs plus ``ca_certs``; no hostname check without
        verification).  ValueError (naming the parameter) if a file does not load."""
        verify = _CERT_REQS[self.cert_reqs]
        context = ssl.create_default_context()
        context.check_hostname = self.check_hostname and verify != ssl.CERT_NONE
        context.verify_mode = verify
        try:
            if self.certfile is not None:
                context.load_cert_chain(certfile=self.certfile, keyfile=self.keyfile)
        except (OSError, ValueError) as exc:
            raise ValueError(f"redis_url: ssl_certfile/ssl_keyfile do not load: {exc}") from None
        try:
            if self.ca_certs is not None:
                context.load_verify_locations(cafile=self.ca_certs)
        except (OSError, ValueError) as exc:
            raise ValueError(f"redis_url: ssl_ca_certs does not load: {exc}") from None
        return context


@dataclass(frozen=True)
class RedisSettings:
    """Everything a connection to Redis is made of (see the module docstring)."""

    #: :data:`SERVER`, :data:`UNIX`, :data:`SENTINEL` or :data:`CLUSTER`.
    kind: str
    #: The server (one), the cluster's seeds or the Sentinels, as ``(host, port)``.
    hosts: tuple[tuple[str, int], ...] = ()
    #: The unix socket's path.
    path: str | None = None
    #: The master's name (Sentinels).
    master: str | None = None
    db: int = 0
    #: The server's (the master's, every cluster node's) credentials and TLS.
    credentials: Credentials = field(default_factory=Credentials)
    tls: TLS | None = None
    #: ``CLIENT SETNAME`` of every connection (None: the connection's owner names it).
    client_name: str | None = None
    #: Every call's bound, and a connection's (its handshake included), in seconds.
    timeout: float = 3.0
    connect_timeout: float = 3.0
    #: The Sentinels' own credentials and TLS.
    sentinel_credentials: Credentials = field(default_factory=Credentials)
    sentinel_tls: TLS | None = None

    @property
    def identity(self) -> str:
        """The configured server as the append step records it (``host:port`` or the
        socket's path; empty for Sentinels, whose master is learnt on connect)."""
        if self.kind == UNIX:
            return self.path or ""
        if self.kind == SENTINEL:
            return ""
        host, port = self.hosts[0]
        return f"{host}:{port}"

    def named(self, client_name: str) -> RedisSettings:
        """These settings with ``client_name`` unless the URL named the clients."""
        return self if self.client_name is not None else replace(self, client_name=client_name)

    def handshake(self) -> list[list[str | int]]:
        """What a raw connection sends first, each to be answered without an error:
        ``AUTH``, ``CLIENT SETNAME`` and ``SELECT`` (as redis-py's pool does)."""
        commands: list[list[str | int]] = []
        auth = self.credentials.auth()
        if auth is not None:
            commands.append(list(auth))
        if self.client_name is not None:
            commands.append(["CLIENT", "SETNAME", self.client_name])
        if self.db:
            commands.append(["SELECT", self.db])
        return commands

    def sentinel_kwargs(self) -> dict[str, Any]:
        """redis-py's keyword arguments for a connection to a Sentinel."""
        options: dict[str, Any] = {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.connect_timeout,
            "client_name": self.client_name,
            **self.sentinel_credentials.redis_py(),
        }
        if self.sentinel_tls is not None:
            options.update(ssl=True, **self.sentinel_tls.redis_py())
        return options


def client_name_of(node_id: str) -> str:
    """The default client name, ``gateway:<node id>``, in the characters Redis takes
    in one (``!`` to ``~``; others become ``_``)."""
    return "gateway:" + "".join(c if "!" <= c <= "~" else "_" for c in node_id)


def from_settings(settings: Settings) -> RedisSettings:
    """The Redis settings of the node's settings (``redis_url`` must be set)."""
    if settings.redis_url is None:
        raise ValueError("redis_url: not set")
    return parse(
        settings.redis_url,
        cluster=settings.redis_cluster,
        timeout=settings.redis_timeout_seconds,
        sentinel_username=settings.redis_sentinel_username,
        sentinel_password=settings.redis_sentinel_password,
        sentinel_tls=settings.redis_sentinel_tls,
    )


def check(settings: Settings) -> None:
    """Refuse at start-up settings no Redis connection could be made of (ValueError):
    the URL and the Sentinel settings parse, and the TLS files load."""
    if settings.redis_url is None:
        if settings.redis_sentinel_username or settings.redis_sentinel_password:
            raise ValueError("redis_sentinel_username/password: only with a Sentinel redis_url")
        if settings.redis_sentinel_tls:
            raise ValueError("redis_sentinel_tls: only with a Sentinel redis_url")
        return
    parsed = from_settings(settings)
    for tls in (parsed.tls, parsed.sentinel_tls):
        if tls is not None:
            tls.context()


def parse(
    url: str,
    *,
    cluster: bool = False,
    timeout: float = 3.0,
    sentinel_username: str | None = None,
    sentinel_password: str | None = None,
    sentinel_tls: bool = False,
) -> RedisSettings:
    """The settings a Redis URL (and the settings beside it) name; ValueError, naming
    the setting and never a password, for anything refused (see the module docstring)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError("redis_url: not a URL") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError("redis_url: the scheme must be " + ", ".join(SCHEMES))
    if parts.fragment:
        raise ValueError("redis_url: a fragment (#...) means nothing in a Redis URL")
    sentinels = scheme.endswith("+sentinel")
    if cluster and scheme not in ("redis", "rediss"):
        raise ValueError("redis_cluster: the seed URL must be redis:// or rediss://")
    if not sentinels and (sentinel_username or sentinel_password):
        raise ValueError("redis_sentinel_username/password: only with a Sentinel redis_url")
    if not sentinels and sentinel_tls:
        raise ValueError("redis_sentinel_tls: only with a Sentinel redis_url")
    if sentinel_username and not sentinel_password:
        raise ValueError("redis_sentinel_username: needs GATEWAY_REDIS_SENTINEL_PASSWORD")
    query = _query(parts.query)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    credentials = _credentials(userinfo)
    tls_here = scheme in ("rediss", "rediss+sentinel")
    tls = _tls(query) if tls_here or sentinel_tls else None
    if tls is None and any(name in query for name in _TLS_PARAMETERS):
        raise ValueError(
            "redis_url: ssl_* parameters need TLS (rediss://, rediss+sentinel:// or "
            "redis_sentinel_tls)"
        )
    db_in_query = _number("db", query["db"]) if "db" in query else None
    common: dict[str, Any] = {
        "credentials": credentials,
        "tls": tls if tls_here else None,
        "client_name": _client_name(query.get("client_name")),
        "timeout": timeout,
        "connect_timeout": _connect_timeout(query.get("socket_connect_timeout"), timeout),
    }
    if scheme == "unix":
        if hosts:
            raise ValueError("redis_url: a unix:// URL names no host (unix:///path/to/socket)")
        path = unquote(parts.path)
        if not path or path.endswith("/"):
            raise ValueError("redis_url: a unix:// URL needs the socket's path")
        return RedisSettings(UNIX, path=path, db=db_in_query or 0, **common)
    if sentinels:
        segments = [unquote(s) for s in parts.path.split("/") if s]
        if not segments or len(segments) > 2:
            raise ValueError("redis_url: a Sentinel URL's path is /<master name>[/<db>]")
        db = _database(segments[1] if len(segments) == 2 else None, db_in_query)
        return RedisSettings(
            SENTINEL,
            hosts=_hosts(hosts, need_port=True, what="Sentinel"),
            master=segments[0],
            db=db,
            sentinel_credentials=Credentials(sentinel_username, sentinel_password),
            sentinel_tls=tls if sentinel_tls else None,
            **common,
        )
    path = parts.path.strip("/")
    if "/" in path:
        raise ValueError("redis_url: the path is the database number, /<db>")
    db = _database(unquote(path) or None, db_in_query)
    if cluster:
        if db:
            raise ValueError("redis_url: a Redis Cluster has database 0 only")
        return RedisSettings(
            CLUSTER, hosts=_hosts(hosts, need_port=True, what="Redis Cluster seed"), **common
        )
    if "," in hosts:
        raise ValueError("redis_url: several hosts name a Redis Cluster: set redis_cluster")
    server = _hosts(hosts, need_port=False, what="Redis")
    return RedisSettings(SERVER, hosts=server, db=db, **common)


def _query(text: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text))
    except ValueError:
        raise ValueError("redis_url: the query must be name=value pairs joined by &") from None
    query: dict[str, str] = {}
    for name, value in pairs:
        if name in _SET_ELSEWHERE:
            raise ValueError(f"redis_url: query parameter {name!r}: {_SET_ELSEWHERE[name]}")
        if name not in PARAMETERS:
            # Named only if it looks like a parameter: in a URL whose parts are out of
            # place, a "name" may hold the password.
            shown = f" {name!r}" if _NAME.fullmatch(name) else ""
            accepted = ", ".join(sorted(PARAMETERS))
            raise ValueError(f"redis_url: unknown query parameter{shown} (accepted: {accepted})")
        if name in query:
            raise ValueError(f"redis_url: query parameter {name!r} given twice")
        if not value:
            raise ValueError(f"redis_url: query parameter {name!r} has no value")
        query[name] = value
    return query


def _credentials(userinfo: str) -> Credentials:
    if not userinfo:
        return Credentials()
    user, colon, password = userinfo.partition(":")
    username = unquote(user) or None
    if not colon or not password:
        # A user without a password sends no AUTH (redis-py's pool neither): the
        # connection would run as the default user, not the one named.
        raise ValueError("redis_url: a user needs a password (redis://user:password@host)")
    return Credentials(username, unquote(password))


def _tls(query: dict[str, str]) -> TLS:
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        if name in query and not os.path.isfile(query[name]):
            raise ValueError(f"redis_url: {name}: no such file")
    if "ssl_keyfile" in query and "ssl_certfile" not in query:
        raise ValueError("redis_url: ssl_keyfile needs ssl_certfile")
    reqs = query.get("ssl_cert_reqs", "required")
    if reqs not in _CERT_REQS:
        raise ValueError("redis_url: ssl_cert_reqs must be none, optional or required")
    check_hostname = _bool("ssl_check_hostname", query.get("ssl_check_hostname", "true"))
    if reqs == "none" and check_hostname and "ssl_check_hostname" in query:
        raise ValueError(
            "redis_url: ssl_check_hostname=true with ssl_cert_reqs=none: nothing is verified, "
            "so no hostname is checked (drop one)"
        )
    return TLS(
        ca_certs=query.get("ssl_ca_certs"),
        certfile=query.get("ssl_certfile"),
        keyfile=query.get("ssl_keyfile"),
        cert_reqs=reqs,
        check_hostname=check_hostname and reqs != "none",
    )


def _bool(name: str, text: str) -> bool:
    if text.upper() in _TRUE:
        return True
    if text.upper() in _FALSE:
        return False
    raise ValueError(f"redis_url: {name} must be true or false (1/0, yes/no)")


def _number(name: str, text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"redis_url: {name} must be a number")
    return int(text)


def _database(in_path: str | None, in_query: int | None) -> int:
    if in_path is not None and in_query is not None:
        raise ValueError("redis_url: the database is given twice (/N and ?db=N): give it once")
    if in_path is not None:
        return _number("the database (/<db>)", in_path)
    return in_query or 0


def _client_name(text: str | None) -> str | None:
    if text is not None and not all("!" <= c <= "~" for c in text):
        raise ValueError(
            "redis_url: client_name: Redis takes no spaces, newlines or characters past ~"
        )
    return text


def _connect_timeout(text: str | None, timeout: float) -> float:
    if text is None:
        return min(timeout, 5.0)
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= 60:
        raise ValueError("redis_url: socket_connect_timeout must be above 0 and at most 60")
    return seconds


def _hosts(text: str, *, need_port: bool, what: str) -> tuple[tuple[str, int], ...]:
    hosts: list[tuple[str, int]] = []
    for item in text.split(","):
        host, port = _host_port(item, need_port=need_port, what=what)
        hosts.append((host, port))
    return tuple(hosts)


def _host_port(text: str, *, need_port: bool, what: str) -> tuple[str, int]:
    if text.startswith("["):  # [IPv6]:port
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"redis_url: a {what} address is host:port or [ipv6]:port")
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
    # As urllib (and so redis-py) reads a host: case does not matter.
    host = unquote(host).lower()
    if not host:
        raise ValueError(f"redis_url: a {what} address needs a host")
    if not _HOST.fullmatch(host) and not (text.startswith("[") and _is_ipv6(host)):
        raise ValueError(f"redis_url: a {what} host must be a name or an address")
    if not port_text:
        if need_port:
            raise ValueError(f"redis_url: a {what} address is host:port")
        return host, DEFAULT_PORT
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise ValueError(f"redis_url: a {what} port must be a number from 1 to 65535")
    return host, int(port_text)


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True
