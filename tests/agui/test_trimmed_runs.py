"""A long run whose start retention trimmed: the prelude comes from the fold kept with it.

Run feeds trim in whole blocks, and publishers keep the fold at each block boundary with
the feed before trimming reaches it (``FoldCache.persist``), so a node that never saw the
run's start (its own empty fold cache) still builds the exact prelude (contract D7).
Both logs; for the embedded one the two nodes share one log.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

from gateway.agui.fold import RunFold
from gateway.feed import run_feed
from gateway.store.memory import memory_backend
from tests.support.node import auth, start_node

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

THREAD, RUN = "long-thread", "long-run"
PATH = f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui"


def long_run(n: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN},
        {"type": "STATE_SNAPSHOT", "snapshot": {"turn": 0}},
        {"type": "TEXT_MESSAGE_START", "messageId": "intro"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "intro", "delta": "from the start"},
        {"type": "TEXT_MESSAGE_END", "messageId": "intro"},
    ]
    turn = 0
    while len(events) < n:
        turn += 1
        events += [
            {"type": "TEXT_MESSAGE_START", "messageId": f"m{turn}"},
            *[
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": f"m{turn}", "delta": f"{i} "}
                for i in range(8)
            ],
            {
                "type": "TOOL_CALL_START",
                "toolCallId": f"t{turn}",
                "toolCallName": "f",
                "parentMessageId": f"m{turn}",
            },
            {"type": "TOOL_CALL_ARGS", "toolCallId": f"t{turn}", "delta": "{}"},
            {"type": "TOOL_CALL_END", "toolCallId": f"t{turn}"},
            {"type": "TEXT_MESSAGE_END", "messageId": f"m{turn}"},
            {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/turn", "value": turn}]},
        ]
    return events[:n]


async def prelude_at(client: httpx.AsyncClient, cursor: str | None) -> list[dict[str, Any]]:
    headers = auth() if cursor is None else {**auth(), "Last-Event-ID": cursor}
    got: list[dict[str, Any]] = []
    with anyio.fail_after(20):
        async with aconnect_sse(client, "GET", PATH, headers=headers) as source:
            async for sse in source.aiter_sse():
                if sse.id:
                    break  # the first event after the prelude
                got.append(json.loads(sse.data))
    return got


async def test_a_node_that_never_saw_the_start_builds_the_exact_prelude(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    shared = memory_backend() if url is None else None
    events = long_run(6500)
    settings = {
        "run_retention": 2500,
        "history_page": 300,
        "publish_rate": 1e6,
        "publish_burst": 100_000,
    }
    async with start_node(url, prefix, backend=shared, **settings) as a:
        async with httpx.AsyncClient(base_url=a.url, timeout=20) as client:
            cursors: list[str] = []
            for start in range(0, len(events), 500):
                r = await client.post(PATH, json=events[start : start + 500], headers=auth())
                assert r.status_code == 200, r.text
                cursors += r.json()["cursors"]
        state = await a.backend.feeds.state(run_feed("acme", THREAD, RUN))
        assert state is not None
        # Trimmed, in whole blocks: the first retained offset follows a block boundary.
        assert state.first > 1 and (state.first - 1) % 1000 == 0
        assert state.head - state.first + 1 < 2500 + 1000

    async with (
        start_node(url, prefix, backend=shared, **settings) as b,  # empty fold cache
        httpx.AsyncClient(base_url=b.url, timeout=20) as client,
    ):
        trimmed_at = state.first - 1
        for k in (trimmed_at, trimmed_at + 1, trimmed_at + 777, len(events) - 5):
            expected = RunFold()
            for event in events[:k]:
                expected.apply(event)
            got = await prelude_at(client, cursors[k - 1])
            assert got == expected.prelude(THREAD, RUN), k
        # No cursor: every retained item, after the prelude of what was trimmed.
        expected = RunFold()
        for event in events[:trimmed_at]:
            expected.apply(event)
        assert await prelude_at(client, None) == expected.prelude(THREAD, RUN)
        assert b.context.folds.items_folded < len(events) - trimmed_at + 10
