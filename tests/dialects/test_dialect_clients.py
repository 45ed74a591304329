"""The dialects end to end: published to a real node, read by the real clients.

- SparkTide events published over HTTP are followed by an unmodified AG-UI ``HttpAgent``
  (``@ag-ui/client``, ``tests/js/agui_http.mjs``) from the start and resumed after every
  item of the run feed: its own verification accepts each stream, and each client ends
  with the messages and state of the one that saw the run from the start.
- A2UI messages published over HTTP (including a surface rebuilt to keep its list short)
  are read by ``HttpAgent`` joined at every cut, and over WebSocket in the ``a2ui`` format
  subscribed at every cut; ``@a2ui/web_core``'s ``MessageProcessor``
  (``tests/js/a2ui_replay.mjs``) renders each, fresh and on top of what a client held
  before it resumed, and every render holds the surfaces of a client that saw every
  message.

Both logs (``log_kind``).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from gateway.agui.fold import RunFold
from gateway.app import Gateway
from gateway.dialects import a2ui
from gateway.dialects.sparktide import RunState
from gateway.dialects.sparktide_agui import plan
from tests.agui.test_http_agent import node_exe
from tests.dialects.a2ui_runs import DATA_EDGES, SURFACES, components, create, data, text
from tests.dialects.sparktide_runs import CONVERSATION, EVERYTHING, RUN, SYNTHESISED
from tests.dialects.test_client_parity import JS, _operations, _ordered, render
from tests.support.node import auth, open_ws, token

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Event = dict[str, Any]
Message = dict[str, Any]


async def post(node: Gateway, path: str, body: Any) -> list[str]:
    async with httpx.AsyncClient(base_url=node.url, timeout=30) as client:
        r = await client.post(path, json=body, headers=auth())
        assert r.status_code == 200, r.text
        cursors: list[str] = r.json()["cursors"]
        return cursors


async def http_agent(
    node: Gateway, thread: str, run: str, cuts: list[str | None]
) -> list[dict[str, Any]]:
    """One ``HttpAgent.runAgent`` per cut (None: from the start)."""
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [node_exe(), str(JS / "agui_http.mjs"), node.url, token(), thread, run],
            input=json.dumps({"cursors": cuts}).encode(),
        )
    results: list[dict[str, Any]] = json.loads(done.stdout.decode().splitlines()[-1])["results"]
    assert len(results) == len(cuts)
    return results


def every_cut(epoch: str, head: int) -> list[str | None]:
    return [None, *[f"{epoch}:{offset}" for offset in range(head + 1)]]


# --------------------------------------------------------------------------- SparkTide


@pytest.mark.parametrize("events", [EVERYTHING, SYNTHESISED], ids=["everything", "synthesised"])
async def test_sparktide_runs_through_the_ag_ui_client_at_every_cut(
    node: Gateway, events: list[Event]
) -> None:
    path = "/v1/sparktide/events"
    cursors = await post(node, path, events[:1])
    cursors += await post(node, path, events[1 : len(events) // 2])
    cursors += await post(node, path, events[len(events) // 2 :])
    _, planned = plan(RunState(), events, {})
    derived = [e for p in planned for e in p.derived]
    epoch, head = cursors[-1].split(":")
    assert int(head) == len(derived)
    cuts = every_cut(epoch, len(derived))
    results = await http_agent(node, CONVERSATION, RUN, cuts)
    reference = results[0]
    assert reference["ok"], reference
    assert reference["events"] == len(derived)
    expected = RunFold()
    for event in derived:
        expected.apply(event)
    assert reference["messages"] == expected.messages
    for cut, result in zip(cuts, results, strict=True):
        assert result["ok"], (cut, result)
        assert result["messages"] == reference["messages"], cut
        assert result["state"] == reference["state"], cut


# --------------------------------------------------------------------------- A2UI

THREAD, A2UI_RUN = "a2ui-thread", "a2ui-run"
FEED = f"run/{THREAD}/{A2UI_RUN}"
LONG = [
    create("long"),
    components("long", text("root", {"path": "/n"})),
    *[data("long", "/n", i) for i in range(a2ui.MAX_OPERATIONS + 4)],
]
MESSAGES: list[Message] = [*SURFACES, *DATA_EDGES, *LONG]


async def publish_a2ui_run(node: Gateway) -> tuple[list[Event], list[str]]:
    """The run: RUN_STARTED, the messages in bodies of 10, RUN_FINISHED.  Returns the
    feed's events and cursors."""
    agui = f"/v1/threads/{THREAD}/runs/{A2UI_RUN}/ui/ag-ui"
    started = {"type": "RUN_STARTED", "threadId": THREAD, "runId": A2UI_RUN}
    cursors = await post(node, agui, started)
    for at in range(0, len(MESSAGES), 10):
        cursors += await post(
            node, f"/v1/threads/{THREAD}/runs/{A2UI_RUN}/a2ui", MESSAGES[at : at + 10]
        )
    finished = {"type": "RUN_FINISHED", "threadId": THREAD, "runId": A2UI_RUN}
    cursors += await post(node, agui, finished)
    events = [started, *a2ui.derive(MESSAGES, RunFold()), finished]
    assert len(cursors) == len(events)
    assert any("metadata" in e for e in events), "the long surface is rebuilt"
    return events, cursors


async def test_a2ui_through_the_ag_ui_client_at_every_cut(node: Gateway) -> None:
    events, cursors = await publish_a2ui_run(node)
    epoch = cursors[0].split(":")[0]
    cuts = every_cut(epoch, len(events))
    results = await http_agent(node, THREAD, A2UI_RUN, cuts)
    streams: dict[str, list[Message]] = {}
    for cut, result in zip(cuts, results, strict=True):
        assert result["ok"], (cut, result)
        streams[str(cut)] = _operations(result["messages"])
        assert len(streams[str(cut)]) <= 3 * a2ui.MAX_OPERATIONS, "bounded activity lists"
    out = render(streams)
    full = _ordered(a2ui.view(MESSAGES))
    for name, result in out.items():
        assert _ordered(result["surfaces"]) == full, name
        assert result["errors"] == [], name


async def test_a2ui_over_websocket_at_every_cut(node: Gateway) -> None:
    events, cursors = await publish_a2ui_run(node)
    epoch = cursors[0].split(":")[0]
    streams: dict[str, list[Message]] = {}
    async with open_ws(node) as ws:
        for offset in [None, *range(len(events) + 1)]:
            subscribe: dict[str, Any] = {"type": "subscribe", "feed": FEED, "format": "a2ui"}
            if offset is not None:
                subscribe["after"] = f"{epoch}:{offset}"
            await ws.send(json.dumps(subscribe))
            assert json.loads(await ws.recv())["type"] == "subscribed"
            # What the gateway sends (the count only says when to stop reading).
            seen = 0 if offset is None else offset
            prelude = [] if not seen else a2ui.rejoin_messages(fold_of(events[:seen]))
            rest = [m for e in events[seen:] for m in a2ui.messages_of(e)]
            got: list[Message] = []
            with anyio.fail_after(10):
                while len(got) < len(prelude) + len(rest):
                    frame = json.loads(await ws.recv())
                    assert frame["type"] == "event" and frame["feed"] == FEED, frame
                    got.append(frame["data"])
            await ws.send(json.dumps({"type": "unsubscribe", "feed": FEED}))
            streams[f"joined:{offset}"] = got
            # A client that saw the items up to the cut and resumed after it.
            held = [m for e in events[:seen] for m in a2ui.messages_of(e)]
            streams[f"resumed:{offset}"] = held + got
    out = render(streams)
    full = _ordered(a2ui.view(MESSAGES))
    for name, result in out.items():
        assert _ordered(result["surfaces"]) == full, name
        assert result["errors"] == [], name


def fold_of(events: list[Event]) -> RunFold:
    fold = RunFold()
    for event in events:
        fold.apply(event)
    return fold
