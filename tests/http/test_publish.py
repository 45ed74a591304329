"""POST /v1/teams/{team}/events (D4): validation, all-or-nothing, idempotent retries."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.app import Gateway
from gateway.feed import team_feed
from tests.support import events as ev
from tests.support.node import auth, metric, start_node

pytestmark = pytest.mark.anyio


@pytest.fixture
async def node(node_redis: tuple[str | None, str]) -> AsyncIterator[Gateway]:
    url, prefix = node_redis
    async with start_node(url, prefix, max_body_bytes=64 * 1024) as n:
        yield n


async def head(node: Gateway, team: str, tenant: str = "acme") -> int:
    state = await node.backend.feeds.state(team_feed(tenant, team))
    return 0 if state is None else state.head


def error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert list(body) == ["error"] and sorted(body["error"]) == ["code", "message"]
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    return message


async def test_single_and_array_answers_cursors_in_order(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    r = await client.post(f"/v1/teams/{team}/events", json=ev.item(), headers=auth())
    assert r.status_code == 200
    [first] = r.json()["cursors"]
    epoch = first.split(":")[0]
    assert first == f"{epoch}:1"
    r = await client.post(
        f"/v1/teams/{team}/events", json=[ev.item() for _ in range(3)], headers=auth()
    )
    assert r.json() == {"cursors": [f"{epoch}:{i}" for i in (2, 3, 4)]}


async def test_retry_returns_the_original_cursor(node: Gateway, client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    body = [ev.item(), ev.item()]
    r1 = await client.post(f"/v1/teams/{team}/events", json=body, headers=auth())
    r2 = await client.post(f"/v1/teams/{team}/events", json=body, headers=auth())
    assert r1.status_code == r2.status_code == 200
    assert r1.json() == r2.json()
    assert await head(node, team) == 2
    # A batch mixing a retried item with a new one appends only the new one.
    new = ev.item()
    r3 = await client.post(f"/v1/teams/{team}/events", json=[body[1], new], headers=auth())
    epoch = r1.json()["cursors"][0].split(":")[0]
    assert r3.json() == {"cursors": [r1.json()["cursors"][1], f"{epoch}:3"]}
    # The same event twice in one array: one item, both answers name it.
    twice = ev.item()
    r4 = await client.post(f"/v1/teams/{team}/events", json=[twice, twice], headers=auth())
    assert r4.json() == {"cursors": [f"{epoch}:4", f"{epoch}:4"]}
    assert await head(node, team) == 4


async def test_same_event_id_different_body_is_409(
    node: Gateway, client: httpx.AsyncClient
) -> None:
    team = ev.team_id()
    original = ev.item()
    await client.post(f"/v1/teams/{team}/events", json=original, headers=auth())
    changed = json.loads(json.dumps(original))
    changed["event"]["data"]["text"] = "something else"
    r = await client.post(f"/v1/teams/{team}/events", json=[ev.item(), changed], headers=auth())
    assert "item 1" in error(r, 409, "idempotency_key_reused")
    assert await head(node, team) == 1  # nothing of the array was appended


BAD_ITEMS: list[tuple[str, Any, str]] = [
    ("unknown item key", {**ev.item(), "extra": 1}, "extra"),
    ("missing event", {"source": ev.team_source()}, "event"),
    ("unknown envelope field", ev.item({**ev.message(), "bogus": 1}), "bogus"),
    (
        "unknown data field",
        ev.item(
            ev.event(
                "team_message",
                {"message_id": "m", "from": "a", "to": "*", "text": "t", "colour": "red"},
            )
        ),
        "colour",
    ),
    ("wrong type", ev.item({**ev.message(), "seq": "one"}), "event.seq"),
    ("unknown event type", ev.item(ev.event("no_such_type", {})), "event.type"),
    ("bad source kind", ev.item(source={"kind": "nobody"}), "source"),
]


@pytest.mark.parametrize(("why", "bad", "field"), BAD_ITEMS, ids=[b[0] for b in BAD_ITEMS])
async def test_invalid_items_are_400_naming_item_and_field(
    node: Gateway, client: httpx.AsyncClient, why: str, bad: Any, field: str
) -> None:
    team = ev.team_id()
    r = await client.post(f"/v1/teams/{team}/events", json=[ev.item(), bad], headers=auth())
    message = error(r, 400, "invalid_request")
    assert message.startswith("item 1"), message
    assert field in message, message
    assert await head(node, team) == 0


async def test_source_must_match_caller_and_path(node: Gateway, client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    other_team = ev.member_source("acme", ev.team_id())
    other_tenant = ev.member_source("globex", team)
    for source, field in (
        (other_team, "source.member.team"),
        (other_tenant, "source.member.tenant"),
    ):
        r = await client.post(
            f"/v1/teams/{team}/events", json=ev.item(source=source), headers=auth()
        )
        assert field in error(r, 400, "invalid_request")
    operator = {
        "kind": "operator",
        "principal": {"issuer": "api", "tenant": "globex", "subject": "x"},
        "request": ev.new_id(),
    }
    r = await client.post(f"/v1/teams/{team}/events", json=ev.item(source=operator), headers=auth())
    assert "source.principal.tenant" in error(r, 400, "invalid_request")
    assert await head(node, team) == 0
    ok = ev.member_source("acme", team)
    r = await client.post(f"/v1/teams/{team}/events", json=ev.item(source=ok), headers=auth())
    assert r.status_code == 200


async def test_body_errors(node: Gateway, client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    path = f"/v1/teams/{team}/events"
    r = await client.post(
        path, content=b"{not json", headers={**auth(), "content-type": "application/json"}
    )
    assert "JSON" in error(r, 400, "invalid_request")
    r = await client.post(
        path, content=json.dumps(ev.item()), headers={**auth(), "content-type": "text/plain"}
    )
    error(r, 415, "unsupported_media_type")
    r = await client.post(path, content=b"", headers={**auth(), "content-type": "application/json"})
    error(r, 400, "invalid_request")
    r = await client.post(path, json=[], headers=auth())
    error(r, 400, "invalid_request")
    r = await client.post(path, json="a string", headers=auth())
    error(r, 400, "invalid_request")
    big = ev.item(ev.message("x" * 70_000))
    r = await client.post(path, json=big, headers=auth())
    assert "65536" in error(r, 413, "too_large")
    assert await head(node, team) == 0
    # The node still serves after all that.
    r = await client.post(path, json=ev.item(), headers=auth())
    assert r.status_code == 200
    assert (
        metric(node, "gateway_publish_rejections_total", code="invalid_request", path="http") >= 3
    )


async def test_oversized_chunked_body_is_413(client: httpx.AsyncClient) -> None:
    team = ev.team_id()

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):
            yield b"x" * 1024

    r = await client.post(
        f"/v1/teams/{team}/events",
        content=chunks(),
        headers={**auth(), "content-type": "application/json"},
    )
    error(r, 413, "too_large")


async def test_auth_for_publishing(node: Gateway, client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    path = f"/v1/teams/{team}/events"
    error(await client.post(path, json=ev.item()), 401, "unauthenticated")
    error(
        await client.post(path, json=ev.item(), headers=auth(scopes=["subscribe"])),
        403,
        "forbidden",
    )
    error(
        await client.post("/v1/teams/Not-A-Uuid/events", json=ev.item(), headers=auth()),
        404,
        "not_found",
    )
    assert await head(node, team) == 0


async def test_other_methods_and_routes(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    error(
        await client.delete(f"/v1/teams/{team}/events", headers=auth()), 405, "method_not_allowed"
    )
    error(await client.get("/v1/nothing", headers=auth()), 404, "not_found")
    error(await client.get("/v1/nothing"), 401, "unauthenticated")
    error(await client.get("/nothing"), 404, "not_found")
