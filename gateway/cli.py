"""``gateway serve``, ``gateway dev``, ``gateway demo`` and ``gateway token``."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence

import anyio

from gateway import auth, config


def _serve(argv: Sequence[str], *, dev: bool = False) -> int:
    parser = config.serve_parser()
    # Whole flags only: "--dev" must never be read as "--dev-allow-remote".
    parser.allow_abbrev = False
    dev_flags = parser.add_argument_group("development (dev mode, never for production)")
    if dev:
        parser.prog = "gateway dev"
        parser.description = (
            "Run the gateway in dev mode: a random JWT secret, the console at /console/, "
            "the demo producer, loopback only; prints the console's URL with a token. "
            "Takes every flag of gateway serve."
        )
    else:
        dev_flags.add_argument(
            "--dev", action="store_true", help="dev mode, as 'gateway dev' (see its --help)"
        )
    dev_flags.add_argument(
        "--dev-allow-remote",
        action="store_true",
        help="in dev mode, listen on a --host that is not a loopback address",
    )
    ns = parser.parse_args(list(argv))
    dev = dev or ns.dev
    try:
        settings = config.load(vars(ns))
        from gateway.store import redis as redis_store

        redis_store.check(settings)  # the Redis URL and its files, before anything runs
        if dev:
            from gateway import devmode

            settings = devmode.dev_settings(settings, allow_remote=ns.dev_allow_remote)
    except ValueError as exc:
        parser.error(str(exc))
    if ns.dev_allow_remote and not dev:
        parser.error("--dev-allow-remote: only in dev mode (gateway dev, or --dev)")
    from gateway.app import serve

    _tune_gc()
    backend_options = {"use_uvloop": True} if settings.uvloop and _has_uvloop() else {}
    try:
        if dev:
            anyio.run(devmode.run, settings, backend="asyncio", backend_options=backend_options)
        else:
            anyio.run(serve, settings, backend="asyncio", backend_options=backend_options)
    except KeyboardInterrupt:
        return 130
    return 0


def _dev(argv: Sequence[str]) -> int:
    return _serve(argv, dev=True)


def _demo(argv: Sequence[str]) -> int:
    from gateway import demo

    return demo.main(argv)


def _tune_gc() -> None:
    """Collect cycles less often than CPython's default (every 700 allocations).

    A node holds ~100 tracked objects per connection; while thousands connect at once
    the default thresholds ran eight full collections of the growing heap (up to
    270 ms each, a fifth of the connect phase's CPU with 5,000 WebSocket clients).
    Young collections every 5,000 allocations still stay near a millisecond.  What the
    imports and the startup built (schemas, validators) is frozen: never scanned again.
    """
    gc.freeze()
    gc.set_threshold(5_000, 20, 10)


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def _token(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gateway token",
        description="Mint an HS256 development token from GATEWAY_JWT_SECRET.",
    )
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--scope", default="subscribe publish", help="space-separated scopes")
    parser.add_argument("--teams", nargs="*", default=None, help="team ids the token may read")
    parser.add_argument("--threads", nargs="*", default=None, help="thread ids (run feeds)")
    parser.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds")
    parser.add_argument("--subject", default="dev")
    parser.add_argument("--issuer", default="gateway-dev")
    parser.add_argument("--secret", default=None, help="default: GATEWAY_JWT_SECRET")
    ns = parser.parse_args(list(argv))
    secret = ns.secret or os.environ.get("GATEWAY_JWT_SECRET")
    if not secret:
        parser.error("set GATEWAY_JWT_SECRET (or pass --secret)")
    if ns.ttl <= 0:
        parser.error("--ttl must be positive")
    print(
        auth.mint(
            secret,
            tenant=ns.tenant,
            subject=ns.subject,
            issuer=ns.issuer,
            scopes=ns.scope.split(),
            teams=ns.teams,
            threads=ns.threads,
            ttl_seconds=ns.ttl,
        )
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {"serve": _serve, "dev": _dev, "demo": _demo, "token": _token}
    if not args or args[0] not in commands:
        print(
            "usage: gateway {serve,dev,demo,token} [options]   (gateway serve --help)\n"
            "  serve  run a node;  dev  a node in dev mode (console, demo, a ready token);\n"
            "  demo   publish the demo story into a gateway;  token  mint a dev token",
            file=sys.stderr,
        )
        return 2
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
