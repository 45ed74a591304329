"""Validation fails closed: an item the fast validator (jsonschema-rs) refuses is refused,
even when the reference validator (jsonschema) finds no error in it.

A real disagreement: the seed's patterns end in ``$``, which in Python's ``re`` (what
jsonschema uses) also matches before a final newline, and in ECMA 262 (the dialect JSON
Schema names, and jsonschema-rs's) only at the very end.  A ``prev_hash`` of 64 hex
digits and a newline is valid for one and not the other.  Where no real disagreement
exists (sources, say), a fast validator that refuses everything stands in through the
``fast`` seam of the public functions.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import validate as v
from gateway.errors import InvalidRequest
from gateway.metrics import VALIDATION_DISAGREEMENTS, Metrics
from gateway.validate import validate_event, validate_source, validate_team_publish
from tests.support.node import auth, metric, start_node
from tests.test_validate import (
    SHA,
    TEAM,
    TENANT,
    VALID_EVENTS,
    item,
    member_source,
    team_message,
)


def disagreements(label: str) -> float:
    return VALIDATION_DISAGREEMENTS.labels(label).value


class Refuses:
    """A fast validator that refuses everything."""

    def is_valid(self, instance: Any) -> bool:
        return False


def refusing(key: str) -> Refuses:
    return Refuses()


def newline_hash() -> dict[str, Any]:
    ev = team_message()
    ev["prev_hash"] = SHA + "\n"
    return ev


def test_the_regex_dialects_really_disagree() -> None:
    ev = newline_hash()
    # If a library changes its dialect, this says so (and the rest proves less).
    assert not v._fast_event_validator("team_message").is_valid(ev)
    assert v._event_validator("team_message").is_valid(ev)


def test_a_disagreement_is_refused_counted_and_logged_once_per_type() -> None:
    v._LOGGED_DISAGREEMENTS.discard("team_message")
    before = disagreements("team_message")
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            with pytest.raises(InvalidRequest) as caught:
                validate_event(newline_hash())
            assert caught.value.code == "invalid_request" and caught.value.status == 400
            assert caught.value.message == (
                "event.prev_hash: does not match the schema "
                f'("{SHA}\\n" does not match "^[0-9a-f]{{64}}$")'
            )
    assert disagreements("team_message") == before + 3
    [line] = [x for x in logs if x["log_level"] == "warning"]
    assert line["type"] == "team_message"
    assert line["error"].startswith("event.prev_hash: does not match the schema")
    assert "disagree" in line["event"]


def test_a_disagreement_inside_a_publish_body_names_its_item() -> None:
    body = [item(team_message()), item(newline_hash())]
    with pytest.raises(InvalidRequest) as caught:
        validate_team_publish(body, tenant=TENANT, team=TEAM)
    assert caught.value.message.startswith("item 1: event.prev_hash: does not match the schema")


def test_a_fast_validator_that_refuses_wins_over_a_reference_that_accepts() -> None:
    # Every factory event is valid for both validators; a fast one that refuses makes
    # each of them refused, with the message for a disagreement without an error.
    v._LOGGED_DISAGREEMENTS.clear()
    with structlog.testing.capture_logs() as logs:
        for name, make in sorted(VALID_EVENTS.items()):
            ev = make()
            validate_event(ev)
            type_name = ev["type"]
            before = disagreements(type_name)
            with pytest.raises(InvalidRequest) as caught:
                validate_event(ev, fast=refusing)
            assert caught.value.message == "event: does not match the schema", name
            assert disagreements(type_name) == before + 1
    types = {x["type"] for x in logs if x["log_level"] == "warning"}
    assert types == {make()["type"] for make in VALID_EVENTS.values()}
    assert len([x for x in logs if x["log_level"] == "warning"]) == len(types)


def test_a_source_disagreement_is_refused_too() -> None:
    source = member_source()
    validate_source(source, tenant=TENANT, team=TEAM)
    before = disagreements("source:member")
    with pytest.raises(InvalidRequest) as caught:
        validate_source(source, tenant=TENANT, team=TEAM, fast=refusing)
    assert caught.value.message == "source: does not match the schema"
    assert disagreements("source:member") == before + 1
    with pytest.raises(InvalidRequest) as caught:
        validate_team_publish(
            item(team_message(), source), tenant=TENANT, team=TEAM, fast_source=refusing
        )
    assert caught.value.message == "item 0: source: does not match the schema"
    with pytest.raises(InvalidRequest) as caught:
        validate_team_publish(item(team_message()), tenant=TENANT, team=TEAM, fast_event=refusing)
    assert caught.value.message == "item 0: event: does not match the schema"


def test_the_counter_is_exported_by_every_metrics_registry() -> None:
    with pytest.raises(InvalidRequest):
        validate_event(newline_hash())
    value = Metrics().registry.get_sample_value(
        "gateway_validation_disagreements_total", {"type": "team_message"}
    )
    assert value == disagreements("team_message") and value >= 1


def _string_paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, str):
        return [path]
    if isinstance(node, dict):
        return [p for k, child in node.items() for p in _string_paths(child, (*path, k))]
    if isinstance(node, list):
        return [p for i, child in enumerate(node) for p in _string_paths(child, (*path, i))]
    return []


@st.composite
def newline_events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event with a newline added at the end (or start) of one of its strings."""
    ev = copy.deepcopy(VALID_EVENTS[draw(st.sampled_from(sorted(VALID_EVENTS)))]())
    paths = [p for p in _string_paths(ev) if p != ("type",)]
    path = draw(st.sampled_from(paths))
    parent = ev
    for key in path[:-1]:
        parent = parent[key]
    suffix = draw(st.sampled_from(["\n", "\r\n", "\n\n", " "]))
    parent[path[-1]] = parent[path[-1]] + suffix
    return ev


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(newline_events())
def test_the_verdict_is_the_fast_validators_and_never_looser_than_either(
    ev: dict[str, Any],
) -> None:
    """On events where the dialects may part, our verdict is jsonschema-rs's, and it
    accepts nothing either validator refuses."""
    fast = v._fast_event_validator(ev["type"]).is_valid(ev)
    reference = v._event_validator(ev["type"]).is_valid(ev)
    try:
        validate_event(ev)
        ours = True
    except InvalidRequest:
        ours = False
    assert ours == fast
    assert not ours or reference


@pytest.mark.anyio
async def test_a_node_answers_a_disagreement_with_400_in_the_error_shape() -> None:
    async with start_node() as node, httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        before = metric(node, "gateway_validation_disagreements_total", type="team_message")
        r = await client.post(
            f"/v1/teams/{TEAM}/events", json=[item(newline_hash())], headers=auth(TENANT)
        )
        assert r.status_code == 400
        error = r.json()["error"]
        assert list(r.json()) == ["error"] and sorted(error) == ["code", "message"]
        assert error["code"] == "invalid_request"
        assert error["message"].startswith("item 0: event.prev_hash: does not match the schema")
        after = metric(node, "gateway_validation_disagreements_total", type="team_message")
        assert after == before + 1
        # Nothing was appended: the feed does not exist.
        r = await client.get(f"/v1/teams/{TEAM}/events", headers=auth(TENANT))
        assert r.status_code == 404, r.text
