"""``GET /v1/runs?state=live``: the caller's live runs (docs/contract.md, "Runs end").

``state=live`` (required: the one state listed), ``limit`` (1 to
:data:`~gateway.http.feed_listing.MAX_LIMIT`, default
:data:`~gateway.http.feed_listing.DEFAULT_LIMIT`), ``after`` (the ``next`` of the
previous page).  The answer is ``{"runs": [{"feed", "thread_id", "run_id",
"started_ms", "updated_ms", "lease_deadline_ms"}], "next"}`` (``feed``: the AG-UI run
feed ``run/<thread>/<run>``, or a threads run stream's ``run/<thread>/<run>/events``),
the latest started first,
``next`` null on the last page, paged like ``GET /v1/feeds``.  Only runs the token may
read (:func:`gateway.access.may_read`, its ``threads`` claim) and whose feed holds a live
run when the request is answered are listed (the live-run index is checked against each
run's lease); a page looks at no more than
:data:`~gateway.http.feed_listing.MAX_SCAN` index entries, so it may hold fewer than
``limit`` runs with a non-null ``next``.
"""

from __future__ import annotations

import msgspec

from gateway import access
from gateway.auth import Principal
from gateway.errors import InvalidRequest, NotFound
from gateway.feed import FeedKey, FeedKind, is_run_part
from gateway.http.feed_listing import MAX_SCAN, decode_after, encode_after, page_limit, read_each
from gateway.http.route_context import RouteContext
from gateway.net.server import Request, Responder
from gateway.store.interfaces import FeedStore, Lease, LiveRun, RunIndex


class ListedRun(msgspec.Struct, frozen=True):
    feed: str
    thread_id: str
    run_id: str
    started_ms: int
    updated_ms: int
    lease_deadline_ms: int


class RunListing(msgspec.Struct, frozen=True):
    runs: list[ListedRun]
    next: str | None


def encode_position(run: LiveRun) -> str:
    return encode_after(run.started_ms, run.feed.id)


def decode_position(text: str, tenant: str) -> LiveRun:
    """The position an ``after`` names; InvalidRequest for anything this route did not
    hand out."""
    ms, feed_id = decode_after(text, lambda feed_id: _run_ids(feed_id) is not None)
    return LiveRun(FeedKey(tenant, FeedKind.RUN, feed_id), ms)


def _run_ids(feed_id: str) -> tuple[str, str] | None:
    """The thread and run ids of a run feed's id: an AG-UI run feed's
    ``<thread>/<run>``, or a threads run stream's ``<thread>/<run>/events``."""
    parts = feed_id.split("/")
    if len(parts) == 3 and parts[2] == "events":
        parts = parts[:2]
    if len(parts) != 2 or not (is_run_part(parts[0]) and is_run_part(parts[1])):
        return None
    return parts[0], parts[1]


async def list_runs(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET /v1/runs``: one page of the caller's live runs."""
    principal = context.principal(request)
    principal.require_subscribe()
    if request.query_one("state") != "live":
        raise InvalidRequest("state: must be live")
    limit = page_limit(request.query_one("limit"))
    raw_after = request.query_one("after")
    after = None if raw_after is None else decode_position(raw_after, principal.tenant)
    if context.runs is None:
        raise NotFound("this gateway keeps no live-run index")
    listing = await list_page(context.runs, context.feeds, principal, limit, after)
    headers = [(b"cache-control", b"no-store"), *context.cors.headers(request)]
    responder.send(200, msgspec.json.encode(listing), headers=headers)


async def list_page(
    runs: RunIndex,
    feeds: FeedStore,
    principal: Principal,
    limit: int,
    after: LiveRun | None,
) -> RunListing:
    """Up to ``limit`` live runs after ``after``, and the position to go on from.

    Reads the index in chunks with one entry to spare (so that a full page knows whether
    more follow), skips what the principal may not read, and reads the lease of the rest:
    an entry whose run is not live is skipped, not dropped (its run may be starting:
    entries are added before the start is appended; the sweep drops it when due).
    """
    found: list[ListedRun] = []
    position = after
    scanned = 0
    while True:
        want = min(limit - len(found), MAX_SCAN - scanned)
        entries = await runs.live_page(principal.tenant, before=position, limit=want + 1)
        readable = [e.feed for e in entries[:want] if _listable(principal, e.feed)]
        leases = await read_each(readable, feeds.lease)
        for entry in entries[:want]:
            scanned += 1
            position = entry
            lease = leases.get(entry.feed)
            if lease is not None:
                found.append(_listed(entry.feed, lease))
        if len(entries) <= want:
            return RunListing(found, None)  # nothing beyond what was looked at
        if len(found) >= limit or scanned >= MAX_SCAN:
            assert position is not None
            return RunListing(found, encode_position(position))


def _listable(principal: Principal, feed: FeedKey) -> bool:
    return _run_ids(feed.id) is not None and access.may_read(principal, feed)


def _listed(feed: FeedKey, lease: Lease) -> ListedRun:
    ids = _run_ids(feed.id)
    assert ids is not None  # _listable
    thread_id, run_id = ids
    return ListedRun(
        feed.public_name,
        thread_id,
        run_id,
        lease.started_ms,
        lease.renewed_ms,
        lease.deadline_ms,
    )
