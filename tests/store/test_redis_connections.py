"""Every connection a node opens honours the one Redis URL and settings: TLS with a
private CA, client certificates, verification off, an ACL user, a database, a unix
socket, Sentinels with credentials of their own; a wrong password says why, once.

Each test runs real ``redis-server`` processes of its own and two gateway nodes, and
goes through :func:`roundtrip`, which uses every kind of connection of both nodes:
redis-py's pool (history reads, inbox groups, pings), the pipelined connection (the append step) and
the pub/sub listener (live delivery).  Then ``CLIENT LIST`` on the server shows every
connection named ``gateway:<node id>`` (and as the ACL user, where there is one): no
connection went out with settings of its own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis
from httpx_sse import aconnect_sse
from structlog.testing import capture_logs

from gateway.fanout.hub import Hooks
from tests.support import events as ev
from tests.support.certs import Certs, make_certs
from tests.support.gateway_process import GatewayProcess
from tests.support.node import auth, start_node
from tests.support.redis_sentinel import ReplicatedSet, SentinelGroup, client
from tests.support.redis_server import ADMIN_USER, RedisServer, ServerTLS
from tests.support.wait import until

pytestmark = [pytest.mark.anyio, pytest.mark.redis_admin]

#: Seconds a whole round trip may take.
ROUNDTRIP_WITHIN = 20.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


async def roundtrip(a: str, b: str) -> None:
    """Publish on node ``a``, follow live there (SSE), resume on node ``b`` from a
    cursor and follow live there too, while ``a`` still follows: every item arrives in
    order on both, history and live."""
    team = ev.team_id()
    path = f"/v1/teams/{team}/events"
    async with httpx.AsyncClient(timeout=10) as http:

        async def publish(node: str) -> str:
            r = await http.post(node + path, json=[ev.item()], headers=auth())
            assert r.status_code == 200, r.text
            cursor: str = r.json()["cursors"][0]
            return cursor

        with anyio.fail_after(ROUNDTRIP_WITHIN):
            first = await publish(a)  # a's pipelined connection
            async with aconnect_sse(http, "GET", a + path, headers=auth()) as on_a:
                follow_a = on_a.aiter_sse()
                assert (await anext(follow_a)).id == first  # a's pool: history
                second = await publish(a)
                assert (await anext(follow_a)).id == second  # a's listener: live
                resume = {**auth(), "Last-Event-ID": first}
                async with aconnect_sse(http, "GET", b + path, headers=resume) as on_b:
                    follow_b = on_b.aiter_sse()
                    assert (await anext(follow_b)).id == second  # b's pool: history
                    third = await publish(b)  # b's pipelined connection
                    assert (await anext(follow_b)).id == third  # b's listener: live
                assert (await anext(follow_a)).id == third  # from b, live on a


def clients(admin: redis.Redis) -> list[dict[str, Any]]:
    """``CLIENT LIST`` of the server, without the harness's own connections (nor the
    Sentinels')."""
    listed: list[dict[str, Any]] = admin.client_list()
    return [
        c
        for c in listed
        if c.get("user") != ADMIN_USER and not c.get("name", "").startswith("sentinel-")
    ]


def named(admin: redis.Redis, nodes: set[str], user: str = "default") -> bool:
    """Every connection on the server is one of ``nodes``' (``gateway:<id>``), as
    ``user``, and each node holds several (pool, pipelined, pub/sub)."""
    listed = clients(admin)
    names = [c["name"] for c in listed]
    return (
        {c["user"] for c in listed} == {user}
        and set(names) == {f"gateway:{n}" for n in nodes}
        and all(names.count(f"gateway:{n}") >= 3 for n in nodes)
    )


async def assert_named(admin: redis.Redis, nodes: set[str], user: str = "default") -> None:
    """:func:`named`, within a few seconds (a pool connection that a node opens just
    then is listed for a moment before its handshake names it)."""
    with contextlib.suppress(TimeoutError):
        await until(lambda: named(admin, nodes, user), 5, "every connection named")
    assert named(admin, nodes, user), clients(admin)


@pytest.fixture
def server_dir(tmp_path: Path) -> Path:
    return tmp_path / "redis"


@pytest.fixture
def quiet() -> Iterator[None]:
    """The nodes of the test log no warning and no error: every connection worked the
    first time (a refused pool connection would be retried, and logged)."""
    with capture_logs() as logs:
        yield
    loud = [e for e in logs if e["log_level"] in ("warning", "error", "critical")]
    assert loud == []


# -- TLS -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["private CA", "client certificates", "verification off"])
@pytest.mark.usefixtures("quiet")
async def test_tls(case: str, certs: Certs, server_dir: Path) -> None:
    if case == "verification off":
        # A certificate the client has no CA for: only ssl_cert_reqs=none connects.
        tls = ServerTLS(certs.stranger.cert, certs.stranger.key, certs.ca)
        query = "ssl_cert_reqs=none"
    else:
        tls = ServerTLS(certs.server.cert, certs.server.key, certs.ca)
        query = f"ssl_ca_certs={certs.ca}"
    if case == "client certificates":
        query += f"&ssl_certfile={certs.client.cert}&ssl_keyfile={certs.client.key}"
    with RedisServer(tls=tls, auth_clients=case == "client certificates", dir=server_dir) as srv:
        url = f"{srv.url}?{query}"
        async with (
            start_node(url, "gwtls", node_id="a") as a,
            start_node(url, "gwtls", node_id="b") as b,
        ):
            await roundtrip(a.url, b.url)
            with srv.admin() as admin:
                await assert_named(admin, {"a", "b"})


async def test_a_private_ca_is_needed(certs: Certs, server_dir: Path) -> None:
    """The same server without the CA: nothing connects (no connection falls back to
    something unverified), and the reason is the certificate."""
    tls = ServerTLS(certs.server.cert, certs.server.key, certs.ca)
    with RedisServer(tls=tls, dir=server_dir) as srv:
        async with start_node(srv.url, "gwtls") as node, httpx.AsyncClient(timeout=10) as http:
            r = await http.post(
                f"{node.url}/v1/teams/{ev.team_id()}/events", json=ev.item(), headers=auth()
            )
            assert r.status_code == 503
            assert "CERTIFICATE_VERIFY_FAILED" in r.json()["error"]["message"]
            with srv.admin() as admin:
                # None got as far as naming itself (a connection in its TLS handshake
                # may be listed, unnamed, for a moment).
                assert [c for c in clients(admin) if c["name"]] == []


# -- credentials, database, socket ------------------------------------------------------------

#: What the gateway needs of an ACL user (docs/storage.md, "An ACL user").
GATEWAY_ACL = [
    "-@all", "+@read", "+@write", "+@stream", "+@pubsub", "+@scripting", "+ping", "+info",
    "+time", "+select", "+client|setname",
]  # fmt: skip


@pytest.mark.usefixtures("quiet")
async def test_an_acl_user(server_dir: Path) -> None:
    with RedisServer(harness_user=True, dir=server_dir) as srv:
        with srv.admin() as admin:
            admin.execute_command(
                "ACL", "SETUSER", "gw", "on", ">gw-pass", "resetkeys", "~gwacl:*",
                "resetchannels", "&gwacl:*", *GATEWAY_ACL,
            )  # fmt: skip
            admin.execute_command("ACL", "SETUSER", "default", "off")
        url = f"redis://gw:gw-pass@127.0.0.1:{srv.port}/0"
        async with (
            start_node(url, "gwacl", node_id="a") as a,
            start_node(url, "gwacl", node_id="b") as b,
        ):
            await roundtrip(a.url, b.url)
            with srv.admin() as admin:
                await assert_named(admin, {"a", "b"}, user="gw")
                assert admin.keys("gwacl:*")


@pytest.mark.usefixtures("quiet")
async def test_a_database_of_its_own(server_dir: Path) -> None:
    with RedisServer(password="db-pass", dir=server_dir) as srv:
        url = f"redis://:db-pass@127.0.0.1:{srv.port}/5"
        async with (
            start_node(url, "gwdb", node_id="a") as a,
            start_node(url, "gwdb", node_id="b") as b,
        ):
            await roundtrip(a.url, b.url)
            with srv.admin() as admin:
                await assert_named(admin, {"a", "b"})
                # Every key the nodes made (feeds, inbox streams) is in database 5.
                assert set(admin.info("keyspace")) == {"db5"}
                assert {c["db"] for c in clients(admin)} == {"5"}


@pytest.mark.usefixtures("quiet")
async def test_a_unix_socket(server_dir: Path) -> None:
    with RedisServer(unix_socket=True, password="sock-pass", dir=server_dir) as srv:
        url = f"unix://:sock-pass@{srv.socket}?db=3"
        async with (
            start_node(url, "gwsock", node_id="a") as a,
            start_node(url, "gwsock", node_id="b") as b,
        ):
            await roundtrip(a.url, b.url)
            with srv.admin() as admin:
                await assert_named(admin, {"a", "b"})
                # Over the socket only (its clients' addresses are the socket's).
                assert all(c["addr"].startswith("/") for c in clients(admin)), clients(admin)
                assert set(admin.info("keyspace")) == {"db3"}


@pytest.mark.usefixtures("quiet")
async def test_sentinels_and_master_with_passwords_of_their_own() -> None:
    async with (
        ReplicatedSet(0, password="master-pass") as rset,
        SentinelGroup(rset, 2, quorum=1, username="watcher", password="sentinel-pass") as group,
    ):
        sentinels = ",".join(f"127.0.0.1:{port}" for port in group.ports)
        url = f"redis+sentinel://:master-pass@{sentinels}/{group.name}/2"
        options = {"redis_sentinel_username": "watcher", "redis_sentinel_password": "sentinel-pass"}
        async with (
            start_node(url, "gwsent", node_id="a", **options) as a,
            start_node(url, "gwsent", node_id="b", **options) as b,
        ):
            await roundtrip(a.url, b.url)
            with rset.master.admin() as admin:
                await assert_named(admin, {"a", "b"})
                assert set(admin.info("keyspace")) == {"db2"}
            # The nodes asked the Sentinels as their own user, under their names.
            asked = set()
            for sentinel in group.sentinels:
                with client(sentinel.port, username="watcher", password="sentinel-pass") as c:
                    asked |= {(x["user"], x["name"]) for x in c.client_list()}
            assert {("watcher", "gateway:a"), ("watcher", "gateway:b")} <= asked, asked


# -- failures say why, once ---------------------------------------------------------------------

WRONG = "wrong-pass-Q7x"
RIGHT = "right-pass-K2w"


def log_lines(node: GatewayProcess) -> list[dict[str, Any]]:
    """The node's JSON log lines (the harness's header lines left out)."""
    text = node.log.read_text(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


async def test_a_wrong_password_says_so_once_and_recovers(tmp_path: Path, server_dir: Path) -> None:
    """A node with a wrong password keeps running (no crash loop), unready, and says
    why once per loop, at warning, without a traceback or the password; given the
    password, it recovers by itself, says so once, and serves."""
    with RedisServer(harness_user=True, dir=server_dir) as srv:
        with srv.admin() as admin:
            admin.execute_command("ACL", "SETUSER", "gw", "on", f">{RIGHT}", "~*", "&*", "+@all")
            admin.execute_command("ACL", "SETUSER", "default", "off")
        env = {
            "GATEWAY_REDIS_URL": f"redis://gw:{WRONG}@127.0.0.1:{srv.port}/0",
            "GATEWAY_REDIS_PREFIX": "gwpass",
            "GATEWAY_NODE_ID": "a",
            "GATEWAY_READ_BLOCK_MS": "200",
        }
        a = GatewayProcess("a", tmp_path, env)
        a.spawn()
        try:
            # Several retries of every loop (four inboxes, the readiness ping).
            async def failed_often() -> bool:
                try:
                    status = (await a.readyz())[0]
                    errors = await a.metric("gateway_redis_errors_total")
                except httpx.ConnectError:
                    return False  # not listening yet
                said = any(line["event"] == "not ready" for line in log_lines(a))
                return status == 503 and errors >= 16 and said

            with anyio.fail_after(30, reason="the node did not fail repeatedly"):
                while not await failed_often():
                    assert a.running, a.log_tail()
                    await anyio.sleep(0.1)
            lines = log_lines(a)
            warnings = [line for line in lines if line["level"] == "warning"]
            inboxes = [w for w in warnings if w["event"] == "inbox read failed"]
            assert sorted(w["inbox"] for w in inboxes) == ["a2ui", "run", "sparktide", "team"]
            unready = [w for w in warnings if w["event"] == "not ready"]
            assert len(unready) == 1, warnings
            assert unready[0]["cause"].startswith("redis unavailable during ping: ")
            sweep = [w for w in warnings if w["event"] == "sweeping run leases failed"]
            assert len(sweep) == 1, warnings
            for w in [*inboxes, *unready, *sweep]:
                assert "AuthenticationError: WRONGPASS invalid username-password pair" in str(w)
            assert len(warnings) == len(inboxes) + len(unready) + len(sweep), warnings
            text = a.log.read_text()
            assert "Traceback" not in text and "exception" not in text
            # The password given, the node recovers by itself.
            with srv.admin() as admin:
                admin.execute_command("ACL", "SETUSER", "gw", f">{WRONG}")
            await a.wait_ready(within=20)
            await until(
                lambda: (
                    sum(line["event"] == "inbox read failed: recovered" for line in log_lines(a))
                    == 4
                ),
                within=15,
                what="every inbox loop's recovery logged",
            )
            assert [line["event"] for line in log_lines(a)].count("ready again") == 1
            await until(
                lambda: any(
                    line["event"] == "sweeping run leases failed: recovered"
                    for line in log_lines(a)
                ),
                within=15,
                what="the lease sweep's recovery logged",
            )
            url = f"redis://gw:{RIGHT}@127.0.0.1:{srv.port}/0"
            async with start_node(url, "gwpass", node_id="b") as b:
                await roundtrip(a.url, b.url)
            text = a.log.read_text()
            assert WRONG not in text and RIGHT not in text
            assert "Traceback" not in text
        finally:
            a.kill()


async def test_a_url_no_connection_could_use_is_refused_at_start_up() -> None:
    """``gateway serve`` refuses, before it runs, a URL with a parameter it does not
    know (nothing fails open), saying which, and never prints the password."""
    from tests.support.gateway_process import CLI, base_env

    for url, says in [
        (f"redis://gw:{WRONG}@127.0.0.1:1/0?sslmode=require", "unknown query parameter 'sslmode'"),
        (f"rediss://gw:{WRONG}@127.0.0.1:1/0?ssl_ca_certs=/nonexistent.pem", "no such file"),
        (f"unix://gw:{WRONG}@host/tmp/redis.sock", "names no host"),
    ]:
        with anyio.fail_after(30):
            done = await anyio.run_process(
                CLI, env=base_env({"GATEWAY_REDIS_URL": url}), check=False
            )
        err = done.stderr.decode()
        assert done.returncode == 2 and says in err, err
        assert WRONG not in err and WRONG not in done.stdout.decode()


async def test_the_feed_reader_says_why_once_and_when_it_recovers(server_dir: Path) -> None:
    """The node's reader, refused by Redis on every retry, logs each reason once (not
    once per retry) and its recovery once; live delivery then goes on."""
    reads = 0

    async def count() -> None:
        nonlocal reads
        reads += 1

    with RedisServer(harness_user=True, dir=server_dir) as srv, srv.admin() as admin:
        admin.execute_command("ACL", "SETUSER", "gw", "on", f">{RIGHT}", "~*", "&*", "+@all")
        admin.execute_command("ACL", "SETUSER", "default", "off")
        url = f"redis://gw:{RIGHT}@127.0.0.1:{srv.port}/0"
        team = ev.team_id()
        path = f"/v1/teams/{team}/events"
        with capture_logs() as logs:
            async with (
                start_node(url, "gwhub", hooks=Hooks(before_read=count)) as node,
                httpx.AsyncClient(base_url=node.url, timeout=10) as http,
            ):
                r = await http.post(path, json=ev.item(), headers=auth())
                assert r.status_code == 200
                with anyio.fail_after(30):
                    async with aconnect_sse(http, "GET", path, headers=auth()) as source:
                        follow = source.aiter_sse()
                        await anext(follow)  # the reader follows the feed now
                        # Every connection dropped, and none can come back: the
                        # password is another one now.
                        admin.execute_command("ACL", "SETUSER", "gw", "resetpass", f">{WRONG}")
                        admin.execute_command("CLIENT", "KILL", "USER", "gw")
                        failing = [0]

                        def failed_reads() -> int:
                            warned = [e for e in logs if e["event"] == "feed read failed"]
                            if warned and not failing[0]:
                                failing[0] = reads
                            return reads - failing[0] if failing[0] else 0

                        await until(lambda: failed_reads() >= 6, 20, "the reader retrying")
                        admin.execute_command("ACL", "SETUSER", "gw", f">{RIGHT}")
                        await until(
                            lambda: any(e["event"] == "feed read failed: recovered" for e in logs),
                            20,
                            "the reader's recovery",
                        )
                        r = await http.post(path, json=ev.item(), headers=auth())
                        assert r.status_code == 200
                        assert (await anext(follow)).id == r.json()["cursors"][0]
        warned = [e for e in logs if e["event"] == "feed read failed"]
        reasons = [e["reason"] for e in warned]
        # Once per reason (the connection lost, then the password refused), and at
        # warning; the retries in between say nothing.
        assert len(set(reasons)) == len(reasons) and 1 <= len(reasons) <= 3, reasons
        assert all(e["log_level"] == "warning" for e in warned)
        assert "WRONGPASS" in reasons[-1]
        recovered = [e for e in logs if e["event"] == "feed read failed: recovered"]
        assert len(recovered) == 1 and recovered[0]["failures"] >= 6
        assert not any(RIGHT in str(e) or WRONG in str(e) for e in logs)
