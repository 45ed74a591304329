"""Bearer tokens (D5): mint + verify, and every way a token is rejected.

Pure: tokens are built with :func:`gateway.auth.mint` or with PyJWT directly; RSA and EC
keys are generated here and written as PEM/JWKS files under ``tmp_path``.
Every rejection is :class:`~gateway.errors.Unauthenticated` and never echoes the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway.auth import LEEWAY_SECONDS, TWO_TOKENS, Authenticator, Principal, bearer_token, mint
from gateway.config import Settings
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
    [
        ("sub", ""),
        ("iss", ""),
        ("tenant", ""),
        ("sub", 5),
        ("tenant", ["acme"]),
        ("iss", None),
        ("exp", "tomorrow"),
    ],
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


# --------------------------------------------------------------------------- public keys
# RS256/ES256 with keys from a PEM file or a JWKS file (reloaded when it changes).

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def ec_key(curve: ec.EllipticCurve | None = None) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(curve or ec.SECP256R1())


RSA_KEY = rsa_key()
EC_KEY = ec_key()


def pem(key: PrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def write_pem(path: Path, key: PrivateKey) -> str:
    path.write_bytes(pem(key))
    return str(path)


def jwk(key: PrivateKey, kid: str | None, alg: str | None = None) -> dict[str, Any]:
    public = key.public_key()
    text = (
        RSAAlgorithm.to_jwk(public)
        if isinstance(public, rsa.RSAPublicKey)
        else ECAlgorithm.to_jwk(public)
    )
    entry: dict[str, Any] = json.loads(text)
    if kid is not None:
        entry["kid"] = kid
    if alg is not None:
        entry["alg"] = alg
    return entry


def write_jwks(path: Path, *entries: dict[str, Any]) -> str:
    path.write_text(json.dumps({"keys": list(entries)}))
    return str(path)


def sign(payload: dict[str, Any], key: PrivateKey, *, kid: str | None = None) -> str:
    alg = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    headers = {"kid": kid} if kid is not None else None
    return jwt.encode(payload, key, algorithm=alg, headers=headers)


def hand_hs256(payload: dict[str, Any], secret: bytes, header: dict[str, Any]) -> str:
    head = b64(json.dumps(header).encode())
    body = b64(json.dumps(payload).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


@pytest.mark.parametrize("key", [RSA_KEY, EC_KEY], ids=["RS256", "ES256"])
def test_pem_public_key_verifies(tmp_path: Path, key: PrivateKey) -> None:
    auth = Authenticator(None, public_key_file=write_pem(tmp_path / "key.pem", key))
    assert auth.configured
    assert auth.verify(sign(claims(), key)).subject == "alice"
    # A token signed by another key of the same kind does not verify.
    other = rsa_key() if isinstance(key, rsa.RSAPrivateKey) else ec_key()
    assert "signature" in rejected(sign(claims(), other), auth)
    # A kid names a JWKS key; a PEM key has none.
    assert rejected(sign(claims(), key, kid="k1"), auth) == "unknown key"


@pytest.mark.parametrize("key", [RSA_KEY, EC_KEY], ids=["RS256", "ES256"])
def test_jwks_keys_verify_by_kid(tmp_path: Path, key: PrivateKey) -> None:
    other = rsa_key()
    path = write_jwks(tmp_path / "jwks.json", jwk(key, "k1"), jwk(other, "k2", "RS256"))
    auth = Authenticator(None, jwks_file=path)
    assert auth.verify(sign(claims(), key, kid="k1")).tenant == "acme"
    assert auth.verify(sign(claims(), other, kid="k2")).tenant == "acme"
    # The right key under the wrong kid, an unknown kid, no kid at all for a kid'ed key
    # of another algorithm: all rejected.
    rejected(sign(claims(), key, kid="k2"), auth)
    assert rejected(sign(claims(), key, kid="nope"), auth) == "unknown key"
    assert "signature" in rejected(
        sign(claims(), ec_key() if key is EC_KEY else rsa_key(), kid="k1"), auth
    )


def test_jwks_key_without_kid_matches_by_algorithm(tmp_path: Path) -> None:
    auth = Authenticator(None, jwks_file=write_jwks(tmp_path / "j.json", jwk(EC_KEY, None)))
    assert auth.verify(sign(claims(), EC_KEY)).subject == "alice"
    assert "algorithm" in rejected(sign(claims(), RSA_KEY), auth)


def test_secret_pem_and_jwks_together(tmp_path: Path) -> None:
    rsa2 = rsa_key()
    auth = Authenticator(
        SECRET,
        public_key_file=write_pem(tmp_path / "k.pem", RSA_KEY),
        jwks_file=write_jwks(tmp_path / "j.json", jwk(rsa2, "k2"), jwk(EC_KEY, "k3")),
    )
    assert auth.verify(mint(SECRET, tenant="acme")).tenant == "acme"
    assert auth.verify(sign(claims(), RSA_KEY)).subject == "alice"
    assert auth.verify(sign(claims(), rsa2, kid="k2")).subject == "alice"
    assert auth.verify(sign(claims(), EC_KEY, kid="k3")).subject == "alice"
    # Without a kid, every configured key of the token's algorithm is tried.
    assert auth.verify(sign(claims(), rsa2)).subject == "alice"
    assert auth.verify(sign(claims(), EC_KEY)).subject == "alice"
    rejected(sign(claims(), rsa_key()), auth)


def test_alg_none_is_rejected_with_public_keys(tmp_path: Path) -> None:
    auth = Authenticator(
        SECRET,
        public_key_file=write_pem(tmp_path / "k.pem", RSA_KEY),
        jwks_file=write_jwks(tmp_path / "j.json", jwk(EC_KEY, "k1")),
    )
    body = b64(json.dumps(claims()).encode())
    for header in ({"alg": "none"}, {"alg": "none", "kid": "k1"}, {"alg": "NONE"}):
        rejected(f"{b64(json.dumps(header).encode())}.{body}.", auth)
    rejected(jwt.encode(claims(), None, algorithm="none"), auth)


@pytest.mark.parametrize("with_secret", [False, True])
def test_hs256_signed_with_the_public_key_is_rejected(tmp_path: Path, with_secret: bool) -> None:
    # The classic confusion: the attacker knows the public key and uses its PEM bytes as
    # an HMAC secret.  Only the configured secret verifies HS256.
    auth = Authenticator(
        SECRET if with_secret else None,
        public_key_file=write_pem(tmp_path / "k.pem", RSA_KEY),
        jwks_file=write_jwks(tmp_path / "j.json", jwk(rsa_key(), "k1")),
    )
    jwks_bytes = (tmp_path / "j.json").read_bytes()
    for secret in (pem(RSA_KEY), pem(RSA_KEY).strip(), jwks_bytes):
        rejected(hand_hs256(claims(), secret, {"alg": "HS256", "typ": "JWT"}), auth)
    rejected(hand_hs256(claims(), jwks_bytes, {"alg": "HS256", "kid": "k1"}), auth)
    # The helper makes real tokens: with the right secret, one verifies.
    if with_secret:
        assert auth.verify(hand_hs256(claims(), SECRET.encode(), {"alg": "HS256"}))


def test_rs256_token_with_only_a_secret_is_rejected() -> None:
    assert "algorithm" in rejected(sign(claims(), RSA_KEY))


def test_expiry_and_nbf_with_leeway(tmp_path: Path) -> None:
    now = int(time.time())
    auth = Authenticator(None, public_key_file=write_pem(tmp_path / "k.pem", RSA_KEY), leeway=30)
    assert auth.verify(sign(claims(exp=now - 20), RSA_KEY))
    assert auth.verify(sign(claims(nbf=now + 20), RSA_KEY))
    assert rejected(sign(claims(exp=now - 60), RSA_KEY), auth) == "token expired"
    assert rejected(sign(claims(nbf=now + 60), RSA_KEY), auth) == "token not yet valid"
    strict = Authenticator(None, public_key_file=str(tmp_path / "k.pem"), leeway=0)
    assert rejected(sign(claims(exp=now - 2), RSA_KEY), strict) == "token expired"
    payload = claims()
    del payload["exp"]
    assert "exp" in rejected(sign(payload, RSA_KEY), auth)


def test_audience(tmp_path: Path) -> None:
    auth = Authenticator(
        None, public_key_file=write_pem(tmp_path / "k.pem", RSA_KEY), audience="gateway"
    )
    assert auth.verify(sign(claims(aud="gateway"), RSA_KEY))
    assert auth.verify(sign(claims(aud=["other", "gateway"]), RSA_KEY))
    assert "audience" in rejected(sign(claims(aud="other"), RSA_KEY), auth)
    assert "aud" in rejected(sign(claims(), RSA_KEY), auth)  # required when configured
    # Without an audience configured, an aud claim is not checked.
    assert Authenticator(None, public_key_file=str(tmp_path / "k.pem")).verify(
        sign(claims(aud="anything"), RSA_KEY)
    )


def test_issuer_allow_list(tmp_path: Path) -> None:
    auth = Authenticator(
        SECRET,
        public_key_file=write_pem(tmp_path / "k.pem", RSA_KEY),
        issuers=("https://a.example", "https://b.example"),
    )
    assert auth.verify(sign(claims(iss="https://b.example"), RSA_KEY)).issuer == "https://b.example"
    assert "issuer" in rejected(sign(claims(iss="https://evil.example"), RSA_KEY), auth)
    assert "issuer" in rejected(mint(SECRET, tenant="acme"), auth)  # iss gateway-dev


def test_jwks_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    write_jwks(path, jwk(RSA_KEY, "old"))
    clock = [1000.0]
    auth = Authenticator(None, jwks_file=str(path), clock=lambda: clock[0])
    new_key = ec_key()
    new_token = sign(claims(), new_key, kid="new")
    assert auth.verify(sign(claims(), RSA_KEY, kid="old"))
    rejected(new_token, auth)

    write_jwks(path, jwk(new_key, "new"))
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    # Checked at most once per second.
    clock[0] += 0.5
    assert rejected(new_token, auth) == "unknown key"
    clock[0] += 1
    assert auth.verify(new_token).subject == "alice"
    assert rejected(sign(claims(), RSA_KEY, kid="old"), auth) == "unknown key"

    # A broken new file keeps the previous keys; so does a deleted one.
    path.write_text("{not json")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000_000))
    clock[0] += 2
    assert auth.verify(new_token)
    path.unlink()
    clock[0] += 2
    assert auth.verify(new_token)


def test_pem_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    write_pem(path, RSA_KEY)
    auth = Authenticator(None, public_key_file=str(path), reload_interval=0)
    assert auth.verify(sign(claims(), RSA_KEY))
    write_pem(path, EC_KEY)
    os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 5_000_000_000))
    assert auth.verify(sign(claims(), EC_KEY))
    rejected(sign(claims(), RSA_KEY), auth)


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"nokeys": []}),
        json.dumps({"keys": []}),
        json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}),
        json.dumps({"keys": [jwk(RSA_KEY, "a", alg="HS256")]}),
        json.dumps({"keys": [jwk(RSA_KEY, "a", alg="ES256")]}),
        json.dumps({"keys": [jwk(RSA_KEY, "a"), jwk(EC_KEY, "a")]}),
        json.dumps({"keys": [jwk(ec_key(ec.SECP384R1()), "a")]}),
        json.dumps({"keys": [{"kty": "RSA", "kid": "a"}]}),
    ],
)
def test_bad_jwks_file_is_a_configuration_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="jwt_jwks_file"):
        Authenticator(None, jwks_file=str(path))


def test_jwks_skips_encryption_keys(tmp_path: Path) -> None:
    enc = {**jwk(rsa_key(), "e", alg=None), "use": "enc", "alg": "RSA-OAEP"}
    path = write_jwks(tmp_path / "j.json", enc, jwk(RSA_KEY, "s"))
    assert Authenticator(None, jwks_file=path).verify(sign(claims(), RSA_KEY, kid="s"))


def test_bad_or_missing_pem_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jwt_public_key_file"):
        Authenticator(None, public_key_file=str(tmp_path / "missing.pem"))
    (tmp_path / "bad.pem").write_text("-----BEGIN PUBLIC KEY-----\nxx\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ValueError, match="jwt_public_key_file"):
        Authenticator(None, public_key_file=str(tmp_path / "bad.pem"))
    with pytest.raises(ValueError, match="P-256"):
        Authenticator(
            None, public_key_file=write_pem(tmp_path / "p384.pem", ec_key(ec.SECP384R1()))
        )
    with pytest.raises(ValueError, match="jwt_jwks_file"):
        Authenticator(None, jwks_file=str(tmp_path / "missing.json"))


def test_from_settings(tmp_path: Path) -> None:
    settings = Settings(
        jwt_public_key_file=write_pem(tmp_path / "k.pem", RSA_KEY),
        jwt_audience="gw",
        jwt_issuers=" https://a.example , https://b.example,",
        jwt_leeway_seconds=0,
    )
    auth = Authenticator.from_settings(settings)
    assert auth.verify(sign(claims(aud="gw", iss="https://a.example"), RSA_KEY))
    assert "issuer" in rejected(sign(claims(aud="gw"), RSA_KEY), auth)
    assert "audience" in rejected(sign(claims(aud="x", iss="https://a.example"), RSA_KEY), auth)
    assert not Authenticator.from_settings(Settings()).configured
    rejected(sign(claims(), RSA_KEY), Authenticator.from_settings(Settings()))


# -- tokens verified once ----------------------------------------------------------------


def test_a_token_verified_once_is_answered_from_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = Authenticator(SECRET)
    token = signed(claims())
    first = auth.verify(token)
    decoded: list[str] = []
    real = jwt.decode
    monkeypatch.setattr(jwt, "decode", lambda *a, **kw: decoded.append(a[0]) or real(*a, **kw))
    assert auth.verify(token) == first
    assert decoded == [], "verified again"
    # A token that failed is not remembered: it fails again, checked again.
    bad = signed(claims(), secret="another-secret-that-is-long-enough-for-hs256-0123456789")
    assert rejected(bad, auth) == "invalid token signature"
    assert rejected(bad, auth) == "invalid token signature"
    assert decoded == [bad, bad]


def test_a_remembered_token_still_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = Authenticator(SECRET)
    now = time.time()
    token = signed(claims(exp=int(now) + 60))
    assert auth.verify(token).subject == "alice"
    monkeypatch.setattr(time, "time", lambda: now + 60 + LEEWAY_SECONDS + 1)
    assert rejected(token, auth) == "token expired"


def test_a_remembered_token_fails_once_its_key_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    write_jwks(path, jwk(RSA_KEY, "old"))
    clock = [1000.0]
    auth = Authenticator(None, jwks_file=str(path), clock=lambda: clock[0])
    token = sign(claims(), RSA_KEY, kid="old")
    assert auth.verify(token)
    write_jwks(path, jwk(ec_key(), "new"))
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    clock[0] += 2
    assert rejected(token, auth) == "unknown key"


def test_remembered_tokens_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.auth

    monkeypatch.setattr(gateway.auth, "VERIFIED_TOKENS", 3)
    auth = Authenticator(SECRET)
    tokens = [signed(claims(sub=f"user-{i}")) for i in range(5)]
    for token in tokens:
        auth.verify(token)
    assert list(auth._verified) == tokens[2:]


@pytest.mark.parametrize(
    ("authorization", "fallbacks", "expected"),
    [
        ("Bearer tok-a", (), "tok-a"),
        ("bearer   tok-a ", (), "tok-a"),
        (None, ("tok-a",), "tok-a"),
        ("Bearer tok-a", ("tok-a",), "tok-a"),
        (None, ("tok-a", "tok-a"), "tok-a"),
        ("Bearer tok-a", ("tok-b",), None),
        ("Bearer tok-a", ("tok-a", "tok-b"), None),
        (None, ("tok-a", "tok-b"), None),
        (None, ("tok-b", "tok-a"), None),
        ("Bearer tok-a", ("",), None),
        (None, ("",), None),
        (None, (), None),
        ("Basic dXNlcjpwYXNz", (), None),
        ("Basic dXNlcjpwYXNz", ("tok-a",), None),
        ("Bearer", (), None),
    ],
)
def test_bearer_token_is_one_token(
    authorization: str | None, fallbacks: tuple[str, ...], expected: str | None
) -> None:
    """The header and every fallback (query tokens, bearer subprotocols) must be one
    token; two different ones are refused in any order, and never echoed."""
    if expected is not None:
        assert bearer_token(authorization, fallbacks) == expected
        return
    with pytest.raises(Unauthenticated) as info:
        bearer_token(authorization, fallbacks)
    assert info.value.code == ErrorCode.UNAUTHENTICATED
    header = [authorization[7:]] if authorization and authorization.startswith("Bearer ") else []
    if len({*fallbacks, *header}) > 1:
        assert info.value.message == TWO_TOKENS
    assert "tok-" not in info.value.message
