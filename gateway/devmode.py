"""Dev mode (``gateway dev``, ``gateway serve --dev``): see it work in a minute (D11).

A node as ``gateway serve`` runs it (every flag and ``GATEWAY_*`` variable applies; with
no Redis URL, on the embedded log), with three differences:

1. a random JWT secret made at start-up replaces any configured one, so the only tokens
   it accepts are the ones it mints (they die with the process);
2. the console is on (``/console/``);
3. the demo producer (:func:`gateway.demo.run_demo`) publishes into tenant
   :data:`TENANT` for as long as the node runs.

It listens on a loopback address only, unless ``--dev-allow-remote`` says otherwise;
it says loudly (stderr) that it is for development, and prints one line on stdout: the
console's URL, whose fragment carries a token with both scopes.  Dev mode is never the
default and has no environment variable, so no environment left behind can turn it on.
"""

from __future__ import annotations

import ipaddress
import secrets
import sys
from typing import Final, TextIO

import msgspec
import structlog

from gateway.app import Gateway, serve
from gateway.auth import mint
from gateway.config import Settings
from gateway.demo import DEFAULT_RATE, DemoError, run_demo

log = structlog.get_logger("gateway.dev")

TENANT: Final = "demo"
ISSUER: Final = "gateway-dev"
#: The console's token; the demo's own (in-process only) lasts as long as any node.
CONSOLE_TOKEN_TTL: Final = 24 * 3600
DEMO_TOKEN_TTL: Final = 365 * 24 * 3600
ALLOW_REMOTE_FLAG: Final = "--dev-allow-remote"


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def dev_settings(settings: Settings, *, allow_remote: bool = False) -> Settings:
    """The node's settings in dev mode: a fresh random secret, the console on.

    Raises ValueError for a host that is not a loopback address, unless ``allow_remote``.
    """
    if not allow_remote and not is_loopback(settings.host):
        raise ValueError(
            f"host: dev mode listens on a loopback address only, not {settings.host!r} "
            f"(anyone who reaches it may read and publish); pass {ALLOW_REMOTE_FLAG} "
            "to listen there anyway"
        )
    return msgspec.structs.replace(settings, jwt_secret=secrets.token_urlsafe(32), console=True)


def base_url(node: Gateway) -> str:
    """Where this machine reaches the node (a wildcard address is reached on loopback)."""
    host = node.settings.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{node.port}"


def console_token(secret: str) -> str:
    return mint(
        secret,
        tenant=TENANT,
        subject="console",
        issuer=ISSUER,
        scopes=["subscribe", "publish"],
        ttl_seconds=CONSOLE_TOKEN_TTL,
    )


def banner(node: Gateway, token: str) -> str:
    """The loud notice on stderr (the URL itself goes to stdout)."""
    settings = node.settings
    log_line = (
        "the embedded in-memory log: NOTHING IS DURABLE"
        if settings.redis_url is None
        else "Redis (GATEWAY_REDIS_URL): the demo writes into tenant 'demo' there"
    )
    exposed = (
        ""
        if is_loopback(settings.host)
        else (
            f"\n  !! listening on {settings.host}, not loopback ({ALLOW_REMOTE_FLAG}): "
            "anyone who reaches this port and sees the token can read and publish"
        )
    )
    rule = "=" * 78
    return (
        f"{rule}\n"
        "  GATEWAY DEV MODE: for development only, NEVER for production.\n"
        "  - a random JWT secret made for this run (its tokens die with the process)\n"
        f"  - the console at /console/; the demo producer publishing into tenant '{TENANT}'\n"
        f"  - {log_line}"
        f"{exposed}\n"
        f"  More load:  GATEWAY_TOKEN={token} gateway demo --url {base_url(node)}\n"
        f"  Open the console (the token has both scopes, valid {CONSOLE_TOKEN_TTL // 3600} h):\n"
        f"{rule}"
    )


async def run(
    settings: Settings,
    *,
    rate: float = DEFAULT_RATE,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> None:
    """Run a dev-mode node (``settings`` from :func:`dev_settings`) until a signal."""
    stdout = sys.stdout if out is None else out
    stderr = sys.stderr if err is None else err
    secret = settings.jwt_secret
    if secret is None or not settings.console:
        raise ValueError("dev mode needs the settings of dev_settings()")

    async def beside(node: Gateway) -> None:
        token = console_token(secret)
        log.warning("dev mode: for development only, never for production")
        print(banner(node, token), file=stderr, flush=True)
        print(f"{base_url(node)}/console/#token={token}", file=stdout, flush=True)
        demo_token = mint(
            secret,
            tenant=TENANT,
            subject="demo",
            issuer=ISSUER,
            scopes=["publish"],
            ttl_seconds=DEMO_TOKEN_TTL,
        )
        try:
            await run_demo(base_url(node), demo_token, rate=rate, progress=stderr)
        except DemoError as exc:
            log.error("the demo producer stopped", error=str(exc))

    await serve(settings, beside=beside)
