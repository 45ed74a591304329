"""Feeds: what a feed is called, what state it is in, and what an item is.

Pure vocabulary shared by the stores, the hub and the routes (contract D1).
"""

from __future__ import annotations

import enum
import re
from typing import NamedTuple
from urllib.parse import quote

import msgspec

from gateway.cursor import Cursor

_RUN_PART = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_TEAM_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class FeedKind(enum.StrEnum):
    TEAM = "team"
    RUN = "run"


class FeedKey(NamedTuple):
    """One feed: its tenant (from the token, never from the path), kind and id.

    For run feeds ``id`` is ``<thread_id>/<run_id>``.
    """

    tenant: str
    kind: FeedKind
    id: str

    def tag(self) -> str:
        """The Redis Cluster hash tag shared by every key of this feed.

        The tenant is percent-encoded so that no tenant can contain ``{``, ``}`` or
        ``:`` and collide with another tenant's keys.
        """
        return "{" + quote(self.tenant, safe="") + ":" + self.kind.value + ":" + self.id + "}"

    @property
    def public_name(self) -> str:
        """The name a client uses for this feed (``team/<id>``, ``run/<thread>/<run>``)."""
        # The kind is a StrEnum member, a str itself: ``.value`` would go through enum's
        # descriptor, which costs as much as the rest (this runs for every event framed).
        return self.kind + "/" + self.id


def is_team_id(text: str) -> bool:
    """A team id is a lowercase UUID (the seed's events_TeamId)."""
    return _TEAM_ID.match(text) is not None


def is_run_part(text: str) -> bool:
    return _RUN_PART.match(text) is not None


def team_feed(tenant: str, team: str) -> FeedKey:
    return FeedKey(tenant, FeedKind.TEAM, team)


def run_feed(tenant: str, thread_id: str, run_id: str) -> FeedKey:
    return FeedKey(tenant, FeedKind.RUN, f"{thread_id}/{run_id}")


def run_events_feed(tenant: str, thread_id: str, run_id: str) -> FeedKey:
    """The threads run stream of a run (D7b), beside its AG-UI feed.

    Ids of run feeds hold no ``/`` of their own, so ``<thread>/<run>/events`` can never
    name an AG-UI run feed.
    """
    return FeedKey(tenant, FeedKind.RUN, f"{thread_id}/{run_id}/events")


class FeedState(msgspec.Struct, frozen=True):
    """A feed's position as the store reports it.

    ``first`` is the offset of the oldest retained item (``head + 1`` when the epoch
    holds no retained items).  ``host`` marks a team feed that began with a host
    ``team_opened``.
    """

    epoch: int
    head: int
    first: int
    host: bool = False
    #: The chain value after the head item (see docs/architecture.md); "" for head 0.
    chain: str = ""

    @property
    def head_cursor(self) -> Cursor:
        return Cursor(self.epoch, self.head)


class StoredItem(msgspec.Struct, frozen=True, array_like=True):
    """One item as the store keeps it.

    ``data`` is the kind-specific payload: for a team feed the RFC 8785 JSON of the
    TeamItem without its cursor (``"event":...,"kind":"event","source":...``), so the
    wire layer can add the cursor by concatenation.  ``chain`` is the hash chain
    value after this item; readers use it to notice a rolled-back history.
    """

    epoch: int
    offset: int
    data: bytes
    chain: str

    @property
    def cursor(self) -> Cursor:
        return Cursor(self.epoch, self.offset)


class NewItem(msgspec.Struct, frozen=True):
    """An item to append: its idempotency key (a team event's ``event_id``) and payload."""

    key: str | None
    data: bytes
    #: The item opens a host team (only meaningful as a feed's first item).
    host_opening: bool = False


class AppendResult(msgspec.Struct, frozen=True):
    """Cursors of the appended (or, for retries, previously appended) items, in order."""

    cursors: list[Cursor]
    #: The append started a new epoch (the history could not be trusted, or was lost).
    new_epoch: bool
    state: FeedState


class Known(msgspec.Struct, frozen=True):
    """What this node last saw of a feed; the store uses it to notice a rollback."""

    epoch: int
    offset: int
    chain: str
