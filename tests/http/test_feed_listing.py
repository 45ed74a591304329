"""``GET /v1/feeds`` (D11): the tenant's active feeds, on both logs, over real HTTP."""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import pytest

from gateway.activity import FeedActivity
from gateway.app import Gateway
from gateway.feed import team_feed
from gateway.http.feed_listing import MAX_SCAN, encode_position
from gateway.producer import Producer
from gateway.store.interfaces import IndexEntry
from tests.support import events as ev
from tests.support.backends import lose
from tests.support.node import auth, start_node

pytestmark = pytest.mark.anyio

Json = dict[str, Any]


def activity(node: Gateway) -> FeedActivity:
    found = node.publisher.activity
    assert found is not None
    return found


async def publish_team(client: httpx.AsyncClient, team: str, n: int = 1, **kw: Any) -> str:
    body = [ev.item() for _ in range(n)]
    r = await client.post(f"/v1/teams/{team}/events", json=body, headers=auth(**kw))
    assert r.status_code == 200, r.text
    cursor: str = r.json()["cursors"][-1]
    return cursor


async def publish_run(client: httpx.AsyncClient, thread: str, run: str, **kw: Any) -> str:
    body = [
        {"type": "RUN_STARTED", "threadId": thread, "runId": run},
        {"type": "STEP_STARTED", "stepName": "s"},
    ]
    path = f"/v1/threads/{thread}/runs/{run}/ui/ag-ui"
    r = await client.post(path, json=body, headers=auth(**kw))
    assert r.status_code == 200, r.text
    cursor: str = r.json()["cursors"][-1]
    return cursor


async def listing(client: httpx.AsyncClient, kind: str, **params: Any) -> Json:
    headers = params.pop("headers", None) or auth()
    r = await client.get("/v1/feeds", params={"kind": kind, **params}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body: Json = r.json()
    return body


async def test_lists_teams_and_runs_most_recent_first_with_their_heads(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    older, newer = ev.team_id(), ev.team_id()
    older_head = await publish_team(client, older, 3)
    await activity(node).flush()  # older is written first ...
    newer_head = await publish_team(client, newer)
    run_head = await publish_run(client, "t1", "r1")
    await activity(node).flush()  # ... then newer
    teams = await listing(client, "team")
    assert [(f["feed"], f["kind"], f["head"]) for f in teams["feeds"]] == [
        (f"team/{newer}", "team", newer_head),
        (f"team/{older}", "team", older_head),
    ]
    assert teams["next"] is None
    assert teams["feeds"][0]["updated_ms"] >= teams["feeds"][1]["updated_ms"]
    runs = await listing(client, "run")
    assert [(f["feed"], f["head"]) for f in runs["feeds"]] == [("run/t1/r1", run_head)]
    # The head is the feed's head when asked, not when the index last heard of it.
    later = await publish_team(client, older)
    teams = await listing(client, "team")
    assert {f["feed"]: f["head"] for f in teams["feeds"]}[f"team/{older}"] == later


async def test_a_node_lists_a_new_feed_within_about_a_second(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    await publish_team(client, team)

    # No flush here: the node's own round (once a second) writes it.
    async def listed() -> list[str]:
        return [f["feed"] for f in (await listing(client, "team"))["feeds"]]

    with anyio.fail_after(5):
        while f"team/{team}" not in await listed():  # noqa: ASYNC110 - polls the route
            await anyio.sleep(0.05)


async def test_pages_walk_every_feed_once(node: Gateway, client: httpx.AsyncClient) -> None:
    teams = [ev.team_id() for _ in range(7)]
    for team in teams:
        await publish_team(client, team)
    await activity(node).flush()
    seen: list[str] = []
    after = None
    for _ in range(10):
        params = {"limit": 3} if after is None else {"limit": 3, "after": after}
        page = await listing(client, "team", **params)
        assert len(page["feeds"]) <= 3
        seen += [f["feed"] for f in page["feeds"]]
        after = page["next"]
        if after is None:
            break
    assert sorted(seen) == sorted(f"team/{t}" for t in teams)
    assert len(seen) == len(set(seen))
    # A full last page says so: no next page to ask for.
    page = await listing(client, "team", limit=7)
    assert len(page["feeds"]) == 7 and page["next"] is None


async def test_only_what_the_token_may_read(node: Gateway, client: httpx.AsyncClient) -> None:
    mine, other = ev.team_id(), ev.team_id()
    await publish_team(client, mine)
    await publish_team(client, other)
    await publish_team(client, ev.team_id(), tenant="globex")
    await publish_run(client, "t1", "r1")
    await publish_run(client, "t2", "r1")
    await activity(node).flush()
    narrow = auth(teams=[mine], threads=["t2"])
    teams = await listing(client, "team", headers=narrow)
    assert [f["feed"] for f in teams["feeds"]] == [f"team/{mine}"]
    runs = await listing(client, "run", headers=narrow)
    assert [f["feed"] for f in runs["feeds"]] == ["run/t2/r1"]
    # Another tenant sees its own feeds only.
    globex = await listing(client, "team", headers=auth("globex"))
    assert len(globex["feeds"]) == 1 and globex["feeds"][0]["feed"] not in (
        f"team/{mine}",
        f"team/{other}",
    )
    assert (await listing(client, "team", headers=auth("initech")))["feeds"] == []


async def test_host_teams_and_run_streams_are_not_listed(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    host, plain = ev.team_id(), ev.team_id()
    body = [ev.item(ev.opened_host(host, "acme")), ev.item()]
    r = await client.post(f"/v1/teams/{host}/events", json=body, headers=auth())
    assert r.status_code == 200, r.text
    await publish_team(client, plain)
    # The threads run stream (D7b) of a run: its thread is the events' thread_id.
    committed = {"kind": "event", "event": ev.message(seq=1)}
    thread = committed["event"]["thread_id"]
    r = await client.post(f"/v1/threads/{thread}/runs/r9/events", json=committed, headers=auth())
    assert r.status_code == 200, r.text
    await activity(node).flush()
    assert [f["feed"] for f in (await listing(client, "team"))["feeds"]] == [f"team/{plain}"]
    assert (await listing(client, "run"))["feeds"] == []


async def test_a_feed_that_is_gone_is_left_out_and_forgotten(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    lost, kept = ev.team_id(), ev.team_id()
    await publish_team(client, lost)
    await publish_team(client, kept)
    await activity(node).flush()
    await lose(node.backend, team_feed("acme", lost))
    assert [f["feed"] for f in (await listing(client, "team"))["feeds"]] == [f"team/{kept}"]
    assert node.backend.index is not None
    entries = await node.backend.index.page(
        "acme", team_feed("acme", kept).kind, before=None, limit=9
    )
    assert [e.id for e in entries] == [kept]


async def test_a_page_looks_at_a_bounded_number_of_entries(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    # Index entries the token may not read: the page ends early with a next page.
    assert node.backend.index is not None
    mine = ev.team_id()
    await publish_team(client, mine)
    await activity(node).flush()
    others = [team_feed("acme", ev.team_id()) for _ in range(MAX_SCAN + 5)]
    later = int(time.time() * 1000) + 60_000  # listed before mine
    await node.backend.index.touch([(f, later) for f in others])
    narrow = auth(teams=[mine])
    first = await listing(client, "team", headers=narrow)
    assert first["feeds"] == [] and first["next"] is not None
    second = await listing(client, "team", headers=narrow, after=first["next"])
    assert [f["feed"] for f in second["feeds"]] == [f"team/{mine}"]
    assert second["next"] is None


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "kind"),
        ({"kind": "teams"}, "kind"),
        ({"kind": "team", "limit": "0"}, "limit"),
        ({"kind": "team", "limit": "101"}, "limit"),
        ({"kind": "team", "limit": "ten"}, "limit"),
        ({"kind": "team", "after": "!!"}, "after"),
        ({"kind": "team", "after": "x" * 401}, "after"),
        # A position of another kind, and one that is not base64 of "<ms>:<id>".
        ({"kind": "team", "after": encode_position(IndexEntry("t1/r1", 5))}, "after"),
        ({"kind": "run", "after": "bm90LWEtcG9zaXRpb24"}, "after"),
    ],
)
async def test_bad_parameters_are_400_naming_them(
    client: httpx.AsyncClient, params: dict[str, str], message: str
) -> None:
    r = await client.get("/v1/feeds", params=params, headers=auth())
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request" and error["message"].startswith(message + ":")


async def test_needs_a_token_with_the_subscribe_scope(client: httpx.AsyncClient) -> None:
    for headers in ({}, auth(scopes=("publish",))):
        r = await client.get("/v1/feeds", params={"kind": "team"}, headers=headers)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "unauthenticated"
    r = await client.post("/v1/feeds", headers=auth())
    assert r.status_code == 405 and r.headers["allow"] == "GET"


async def test_what_the_python_producer_publishes_is_listed(
    redis_url: str, redis_prefix: str
) -> None:
    producer = Producer.connect(redis_url, prefix=redis_prefix)
    team = ev.team_id()
    try:
        cursor = await producer.publish_team("acme", team, ev.team_source(), ev.message())
    finally:
        await producer.aclose()
    async with (
        start_node(redis_url, redis_prefix) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        page = await listing(client, "team")
    assert [(f["feed"], f["head"]) for f in page["feeds"]] == [(f"team/{team}", str(cursor))]
