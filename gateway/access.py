"""Which feed a request names, and whether its principal may read it (pure).

docs/contract.md D5: every feed belongs to one tenant, taken from the token, never from
the path; the optional ``teams`` and ``threads`` claims narrow what a token may read and
publish to.  A feed outside the claims, another tenant's feed and a feed that does not
exist are answered alike (``not_found``), so a caller learns nothing about feeds it may
not read.  Every route and transport asks :func:`may_read` (through the helpers below);
nothing else decides it.
"""

from __future__ import annotations

from gateway.auth import Principal
from gateway.errors import InvalidRequest, NotFound
from gateway.feed import FeedKey, FeedKind, is_run_part, is_team_id, run_feed, team_feed

NO_SUCH_TEAM = "no such team"
NO_SUCH_RUN = "no such run"
NO_SUCH_FEED = "no such feed"


def may_read(principal: Principal, feed: FeedKey) -> bool:
    """The one rule: the principal's tenant, and the ``teams``/``threads`` claims."""
    if feed.tenant != principal.tenant:
        return False
    if feed.kind is FeedKind.TEAM:
        return principal.may_read_team(feed.id)
    return principal.may_read_thread(feed.id.partition("/")[0])


def team_for(principal: Principal, team: str) -> FeedKey:
    """The principal's team feed ``team``; NotFound for a malformed id or one it may not
    read (exactly like a team that does not exist)."""
    if is_team_id(team):
        feed = team_feed(principal.tenant, team)
        if may_read(principal, feed):
            return feed
    raise NotFound(NO_SUCH_TEAM)


def run_for(principal: Principal, thread_id: str, run_id: str) -> FeedKey:
    """The principal's run feed; NotFound for malformed ids or a thread it may not read."""
    if is_run_part(thread_id) and is_run_part(run_id):
        feed = run_feed(principal.tenant, thread_id, run_id)
        if may_read(principal, feed):
            return feed
    raise NotFound(NO_SUCH_RUN)


def feed_named(principal: Principal, name: str) -> FeedKey:
    """A public feed name (``team/<id>``, ``run/<thread>/<run>``) as this principal's feed.

    Raises InvalidRequest for a name of neither shape, NotFound for a feed it may not
    read (a team id that is not a lowercase UUID included).
    """
    kind, slash, rest = name.partition("/")
    if slash and kind == FeedKind.TEAM.value:
        feed = team_feed(principal.tenant, rest)
        if is_team_id(rest) and may_read(principal, feed):
            return feed
        raise NotFound(NO_SUCH_FEED)
    if slash and kind == FeedKind.RUN.value:
        thread, _, run = rest.partition("/")
        if not is_run_part(thread) or not is_run_part(run):
            raise InvalidRequest("feed: run feeds are run/<thread_id>/<run_id>")
        feed = run_feed(principal.tenant, thread, run)
        if may_read(principal, feed):
            return feed
        raise NotFound(NO_SUCH_FEED)
    raise InvalidRequest("feed: must be team/<team_id> or run/<thread_id>/<run_id>")
