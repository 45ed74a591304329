"""An unmodified AG-UI ``HttpAgent`` (npm ``@ag-ui/client``) against a real node (D7).

``tests/js/agui_http.mjs`` attaches through ``POST /v1/ui/ag-ui/{agent}``.  It attaches to
a run while the run is being published, and separately resumes with ``Last-Event-ID``
after a cut at every event of runs that nest a subagent, a step, reasoning, a text
message and a tool call (and use the chunk shorthands).  The client's own event
verification must accept every stream, and each client must end with the messages and
state of the client that saw the run from the start.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from gateway.agui.fold import RunFold
from gateway.app import Gateway
from tests.agui.runs import CHUNKS, NESTED, RUN, THREAD
from tests.support.node import auth, token

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JS = Path(__file__).parent.parent / "js"
PATH = f"/v1/threads/{THREAD}/runs/{RUN}/ui/ag-ui"


def node_exe() -> str:
    exe = shutil.which("node")
    if exe is None or not (JS / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("Node.js and tests/js/node_modules are needed (scripts/test installs them)")
    return exe


async def publish(node: Gateway, events: list[dict[str, Any]]) -> list[str]:
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        r = await client.post(PATH, json=events, headers=auth())
        assert r.status_code == 200, r.text
        cursors: list[str] = r.json()["cursors"]
        return cursors


def final(lines: list[str]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = json.loads(lines[-1])["results"]
    return results


@pytest.mark.parametrize("events", [NESTED, CHUNKS], ids=["nested", "chunks"])
async def test_resume_after_a_cut_at_every_event(
    node: Gateway, events: list[dict[str, Any]]
) -> None:
    cursors = await publish(node, events)
    epoch = cursors[0].split(":")[0]
    cuts: list[str | None] = [None, f"{epoch}:0", *cursors]
    with anyio.fail_after(90):
        done = await anyio.run_process(
            [node_exe(), str(JS / "agui_http.mjs"), node.url, token(), THREAD, RUN],
            input=json.dumps({"cursors": cuts}).encode(),
        )
    results = final(done.stdout.decode().splitlines())
    assert len(results) == len(cuts)
    reference = results[0]
    assert reference["ok"], reference
    assert reference["events"] >= len(events)
    for cut, result in zip(cuts, results, strict=True):
        assert result["ok"], (cut, result)
        assert result["messages"] == reference["messages"], cut
        assert result["state"] == reference["state"], cut


async def test_attach_while_the_run_is_being_published(node: Gateway) -> None:
    first = 5
    await publish(node, NESTED[:first])
    async with await anyio.open_process(
        [node_exe(), str(JS / "agui_http.mjs"), node.url, token(), THREAD, RUN, "--live"],
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        await proc.stdin.send(json.dumps({"cursors": [None]}).encode())
        await proc.stdin.aclose()
        reader = BufferedByteReceiveStream(proc.stdout)
        lines: list[str] = []
        published = False
        with anyio.fail_after(30):
            while True:
                line = (await reader.receive_until(b"\n", 1 << 24)).decode()
                lines.append(line)
                if "results" in line:
                    break
                if not published and len(lines) == first:
                    # The client has seen everything published so far: publish the rest
                    # while it is attached.
                    await publish(node, NESTED[first:])
                    published = True
            await proc.wait()
    assert published
    [result] = final(lines)
    assert result["ok"], result
    expected = RunFold()
    for event in NESTED:
        expected.apply(event)
    assert result["messages"] == expected.messages
    assert result["state"] == expected.state
