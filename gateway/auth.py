"""Bearer tokens to principals, and what a principal may read or publish (decisions D5).

PyJWT does the JOSE work; its exceptions are translated to :class:`Unauthenticated`
here.  Only HS256 with ``GATEWAY_JWT_SECRET`` for now; the algorithm allow-list is
fixed per key so ``alg: none`` and algorithm confusion can never verify.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jwt
import msgspec

from gateway.errors import Unauthenticated

_REQUIRED = ("sub", "iss", "tenant", "exp")
#: Clock skew tolerated on exp/nbf, in seconds.
LEEWAY_SECONDS = 5


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


def bearer_token(authorization: str | None, fallback: str | None = None) -> str:
    """The token of an ``Authorization: Bearer`` header, else ``fallback``.

    ``fallback`` is where a browser put it (the ``access_token`` query parameter of an
    SSE route, the ``bearer.<JWT>`` WebSocket subprotocol).  Raises Unauthenticated.
    """
    token = fallback
    if authorization is not None:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthenticated("expected 'Authorization: Bearer <token>'")
        token = value.strip()
    if not token:
        raise Unauthenticated("missing bearer token")
    return token


class Authenticator:
    """Verifies HS256 bearer tokens.  ``secret=None`` rejects every token (D5)."""

    def __init__(self, secret: str | None) -> None:
        self._secret = secret

    @property
    def configured(self) -> bool:
        return self._secret is not None

    def verify(self, token: str) -> Principal:
        if self._secret is None:
            raise Unauthenticated("no authenticator is configured on this gateway")
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=["HS256"],
                options={"require": list(_REQUIRED), "verify_aud": False},
                leeway=LEEWAY_SECONDS,
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated("token expired") from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated("invalid token") from exc
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
