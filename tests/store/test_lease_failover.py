"""A run abandoned across a Redis failover still ends once (docs/contract.md, "Runs
end"): its lease, its live-run index entry and its events are replicated; the master
dies while the run is live, the Sentinels promote the replica, and the nodes' sweeps end
the run on the new master with one ``RUN_ERROR`` ``producer_lost``.

A master with one replica and three Sentinels (:mod:`tests.support.redis_sentinel`), two
nodes configured with the Sentinel URL, real HTTP (httpx).
"""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from gateway.errors import Unavailable
from gateway.feed import Cursor, run_feed
from tests.support import events as ev
from tests.support.node import auth, lease_ends, start_node
from tests.support.redis_sentinel import ReplicatedSet, SentinelGroup

pytestmark = [pytest.mark.anyio, pytest.mark.redis_admin, pytest.mark.slow]

LEASE = 5


async def test_an_abandoned_run_ends_once_after_a_failover() -> None:
    thread, run = ev.new_id(), ev.new_id()
    path = f"/v1/threads/{thread}/runs/{run}/ui/ag-ui"
    feed = run_feed("acme", thread, run)
    async with (
        ReplicatedSet(1) as rset,
        SentinelGroup(rset) as sentinels,
        start_node(sentinels.url, "gwlease") as a,
        start_node(sentinels.url, "gwlease") as b,
        httpx.AsyncClient(base_url=a.url, timeout=10) as client,
    ):
        r = await client.post(
            path,
            json=[
                {"type": "RUN_STARTED", "threadId": thread, "runId": run},
                {"type": "CUSTOM", "name": "work", "value": 1},
            ],
            headers=auth(),
            params={"lease_seconds": LEASE},
        )
        assert r.status_code == 200, r.text
        await rset.wait_synced()
        replica = rset.replicas[0]
        rset.master.kill()
        await sentinels.wait_master(replica.port)

        async def ended() -> list[dict[str, object]] | None:
            try:
                state = await a.backend.feeds.state(feed)
                if state is None:
                    return None
                items = await a.backend.feeds.read(feed, Cursor(state.epoch, 0), 100)
            except Unavailable:  # the node is still finding the new master
                return None
            events = [json.loads(item.data) for item in items]
            done = any(e["type"] == "RUN_ERROR" for e in events)
            return events if done else None

        # The lease, the failover's own time (Sentinels' down-after and election)
        # and the sweep's margin.
        with anyio.fail_after(LEASE + 2 + 15):
            while not (events := await ended()):  # noqa: ASYNC110 - the lease's clock
                await anyio.sleep(0.1)
        ends = [e for e in events if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
        assert len(ends) == 1 and events[-1] == ends[0], events
        assert ends[0]["code"] == "producer_lost"
        assert sorted(await lease_ends([a, b], 1)) == [0, 1]
        late = {"type": "CUSTOM", "name": "late", "value": 1}
        r = await client.post(path, json=late, headers=auth())
        assert r.status_code == 409 and r.json()["error"]["code"] == "run_ended", r.text
