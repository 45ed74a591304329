"""SparkTide in: validation, keys and the sequence rule (the translation: test_sparktide_agui)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway import feed, validate
from gateway.dialects import seeds
from gateway.dialects.sparktide import (
    ENVELOPE,
    EVENT_NAMES,
    RUN_PART,
    Verdict,
    check_body,
    check_event,
    check_sequence,
    event_key,
    feed_of,
    item_keys,
)
from gateway.dialects.sparktide_agui import (
    RunState,
    plan,
)
from gateway.errors import IdempotencyKeyReused, InvalidRequest
from tests.dialects.sparktide_runs import (
    CONVERSATION,
    MESSAGE,
    RUN,
    event,
)

Event = dict[str, Any]


def types(events: list[Event]) -> list[str]:
    return [e["type"] for e in events]


# --------------------------------------------------------------------------- validation


def test_the_constants_agree_with_the_rest_of_the_gateway() -> None:
    assert seeds.MAX_ITEMS == validate.MAX_BATCH_ITEMS
    assert RUN_PART.pattern == feed._RUN_PART.pattern
    schema = seeds.schema(seeds.SPARKTIDE)
    assert tuple(schema["properties"]["event"]["enum"]) == EVENT_NAMES
    assert set(schema["required"]) == set(ENVELOPE) == set(schema["properties"])


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_every_event_name_with_valid_data_passes(name: str) -> None:
    valid = event(name, 1)
    assert check_event(valid) is valid


def _drop(key: str) -> Any:
    def change(e: Event) -> None:
        del e[key]

    return change


def _set(path: str, value: Any) -> Any:
    def change(e: Event) -> None:
        *parents, last = path.split(".")
        target = e
        for part in parents:
            target = target[part]
        target[last] = value

    return change


# (case, event name, change, the start of the error message)
INVALID: list[tuple[str, str, Any, str]] = [
    ("extra envelope key", "text.delta", _set("timestamp", 1), "event.timestamp: unknown field"),
    (
        "wrong protocol version",
        "text.delta",
        _set("protocolVersion", "1.1"),
        "event.protocolVersion:",
    ),
    ("unknown event name", "text.delta", _set("event", "text.appended"), "event.event: 'text.app"),
    ("sequence below 1", "text.delta", _set("sequence", 0), "event.sequence: 0 is less than"),
    ("sequence not an integer", "text.delta", _set("sequence", 1.5), "event.sequence:"),
    ("sequence as a string", "text.delta", _set("sequence", "1"), "event.sequence:"),
    ("data not an object", "text.delta", _set("data", []), "event.data:"),
    ("id not a string", "text.delta", _set("traceId", 7), "event.traceId:"),
    ("text not a string", "text.delta", _set("data.text", 5), "event.data.text: 5 is not of type"),
    (
        "effect outside its enum",
        "tool.started",
        _set("data.effect", "READ_ONLY"),
        "event.data.effect:",
    ),
    (
        "agentVersion not semver",
        "agent.started",
        _set("data.agentVersion", "1.2"),
        "event.data.agentVersion:",
    ),
    ("negative depth", "agent.started", _set("data.depth", -1), "event.data.depth:"),
    ("count below 0", "knowledge.retrieved", _set("data.count", -1), "event.data.count:"),
    ("closed data: knowledge.planned", "knowledge.planned", _set("data.extra", 1), "event.data:"),
    ("closed data: knowledge.fused", "knowledge.fused", _set("data.extra", 1), "event.data:"),
    ("closed data: citation.verified", "citation.verified", _set("data.extra", 1), "event.data:"),
    ("closed binding", "model.started", _set("data.binding.extra", 1), "event.data.binding:"),
    (
        "model status outside its enum",
        "model.completed",
        _set("data.status", "OK"),
        "event.data.status:",
    ),
    (
        "expiresAt not an integer",
        "confirmation.required",
        _set("data.expiresAt", "soon"),
        "event.data.expiresAt:",
    ),
    ("cost source", "usage.updated", _set("data.cost.source", "guess"), "event.data.cost.source:"),
    (
        "agent result status",
        "agent.completed",
        _set("data.result", {"status": "FAILED"}),
        "event.data.result",
    ),
    ("retryable not a boolean", "error", _set("data.retryable", "no"), "event.data.retryable:"),
    (
        "conversationId unfit for a feed",
        "text.delta",
        _set("conversationId", "a/b"),
        "event.conversationId: names",
    ),
    ("runId too long for a feed", "text.delta", _set("runId", "r" * 129), "event.runId: names"),
]


@pytest.mark.parametrize(
    ("case", "name", "change", "message"), INVALID, ids=[c[0] for c in INVALID]
)
def test_an_invalid_event_is_refused_naming_the_field(
    case: str, name: str, change: Any, message: str
) -> None:
    bad = event(name, 1)
    change(bad)
    with pytest.raises(InvalidRequest) as caught:
        check_event(bad)
    assert caught.value.message.startswith(message), caught.value.message


@pytest.mark.parametrize("key", ENVELOPE)
def test_each_envelope_key_is_required(key: str) -> None:
    bad = event("text.delta", 1)
    del bad[key]
    with pytest.raises(InvalidRequest, match=rf"^event\.{key}: required$"):
        check_event(bad)


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_each_event_requires_its_data(name: str) -> None:
    schema = seeds.schema(seeds.SPARKTIDE)
    (branch,) = [b for b in schema["allOf"] if b["if"]["properties"]["event"]["const"] == name]
    for field in branch["then"]["properties"]["data"]["required"]:
        bad = event(name, 1)
        del bad["data"][field]
        with pytest.raises(InvalidRequest, match=rf'^event\.data: "{field}" is a required'):
            check_event(bad)


def test_a_non_object_is_refused() -> None:
    with pytest.raises(InvalidRequest, match=r"^event: a SparkTide event is an object, not array"):
        check_event([])


def test_a_body_is_one_event_or_an_array_of_one_run() -> None:
    one = event("text.delta", 1)
    assert check_body(one) == [one]
    assert check_body([one, event("text.delta", 2)]) == [one, event("text.delta", 2)]
    with pytest.raises(InvalidRequest, match=r"^body: the array is empty"):
        check_body([])
    with pytest.raises(InvalidRequest, match=r"^body: at most 1000 events"):
        check_body([one] * 1001)
    with pytest.raises(InvalidRequest, match=r"^\[1\]\.data\.text: "):
        check_body([one, event("text.delta", 2, {"text": 1})])
    with pytest.raises(InvalidRequest, match=r"^\[1\]\.runId: differs from item 0's"):
        check_body([one, event("text.delta", 2, runId="run-2")])
    with pytest.raises(InvalidRequest, match=r"^\[1\]\.conversationId: differs"):
        check_body([one, event("text.delta", 2, conversationId="conv-2")])


def test_keys_name_the_message_and_sequence() -> None:
    e = event("text.delta", 7, messageId="m:1")
    assert event_key(e) == "m:1:7"
    assert item_keys(e, 2) == ["sparktide:m:1:7#0", "sparktide:m:1:7#1"]
    assert feed_of(e) == (CONVERSATION, RUN)


# --------------------------------------------------------------------------- the sequence rule

SEQUENCE: list[tuple[str, int, int, str | None, Any]] = [
    # (case, the run's last sequence, the event's sequence, what the run holds under its
    #  key: "same"/"other" body or None, the verdict or the error)
    ("the first event", 0, 1, None, Verdict.APPEND),
    ("the next event", 4, 5, None, Verdict.APPEND),
    ("a retry of the last", 5, 5, "same", Verdict.RETRY),
    ("a retry of an earlier one", 5, 2, "same", Verdict.RETRY),
    ("the same sequence, another body", 5, 5, "other", IdempotencyKeyReused),
    ("a first event that is not 1", 0, 2, None, "leaves a gap: the message's next sequence is 1"),
    ("a gap", 4, 6, None, "leaves a gap: the message's next sequence is 5"),
    ("a regression the run no longer holds", 5, 3, None, "is at or below"),
]


@pytest.mark.parametrize(
    ("case", "last", "sequence", "held", "expected"), SEQUENCE, ids=[c[0] for c in SEQUENCE]
)
def test_the_sequence_rule(
    case: str, last: int, sequence: int, held: str | None, expected: Any
) -> None:
    state = RunState(message_id=MESSAGE if last else None, sequence=last)
    incoming = event("text.delta", sequence, {"text": "a"})
    stored = None
    if held is not None:
        # The same body with its keys in another order is the same body (RFC 8785).
        stored = dict(reversed(list(copy.deepcopy(incoming).items())))
        if held == "other":
            stored["data"]["text"] = "b"
    if isinstance(expected, Verdict):
        assert check_sequence(state, incoming, stored=stored) is expected
    elif expected is IdempotencyKeyReused:
        with pytest.raises(IdempotencyKeyReused, match=r"^event.sequence: message 'msg-1' already"):
            check_sequence(state, incoming, stored=stored)
    else:
        with pytest.raises(InvalidRequest, match=f"^event.sequence: {sequence} .*{expected}"):
            check_sequence(state, incoming, stored=stored)


def test_plan_answers_retries_and_appends_the_rest() -> None:
    first = [event("message.started", 1), event("text.delta", 2)]
    state, planned = plan(RunState(), first, {})
    assert [p.retry for p in planned] == [False, False]
    assert state.sequence == 2
    stored = {event_key(e): e for e in first}
    # The retried body, with one new event and one repeated within the body.
    again = [*first, event("text.delta", 3, {"text": "!"}), event("text.delta", 3, {"text": "!"})]
    after, planned = plan(state, again, stored)
    assert [p.retry for p in planned] == [True, True, False, True]
    assert [p.derived for p in planned if p.retry] == [[], [], []]
    assert types(planned[2].derived) == ["TEXT_MESSAGE_CONTENT"]
    assert planned[2].item_keys == ["sparktide:msg-1:3#0"]
    assert after.sequence == 3
    with pytest.raises(IdempotencyKeyReused, match=r"^\[1\]\.sequence"):
        plan(state, [first[0], event("text.delta", 2, {"text": "changed"})], stored)
    with pytest.raises(InvalidRequest, match=r"^event\.sequence: 9 leaves a gap"):
        plan(state, [event("text.delta", 9)], stored, array=False)
