"""Tokens never appear in the node's logs or metrics."""

from __future__ import annotations

import httpx
import pytest
import structlog
from httpx_sse import aconnect_sse

from tests.support import events as ev
from tests.support.node import start_node, token

pytestmark = pytest.mark.anyio


async def test_tokens_are_not_logged_or_exported() -> None:
    good = token()
    bad = good[:-4] + "AAAA"  # a forged signature
    with structlog.testing.capture_logs() as logs:
        async with start_node(None) as node, httpx.AsyncClient(base_url=node.url) as client:
            team = ev.team_id()
            r = await client.post(
                f"/v1/teams/{team}/events",
                json=ev.item(),
                headers={"Authorization": f"Bearer {good}"},
            )
            assert r.status_code == 200
            r = await client.get(
                f"/v1/teams/{team}/events", headers={"Authorization": f"Bearer {bad}"}
            )
            assert r.status_code == 401
            assert bad not in r.text and good not in r.text
            async with aconnect_sse(
                client, "GET", f"/v1/teams/{team}/events", params={"access_token": good}
            ) as source:
                async for _ in source.aiter_sse():
                    break
            metrics = (await client.get("/metrics")).text
    text = repr(logs) + metrics
    for secret in (good, bad, good.split(".")[2]):
        assert secret not in text
