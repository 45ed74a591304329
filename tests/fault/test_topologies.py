"""The fault suite's own support does what it says: HAProxy, Sentinel, Cluster, namespaces.

These check the tools, not the gateway, so that a failing scenario points at the
gateway: HAProxy balances, takes a dead node out and cuts streams on demand; the
lagging-replica recipe really loses the writes made during the partition; a cluster
fails over and migrates a slot; a socket made in a namespace goes silent when its
link goes down.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse
from redis.cluster import RedisCluster as ClusterClient

from tests.support import events as ev
from tests.support import netns
from tests.support.gateway_process import Fleet, tracebacks
from tests.support.haproxy import HAProxy, config
from tests.support.node import auth
from tests.support.redis_cluster import RedisCluster, parse_nodes
from tests.support.redis_sentinel import (
    ReplicatedSet,
    SentinelGroup,
    client,
    promote_lagging_replica,
    sentinel_url,
)

pytestmark = [pytest.mark.anyio, pytest.mark.fault]


def test_haproxy_config_checks_readyz_and_names_the_node() -> None:
    text = config([("gw0", 1001), ("gw1", 1002)], port=2000, socket_path=Path("/tmp/x.sock"))
    assert "option httpchk GET /readyz" in text
    assert "http-response set-header X-Gateway-Node %[srv_name]" in text
    assert "server gw0 127.0.0.1:1001 check" in text and "server gw1 127.0.0.1:1002 check" in text
    assert "bind 127.0.0.1:2000" in text and "balance roundrobin" in text


def test_parse_cluster_nodes() -> None:
    text = (
        "a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [5461->-b2]\n"
        "b2 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922 16000\n"
        "c3 127.0.0.1:7003@17003 slave,fail a1 0 0 1 connected\n"
    )
    a, b, c = parse_nodes(text)
    assert (a.port, a.slots, a.is_master) == (7001, ((0, 5460),), True)
    assert b.slots == ((5461, 10922), (16000, 16000))
    assert (c.master_id, c.failed, c.is_master) == ("a1", True, False)


def test_tracebacks_in_logs_are_found_with_their_last_exception(tmp_path: Path) -> None:
    logs = tmp_path / "logs"  # not tmp_path itself, which the suite checks for tracebacks
    logs.mkdir()
    (logs / "gw0.log").write_text('{"event": "fine"}\n')
    (logs / "gw1.log").write_text(
        "Traceback (most recent call last):\n  ExceptionGroup: one\n"
        "    | RuntimeError: the handler is closed\n"
    )
    (logs / "gw2.log").write_text(
        json.dumps(
            {
                "event": "handler failed",
                "exception": "Traceback (most...)\n  File x\nRuntimeError: closed transport",
            }
        )
        + "\n"
    )
    assert tracebacks(logs) == [
        "gw1.log: RuntimeError: the handler is closed",
        "gw2.log: RuntimeError: closed transport",
    ]


def test_sentinel_url() -> None:
    assert sentinel_url([1, 2], "m") == "redis+sentinel://127.0.0.1:1,127.0.0.1:2/m"


@pytest.mark.slow
async def test_haproxy_balances_takes_a_dead_node_out_and_cuts_streams(tmp_path: Path) -> None:
    team = ev.team_id()
    async with Fleet(tmp_path, 2, {}) as fleet:  # the embedded log: each node its own
        with HAProxy([(n.name, n.port) for n in fleet.nodes]) as lb:
            await lb.wait_states({"gw0": "UP", "gw1": "UP"})
            async with httpx.AsyncClient(base_url=lb.url, timeout=5) as http:
                served = [(await http.get("/healthz")).headers["x-gateway-node"] for _ in range(4)]
                assert served == ["gw0", "gw1", "gw0", "gw1"]
                for node in fleet.nodes:  # the feed on both nodes' embedded logs
                    async with httpx.AsyncClient(base_url=node.url) as direct:
                        r = await direct.post(
                            f"/v1/teams/{team}/events", json=[ev.item()], headers=auth()
                        )
                    assert r.status_code == 200, r.text
                with anyio.fail_after(10):
                    async with aconnect_sse(
                        http, "GET", f"/v1/teams/{team}/events", headers=auth()
                    ) as s:
                        assert s.response.status_code == 200
                        events = s.aiter_sse()
                        first = await events.__anext__()
                        assert json.loads(first.data)["kind"] == "event"
                        lb.shutdown_sessions(s.response.headers["x-gateway-node"])
                        with pytest.raises(httpx.RemoteProtocolError):
                            async for _ in events:
                                pass
            fleet.nodes[0].kill()
            await lb.wait_states({"gw0": "DOWN", "gw1": "UP"})


@pytest.mark.slow
@pytest.mark.redis_admin
async def test_lagging_replica_recipe_loses_the_partitioned_writes() -> None:
    async with ReplicatedSet(1) as rset, SentinelGroup(rset) as sentinels:
        assert sentinels.master_port() == {rset.master.port}

        def write(key: str) -> None:
            with client(rset.master.port) as master:
                master.set(key, 1)

        await anyio.to_thread.run_sync(write, "before")

        async def write_more() -> None:
            await anyio.to_thread.run_sync(write, "during")

        promoted = await promote_lagging_replica(rset, sentinels, write_more)
        assert promoted is rset.replicas[0] and not rset.master.running
        assert sentinels.master_port() == {promoted.port}
        with client(promoted.port) as r:
            assert r.get("before") == "1" and r.get("during") is None
            assert r.info("replication")["role"] == "master"


@pytest.mark.slow
@pytest.mark.redis_admin
async def test_cluster_fails_over_and_migrates_a_slot() -> None:
    async with RedisCluster(3, 1) as cluster:
        assert len(cluster.masters()) == 3
        c = ClusterClient(host="127.0.0.1", port=cluster.running[0].port, decode_responses=True)
        try:
            keys = [f"k{{t{i}}}" for i in range(30)]
            for k in keys:
                c.set(k, "v")
            assert all(cluster.keys_by_master("k*").values())  # every shard holds some

            slot = cluster.keyslot(keys[0])
            source = cluster.owner(slot)
            target = next(m.port for m in cluster.masters() if m.port != source.port)
            await anyio.to_thread.run_sync(cluster.begin_migration, slot, target)
            c.set(keys[0], "during")  # still served (from the source, or by ASK)
            assert cluster.move_keys(slot, source.port, target) >= 1
            cluster.finish_migration(slot, source.port, target)
            await cluster.wait_ok()
            assert cluster.owner(slot).port == target
            assert keys[0] in cluster.keys_by_master("k*")[target]

            victim = cluster.owner(cluster.keyslot(keys[1]))
            cluster.kill(victim.port)
            promoted = await cluster.wait_failover(victim)
            assert cluster.owner(cluster.keyslot(keys[1])).port == promoted
        finally:
            c.close()


@pytest.fixture
def namespace() -> Iterator[netns.VethNamespace]:
    missing = netns.available()
    if missing is not None:
        pytest.fail(missing)
    with netns.VethNamespace() as ns:
        yield ns


def test_namespace_socket_goes_silent_when_its_link_is_down(
    namespace: netns.VethNamespace,
) -> None:
    ns = namespace
    with socket.socket() as server:
        server.bind((ns.host_address, 0))
        server.listen()
        inside = ns.socket()
        inside.settimeout(2)
        inside.connect(server.getsockname())
        peer, (address, _) = server.accept()
        with inside, peer:
            assert address == ns.peer_address  # it really comes from the namespace
            peer.sendall(b"up")
            assert inside.recv(2) == b"up"
            ns.link_down()
            peer.sendall(b"lost")
            inside.settimeout(0.5)
            with pytest.raises(TimeoutError):
                inside.recv(4)
