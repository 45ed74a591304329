"""Hand-written SparkTide runs and valid data for every event name (test fixtures).

``VALID`` holds, per event name, a ``data`` object the seed accepts.  The runs together
use every event name and every path of the translation: ``EVERYTHING`` nests a subagent
two deep, steps in two lanes, tools of the root agent and of a subagent, and ends with
some still open; ``FAILED`` ends with a failure status; ``ABORTED`` with an error that is
not retryable; ``SYNTHESISED`` finishes agents and models that never started.
"""

from __future__ import annotations

import copy
from typing import Any

Event = dict[str, Any]
CONVERSATION, RUN, MESSAGE, TRACE = "conv-1", "run-1", "msg-1", "trace-1"

ROOT = {"agentCallId": "a0", "parentAgentCallId": None, "depth": 0, "agentId": "planner"}
CHILD = {"agentCallId": "a1", "parentAgentCallId": "a0", "depth": 1, "agentId": "searcher"}
GRANDCHILD = {"agentCallId": "a2", "parentAgentCallId": "a1", "depth": 2, "agentId": "reader"}
USAGE = {
    "steps": 1,
    "toolCalls": 0,
    "agentCalls": 0,
    "budgetUnits": 10,
    "modelInvocationIds": ["m9"],
    "citationIds": [],
}


def model(agent: dict[str, Any], invocation: str, **more: Any) -> dict[str, Any]:
    return {
        **agent,
        "invocationId": invocation,
        "stepId": f"step-{invocation}",
        "attempt": 1,
        "binding": {"id": "chat", "version": "1.0.0"},
        "model": {"id": "gpt-x", "version": "2.1.0", "scope": "tenant"},
        "selectionReason": "default",
        **more,
    }


def completed_model(agent: dict[str, Any], invocation: str) -> dict[str, Any]:
    return model(
        agent,
        invocation,
        status="RESPONDED",
        errorCode=None,
        outputStarted=True,
        usage={"inputTokens": 12},
        cost=None,
    )


#: A data object the seed accepts, per event name.
VALID: dict[str, dict[str, Any]] = {
    "message.started": {"status": "RUNNING"},
    "status.changed": {"status": "SEARCHING", "detail": "open fields pass"},
    "text.delta": {"text": "Hello"},
    "agent.started": {**ROOT, "agentVersion": "1.2.3"},
    "agent.completed": {**ROOT, "status": "SUCCEEDED"},
    "tool.started": {
        **ROOT,
        "callId": "c0",
        "toolId": "search",
        "version": "1",
        "effect": "READ",
    },
    "tool.completed": {**ROOT, "callId": "c0", "toolId": "search", "status": "SUCCEEDED"},
    "knowledge.retrieved": {**ROOT, "knowledgeId": "kb", "count": 3, "status": "SUCCEEDED"},
    "citation.created": {
        **ROOT,
        "id": "cit-1",
        "documentId": "doc-1",
        "title": "A paper",
        "source": "kb",
        "knowledgeId": "kb",
        "score": 0.5,
        "sourceRef": {"type": "URL", "id": "u1", "uri": "https://example.com/a"},
    },
    "ui.created": {**ROOT, "component": "chart", "version": "1", "props": {"kind": "bar"}},
    "confirmation.required": {
        "confirmationId": "conf-1",
        "toolId": "pay",
        "version": "1",
        "arguments": {"amount": 5},
        "argumentsHash": "h1",
        "expiresAt": 1767225600000,
    },
    "usage.updated": {
        **ROOT,
        "budgetUnits": 10,
        "steps": 1,
        "toolCalls": 1,
        "providerUsage": {"inputTokens": 12},
        "cost": {"source": "configured-pricing", "amounts": {"USD": "0.01"}},
    },
    "error": {"code": "RATE_LIMITED", "message": "slow down", "retryable": True},
    "message.completed": {"status": "SUCCEEDED"},
    "model.started": model(ROOT, "m0"),
    "model.completed": completed_model(ROOT, "m0"),
    "knowledge.planned": {
        **ROOT,
        "agentVersion": "1.0.0",
        "retrievalId": "r1",
        "mode": "AUTO",
        "sources": [{"id": "kb", "version": "3", "reason": "QUERY_MATCH"}],
    },
    "knowledge.fused": {
        **ROOT,
        "agentVersion": "1.0.0",
        "retrievalId": "r1",
        "count": 2,
        "rerank": "LEXICAL",
        "usage": {"retrievals": 1, "contextChars": 1200},
    },
    "citation.verified": {
        **ROOT,
        "agentVersion": "planner-1",
        "references": [{"id": "cit-1", "status": "VERIFIED"}],
    },
}


def event(name: str, sequence: int, data: dict[str, Any] | None = None, **envelope: Any) -> Event:
    """A SparkTide event of run-1 / msg-1 (``envelope`` overrides envelope fields)."""
    out: Event = {
        "protocolVersion": "1.0",
        "event": name,
        "runId": RUN,
        "traceId": TRACE,
        "conversationId": CONVERSATION,
        "messageId": MESSAGE,
        "sequence": sequence,
        "data": copy.deepcopy(VALID[name] if data is None else data),
    }
    out.update(envelope)
    return out


def numbered(steps: list[tuple[str, dict[str, Any] | None]]) -> list[Event]:
    return [event(name, i, data) for i, (name, data) in enumerate(steps, start=1)]


EVERYTHING = numbered(
    [
        ("message.started", None),
        ("agent.started", ROOT),
        ("model.started", model(ROOT, "m1")),
        ("text.delta", {"text": "Hello"}),
        ("text.delta", {"text": ""}),
        ("model.completed", completed_model(ROOT, "m1")),
        ("knowledge.planned", None),
        ("knowledge.retrieved", None),
        ("knowledge.fused", None),
        ("citation.created", None),
        ("citation.verified", None),
        ("agent.started", CHILD),
        ("model.started", model(CHILD, "m2")),
        (
            "tool.started",
            {**CHILD, "callId": "c1", "toolId": "fetch", "version": "2", "effect": "WRITE"},
        ),
        ("tool.completed", {**CHILD, "callId": "c1", "toolId": "fetch", "status": "OK"}),
        ("status.changed", None),
        ("usage.updated", {**VALID["usage.updated"], **CHILD}),
        ("error", None),
        ("ui.created", {**VALID["ui.created"], **CHILD}),
        ("confirmation.required", None),
        ("agent.started", GRANDCHILD),
        (
            "agent.completed",
            {
                **GRANDCHILD,
                "status": "SUCCEEDED",
                "result": {
                    **GRANDCHILD,
                    "agentVersion": "0.1.0",
                    "status": "SUCCEEDED",
                    "text": "read it",
                    "output": {"type": "JSON", "value": {"pages": 3}},
                    "usage": USAGE,
                },
            },
        ),
        ("tool.started", None),
        ("tool.completed", None),
        ("text.delta", {"text": " world"}),
        ("message.completed", {"status": "SUCCEEDED"}),
    ]
)

FAILED = numbered(
    [
        ("message.started", None),
        ("agent.started", ROOT),
        ("agent.started", CHILD),
        ("agent.completed", {**CHILD, "status": "FAILED", "errorCode": "TIMEOUT"}),
        ("text.delta", {"text": "partial"}),
        ("message.completed", {"status": "FAILED"}),
    ]
)

ABORTED = numbered(
    [
        ("text.delta", {"text": "no message.started first"}),
        ("agent.started", ROOT),
        ("agent.started", CHILD),
        ("model.started", model(CHILD, "m3")),
        ("error", {"code": "CRASH", "message": "the worker died", "retryable": False}),
    ]
)

SYNTHESISED = numbered(
    [
        ("message.started", None),
        ("agent.completed", {**ROOT, "status": "SUCCEEDED"}),
        ("model.completed", completed_model(ROOT, "m4")),
        ("agent.completed", {**CHILD, "status": "completed"}),
        ("tool.completed", {**ROOT, "callId": "never-started", "toolId": "x", "status": "OK"}),
        ("message.completed", {"status": "done"}),
    ]
)

ALL_RUNS: dict[str, list[Event]] = {
    "everything": EVERYTHING,
    "failed": FAILED,
    "aborted": ABORTED,
    "synthesised": SYNTHESISED,
}
