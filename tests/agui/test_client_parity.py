"""The fold and its prelude against the real AG-UI client, at every cut point.

``tests/js/agui_replay.mjs`` runs event streams through ``@ag-ui/client`` itself (its
chunk transform, its event verification and the way it applies events to messages and
state), with no network.  For every hand-written run and every cut point k:

- the client that saw events ``[:k]`` holds exactly the messages and state of our fold
  of those events (the fold folds like the client);
- the stream ``prelude(fold of [:k]) + events[k:]`` passes the client's verification and
  ends with the same messages and state as the client that saw the run from the start.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gateway.agui.fold import RunFold
from tests.agui.runs import ALL_RUNS, RUN, THREAD

JS = Path(__file__).parent.parent / "js"


def fold_of(events: list[dict[str, Any]]) -> RunFold:
    fold = RunFold()
    for event in events:
        fold.apply(event)
    return fold


def replay(streams: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("Node.js and tests/js/node_modules are needed (scripts/test installs them)")
    done = subprocess.run(
        [node, str(JS / "agui_replay.mjs")],
        input=json.dumps({"streams": streams}),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALL_RUNS))
def test_fold_and_prelude_match_the_client_at_every_cut(name: str) -> None:
    events = ALL_RUNS[name]
    streams: dict[str, list[dict[str, Any]]] = {"full": events}
    for k in range(1, len(events) + 1):
        streams[f"seen:{k}"] = events[:k]
        streams[f"cut:{k}"] = fold_of(events[:k]).prelude(THREAD, RUN) + events[k:]
    out = replay(streams)

    full = out["full"]
    assert full["ok"], full
    for k in range(1, len(events) + 1):
        seen = out[f"seen:{k}"]
        assert seen["ok"], (k, seen)
        fold = fold_of(events[:k])
        assert fold.messages == seen["messages"], f"messages after {k} events"
        assert fold.state == seen["state"], f"state after {k} events"
        cut = out[f"cut:{k}"]
        assert cut["ok"], (k, cut)
        assert cut["messages"] == full["messages"], f"messages, cut after {k} events"
        assert cut["state"] == full["state"], f"state, cut after {k} events"
