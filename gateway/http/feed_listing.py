"""``GET /v1/feeds``: the caller's recently active feeds of one kind (contract D11).

``?kind=team|run`` (required), ``limit`` (1 to :data:`MAX_LIMIT`, default
:data:`DEFAULT_LIMIT`), ``after`` (the ``next`` of the previous page).  The answer is
``{"feeds": [{"feed", "kind", "head", "updated_ms"}], "next"}``, most recently active
first, ``next`` null on the last page.  Only feeds the token may read
(:func:`gateway.access.may_read`) and that exist are listed (host teams never are, D3.6);
``head`` is the feed's head cursor when the request was answered.  A page looks at no
more than :data:`MAX_SCAN` index entries, so it may hold fewer than ``limit`` feeds with
a non-null ``next``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import msgspec

from gateway import access
from gateway.auth import Principal
from gateway.errors import GatewayError, InvalidRequest, NotFound
from gateway.feed import FeedKey, FeedKind, is_run_part, is_team_id
from gateway.http.route_context import RouteContext
from gateway.net.server import Request, Responder
from gateway.store.interfaces import FeedIndex, FeedStore, IndexEntry

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
#: Index entries one request looks at, at most.
MAX_SCAN = 500
#: Feed states read at once.
STATE_READS = 16
#: Longest ``after`` accepted (an encoded millisecond count and a run feed's id).
MAX_AFTER = 400
NOT_A_POSITION = "after: not a position this route returned"
T = TypeVar("T")


class Listed(msgspec.Struct, frozen=True):
    feed: str
    kind: str
    head: str
    updated_ms: int


class Listing(msgspec.Struct, frozen=True):
    feeds: list[Listed]
    next: str | None


def encode_after(ms: int, feed_id: str) -> str:
    """A listing's ``next``: the position (a time in ms and a feed id) of the last entry
    a page looked at, opaque to clients."""
    raw = f"{ms}:{feed_id}".encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_after(text: str, valid_id: Callable[[str], bool]) -> tuple[int, str]:
    """The time and feed id an ``after`` names; InvalidRequest for anything a listing
    did not hand out (``valid_id``: the feed ids that listing hands out)."""
    if not 0 < len(text) <= MAX_AFTER:
        raise InvalidRequest(NOT_A_POSITION)
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidRequest(NOT_A_POSITION) from None
    ms, _, feed_id = raw.partition(":")
    if not ms.isdigit() or len(ms) > 16 or not valid_id(feed_id):
        raise InvalidRequest(NOT_A_POSITION)
    return int(ms), feed_id


def encode_position(entry: IndexEntry) -> str:
    return encode_after(entry.updated_ms, entry.id)


def decode_position(text: str, kind: FeedKind) -> IndexEntry:
    """The position an ``after`` names; InvalidRequest for anything this route did not
    hand out (for this kind)."""
    ms, feed_id = decode_after(text, lambda feed_id: _valid_id(kind, feed_id))
    return IndexEntry(feed_id, ms)


def _valid_id(kind: FeedKind, feed_id: str) -> bool:
    if kind is FeedKind.TEAM:
        return is_team_id(feed_id)
    thread, slash, run = feed_id.partition("/")
    return bool(slash) and is_run_part(thread) and is_run_part(run)


def _kind(raw: str | None) -> FeedKind:
    if raw == FeedKind.TEAM.value:
        return FeedKind.TEAM
    if raw == FeedKind.RUN.value:
        return FeedKind.RUN
    raise InvalidRequest("kind: must be team or run")


def page_limit(raw: str | None) -> int:
    """A listing's ``limit`` (1 to :data:`MAX_LIMIT`, :data:`DEFAULT_LIMIT` when absent);
    InvalidRequest otherwise."""
    if raw is None:
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise InvalidRequest(f"limit: must be an integer from 1 to {MAX_LIMIT}")
    return int(raw)


async def list_feeds(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET /v1/feeds``: one page of the caller's recently active feeds of a kind."""
    principal = context.principal(request)
    principal.require_subscribe()
    kind = _kind(request.query_one("kind"))
    limit = page_limit(request.query_one("limit"))
    raw_after = request.query_one("after")
    after = None if raw_after is None else decode_position(raw_after, kind)
    if context.index is None:
        raise NotFound("this gateway keeps no feed index")
    listing = await list_page(context.index, context.feeds, principal, kind, limit, after)
    headers = [(b"cache-control", b"no-store"), *context.cors.headers(request)]
    responder.send(200, msgspec.json.encode(listing), headers=headers)


async def list_page(
    index: FeedIndex,
    feeds: FeedStore,
    principal: Principal,
    kind: FeedKind,
    limit: int,
    after: IndexEntry | None,
) -> Listing:
    """Up to ``limit`` listed feeds after ``after``, and the position to go on from.

    Reads the index in chunks with one entry to spare (so that a full page knows whether
    more follow), skips what the principal may not read, reads the states of the rest,
    drops host teams and forgets feeds that no longer exist.
    """
    found: list[Listed] = []
    position = after
    scanned = 0
    while True:
        want = min(limit - len(found), MAX_SCAN - scanned)
        entries = await index.page(principal.tenant, kind, before=position, limit=want + 1)
        keys = [FeedKey(principal.tenant, kind, e.id) for e in entries[:want]]
        readable = [k for k in keys if _valid_id(kind, k.id) and access.may_read(principal, k)]
        states = await read_each(readable, feeds.state)
        gone: list[str] = []
        for entry, key in zip(entries, keys, strict=False):
            scanned += 1
            position = entry
            if key not in states:
                continue  # not the principal's to read
            state = states[key]
            if state is None:
                gone.append(key.id)
            elif not state.host:
                head = str(state.head_cursor)
                found.append(Listed(key.public_name, kind.value, head, entry.updated_ms))
        if gone:
            with contextlib.suppress(GatewayError):  # else the next listing forgets them
                await index.forget(principal.tenant, kind, gone)
        if len(entries) <= want:
            return Listing(found, None)  # nothing beyond what was looked at
        if len(found) >= limit or scanned >= MAX_SCAN:
            assert position is not None
            return Listing(found, encode_position(position))


async def read_each(
    keys: list[FeedKey], read: Callable[[FeedKey], Awaitable[T]]
) -> dict[FeedKey, T]:
    """``read(key)`` for each feed, :data:`STATE_READS` at a time (a feed's state, a
    run's lease); raises the first error."""
    found: dict[FeedKey, T] = {}
    errors: list[GatewayError] = []
    limiter = anyio.CapacityLimiter(STATE_READS)

    async def one(key: FeedKey) -> None:
        async with limiter:
            try:
                found[key] = await read(key)
            except GatewayError as exc:
                errors.append(exc)

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(one, key)
    if errors:
        raise errors[0]
    return found
