"""Bearer tokens to principals, and what a principal may read or publish (contract D5).

PyJWT does the JOSE work; its exceptions are translated to :class:`Unauthenticated`
here.  Keys: an HS256 secret (``GATEWAY_JWT_SECRET``), an RSA or P-256 EC public key
from a PEM file, and the RS256/ES256 keys of a JWKS file, in any combination.  Every
key verifies with its own single algorithm only, so ``alg: none`` and HS/RS confusion
can never verify.  The key files are re-read when their mtime changes.

Token contents (claims, ``kid``, signature) never appear in errors or logs.
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
import msgspec
import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway.config import Settings, issuers
from gateway.errors import Unauthenticated

log = structlog.get_logger("gateway.auth")

_REQUIRED = ("sub", "iss", "tenant", "exp")
#: Default clock skew tolerated on exp/nbf, in seconds (``jwt_leeway_seconds``).
LEEWAY_SECONDS = 5
#: Key files are checked for changes at most this often, in seconds.
RELOAD_INTERVAL_SECONDS = 1.0
#: Tokens remembered once verified (least recently used dropped beyond): a client
#: sends the same token with every request, and checking its signature and claims
#: again was about a third of an HTTP publish's CPU.
VERIFIED_TOKENS = 10_000
_PUBLIC_ALGS = ("RS256", "ES256")


class Principal(msgspec.Struct, frozen=True):
    issuer: str
    tenant: str
    subject: str
    scopes: frozenset[str]
    #: Team ids this token may read; None means every team of the tenant.
    teams: frozenset[str] | None
    threads: frozenset[str] | None
    expires_at: float

    def may_read_team(self, team: str) -> bool:
        return self.teams is None or team in self.teams

    def may_read_thread(self, thread_id: str) -> bool:
        """Run feeds: the ``threads`` claim, when present, lists the readable threads."""
        return self.threads is None or thread_id in self.threads

    def require_subscribe(self) -> None:
        """Subscribing without the ``subscribe`` scope is 401 (D5)."""
        if "subscribe" not in self.scopes:
            raise Unauthenticated("token lacks the subscribe scope")


def _str_list(value: object, claim: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise Unauthenticated(f"token claim {claim!r} must be a list of strings")


#: The answer to a request with two different credentials.
TWO_TOKENS = "two different bearer tokens: send one credential"


def bearer_token(authorization: str | None, fallbacks: Sequence[str] = ()) -> str:
    """The one bearer token a request carries: its ``Authorization: Bearer`` header's
    and every token in ``fallbacks``, which must all be the same token.

    ``fallbacks`` are where a browser puts it: the ``access_token`` query parameters of
    an SSE route, the ``bearer.<JWT>`` elements of the WebSocket subprotocol offer.  Two
    different tokens (a header and a query token, two subprotocol elements, ...) are
    refused, whichever comes first: the gateway never picks one of two credentials (a
    proxy in front may have checked the other).  Nothing is verified here.

    Raises Unauthenticated: an ``Authorization`` header that is not ``Bearer <token>``,
    no token or an empty one, two different tokens.
    """
    token: str | None = None
    if authorization is not None:
        scheme, _, value = authorization.partition(" ")
        token = value.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("expected 'Authorization: Bearer <token>'")
    for other in fallbacks:
        if token is None:
            token = other
        elif other != token:
            raise Unauthenticated(TWO_TOKENS)
    if not token:
        raise Unauthenticated("missing bearer token")
    return token


@dataclass(frozen=True)
class _Key:
    """One verification key and the single algorithm it verifies."""

    alg: str
    key: Any
    kid: str | None = None


def _public_key_alg(key: object, where: str) -> tuple[str, Any]:
    """RS256 for an RSA public key, ES256 for a P-256 one; ValueError otherwise."""
    if isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        key = key.public_key()
    if isinstance(key, rsa.RSAPublicKey):
        return "RS256", key
    if isinstance(key, ec.EllipticCurvePublicKey):
        if isinstance(key.curve, ec.SECP256R1):
            return "ES256", key
        raise ValueError(f"{where}: EC keys must be on P-256 (ES256), not {key.curve.name}")
    raise ValueError(f"{where}: expected an RSA or P-256 EC public key")


def load_pem_keys(path: str) -> list[_Key]:
    """The public key of a PEM file.  Raises ValueError (naming the file, not its content)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a PEM public key") from exc
    alg, public = _public_key_alg(key, path)
    return [_Key(alg, public)]


def load_jwks_keys(path: str) -> list[_Key]:
    """The signing keys of a JWKS file.  Raises ValueError.

    Keys with ``use: enc`` are skipped; every other key must be RS256 (kty RSA) or ES256
    (kty EC, crv P-256), by its ``alg`` when present, else by ``kty``/``crv``.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON") from exc
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: a JWKS needs a 'keys' array")
    keys: list[_Key] = []
    kids: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"{path}: key {index}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: not an object")
        if entry.get("use") == "enc":
            continue
        kty, alg, kid = entry.get("kty"), entry.get("alg"), entry.get("kid")
        if kid is not None and (not isinstance(kid, str) or not kid):
            raise ValueError(f"{where}: kid must be a non-empty string")
        if alg is not None and alg not in _PUBLIC_ALGS:
            raise ValueError(f"{where}: alg must be RS256 or ES256")
        try:
            if kty == "RSA":
                loaded: object = RSAAlgorithm.from_jwk(entry)
            elif kty == "EC":
                loaded = ECAlgorithm.from_jwk(entry)
            else:
                raise ValueError(f"{where}: kty must be RSA or EC")
        except (jwt.InvalidKeyError, KeyError, TypeError) as exc:
            raise ValueError(f"{where}: invalid {kty} key") from exc
        inferred, public = _public_key_alg(loaded, where)
        if alg is not None and alg != inferred:
            raise ValueError(f"{where}: alg {alg} does not fit the key type")
        if kid is not None:
            if kid in kids:
                raise ValueError(f"{where}: duplicate kid")
            kids.add(kid)
        keys.append(_Key(inferred, public, kid))
    if not keys:
        raise ValueError(f"{path}: no RS256 or ES256 signing key")
    return keys


class _KeyFile:
    """A key file, re-read when its mtime changes (checked at most once per interval).

    A file that cannot be read at start-up raises ValueError; a broken or missing file
    later keeps the previous keys and logs a warning (once per change).
    """

    def __init__(
        self,
        path: str,
        loader: Callable[[str], list[_Key]],
        setting: str,
        *,
        interval: float,
        clock: Callable[[], float],
    ) -> None:
        self.path = path
        self._loader = loader
        self._interval = interval
        self._clock = clock
        try:
            self._stamp: object = self._stat()
            self.keys = loader(path)
        except OSError as exc:
            raise ValueError(f"{setting}: cannot read {path!r}: {exc.strerror}") from exc
        except ValueError as exc:
            raise ValueError(f"{setting}: {exc}") from exc
        self._checked = clock()

    def _stat(self) -> tuple[int, int]:
        st = os.stat(self.path)
        return st.st_mtime_ns, st.st_size

    def current(self) -> list[_Key]:
        now = self._clock()
        if now - self._checked < self._interval:
            return self.keys
        self._checked = now
        try:
            stamp: object = self._stat()
        except OSError as exc:
            stamp = ("missing", exc.errno)
        if stamp == self._stamp:
            return self.keys
        self._stamp = stamp
        try:
            keys = self._loader(self.path)
        except (OSError, ValueError) as exc:
            log.warning(
                "key file unusable; keeping the previous keys",
                path=self.path,
                error=str(exc) if isinstance(exc, ValueError) else exc.strerror,
            )
            return self.keys
        self.keys = keys
        log.info("key file reloaded", path=self.path, keys=len(keys))
        return keys


class Authenticator:
    """Verifies bearer tokens.  With no key configured it rejects every token (D5).

    ``Authenticator(secret)`` verifies HS256 only; :meth:`from_settings` adds the
    public keys of ``jwt_public_key_file`` / ``jwt_jwks_file`` and the claim checks.
    """

    def __init__(
        self,
        secret: str | None,
        *,
        public_key_file: str | None = None,
        jwks_file: str | None = None,
        audience: str | None = None,
        issuers: Sequence[str] = (),
        leeway: float = LEEWAY_SECONDS,
        reload_interval: float = RELOAD_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secret = secret
        #: The shared secret's key, made once: every request's token is checked against
        #: the configured keys (:meth:`verify`), and a frozen dataclass is slow to build.
        self._secret_key = None if secret is None else _Key("HS256", secret)
        self._files: list[_KeyFile] = []
        if public_key_file is not None:
            self._files.append(
                _KeyFile(
                    public_key_file,
                    load_pem_keys,
                    "jwt_public_key_file",
                    interval=reload_interval,
                    clock=clock,
                )
            )
        if jwks_file is not None:
            self._files.append(
                _KeyFile(
                    jwks_file,
                    load_jwks_keys,
                    "jwt_jwks_file",
                    interval=reload_interval,
                    clock=clock,
                )
            )
        self._audience = audience
        self._issuers = tuple(issuers)
        self._leeway = leeway
        #: token -> (its principal, the key that verified it); see :meth:`verify`.
        self._verified: OrderedDict[str, tuple[Principal, _Key]] = OrderedDict()

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> Authenticator:
        """The authenticator the settings describe.  Raises ValueError for a bad key file."""
        return cls(
            settings.jwt_secret,
            public_key_file=settings.jwt_public_key_file,
            jwks_file=settings.jwt_jwks_file,
            audience=settings.jwt_audience,
            issuers=issuers(settings),
            leeway=settings.jwt_leeway_seconds,
            **kwargs,
        )

    @property
    def configured(self) -> bool:
        return self._secret is not None or bool(self._files)

    def _keys(self) -> list[_Key]:
        keys = [] if self._secret_key is None else [self._secret_key]
        for key_file in self._files:
            keys.extend(key_file.current())
        return keys

    def _candidates(self, token: str) -> list[_Key]:
        """The keys that may verify this token, from its (untrusted) header."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated("invalid token") from exc
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or (kid is not None and not isinstance(kid, str)):
            raise Unauthenticated("invalid token")
        keys = self._keys()
        if kid is not None:
            keys = [key for key in keys if key.kid == kid]
            if not keys:
                raise Unauthenticated("unknown key")
        keys = [key for key in keys if key.alg == alg]
        if not keys:
            raise Unauthenticated("token algorithm not accepted")
        return keys

    def _decode(self, token: str, key: _Key) -> dict[str, Any]:
        claims: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=[key.alg],
            options={
                "require": list(_REQUIRED) + (["aud"] if self._audience is not None else []),
                "verify_aud": self._audience is not None,
            },
            audience=self._audience,
            issuer=self._issuers or None,
            leeway=self._leeway,
        )
        return claims

    def verify(self, token: str) -> Principal:
        """The principal of a valid token; Unauthenticated (with the reason) otherwise.

        A token verified before is answered from memory while the key that verified it
        is still configured (a key file that dropped it makes the token fail again) and
        the token has not expired (``exp`` plus the leeway, as PyJWT checks it).  The
        claims cannot change: they are signed.  Failures are not remembered.
        """
        if not self.configured:
            raise Unauthenticated("no authenticator is configured on this gateway")
        known = self._verified.get(token)
        if known is not None:
            principal, key = known
            if time.time() >= principal.expires_at + self._leeway:
                del self._verified[token]
                raise Unauthenticated("token expired")
            if key in self._keys():
                self._verified.move_to_end(token)
                return principal
            del self._verified[token]  # its key is gone: verified again (and refused)
        principal, key = self._verify(token)
        self._verified[token] = (principal, key)
        if len(self._verified) > VERIFIED_TOKENS:
            self._verified.popitem(last=False)
        return principal

    def _verify(self, token: str) -> tuple[Principal, _Key]:
        failure: Exception | None = None
        for key in self._candidates(token):
            try:
                claims = self._decode(token, key)
            except jwt.InvalidSignatureError as exc:
                failure = exc  # another key with the same algorithm may fit
                continue
            except jwt.ExpiredSignatureError as exc:
                raise Unauthenticated("token expired") from exc
            except jwt.ImmatureSignatureError as exc:
                raise Unauthenticated("token not yet valid") from exc
            except jwt.InvalidAudienceError as exc:
                raise Unauthenticated("token audience not accepted") from exc
            except jwt.InvalidIssuerError as exc:
                raise Unauthenticated("token issuer not accepted") from exc
            except jwt.MissingRequiredClaimError as exc:
                raise Unauthenticated(f"token lacks the {exc.claim!r} claim") from exc
            except jwt.PyJWTError as exc:
                raise Unauthenticated("invalid token") from exc
            return _principal(claims), key
        raise Unauthenticated("invalid token signature") from failure


def _principal(claims: dict[str, Any]) -> Principal:
    for claim in ("sub", "iss", "tenant"):
        if not isinstance(claims.get(claim), str) or not claims[claim]:
            raise Unauthenticated(f"token claim {claim!r} must be a non-empty string")
    scope = claims.get("scope", "")
    if not isinstance(scope, str):
        raise Unauthenticated("token claim 'scope' must be a space-separated string")
    return Principal(
        issuer=claims["iss"],
        tenant=claims["tenant"],
        subject=claims["sub"],
        scopes=frozenset(scope.split()),
        teams=_str_list(claims.get("teams"), "teams"),
        threads=_str_list(claims.get("threads"), "threads"),
        expires_at=float(claims["exp"]),
    )


def mint(
    secret: str,
    *,
    tenant: str,
    subject: str = "dev",
    issuer: str = "gateway-dev",
    scopes: Sequence[str] = ("subscribe", "publish"),
    teams: Sequence[str] | None = None,
    threads: Sequence[str] | None = None,
    ttl_seconds: int = 3600,
    now: float | None = None,
) -> str:
    """Mint an HS256 development token (``gateway token``)."""
    issued = int(now if now is not None else time.time())
    claims: dict[str, object] = {
        "sub": subject,
        "iss": issuer,
        "tenant": tenant,
        "scope": " ".join(scopes),
        "iat": issued,
        "exp": issued + ttl_seconds,
    }
    if teams is not None:
        claims["teams"] = list(teams)
    if threads is not None:
        claims["threads"] = list(threads)
    return jwt.encode(claims, secret, algorithm="HS256")
