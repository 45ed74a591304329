"""Load-generator publisher: publishes through the gateway's real publish path.

``--pub py:bench/gateway_pub.py:make`` makes ``bench/loadgen.py`` publish each event as a
team event (``team_message`` whose text is the load generator's marker JSON) with the gateway's
Python producer API: validated against the seed schema in this process and appended
to Redis by the same atomic step the HTTP route and the inbox use.  The gateway under
test only reads and fans out, as a node behind an ingest tier would.

Environment: ``BENCH_REDIS_URL``, ``BENCH_PREFIX`` (default gw), ``BENCH_TENANT``,
``BENCH_REDIS_CLUSTER`` (``1``: the URL names nodes of a Redis Cluster),
``BENCH_PUB_GATEWAY`` (a checkout whose ``gateway`` package publishes instead of this
one's: an A/B of the gateway under test with the same publisher on both sides).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections import defaultdict
from typing import Any

if os.environ.get("BENCH_PUB_GATEWAY"):
    sys.path.insert(0, os.environ["BENCH_PUB_GATEWAY"])
    for _name in [m for m in sys.modules if m == "gateway" or m.startswith("gateway.")]:
        del sys.modules[_name]  # the load generator may have imported ours already

from gateway.producer import Producer

SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def team_event(text: str, seq: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "event_id": str(uuid.uuid4()),
        "thread_id": "0190f5a2-7c1e-7b3d-8a4f-000000000002",
        "branch_id": "0190f5a2-7c1e-7b3d-8a4f-000000000003",
        "epoch": 1,
        "type": "team_message",
        "type_version": 1,
        "time": 1_760_000_000_000,
        "actor": {"kind": "host"},
        "prev_hash": SHA,
        "critical": True,
        "data": {"message_id": f"m-{seq}", "from": "bench", "to": "*", "text": text},
    }


class ProducerPub:
    def __init__(self) -> None:
        self.tenant = os.environ.get("BENCH_TENANT", "bench")
        self.producer = Producer.connect(
            os.environ["BENCH_REDIS_URL"],
            prefix=os.environ.get("BENCH_PREFIX", "gw"),
            cluster=os.environ.get("BENCH_REDIS_CLUSTER") == "1",
        )
        self.seq = 0

    def _item(self, data: str) -> dict[str, Any]:
        self.seq += 1
        return {"source": {"kind": "team"}, "event": team_event(data, self.seq)}

    async def publish(self, ch: int, channel: str, data: str) -> None:
        await self.producer.publish_team_batch(self.tenant, channel, [self._item(data)])

    async def many(self, items: list[tuple[int, str, str]]) -> None:
        # the load generator's batches go round the channels: one pipelined round trip for all
        # the teams of a batch (each team's items still one atomic append).
        by_channel: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for _, channel, data in items:
            by_channel[channel].append(self._item(data))
        results = await self.producer.publish_team_many(self.tenant, by_channel)
        for channel, result in results.items():
            if isinstance(result, Exception):
                raise RuntimeError(f"publishing to {channel} failed: {result}")

    async def aclose(self) -> None:
        await self.producer.aclose()


def make(args: Any) -> ProducerPub:
    return ProducerPub()
