"""A node verifying RS256 tokens from a PEM public key (D5), over real HTTP."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.auth import mint
from tests.support import events as ev
from tests.support.node import SECRET, start_node

pytestmark = pytest.mark.anyio


async def test_rs256_token_from_pem_and_no_hs256_without_secret(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "key.pem"
    pem.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    now = int(time.time())
    claims = {
        "sub": "rs",
        "iss": "https://idp.example",
        "tenant": "acme",
        "scope": "subscribe publish",
        "iat": now,
        "exp": now + 600,
    }
    rs256 = jwt.encode(claims, key, algorithm="RS256")
    hs256 = mint(SECRET, tenant="acme")
    team = ev.team_id()
    async with (
        start_node(None, jwt_secret=None, jwt_public_key_file=str(pem)) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        path = f"/v1/teams/{team}/events"
        bearer = {"Authorization": f"Bearer {rs256}"}
        r = await client.post(path, json=[ev.item()], headers=bearer)
        assert r.status_code == 200, r.text
        async with client.stream("GET", path, headers=bearer) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
        r = await client.get(path, headers={"Authorization": f"Bearer {hs256}"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
        assert hs256 not in r.text


async def test_missing_key_file_fails_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jwt_jwks_file"):
        async with start_node(None, jwt_jwks_file=str(tmp_path / "missing.json")):
            pass
