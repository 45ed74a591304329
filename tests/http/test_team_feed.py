"""GET /v1/teams/{team}/events over real HTTP with an SSE client (D2, D3; seed rules 9-24).

Every test runs on the embedded log and on Redis (``log_kind``).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse
from httpx_sse._decoders import SSEDecoder

from gateway.app import Gateway
from gateway.auth import TWO_TOKENS
from tests.support import events as ev
from tests.support.node import auth, metric, start_node

pytestmark = pytest.mark.anyio


async def publish(
    client: httpx.AsyncClient, team: str, items: list[dict[str, Any]], tenant: str = "acme"
) -> list[str]:
    r = await client.post(f"/v1/teams/{team}/events", json=items, headers=auth(tenant))
    assert r.status_code == 200, r.text
    cursors: list[str] = r.json()["cursors"]
    return cursors


async def collect(
    client: httpx.AsyncClient,
    team: str,
    n: int,
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> list[ServerSentEvent]:
    """Read exactly n SSE messages (bounded by a timeout)."""
    got: list[ServerSentEvent] = []
    with anyio.fail_after(10):
        async with aconnect_sse(
            client, "GET", f"/v1/teams/{team}/events", headers=headers or auth(), params=params
        ) as source:
            async for sse in source.aiter_sse():
                got.append(sse)
                if len(got) == n:
                    break
    return got


def data(sse: ServerSentEvent) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(sse.data)
    return value


async def test_replays_then_follows_in_order(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    first = await publish(client, team, [ev.item() for _ in range(3)])
    received: list[ServerSentEvent] = []
    with anyio.fail_after(10):
        async with aconnect_sse(
            client, "GET", f"/v1/teams/{team}/events", headers=auth()
        ) as source:
            async for sse in source.aiter_sse():
                received.append(sse)
                if len(received) == 3:
                    # Live: published after the client caught up.
                    later = await publish(client, team, [ev.item(), ev.item()])
                if len(received) == 5:
                    break
    assert [s.id for s in received] == first + later
    offsets = [data(s)["cursor"]["offset"] for s in received]
    assert offsets == [1, 2, 3, 4, 5]
    epoch = int(first[0].split(":")[0])
    assert all(data(s)["cursor"]["epoch"] == epoch for s in received)


async def test_items_are_rfc8785_team_items(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    body = ev.item(ev.message('z\u00e9\n"quoted"'), ev.member_source("acme", team))
    [cursor] = await publish(client, team, [body])
    [sse] = await collect(client, team, 1)
    epoch, offset = (int(x) for x in cursor.split(":"))
    expected = {
        "kind": "event",
        "cursor": {"epoch": epoch, "offset": offset},
        "source": body["source"],
        "event": body["event"],
    }
    canonical = json.dumps(expected, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert sse.data == canonical
    assert sse.id == cursor


async def test_resume_after_cursor_header_wins_over_query(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    cursors = await publish(client, team, [ev.item() for _ in range(5)])
    got = await collect(
        client,
        team,
        2,
        headers={**auth(), "Last-Event-ID": cursors[2]},
        params={"after": cursors[0]},
    )
    assert [s.id for s in got] == cursors[3:5]
    got = await collect(client, team, 3, params={"after": cursors[1]})
    assert [s.id for s in got] == cursors[2:5]


async def test_resume_at_head_waits_for_new_items(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    cursors = await publish(client, team, [ev.item(), ev.item()])
    received: list[str] = []
    with anyio.fail_after(10):
        async with aconnect_sse(
            client,
            "GET",
            f"/v1/teams/{team}/events",
            headers={**auth(), "Last-Event-ID": cursors[-1]},
        ) as source:
            later = await publish(client, team, [ev.item()])
            async for sse in source.aiter_sse():
                received.append(sse.id)
                break
    assert received == later


async def test_keepalive_comment_is_sent_when_idle(node: Gateway) -> None:
    team = ev.team_id()
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        cursors = await publish(client, team, [ev.item()])
        raw = b""
        with anyio.fail_after(10):
            async with client.stream(
                "GET", f"/v1/teams/{team}/events", headers={**auth(), "Last-Event-ID": cursors[0]}
            ) as response:
                assert response.status_code == 200
                async for chunk in response.aiter_raw():
                    raw += chunk
                    if raw.count(b": keepalive\n") >= 2:
                        break
    assert raw.startswith(b": keepalive\n: keepalive\n")
    assert b"id:" not in raw  # a keepalive moves no cursor
    assert b"\r" not in raw
    # A client that already holds a last event id sees no event in keepalives (some
    # SSE clients wrongly dispatch an empty event on a bare blank line).
    decoder = SSEDecoder()
    decoder.decode("id: " + cursors[0])
    decoder.decode("data: {}")
    assert decoder.decode("") is not None  # a real event
    dispatched = [decoder.decode(line) for line in raw.decode().splitlines()]
    assert [e for e in dispatched if e is not None] == []


async def test_framing_and_headers(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    [cursor] = await publish(client, team, [ev.item(ev.message("line1\r\nline2"))])
    with anyio.fail_after(10):
        async with client.stream("GET", f"/v1/teams/{team}/events", headers=auth()) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["cache-control"] == "no-cache"
            assert response.headers["x-accel-buffering"] == "no"
            raw = b""
            async for chunk in response.aiter_raw():
                raw += chunk
                if b"\n\n" in raw:
                    break
    message = raw.split(b"\n\n")[0]
    assert b"\r" not in raw
    lines = message.split(b"\n")
    assert lines[0] == b"id: " + cursor.encode()
    assert len(lines) == 2 and lines[1].startswith(b"data: {")


async def test_older_epoch_gets_epoch_restarted_then_close(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    [cursor] = await publish(client, team, [ev.item()])
    epoch = int(cursor.split(":")[0])
    old = f"{epoch - 1}:7"
    with anyio.fail_after(10):
        async with aconnect_sse(
            client, "GET", f"/v1/teams/{team}/events", headers={**auth(), "Last-Event-ID": old}
        ) as source:
            got = [sse async for sse in source.aiter_sse()]  # ends: the server closes
    assert len(got) == 1
    assert got[0].id == f"{epoch}:0"
    assert got[0].data == f'{{"cursor":{{"epoch":{epoch},"offset":0}},"kind":"epoch_restarted"}}'
    # Reconnecting with that cursor resumes in the current epoch (seed rule 22).
    again = await collect(client, team, 1, headers={**auth(), "Last-Event-ID": got[0].id})
    assert again[0].id == cursor


async def test_trimmed_history_restarts_at_oldest_complete_cursor(
    node_redis: tuple[str | None, str],
) -> None:
    url, prefix = node_redis
    async with (
        start_node(url, prefix, team_retention=3) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        team = ev.team_id()
        cursors = await publish(client, team, [ev.item() for _ in range(6)])
        epoch = cursors[0].split(":")[0]
        # Offsets 4..6 are retained; after 1 the feed is incomplete.
        with anyio.fail_after(10):
            async with aconnect_sse(
                client,
                "GET",
                f"/v1/teams/{team}/events",
                headers={**auth(), "Last-Event-ID": cursors[0]},
            ) as source:
                got = [sse async for sse in source.aiter_sse()]
        assert [s.id for s in got] == [f"{epoch}:3"]
        assert data(got[0]) == {
            "cursor": {"epoch": int(epoch), "offset": 3},
            "kind": "epoch_restarted",
        }
        # From the restart cursor, or from 3 itself, the retained items follow.
        resumed = await collect(client, team, 3, headers={**auth(), "Last-Event-ID": got[0].id})
        assert [s.id for s in resumed] == cursors[3:]
        # Without a cursor: every retained item.
        fresh = await collect(client, team, 3)
        assert [s.id for s in fresh] == cursors[3:]
        assert metric(node, "gateway_resumes_total", outcome="epoch_restarted") == 1


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "abc",
        "1",
        "1:",
        ":1",
        "1:2:3",
        "-1:2",
        "1:-2",
        "1.0:2",
        " 1:2x",
        "1:2 3",
        "9007199254740992:0",
        "0:9007199254740992",
        "\uff11:2",
        "0x1:2",
    ],
)
async def test_malformed_cursor_is_400(client: httpx.AsyncClient, cursor: str) -> None:
    team = ev.team_id()
    await publish(client, team, [ev.item()])
    r = await client.get(f"/v1/teams/{team}/events", headers=auth(), params={"after": cursor})
    assert r.status_code == 400
    assert list(r.json()) == ["error"]
    assert sorted(r.json()["error"]) == ["code", "message"]
    assert r.json()["error"]["code"] == "invalid_cursor"
    if cursor.isascii() and cursor == cursor.strip() and cursor:
        # The same through the Last-Event-ID header.
        r = await client.get(
            f"/v1/teams/{team}/events", headers={**auth(), "Last-Event-ID": cursor}
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_cursor"


async def test_later_epoch_and_past_head_are_400(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    cursors = await publish(client, team, [ev.item(), ev.item()])
    epoch = int(cursors[0].split(":")[0])
    for bad in (f"{epoch + 1}:0", f"{epoch}:3"):
        r = await client.get(f"/v1/teams/{team}/events", params={"after": bad}, headers=auth())
        assert r.status_code == 400, bad
        assert r.json()["error"]["code"] == "invalid_cursor"
    # Leading zeros are accepted and normalised.
    got = await collect(client, team, 1, params={"after": f"0{epoch}:01"})
    assert got[0].id == cursors[1]


async def test_errors_401_404(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    await publish(client, team, [ev.item()])
    path = f"/v1/teams/{team}/events"
    r = await client.get(path)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    r = await client.get(path, headers={"Authorization": "Bearer not-a-jwt"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    r = await client.get(path, headers=auth(scopes=["publish"]))
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    r = await client.get(path, headers=auth(ttl=-60))
    assert r.status_code == 401
    missing = await client.get(f"/v1/teams/{ev.team_id()}/events", headers=auth())
    other_tenant = await client.get(path, headers=auth("globex"))
    outside_claim = await client.get(path, headers=auth(teams=[ev.team_id()]))
    not_uuid = await client.get("/v1/teams/NOT-A-UUID/events", headers=auth())
    upper = await client.get(f"/v1/teams/{team.upper()}/events", headers=auth())
    for r in (missing, other_tenant, outside_claim, not_uuid, upper):
        assert r.status_code == 404
        assert r.json() == {"error": {"code": "not_found", "message": "no such team"}}
    # Another tenant's team is byte-identical to a missing one, headers included.
    assert other_tenant.content == missing.content
    assert other_tenant.headers.raw == missing.headers.raw
    # The token's teams claim admits the team.
    ok = await collect(client, team, 1, headers=auth(teams=[team]))
    assert len(ok) == 1
    # access_token query parameter (EventSource)
    from tests.support.node import token

    got = await collect(client, team, 1, headers={}, params={"access_token": token()})
    assert len(got) == 1
    # ... the same token beside the header too; never two different tokens.
    same = token()
    headers = {"Authorization": f"Bearer {same}"}
    got = await collect(client, team, 1, headers=headers, params={"access_token": same})
    assert len(got) == 1
    for header, params in (
        (same, {"access_token": token("globex")}),
        (same, {"access_token": "not-a-jwt"}),
        (None, [("access_token", same), ("access_token", token("globex"))]),
    ):
        headers = {} if header is None else {"Authorization": f"Bearer {header}"}
        r = await client.get(path, headers=headers, params=params)
        assert r.status_code == 401
        assert r.json()["error"] == {"code": "unauthenticated", "message": TWO_TOKENS}


async def test_host_team_is_not_found(client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    await publish(client, team, [ev.item(ev.opened_host(team, "acme")), ev.item()])
    r = await client.get(f"/v1/teams/{team}/events", headers=auth())
    assert r.status_code == 404
    assert r.json() == {"error": {"code": "not_found", "message": "no such team"}}
    # A lead team whose later item is a host-kind team_opened is still served.
    lead = ev.team_id()
    await publish(client, lead, [ev.item(), ev.item(ev.opened_host(lead, "acme"))])
    assert len(await collect(client, lead, 2)) == 2


async def test_many_followers_share_one_reader(node: Gateway, client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    await publish(client, team, [ev.item()])
    n = 20
    results: list[list[str]] = [[] for _ in range(n)]
    connected = anyio.Event()
    ready = 0

    async def follow(i: int) -> None:
        nonlocal ready
        async with aconnect_sse(client, "GET", f"/v1/teams/{team}/events", headers=auth()) as s:
            async for sse in s.aiter_sse():
                results[i].append(sse.id)
                if len(results[i]) == 1:
                    ready += 1
                    if ready == n:
                        connected.set()
                if len(results[i]) == 11:
                    return

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(follow, i)
            await connected.wait()
            assert len(node.hub.audiences) == 1
            [audience] = node.hub.audiences.values()
            assert len(audience.subs) == n
            for _ in range(10):
                await publish(client, team, [ev.item()])
    assert all(r == results[0] for r in results)
    assert len(set(results[0])) == 11
    # The live items were read from the log once for all 20 followers.
    assert metric(node, "gateway_items_read_total") == 10


async def test_stream_ends_when_the_token_expires(node: Gateway, client: httpx.AsyncClient) -> None:
    team = ev.team_id()
    [cursor] = await publish(client, team, [ev.item()])
    got: list[str] = []
    with anyio.fail_after(10):  # ends at exp (2 s), not at the client's timeout
        async with aconnect_sse(
            client, "GET", f"/v1/teams/{team}/events", headers=auth(ttl=2)
        ) as source:
            async for sse in source.aiter_sse():
                got.append(sse.id)
    assert got == [cursor]  # then the server ended the stream
    assert metric(node, "gateway_disconnects_total", transport="sse", reason="auth") == 1
