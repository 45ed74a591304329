"""Half-open TCP: a WebSocket client whose link vanishes is freed by the gateway's pings.

A ``gateway serve`` node listens on one end of a veth pair
(:class:`tests.support.netns.VethNamespace`); a WebSocket client in the namespace at
the other end subscribes and receives, then its link goes down: no FIN, no RST,
nothing crosses any more.  A second follower, in this namespace, keeps receiving.
The node must find the dead peer by its pings (``GATEWAY_WS_PING_INTERVAL`` and
``GATEWAY_WS_PING_TIMEOUT``, D6: "a dead peer is found and freed within interval +
timeout") while it keeps publishing to it: the socket is closed within
:data:`sizes.HALF_OPEN_BOUND`, counted as a client disconnect, and the other follower
gets every item exactly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from tests.fault import sizes
from tests.support import events as ev
from tests.support import netns
from tests.support.delivery import check
from tests.support.followers import WsFollower, read_feed
from tests.support.gateway_process import GatewayProcess
from tests.support.node import auth
from tests.support.publisher import Publisher
from tests.support.redis_server import RedisServer
from tests.support.wait import until

pytestmark = [pytest.mark.anyio, pytest.mark.fault, pytest.mark.slow]


@pytest.fixture
def namespace() -> Iterator[netns.VethNamespace]:
    missing = netns.available()
    if missing is not None:
        pytest.fail(missing)
    with netns.VethNamespace() as ns:
        yield ns


async def _ws_connections(node: GatewayProcess) -> float:
    return await node.metric("gateway_connections", transport="ws")


async def test_half_open_websocket_is_freed_by_pings(
    tmp_path: Path,
    redis_single: RedisServer,
    namespace: netns.VethNamespace,
    measure: Callable[[str, object], None],
) -> None:
    ns = namespace
    env = {
        **sizes.NODE_ENV,
        "GATEWAY_REDIS_URL": redis_single.url,
        "GATEWAY_WS_PING_INTERVAL": str(sizes.PING_INTERVAL),
        "GATEWAY_WS_PING_TIMEOUT": str(sizes.PING_TIMEOUT),
    }
    node = GatewayProcess("gw0", tmp_path, env, host=ns.host_address)
    team = ev.team_id()
    feed = f"team/{team}"
    try:
        await node.start()
        async with Publisher(node.url, [team]) as pub, anyio.create_task_group() as tg:
            with anyio.fail_after(sizes.SCENARIO_TIMEOUT):
                await pub.publish(team, 1)
                healthy = WsFollower("healthy", [feed])
                tg.start_soon(healthy.run, node.ws_url)

                # The client in the namespace: its socket is made there, then used here.
                sock = ns.socket()
                sock.settimeout(5)
                await anyio.to_thread.run_sync(sock.connect, (ns.host_address, node.port))
                sock.setblocking(False)
                remote = connect(
                    node.ws_url,
                    sock=sock,
                    subprotocols=[Subprotocol("gateway.v1")],
                    additional_headers=auth(),
                    compression=None,
                    proxy=None,
                    open_timeout=5,
                    close_timeout=1,
                    ping_interval=None,
                )
                ws = await remote
                try:
                    await ws.send(json.dumps({"type": "subscribe", "feed": feed}))
                    frames = [json.loads(await ws.recv()) for _ in range(2)]
                    assert [f["type"] for f in frames] == ["subscribed", "event"], frames
                    await until(lambda: healthy.received(feed) >= 1, sizes.SETTLE, "healthy")
                    assert await _ws_connections(node) == 2

                    before = await node.metric(
                        "gateway_disconnects_total", transport="ws", reason="client"
                    )
                    ns.link_down()
                    down = time.monotonic()
                    tg.start_soon(pub.run, anyio.Event())  # items keep coming for it
                    freed = None
                    while freed is None:
                        if await _ws_connections(node) == 1:
                            freed = time.monotonic() - down
                        elif time.monotonic() - down > sizes.HALF_OPEN_BOUND + 5:
                            break
                        else:
                            await anyio.sleep(0.1)  # polling another process, bounded
                    after = await node.metric(
                        "gateway_disconnects_total", transport="ws", reason="client"
                    )
                finally:
                    ws.transport.abort()  # its link is down: no close handshake
                tg.cancel_scope.cancel()
            acked = {feed: list(pub.acked[feed])}
        final = {feed: await read_feed(node.ws_url, feed)}
    except BaseException:
        print(node.log_tail())
        raise
    finally:
        node.kill()

    measure("half-open socket freed after (s)", freed if freed is not None else "never")
    measure("bound (s)", sizes.HALF_OPEN_BOUND)
    assert freed is not None, f"not freed within {sizes.HALF_OPEN_BOUND + 5}s\n{node.log_tail()}"
    assert freed <= sizes.HALF_OPEN_BOUND, freed
    assert after == before + 1, (before, after)
    # The healthy follower was not disturbed; it got everything acknowledged before
    # it was stopped (a cancelled follower may miss the last few: compared up to its end).
    trace = healthy.traces[feed]
    last = healthy.position(feed)
    assert last is not None
    upto = [(c, p) for c, p in acked[feed] if tuple(map(int, c.split(":"))) <= last]
    assert len(upto) >= 2, upto
    report = check({feed: upto}, [trace])
    report.assert_clean()
    assert final[feed][: len(upto)] == upto
    assert len(healthy.connections) == 1, healthy.connections
