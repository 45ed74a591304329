"""The Redis URL and the settings beside it, parsed once (gateway/store/redis/settings.py):
pure tests, no sockets.

What is accepted means what it means to redis-py: generated URLs (and mutations of
them) that the gateway accepts are read by redis-py's own ``parse_url`` the same way,
and the raw connections' TLS context is what redis-py's ``RedisSSLContext`` makes of
the same parameters.  Everything else is refused with a message that names the setting
and never holds the password.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio.connection import RedisSSLContext, UnixDomainSocketConnection, parse_url
from redis.exceptions import AuthenticationError, NoPermissionError

from gateway.config import Settings
from gateway.errors import Unavailable
from gateway.store.redis.client.error_map import map_exceptions
from gateway.store.redis.client.resp import describe
from gateway.store.redis.settings import (
    CLUSTER,
    SENTINEL,
    SERVER,
    TLS,
    UNIX,
    Credentials,
    RedisSettings,
    check,
    client_name_of,
    from_settings,
    parse,
)
from tests.support.certs import Certs, make_certs

#: Stands for a password in the generated URLs: never a substring of a message.
SECRET = "pw-Zq8vXk3"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


# -- the forms ---------------------------------------------------------------------------


def test_one_server() -> None:
    s = parse("redis://u:p%40ss@Redis.Example:6380/2", timeout=2.0)
    assert s == RedisSettings(
        SERVER,
        hosts=(("redis.example", 6380),),
        db=2,
        credentials=Credentials("u", "p@ss"),
        timeout=2.0,
        connect_timeout=2.0,
    )
    assert s.identity == "redis.example:6380"
    assert parse("redis://h").hosts == (("h", 6379),) and parse("redis://h").db == 0
    assert parse("redis://:pw@h?db=3").credentials == Credentials(None, "pw")
    assert parse("redis://:pw@h?db=3").db == 3
    assert parse("redis://[::1]:7000/").hosts == (("::1", 7000),)


def test_tls_parameters(certs: Certs) -> None:
    url = (
        f"rediss://h:1/0?ssl_ca_certs={certs.ca}&ssl_certfile={certs.client.cert}"
        f"&ssl_keyfile={certs.client.key}&ssl_check_hostname=no&ssl_cert_reqs=optional"
    )
    assert parse(url).tls == TLS(
        str(certs.ca), str(certs.client.cert), str(certs.client.key), "optional", False
    )
    assert parse("rediss://h").tls == TLS()  # redis-py's defaults: verified, hostname checked
    assert parse("rediss://h?ssl_cert_reqs=none").tls == TLS(cert_reqs="none", check_hostname=False)
    assert parse("redis://h").tls is None


def test_a_unix_socket() -> None:
    s = parse("unix://:pw@/run/redis/redis.sock?db=4&client_name=edge")
    assert (s.kind, s.path, s.db, s.client_name) == (UNIX, "/run/redis/redis.sock", 4, "edge")
    assert s.credentials == Credentials(None, "pw") and s.identity == "/run/redis/redis.sock"


def test_sentinels_with_credentials_of_their_own(certs: Certs) -> None:
    s = parse(
        f"rediss+sentinel://app:mpw@s1:26379,S2:26380/my%20master/3?ssl_ca_certs={certs.ca}",
        sentinel_username="watcher",
        sentinel_password="spw",
        sentinel_tls=True,
    )
    assert (s.kind, s.master, s.db) == (SENTINEL, "my master", 3)
    assert s.hosts == (("s1", 26379), ("s2", 26380))
    assert s.credentials == Credentials("app", "mpw")
    assert s.sentinel_credentials == Credentials("watcher", "spw")
    assert s.tls == s.sentinel_tls == TLS(ca_certs=str(certs.ca))
    kwargs = s.named("gateway:n1").sentinel_kwargs()
    assert kwargs["username"] == "watcher" and kwargs["password"] == "spw"
    assert kwargs["client_name"] == "gateway:n1" and kwargs["ssl"] is True
    assert kwargs["ssl_ca_certs"] == str(certs.ca)
    # The master's TLS alone; the Sentinels' password as the default user's.
    plain = parse("rediss+sentinel://s:1/m?db=2", sentinel_password="spw")
    assert plain.sentinel_tls is None and plain.tls == TLS() and plain.db == 2
    assert "ssl" not in plain.sentinel_kwargs()
    assert plain.sentinel_credentials == Credentials(None, "spw")


def test_cluster_seeds() -> None:
    s = parse("rediss://:pw@a:1,b:2", cluster=True)
    assert (s.kind, s.hosts, s.tls) == (CLUSTER, (("a", 1), ("b", 2)), TLS())


def test_the_handshake_and_the_client_name() -> None:
    s = parse("redis://u:pw@h/5").named(client_name_of("node 1\n"))
    assert s.handshake() == [
        ["AUTH", "u", "pw"],
        ["CLIENT", "SETNAME", "gateway:node_1_"],
        ["SELECT", 5],
    ]
    assert parse("redis://h?client_name=mine").named("gateway:x").client_name == "mine"
    assert parse("redis://h").handshake() == []  # nothing to say before commands


def test_from_the_node_settings() -> None:
    node = Settings(
        redis_url="redis+sentinel://s:1/m",
        redis_timeout_seconds=7.0,
        redis_sentinel_username="u",
        redis_sentinel_password="p",
    )
    s = from_settings(node)
    assert (s.timeout, s.connect_timeout) == (7.0, 5.0)
    assert s.sentinel_credentials == Credentials("u", "p")
    assert parse("redis://h?socket_connect_timeout=0.5").connect_timeout == 0.5


# -- refusals ------------------------------------------------------------------------------

REFUSED = [
    ("http://h", "scheme"),
    ("redis://h?ssl=true", "unknown query parameter 'ssl'"),
    ("redis://h?db=1&db=2", "given twice"),
    ("redis://h?db=", "no value"),
    ("redis://h?socket_timeout=1", "redis_timeout_seconds"),
    ("redis://h?max_connections=9", "redis_max_connections"),
    ("redis://h?password=x", "in the URL"),
    ("redis://h?protocol=3", "RESP2"),
    ("redis://h/1?db=1", "given twice"),
    ("redis://h/x", "number"),
    ("redis://h/1/2", "the path"),
    ("redis://h?ssl_cert_reqs=none", "need TLS"),
    ("rediss://h?ssl_cert_reqs=NONE", "none, optional or required"),
    ("rediss://h?ssl_check_hostname=off", "true or false"),
    ("rediss://h?ssl_cert_reqs=none&ssl_check_hostname=yes", "nothing is verified"),
    ("rediss://h?ssl_ca_certs=/no/such.pem", "no such file"),
    ("redis://user@h", "needs a password"),
    ("redis://a:1,b:2", "redis_cluster"),
    ("redis://h:0", "port"),
    ("redis://h:99999", "port"),
    ("redis://:6379", "needs a host"),
    ("redis://h#frag", "fragment"),
    ("redis://h?client_name=a%20b", "client_name"),
    ("redis://h?socket_connect_timeout=0", "socket_connect_timeout"),
    ("redis://h?socket_connect_timeout=nan", "socket_connect_timeout"),
    ("redis://h?x", "name=value"),
    ("unix://host/tmp/s.sock", "names no host"),
    ("unix://", "socket's path"),
    ("redis+sentinel://s/m", "host:port"),
    ("redis+sentinel://s:1", "master name"),
    ("redis+sentinel://s:1/m/1?db=1", "given twice"),
]


@pytest.mark.parametrize(("url", "says"), REFUSED)
def test_refused_urls_say_why(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=r"^redis_url: ") as info:
        parse(url)
    assert says in str(info.value)


@pytest.mark.parametrize(
    ("url", "options", "says"),
    [
        ("redis://h", {"sentinel_password": "x"}, "only with a Sentinel"),
        ("redis://h", {"sentinel_tls": True}, "only with a Sentinel"),
        ("redis+sentinel://s:1/m", {"sentinel_username": "u"}, "needs GATEWAY_REDIS_SENTINEL"),
        ("unix:///s.sock", {"cluster": True}, "redis_cluster"),
        ("redis://h:1/1", {"cluster": True}, "database 0"),
        ("redis://a:1,b", {"cluster": True}, "host:port"),
    ],
)
def test_refused_combinations_say_why(url: str, options: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse(url, **options)


def test_start_up_checks_the_files_load(tmp_path: Path, certs: Certs) -> None:
    broken = tmp_path / "broken.pem"
    broken.write_text("not a certificate")
    with pytest.raises(ValueError, match="ssl_ca_certs does not load"):
        check(Settings(redis_url=f"rediss://h?ssl_ca_certs={broken}"))
    with pytest.raises(ValueError, match="ssl_certfile/ssl_keyfile do not load"):
        check(Settings(redis_url=f"rediss://h?ssl_certfile={broken}"))
    with pytest.raises(ValueError, match="only with a Sentinel"):
        check(Settings(redis_sentinel_password="x"))
    check(Settings(redis_url=f"rediss://h?ssl_ca_certs={certs.ca}"))
    check(Settings())


# -- against redis-py ----------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_hosts = st.sampled_from(["127.0.0.1", "localhost", "Redis.Example", "[::1]", "10.1.2.3"])
_booleans = st.sampled_from(["1", "0", "true", "False", "YES", "no", "T", "f", "y", "N"])


@st.composite
def urls(draw: st.DrawFn, ca: str) -> str:
    """A URL of one server in a form the gateway accepts."""
    scheme = draw(st.sampled_from(["redis", "rediss", "unix"]))
    userinfo = ""
    if draw(st.booleans()):
        user = quote(draw(_text), safe="")
        userinfo = f"{user}:{quote(draw(_text.filter(bool)), safe='')}@"
    query: dict[str, str] = {}
    db = draw(st.none() | st.integers(0, 15))
    if scheme == "unix":
        where = "/tmp/" + quote(draw(st.text("abc-_.", min_size=1, max_size=8)), safe="")
        if db is not None:
            query["db"] = str(db)
    else:
        port = draw(st.none() | st.integers(1, 65535))
        where = draw(_hosts) + ("" if port is None else f":{port}")
        if db is not None and draw(st.booleans()):
            where += f"/{db}"
        elif db is not None:
            query["db"] = str(db)
    if scheme == "rediss":
        if draw(st.booleans()):
            query["ssl_ca_certs"] = ca
        reqs = draw(st.none() | st.sampled_from(["none", "optional", "required"]))
        if reqs is not None:
            query["ssl_cert_reqs"] = reqs
        if reqs != "none" and draw(st.booleans()):
            query["ssl_check_hostname"] = draw(_booleans)
    if draw(st.booleans()):
        query["client_name"] = draw(st.text(st.characters(min_codepoint=33, max_codepoint=126),
                                            min_size=1, max_size=10))  # fmt: skip
    if draw(st.booleans()):
        query["socket_connect_timeout"] = str(draw(st.floats(0.01, 60)))
    keys = draw(st.permutations(sorted(query)))
    tail = "?" + urlencode([(k, query[k]) for k in keys]) if query else ""
    return f"{scheme}://{userinfo}{where}{tail}"


def _as_redis_py_reads_it(url: str) -> dict[str, Any]:
    """What redis-py's pool would connect with, from its own parse of ``url``."""
    kwargs: dict[str, Any] = dict(parse_url(url))
    read: dict[str, Any] = {
        "db": kwargs.get("db", 0),
        "username": kwargs.get("username"),
        "password": kwargs.get("password"),
        "client_name": kwargs.get("client_name"),
    }
    if kwargs.get("connection_class") is UnixDomainSocketConnection:
        read["where"] = kwargs["path"]
    else:
        read["where"] = (kwargs.get("host", "localhost"), kwargs.get("port", 6379))
    # Absent, the gateway's: the call bound (3 s by default), 5 s at most.
    read["socket_connect_timeout"] = float(kwargs.get("socket_connect_timeout", 3.0))
    if url.startswith("rediss:"):
        reqs = kwargs.get("ssl_cert_reqs", "required")
        check_hostname = kwargs.get("ssl_check_hostname", True)
        read["tls"] = (kwargs.get("ssl_ca_certs"), reqs, bool(check_hostname) and reqs != "none")
    return read


def _as_the_gateway_reads_it(s: RedisSettings) -> dict[str, Any]:
    read: dict[str, Any] = {
        "db": s.db,
        "username": s.credentials.username,
        "password": s.credentials.password,
        "client_name": s.client_name,
        "where": s.path if s.kind == UNIX else s.hosts[0],
    }
    read["socket_connect_timeout"] = s.connect_timeout
    if s.tls is not None:
        read["tls"] = (s.tls.ca_certs, s.tls.cert_reqs, s.tls.check_hostname)
    return read


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_an_accepted_url_means_what_it_means_to_redis_py(data: st.DataObject, certs: Certs) -> None:
    url = data.draw(urls(str(certs.ca)))
    assert _as_the_gateway_reads_it(parse(url)) == _as_redis_py_reads_it(url), url


def _mutate(url: str, edits: list[tuple[int, int, str]]) -> str:
    """``url`` with characters replaced, deleted or inserted (position, kind, char)."""
    chars = list(url)
    for at, kind, char in edits:
        at %= len(chars) + 1
        if kind == 0 and at < len(chars):
            chars[at] = char
        elif kind == 1 and at < len(chars):
            del chars[at]
        else:
            chars.insert(at, char)
    return "".join(chars)


_edits = st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 2), st.sampled_from(list(":/@?&=%,#[]x0A ;"))),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), edits=_edits)
def test_a_mutated_url_is_refused_or_read_as_redis_py_reads_it(
    data: st.DataObject, edits: list[tuple[int, int, str]], certs: Certs
) -> None:
    url = _mutate(data.draw(urls(str(certs.ca))), edits)
    try:
        ours = parse(url)
    except ValueError as exc:
        assert str(exc).startswith(("redis_url: ", "redis_cluster: "))
        return
    assert _as_the_gateway_reads_it(ours) == _as_redis_py_reads_it(url), url


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), edits=_edits, cluster=st.booleans())
def test_no_refusal_tells_the_password(
    data: st.DataObject, edits: list[tuple[int, int, str]], cluster: bool, certs: Certs
) -> None:
    scheme = data.draw(st.sampled_from(["redis", "rediss", "unix", "redis+sentinel"]))
    rest = data.draw(st.sampled_from(["h:1/0", "/tmp/s.sock?db=1", "a:1,b:2/m/1", "h/x?y=1"]))
    url = _mutate(f"{scheme}://user:{SECRET}@{rest}", edits)
    try:
        parse(url, cluster=cluster, sentinel_password=SECRET + "s")
    except ValueError as exc:
        assert SECRET not in str(exc)


def test_settings_never_show_a_password() -> None:
    s = parse("redis+sentinel://u:" + SECRET + "@s:1/m", sentinel_password=SECRET + "s")
    assert SECRET not in repr(s) and SECRET not in str(s)


# -- the raw connections' TLS against redis-py's -------------------------------------------


@pytest.mark.parametrize(
    ("reqs", "check_hostname", "files"),
    [
        ("required", True, "none"),
        ("required", True, "both"),
        ("required", False, "ca"),
        ("optional", True, "client"),
        ("optional", False, "both"),
        ("none", False, "both"),
        ("none", False, "none"),
    ],
)
def test_the_tls_context_is_redis_pys(
    reqs: str, check_hostname: bool, files: str, certs: Certs
) -> None:
    ca = str(certs.ca) if files in ("ca", "both") else None
    cert, key = (
        (str(certs.client.cert), str(certs.client.key))
        if files in ("client", "both")
        else (None, None)
    )
    tls = TLS(ca, cert, key, reqs, check_hostname and reqs != "none")
    ours = tls.context()
    theirs = RedisSSLContext(
        keyfile=key,
        certfile=cert,
        cert_reqs=reqs,
        ca_certs=ca,
        check_hostname=check_hostname,
    ).get()
    assert ours.verify_mode == theirs.verify_mode
    assert ours.check_hostname == theirs.check_hostname
    assert ours.verify_flags == theirs.verify_flags
    assert ours.options == theirs.options
    assert ours.minimum_version == theirs.minimum_version
    assert ours.cert_store_stats() == theirs.cert_store_stats()
    assert ours.get_ca_certs() == theirs.get_ca_certs()
    assert isinstance(ours, ssl.SSLContext)


# -- causes kept -------------------------------------------------------------------------------


def test_a_redis_error_keeps_its_cause_through_the_boundary() -> None:
    """redis-py keeps Redis's error code apart from the text: the message has both."""
    wrong = AuthenticationError(
        "invalid username-password pair or user is disabled.", status_code="WRONGPASS"
    )
    with pytest.raises(Unavailable) as info, map_exceptions("inbox group"):
        raise wrong
    assert info.value.message == (
        "redis unavailable during inbox group: AuthenticationError: WRONGPASS invalid "
        "username-password pair or user is disabled."
    )
    with (
        pytest.raises(Unavailable, match=r"during ping: gaierror: \[Errno -2\]"),
        map_exceptions("ping"),
    ):
        raise socket.gaierror(-2, "Name or service not known")
    with (
        pytest.raises(Unavailable, match="rejected append: NoPermissionError: NOPERM no"),
        map_exceptions("append"),
    ):
        raise NoPermissionError("no", status_code="NOPERM")
    assert describe(TimeoutError()) == "TimeoutError"
