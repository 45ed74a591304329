"""The translations against the real clients, from the start and joined at every cut.

- SparkTide: the AG-UI events derived from each run pass ``@ag-ui/client``'s verification
  (``tests/js/agui_replay.mjs``), and so does, at every cut k, the prelude of the fold
  of the first k derived events followed by the rest, ending with the same messages and
  state as the client that saw everything.
- A2UI: ``@a2ui/web_core``'s ``MessageProcessor`` (``tests/js/a2ui_replay.mjs``) holds
  the surfaces our fold computes after every prefix; a late joiner fed the compacted
  prefix then the rest ends with the surfaces of a client that saw every message; and
  the same holds for the ``a2ui-surface`` activities seen through ``@ag-ui/client``
  (joined at every cut with the compacting prelude) and for the WebSocket ``a2ui`` view,
  also when surfaces are rebuilt to keep their activity's list short.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from gateway.agui.fold import RunFold
from gateway.dialects import a2ui
from gateway.dialects.a2ui_surface import compact
from gateway.dialects.sparktide_agui import RunState, plan
from tests.agui.test_client_parity import JS, replay
from tests.dialects.a2ui_runs import ALL_STREAMS, REFUSED, REFUSED_AT
from tests.dialects.sparktide_runs import ALL_RUNS, CONVERSATION, RUN

Event = dict[str, Any]
Message = dict[str, Any]


def fold_of(events: list[Event]) -> RunFold:
    fold = RunFold()
    for event in events:
        fold.apply(event)
    return fold


def render(streams: dict[str, list[Message]]) -> dict[str, Any]:
    """Each stream through @a2ui/web_core's MessageProcessor: surfaces and errors."""
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "@a2ui" / "web_core").is_dir():
        pytest.fail("Node.js and tests/js/node_modules are needed (scripts/test installs them)")
    done = subprocess.run(
        [node, str(JS / "a2ui_replay.mjs")],
        input=json.dumps({"streams": streams}),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _ordered(surfaces: dict[str, Any]) -> dict[str, Any]:
    """Surfaces with the order of their components made visible to ``==``."""
    return {sid: {**s, "order": list(s["components"])} for sid, s in surfaces.items()}


# --------------------------------------------------------------------------- SparkTide


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALL_RUNS))
def test_sparktide_runs_pass_the_ag_ui_client_at_every_cut(name: str) -> None:
    _, planned = plan(RunState(), ALL_RUNS[name], {})
    events = [e for p in planned for e in p.derived]
    streams: dict[str, list[Event]] = {"full": events}
    for k in range(1, len(events) + 1):
        streams[f"seen:{k}"] = events[:k]
        streams[f"cut:{k}"] = fold_of(events[:k]).prelude(CONVERSATION, RUN) + events[k:]
    out = replay(streams)

    full = out["full"]
    assert full["ok"], full
    assert full["messages"] == fold_of(events).messages
    for k in range(1, len(events) + 1):
        seen = out[f"seen:{k}"]
        assert seen["ok"], (k, seen)
        assert fold_of(events[:k]).messages == seen["messages"], f"messages after {k} events"
        cut = out[f"cut:{k}"]
        assert cut["ok"], (k, cut)
        assert cut["messages"] == full["messages"], f"messages, cut after {k} events"
        assert cut["state"] == full["state"], f"state, cut after {k} events"


# --------------------------------------------------------------------------- A2UI


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALL_STREAMS))
def test_a2ui_late_joiners_render_the_surfaces_of_the_full_history(name: str) -> None:
    messages = ALL_STREAMS[name]
    streams: dict[str, list[Message]] = {"full": messages}
    for k in range(len(messages) + 1):
        streams[f"seen:{k}"] = messages[:k]
        streams[f"joined:{k}"] = compact(messages[:k]) + messages[k:]
    out = render(streams)

    refused = REFUSED_AT if messages is REFUSED else []
    assert [e["at"] for e in out["full"]["errors"]] == refused, out["full"]["errors"]
    full = _ordered(out["full"]["surfaces"])
    for k in range(len(messages) + 1):
        seen = out[f"seen:{k}"]
        assert _ordered(seen["surfaces"]) == _ordered(a2ui.view(messages[:k])), k
        joined = out[f"joined:{k}"]
        # The compacted prefix holds no refused write; the rest still holds its own.
        assert [e["at"] - len(compact(messages[:k])) + k for e in joined["errors"]] == [
            at for at in refused if at >= k
        ]
        assert _ordered(joined["surfaces"]) == full, f"joined after {k} messages"


def _operations(messages: list[Message]) -> list[Message]:
    """The messages of the ``a2ui-surface`` activities an AG-UI client holds, in order."""
    return [
        operation
        for message in messages
        if message.get("role") == "activity" and message.get("activityType") == a2ui.ACTIVITY_TYPE
        for operation in message["content"][a2ui.OPERATIONS_KEY]
    ]


@pytest.mark.slow
@pytest.mark.parametrize("limit", [3, a2ui.MAX_OPERATIONS])
@pytest.mark.parametrize("name", sorted(ALL_STREAMS))
def test_a2ui_activities_seen_through_the_ag_ui_client_render_the_same_surfaces(
    name: str, limit: int
) -> None:
    messages = ALL_STREAMS[name]
    started = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
    events = [started, *a2ui.derive(messages, RunFold(), limit=limit)]
    rebuilt = [e for e in events if "metadata" in e]
    assert bool(rebuilt) == (limit < len(messages)), "a small limit rebuilds surfaces"
    events.append({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})
    streams: dict[str, list[Event]] = {"full": events}
    for k in range(1, len(events) + 1):
        prelude = fold_of(events[:k]).prelude("t", "r", compactors=a2ui.PRELUDE_COMPACTORS)
        streams[f"cut:{k}"] = prelude + events[k:]
    agui = replay(streams)

    renders: dict[str, list[Message]] = {}
    for stream, result in agui.items():
        assert result["ok"], (stream, result)
        renders[stream] = _operations(result["messages"])
    for k in range(1, len(events) + 1):
        # The WebSocket a2ui view: the late joiner's messages, then those the rest carries.
        rest = [m for e in events[k:] for m in a2ui.messages_of(e)]
        renders[f"ws:{k}"] = a2ui.late_joiner_messages(fold_of(events[:k])) + rest
    out = render(renders)

    full = _ordered(out["full"]["surfaces"])
    assert full == _ordered(a2ui.view(messages))
    for stream, result in out.items():
        assert _ordered(result["surfaces"]) == full, stream
        if messages is not REFUSED:
            assert result["errors"] == [], stream
