"""gateway.scenario, the demo's story: valid, deterministic, and the story it promises.

Every publish passes the gateway's own validators (the seed's events_Event and
TeamSource schemas, the AG-UI checks, strictly against AG-UI 1.0), and every run folds
(gateway.agui.fold) to the chat the console shows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter, defaultdict
from typing import Any

import msgspec
import pytest

from gateway.agui.events import check_body
from gateway.agui.fold import RunFold
from gateway.scenario import FAILING_EVERY, Publish, scenario
from gateway.validate import validate_team_publish

TENANT = "acme"
#: Three projects' worth.
N = 500

Json = dict[str, Any]


def take(n: int = N, seed: int = 1) -> list[Publish]:
    return list(itertools.islice(scenario(TENANT, seed=seed, start_ms=1_000), n))


@pytest.fixture(scope="module")
def publishes() -> list[Publish]:
    return take()


def team_events(publishes: list[Publish]) -> list[tuple[str, Json, Json]]:
    """(team id, source, event) of every team publish, in order."""
    out = []
    for p in publishes:
        if p.kind == "team":
            [item] = p.body
            out.append((p.feed.removeprefix("team/"), item["source"], item["event"]))
    return out


def runs_of(publishes: list[Publish]) -> dict[str, list[Json]]:
    by_run: dict[str, list[Json]] = defaultdict(list)
    for p in publishes:
        if p.kind == "run":
            by_run[p.feed].extend(p.body)
    return by_run


def test_every_publish_passes_the_gateways_validators(publishes: list[Publish]) -> None:
    for p in publishes:
        kind, _, rest = p.feed.partition("/")
        if kind == "team":
            assert p.path == f"/v1/teams/{rest}/events"
            [item] = validate_team_publish(p.body, tenant=TENANT, team=rest)
            assert item.event_id == p.body[0]["event"]["event_id"]
            assert p.idempotency_key is None
        else:
            thread, run = rest.split("/")
            assert p.path == f"/v1/threads/{thread}/runs/{run}/ui/ag-ui"
            assert check_body(p.body, thread_id=thread, run_id=run) == p.body
            check_body(p.body, thread_id=thread, run_id=run, strict=True)
            assert p.idempotency_key is not None
        assert len(p.body) == 1


def test_the_same_seed_tells_the_same_story() -> None:
    assert take(200, seed=5) == take(200, seed=5)
    assert take(200, seed=5) != take(200, seed=6)


def test_ids_are_unique(publishes: list[Publish]) -> None:
    keys = [p.idempotency_key for p in publishes if p.idempotency_key]
    assert len(keys) == len(set(keys))
    ids = [e["event_id"] for _, _, e in team_events(publishes)]
    assert len(ids) == len(set(ids))


def test_it_uses_every_kind_of_event_the_demo_promises(publishes: list[Publish]) -> None:
    types = Counter(
        p.body[0]["event"]["type"] if p.kind == "team" else p.body[0]["type"] for p in publishes
    )
    promised = {
        "team_opened",
        "team_message",
        "team_task_created",
        "team_task_claimed",
        "team_task_updated",
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_CONTENT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "RUN_FINISHED",
        "RUN_ERROR",
    }
    assert promised <= set(types), promised - set(types)
    assert types["TEXT_MESSAGE_CONTENT"] > types["TEXT_MESSAGE_START"]  # streamed


def test_each_log_has_contiguous_seqs_and_a_hash_chain(publishes: list[Publish]) -> None:
    last: dict[str, Json] = {}
    for _team, _source, event in team_events(publishes):
        thread = event["thread_id"]
        previous = last.get(thread)
        if previous is None:
            assert event["seq"] == 1
            assert event["prev_hash"] == hashlib.sha256(thread.encode()).hexdigest()
        else:
            assert event["seq"] == previous["seq"] + 1
            assert event["prev_hash"] == hashlib.sha256(msgspec.json.encode(previous)).hexdigest()
            assert event["time"] > previous["time"]
        last[thread] = event


def test_a_lead_and_members_of_the_feeds_team(publishes: list[Publish]) -> None:
    rows = team_events(publishes)
    teams = list(dict.fromkeys(team for team, _, _ in rows))
    assert len(teams) >= 3  # a new team per project
    for team in teams:
        events = [(s, e) for t, s, e in rows if t == team]
        source, first = events[0]
        assert first["type"] == "team_opened" and source == {"kind": "team"}
        assert first["data"]["team"] == team and first["data"]["lead"]["name"] == "lead"
        senders = set()
        for source, event in events[1:]:
            assert source["kind"] == "member"
            assert source["member"]["tenant"] == TENANT and source["member"]["team"] == team
            senders.add(source["member"]["name"])
            if event["type"] == "team_message":
                assert event["data"]["from"] == source["member"]["name"]
        assert senders == {"lead", "researcher-1", "writer-1"}


def test_every_task_is_claimed_and_closed_failed_iff_its_run_errored(
    publishes: list[Publish],
) -> None:
    runs = runs_of(publishes)
    ended = {
        feed: events[-1]["type"]
        for feed, events in runs.items()
        if events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    }
    claims: dict[str, str] = {}
    statuses: dict[str, str] = {}
    for _, _, event in team_events(publishes):
        data = event["data"]
        if event["type"] == "team_task_claimed":
            claims[data["task_id"]] = data["member"]
        elif event["type"] == "team_task_updated":
            assert data["task_id"] in claims
            statuses[data["task_id"]] = data["status"]
    assert len(statuses) >= 8
    assert sorted(Counter(statuses.values())) == ["completed", "failed"]
    # Runs are numbered with their tasks; every FAILING_EVERY-th errors.
    for task_id, status in statuses.items():
        n = int(task_id.removeprefix("T-"))
        [feed] = [f for f in ended if f.endswith(f"/run-{n}")]
        assert (ended[feed] == "RUN_ERROR") == (n % FAILING_EVERY == 0)
        assert status == ("failed" if ended[feed] == "RUN_ERROR" else "completed")


def test_two_members_work_at_once(publishes: list[Publish]) -> None:
    open_runs: set[str] = set()
    most = 0
    for p in publishes:
        if p.kind != "run":
            continue
        kind = p.body[0]["type"]
        if kind == "RUN_STARTED":
            open_runs.add(p.feed)
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            open_runs.discard(p.feed)
        most = max(most, len(open_runs))
    assert most == 2


def test_every_run_folds_to_a_chat_with_a_tool_call_and_state(publishes: list[Publish]) -> None:
    runs = runs_of(publishes)
    finished = [f for f, events in runs.items() if events[-1]["type"] == "RUN_FINISHED"]
    failed = [f for f, events in runs.items() if events[-1]["type"] == "RUN_ERROR"]
    assert finished and failed
    for feed in finished + failed:
        fold = RunFold()
        for event in runs[feed]:
            fold.apply(event)
        assert fold.terminal is not None
        roles = [m["role"] for m in fold.messages]
        assert roles[:3] == ["user", "reasoning", "assistant"]
        [assistant] = [m for m in fold.messages if m["role"] == "assistant"]
        [call] = assistant["toolCalls"]
        json.loads(call["function"]["arguments"])  # streamed in pieces, whole JSON
        if feed in finished:
            assert "Result:" in assistant["content"]
            assert roles[-1] == "tool"
            assert fold.state["stage"] == "done" and "finding" in fold.state
        else:
            assert fold.terminal["type"] == "RUN_ERROR" and fold.terminal["message"]
            assert fold.state["stage"] == "failed"
