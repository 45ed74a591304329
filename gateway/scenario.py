"""The demo's story, as an endless, deterministic sequence of publishes (pure).

A project is one agent team: a lead and two members.  The lead opens the team, creates
tasks and hands them out in team messages; each member claims a task, works on it in an
AG-UI run of its own (reasoning, streamed text, a tool call with arguments and a result,
state deltas) and reports back; the lead closes the task as completed, or as failed when
the run ended in ``RUN_ERROR`` (every third run does).  The two members work at the same
time, so their runs and the team's messages interleave.  Then the next project starts,
with a new team.

:func:`scenario` yields one :class:`Publish` per item, each a complete HTTP publish body:
team items are ``[{"source": TeamSource, "event": events_Event}]`` for
``POST /v1/teams/{team}/events`` (valid against the seed schemas: each member's log has
its own thread, contiguous ``seq`` and a ``prev_hash`` chain), run events
``[<AG-UI event>]`` for ``POST /v1/threads/{thread}/runs/{run}/ui/ag-ui`` with an
``Idempotency-Key``, so that a publisher may retry any of them safely.  The same
``seed`` gives the same sequence; only ``tenant`` and ``start_ms`` enter from outside.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

__all__ = ["Publish", "scenario"]

Json = dict[str, Any]

#: Milliseconds of story time between two publishes (the ``time`` of events).
STEP_MS: Final = 250
#: Every this many runs, one ends in RUN_ERROR.
FAILING_EVERY: Final = 3
#: Tasks per project (handed out two at a time, one per member).
TASKS_PER_PROJECT: Final = 4


@dataclass(frozen=True)
class Publish:
    """One publish request: ``body`` is POSTed as JSON to ``path``."""

    feed: str
    """``team/<id>`` or ``run/<thread>/<run>``."""
    path: str
    body: list[Json]
    idempotency_key: str | None = None
    """Sent as ``Idempotency-Key`` (run publishes; team items dedupe by ``event_id``)."""

    @property
    def kind(self) -> str:
        return self.feed.partition("/")[0]


# --------------------------------------------------------------------------- content

_TOPICS: Final = (
    ("Compare flight prices to Lisbon", "search_flights", {"to": "LIS", "month": "2025-06"}),
    ("Summarise the hotel reviews", "fetch_reviews", {"hotel": "Casa Azul", "limit": 20}),
    ("Check the visa rules", "lookup_policy", {"country": "PT", "passport": "CA"}),
    ("Draft the day-by-day itinerary", "calendar_slots", {"days": 5}),
    ("Estimate the total budget", "calculator", {"expression": "5*120 + 2*310"}),
    ("Find a vegetarian restaurant", "search_places", {"q": "vegetarian", "near": "Alfama"}),
    ("Book the airport transfer", "quote_transfer", {"from": "LIS", "pax": 2}),
    ("Translate the welcome note", "translate", {"target": "pt", "chars": 420}),
)
_THOUGHTS: Final = (
    "The request is specific enough to start with the tool. ",
    "I should check the constraints before answering. ",
    "Two sources disagree; the newer one wins. ",
    "The numbers need a sanity check against last week. ",
)
_FINDINGS: Final = (
    "three options under budget",
    "the cheapest is on a Tuesday",
    "reviews mention noise at night",
    "no visa needed for 90 days",
    "the museum is closed on Mondays",
    "the transfer takes 25 minutes",
)
_ERRORS: Final = (
    ("model_unavailable", "the model provider timed out"),
    ("tool_failed", "the tool answered 502 three times"),
)
_MEMBERS: Final = (("researcher", "researcher-1"), ("writer", "writer-1"))
_LEAD: Final = "lead"


def _words(text: str) -> list[str]:
    """``text`` cut into streaming deltas (each word with its following space)."""
    parts = text.split(" ")
    return [p + " " for p in parts[:-1]] + [parts[-1]]


def _stage(stage: str) -> Json:
    return {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/stage", "value": stage}]}


# --------------------------------------------------------------------------- drafts


@dataclass
class _Log:
    """One member's log: its thread, branch, next seq and hash chain."""

    name: str
    thread_id: str
    branch_id: str
    seq: int = 0
    prev_hash: str = ""


@dataclass(frozen=True)
class _TeamDraft:
    log: str  # a member name, or "" for the team log
    type: str
    data: Json
    actor: str = "model"


@dataclass(frozen=True)
class _RunDraft:
    thread: str
    run: str
    event: Json


_Draft = _TeamDraft | _RunDraft


@dataclass
class _Project:
    tenant: str
    team: str
    logs: dict[str, _Log] = field(default_factory=dict)

    def member_ref(self, name: str) -> Json:
        return {"tenant": self.tenant, "team": self.team, "name": name, "generation": 1}


class _Story:
    """The state the story needs across projects: a seeded RNG, counters, the clock."""

    def __init__(self, tenant: str, seed: int, start_ms: int) -> None:
        self.tenant = tenant
        self.rng = random.Random(seed)
        self.start_ms = start_ms
        self.steps = 0
        self.runs = 0
        self.tasks = 0

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def project(self) -> _Project:
        project = _Project(self.tenant, self.uuid())
        for name in ("", _LEAD, *(m for _, m in _MEMBERS)):
            thread = self.uuid()
            project.logs[name] = _Log(
                name, thread, self.uuid(), prev_hash=hashlib.sha256(thread.encode()).hexdigest()
            )
        return project

    # -- materialising drafts, in publish order ----------------------------------------

    def publish(self, project: _Project, draft: _Draft) -> Publish:
        self.steps += 1
        if isinstance(draft, _RunDraft):
            path = f"/v1/threads/{draft.thread}/runs/{draft.run}/ui/ag-ui"
            return Publish(f"run/{draft.thread}/{draft.run}", path, [draft.event], self.uuid())
        log = project.logs[draft.log]
        log.seq += 1
        event: Json = {
            "seq": log.seq,
            "event_id": self.uuid(),
            "thread_id": log.thread_id,
            "branch_id": log.branch_id,
            "epoch": 1,
            "type": draft.type,
            "type_version": 1,
            "time": self.start_ms + self.steps * STEP_MS,
            "actor": {"kind": draft.actor},
            "prev_hash": log.prev_hash,
            "critical": True,
            "data": draft.data,
        }
        # The seed chains each event to the previous line's bytes in the same log.
        log.prev_hash = hashlib.sha256(msgspec.json.encode(event)).hexdigest()
        source: Json = (
            {"kind": "team"}
            if draft.log == ""
            else {"kind": "member", "member": project.member_ref(draft.log)}
        )
        path = f"/v1/teams/{project.team}/events"
        return Publish(f"team/{project.team}", path, [{"source": source, "event": event}])

    # -- the story ---------------------------------------------------------------------

    def opening(self, project: _Project) -> list[_Draft]:
        lead = project.logs[_LEAD]
        return [
            _TeamDraft(
                "",
                "team_opened",
                {
                    "team": project.team,
                    "kind": "lead",
                    "lead": project.member_ref(_LEAD),
                    "lead_thread_id": lead.thread_id,
                },
                actor="host",
            ),
            self.message(_LEAD, "*", "Morning team. Four tasks today; I'll hand them out."),
        ]

    def message(self, sender: str, to: str, text: str) -> _TeamDraft:
        data = {"message_id": f"msg-{self.uuid()[:8]}", "from": sender, "to": to, "text": text}
        return _TeamDraft(sender, "team_message", data)

    def task(self, project: _Project, member: str) -> list[_Draft]:
        """One member's task, start to end: hand-out, claim, run, report, close."""
        self.tasks += 1
        self.runs += 1
        task_id = f"T-{self.tasks}"
        subject, tool, args = self.rng.choice(_TOPICS)
        fails = self.runs % FAILING_EVERY == 0
        thread = project.logs[member].thread_id
        run = f"run-{self.runs}"
        prefix: list[_Draft] = [
            _TeamDraft(
                _LEAD,
                "team_task_created",
                {"task_id": task_id, "subject": subject, "description": "", "blocked_by": []},
            ),
            self.message(_LEAD, member, f"{member}, please take {task_id}: {subject}."),
            _TeamDraft(_LEAD, "team_task_claimed", {"task_id": task_id, "member": member}),
        ]
        run_events = self.run_events(thread, run, subject, tool, args, fails)
        if fails:
            _, why = self.rng.choice(_ERRORS)
            report = self.message(member, _LEAD, f"{task_id} failed: {why}. Can someone retry?")
            status = "failed"
        else:
            found = self.rng.choice(_FINDINGS)
            report = self.message(member, _LEAD, f"{task_id} done: {found}.")
            status = "completed"
        suffix: list[_Draft] = [
            report,
            _TeamDraft(_LEAD, "team_task_updated", {"task_id": task_id, "status": status}),
        ]
        return prefix + [_RunDraft(thread, run, e) for e in run_events] + suffix

    def run_events(
        self, thread: str, run: str, subject: str, tool: str, args: Json, fails: bool
    ) -> list[Json]:
        """An AG-UI run: reasoning, streamed text, a tool call, state deltas, the end."""
        n = self.runs
        text_id, call_id = f"msg-{n}-a", f"call-{n}"
        reasoning_id, thought_id = f"reason-{n}", f"thought-{n}"
        found = self.rng.choice(_FINDINGS)
        thought = self.rng.choice(_THOUGHTS) + "Let me use " + tool + "."
        events: list[Json] = [
            {
                "type": "RUN_STARTED",
                "threadId": thread,
                "runId": run,
                "input": {
                    "threadId": thread,
                    "runId": run,
                    "messages": [{"id": f"user-{n}", "role": "user", "content": subject}],
                },
            },
            {"type": "STATE_SNAPSHOT", "snapshot": {"task": subject, "stage": "thinking"}},
            {"type": "STEP_STARTED", "stepName": "think"},
            {"type": "REASONING_START", "messageId": reasoning_id},
            {"type": "REASONING_MESSAGE_START", "messageId": thought_id, "role": "reasoning"},
            *(
                {"type": "REASONING_MESSAGE_CONTENT", "messageId": thought_id, "delta": d}
                for d in _words(thought)
            ),
            {"type": "REASONING_MESSAGE_END", "messageId": thought_id},
            {"type": "REASONING_END", "messageId": reasoning_id},
            {"type": "STEP_FINISHED", "stepName": "think"},
            {
                "type": "STATE_DELTA",
                "delta": [{"op": "replace", "path": "/stage", "value": "working"}],
            },
            {"type": "STEP_STARTED", "stepName": "work"},
            {"type": "TEXT_MESSAGE_START", "messageId": text_id, "role": "assistant"},
            *(
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": text_id, "delta": d}
                for d in _words(f"On it: {subject.lower()}.")
            ),
            {
                "type": "TOOL_CALL_START",
                "toolCallId": call_id,
                "toolCallName": tool,
                "parentMessageId": text_id,
            },
        ]
        encoded = msgspec.json.encode(args).decode()
        cut = max(1, len(encoded) // 2)
        events += [
            {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": encoded[:cut]},
            {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": encoded[cut:]},
            {"type": "TOOL_CALL_END", "toolCallId": call_id},
        ]
        if fails:
            code, why = self.rng.choice(_ERRORS)
            events += [
                {
                    "type": "STATE_DELTA",
                    "delta": [{"op": "replace", "path": "/stage", "value": "failed"}],
                },
                {"type": "RUN_ERROR", "message": why, "code": code},
            ]
            return events
        events += [
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"result-{n}",
                "toolCallId": call_id,
                "content": msgspec.json.encode({"ok": True, "summary": found}).decode(),
                "role": "tool",
            },
            {
                "type": "STATE_DELTA",
                "delta": [
                    {"op": "replace", "path": "/stage", "value": "writing"},
                    {"op": "add", "path": "/finding", "value": found},
                ],
            },
            *(
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": text_id, "delta": d}
                for d in _words(f" Result: {found}.")
            ),
            {"type": "TEXT_MESSAGE_END", "messageId": text_id},
            {"type": "STEP_FINISHED", "stepName": "work"},
            {
                "type": "STATE_DELTA",
                "delta": [{"op": "replace", "path": "/stage", "value": "done"}],
            },
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "outcome": {"type": "success"},
                "result": {"finding": found},
            },
        ]
        return events

    def interleave(self, *streams: list[_Draft]) -> Iterator[_Draft]:
        """Merge ``streams`` in a random order that keeps each stream's own order."""
        queues = [list(reversed(s)) for s in streams if s]
        while queues:
            queue = self.rng.choice(queues)
            yield queue.pop()
            if not queue:
                queues.remove(queue)


def scenario(tenant: str, *, seed: int = 0, start_ms: int = 1_760_000_000_000) -> Iterator[Publish]:
    """The demo's publishes, forever (see the module docstring).

    ``tenant`` must be the publishing token's tenant (member sources name it);
    ``start_ms`` is the ``time`` of the story's first event.
    """
    story = _Story(tenant, seed, start_ms)
    while True:
        project = story.project()
        for draft in story.opening(project):
            yield story.publish(project, draft)
        for _ in range(TASKS_PER_PROJECT // len(_MEMBERS)):
            work = [story.task(project, member) for _, member in _MEMBERS]
            for draft in story.interleave(*work):
                yield story.publish(project, draft)
        closing = story.message(_LEAD, "*", "That's everything for this project. Thanks all.")
        yield story.publish(project, closing)
