"""Bearer tokens (D5): mint + verify, and every way a token is rejected.

Pure: tokens are built with :func:`gateway.auth.mint` or with PyJWT directly.
Every rejection is :class:`~gateway.errors.Unauthenticated` and never echoes the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest

from gateway.auth import LEEWAY_SECONDS, Authenticator, Principal, mint
from gateway.errors import ErrorCode, Unauthenticated

SECRET = "a-test-secret-that-is-long-enough-for-hs256-and-hs512-keys-0123456789"
TEAM_A = "0190f5a2-7c1e-7b3d-8a4f-00000000000a"
TEAM_B = "0190f5a2-7c1e-7b3d-8a4f-00000000000b"


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "sub": "alice",
        "iss": "https://issuer.example",
        "tenant": "acme",
        "scope": "subscribe publish",
        "iat": now,
        "exp": now + 600,
    }
    base.update(overrides)
    return base


def signed(payload: dict[str, Any], *, secret: str = SECRET, alg: str = "HS256") -> str:
    return jwt.encode(payload, secret, algorithm=alg)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_signed(payload: dict[str, Any], *, secret: str = SECRET) -> str:
    """An HS256 token built by hand, for payloads PyJWT refuses to encode."""
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(payload).encode())
    mac = hmac.new(secret.encode(), f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{b64(mac)}"


def rejected(token: str, authenticator: Authenticator | None = None) -> str:
    """Assert the token is rejected as Unauthenticated without echoing it; return the message."""
    with pytest.raises(Unauthenticated) as info:
        (authenticator or Authenticator(SECRET)).verify(token)
    error = info.value
    assert error.code == ErrorCode.UNAUTHENTICATED and error.status == 401
    text = f"{error} {error.message} {error.body().decode()}"
    if token:
        assert token not in text
    for part in token.split("."):
        if len(part) >= 8:
            assert part not in text
    return error.message


def test_mint_verify_round_trip() -> None:
    now = time.time()
    token = mint(
        SECRET,
        tenant="acme",
        subject="bob",
        issuer="gateway-dev",
        scopes=["subscribe", "publish"],
        teams=[TEAM_A],
        threads=["thread-1", "thread.2"],
        ttl_seconds=120,
        now=now,
    )
    principal = Authenticator(SECRET).verify(token)
    assert principal == Principal(
        issuer="gateway-dev",
        tenant="acme",
        subject="bob",
        scopes=frozenset({"subscribe", "publish"}),
        teams=frozenset({TEAM_A}),
        threads=frozenset({"thread-1", "thread.2"}),
        expires_at=float(int(now) + 120),
    )
    assert principal.may_read_team(TEAM_A) and not principal.may_read_team(TEAM_B)
    assert jwt.get_unverified_header(token)["alg"] == "HS256"


def test_defaults_absent_teams_and_threads_mean_all() -> None:
    principal = Authenticator(SECRET).verify(mint(SECRET, tenant="acme"))
    assert principal.teams is None and principal.threads is None
    assert principal.may_read_team(TEAM_A)
    assert principal.scopes == frozenset({"subscribe", "publish"})
    assert principal.subject == "dev" and principal.issuer == "gateway-dev"


def test_scopes_and_empty_claims() -> None:
    verify = Authenticator(SECRET).verify
    payload = claims()
    del payload["scope"]
    assert verify(signed(payload)).scopes == frozenset()  # absent scope grants nothing
    assert verify(signed(claims(scope=""))).scopes == frozenset()
    assert verify(signed(claims(scope="  publish   subscribe "))).scopes == {"publish", "subscribe"}
    empty = verify(signed(claims(teams=[], threads=[])))
    assert empty.teams == frozenset() and empty.threads == frozenset()
    assert not empty.may_read_team(TEAM_A)


def test_expiry_and_leeway() -> None:
    now = int(time.time())
    verify = Authenticator(SECRET).verify
    # Within the clock-skew leeway: still accepted.
    assert verify(signed(claims(exp=now - 1))).expires_at == now - 1
    # Beyond it: rejected.
    assert "expired" in rejected(signed(claims(exp=now - LEEWAY_SECONDS - 10)))
    assert "expired" in rejected(mint(SECRET, tenant="acme", ttl_seconds=60, now=now - 3600))


def test_not_yet_valid_is_rejected() -> None:
    now = int(time.time())
    rejected(signed(claims(nbf=now + LEEWAY_SECONDS + 60)))


@pytest.mark.parametrize("claim", ["sub", "iss", "tenant", "exp"])
def test_missing_required_claim(claim: str) -> None:
    payload = claims()
    del payload[claim]
    rejected(signed(payload))


@pytest.mark.parametrize(
    ("claim", "value"),
    [("sub", ""), ("iss", ""), ("tenant", ""), ("sub", 5), ("tenant", ["acme"]),
     ("iss", None), ("exp", "tomorrow")],
)
def test_bad_required_claim(claim: str, value: Any) -> None:
    rejected(hand_signed(claims(**{claim: value})))


def test_hand_signed_tokens_are_accepted() -> None:
    # The helper above builds real HS256 tokens (so the rejections are about the claims).
    assert Authenticator(SECRET).verify(hand_signed(claims())).subject == "alice"


def test_wrong_secret() -> None:
    rejected(signed(claims(), secret="another-secret-that-is-also-long-enough-0123456789"))
    rejected(signed(claims()), Authenticator("another-secret-that-is-long-enough-0123456789"))


def test_alg_none_is_rejected() -> None:
    unsigned = jwt.encode(claims(), None, algorithm="none")
    assert unsigned.endswith(".")
    rejected(unsigned)
    # Hand-made variants: alg none with and without a (stolen) HS256 signature.
    header = b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims()).encode())
    signature = signed(claims()).split(".")[2]
    rejected(f"{header}.{body}.")
    rejected(f"{header}.{body}.{signature}")
    for alg in ("None", "NONE", "nOnE"):
        rejected(f"{b64(json.dumps({'alg': alg}).encode())}.{body}.")


@pytest.mark.parametrize("alg", ["HS384", "HS512"])
def test_only_hs256_is_accepted(alg: str) -> None:
    # Signed with the right secret, but with another HMAC algorithm.
    rejected(signed(claims(), alg=alg))


def test_scope_must_be_a_string() -> None:
    assert "scope" in rejected(signed(claims(scope=["subscribe", "publish"])))
    rejected(signed(claims(scope=1)))


@pytest.mark.parametrize("value", ["teams-as-a-string", [TEAM_A, 5], {"a": 1}, [None], 7])
@pytest.mark.parametrize("claim", ["teams", "threads"])
def test_teams_and_threads_must_be_lists_of_strings(claim: str, value: Any) -> None:
    assert claim in rejected(signed(claims(**{claim: value})))


@pytest.mark.parametrize("token", ["", "not-a-jwt", "a.b.c", "a.b", "....", "Bearer x"])
def test_garbage_is_rejected(token: str) -> None:
    with pytest.raises(Unauthenticated):
        Authenticator(SECRET).verify(token)


def test_no_secret_configured_rejects_everything() -> None:
    unconfigured = Authenticator(None)
    assert not unconfigured.configured
    assert Authenticator(SECRET).configured
    good = mint(SECRET, tenant="acme")
    Authenticator(SECRET).verify(good)  # a token that would otherwise be fine
    for token in (good, jwt.encode(claims(), None, algorithm="none"), "", "x"):
        rejected(token, unconfigured)
