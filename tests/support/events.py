"""Valid team events and publish bodies for integration tests (seed events_Event)."""

from __future__ import annotations

import itertools
import uuid as _uuid
from typing import Any

SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
_counter = itertools.count(1)


def new_id() -> str:
    """A fresh lowercase UUID."""
    return str(_uuid.uuid4())


def team_id() -> str:
    return new_id()


def event(type_: str, data: dict[str, Any], *, seq: int | None = None) -> dict[str, Any]:
    n = next(_counter) if seq is None else seq
    return {
        "seq": n,
        "event_id": new_id(),
        "thread_id": "0190f5a2-7c1e-7b3d-8a4f-000000000002",
        "branch_id": "0190f5a2-7c1e-7b3d-8a4f-000000000003",
        "epoch": 1,
        "type": type_,
        "type_version": 1,
        "time": 1_760_000_000_000 + n,
        "actor": {"kind": "host"},
        "prev_hash": SHA,
        "critical": True,
        "data": data,
    }


def message(text: str = "hello", *, seq: int | None = None) -> dict[str, Any]:
    return event(
        "team_message",
        {"message_id": f"m-{next(_counter)}", "from": "lead", "to": "*", "text": text},
        seq=seq,
    )


def opened_host(team: str, tenant: str) -> dict[str, Any]:
    return event("team_opened", {"team": team, "kind": "host", "tenant": tenant})


def team_source() -> dict[str, Any]:
    return {"kind": "team"}


def member_source(tenant: str, team: str, name: str = "lead") -> dict[str, Any]:
    return {
        "kind": "member",
        "member": {"tenant": tenant, "team": team, "name": name, "generation": 1},
    }


def item(ev: dict[str, Any] | None = None, source: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"source": source or team_source(), "event": ev or message()}
