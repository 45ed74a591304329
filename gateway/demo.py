"""``gateway demo``: publish the demo's story (gateway.scenario) into a running gateway.

:func:`run_demo` POSTs one publish after another over one HTTP/1.1 keep-alive connection
(the standard library's ``http.client``, in a worker thread), at a bounded rate, until
it is cancelled (Ctrl-C), ``stop_after`` seconds have passed or ``max_events`` were
published.  Every publish is safe to retry
(team items carry an ``event_id``, run publishes an ``Idempotency-Key``), so a gateway
that restarts, drains, answers 503 or 429 only slows the demo down: it retries the same
publish with jittered backoff and goes on, and nothing is published twice.  A 4xx other
than 429 is a bug or a bad token and stops it with :class:`DemoError`.

A progress line on ``progress`` (stderr for ``gateway demo``) says how much was
published where; on a terminal it is rewritten in place.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import http.client
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, TextIO
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import msgspec

from gateway.scenario import Publish, scenario

__all__ = ["DemoError", "DemoStats", "main", "run_demo"]

DEFAULT_URL: Final = "http://127.0.0.1:8080"
DEFAULT_RATE: Final = 4.0
#: Bounds: one request (connect, send, answer), an answer's body, the retry backoff.
REQUEST_TIMEOUT: Final = 10.0
MAX_RESPONSE_BYTES: Final = 1 << 20
RETRY_MIN: Final = 0.2
RETRY_MAX: Final = 5.0
#: Off a terminal, a progress line at most this often (seconds).
PROGRESS_EVERY: Final = 5.0
_RETRYABLE_STATUS: Final = frozenset({429, 502, 503, 504})


class DemoError(Exception):
    """The gateway refused the demo for good (bad token, a publish it cannot accept)."""


@dataclass
class DemoStats:
    """What :func:`run_demo` published."""

    published: int = 0
    team: int = 0
    run: int = 0
    retries: int = 0
    feeds: set[str] = field(default_factory=set)
    last: str = ""


@dataclass(frozen=True)
class Published:
    """One publish the gateway accepted, with the cursors it answered."""

    publish: Publish
    cursors: list[str]


class _Http:
    """One keep-alive HTTP/1.1 connection to the gateway, reopened when it breaks.

    The standard library's client, each request in a worker thread; a request that is
    cancelled (a timeout, Ctrl-C) abandons its thread, which ends within the socket
    timeout, and its connection, which is never used again."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise DemoError(f"--url: expected http(s)://host[:port], got {base_url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None

    async def post(
        self, path: str, body: bytes, headers: list[tuple[str, str]]
    ) -> tuple[int, dict[str, str], bytes]:
        """POST ``body``; return (status, headers, body).  Raises ``OSError`` (timeouts
        included) or ``http.client.HTTPException`` when the connection breaks."""
        if self._conn is None:
            kind = http.client.HTTPSConnection if self.tls else http.client.HTTPConnection
            self._conn = kind(self.host, self.port, timeout=REQUEST_TIMEOUT)
        conn = self._conn
        fields = {"content-type": "application/json", **dict(headers)}
        return await anyio.to_thread.run_sync(
            _post, conn, self.prefix + path, body, fields, abandon_on_cancel=True
        )

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _post(
    conn: http.client.HTTPConnection, target: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """One request on ``conn`` (blocking): (status, headers, body)."""
    conn.request("POST", target, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read(MAX_RESPONSE_BYTES + 1)
    if len(data) > MAX_RESPONSE_BYTES:
        raise http.client.HTTPException("answer too large")
    if not response.isclosed():  # not read to its end: the connection cannot go on
        conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


_BROKEN = (OSError, http.client.HTTPException)


def tenant_of(token: str) -> str:
    """The ``tenant`` claim of a JWT, read without verifying it (the gateway does)."""
    try:
        payload = token.split(".")[1]
        claims = msgspec.json.decode(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        tenant = claims["tenant"]
    except (IndexError, KeyError, TypeError, ValueError, binascii.Error, msgspec.DecodeError):
        raise DemoError("the token is not a JWT with a tenant claim: pass --tenant") from None
    if not isinstance(tenant, str) or not tenant:
        raise DemoError("the token's tenant claim is not a string: pass --tenant")
    return tenant


class _Progress:
    """The progress line: rewritten in place on a terminal, else one line now and then."""

    def __init__(self, out: TextIO | None) -> None:
        self.out = out
        self.tty = bool(out is not None and out.isatty())
        self._last = -math.inf

    def show(self, stats: DemoStats, rate: float, final: bool = False) -> None:
        if self.out is None:
            return
        now = time.monotonic()
        if not final and now - self._last < (0.1 if self.tty else PROGRESS_EVERY):
            return
        self._last = now
        teams = sum(1 for f in stats.feeds if f.startswith("team/"))
        runs = len(stats.feeds) - teams
        line = (
            f"demo: {stats.published} events ({stats.team} team, {stats.run} run) "
            f"into {teams} teams and {runs} runs at {rate:g}/s"
        )
        if stats.retries:
            line += f", {stats.retries} retries"
        if stats.last:
            line += f"; last {stats.last}"
        if final:
            line += " (stopped)"
        if self.tty:
            self.out.write("\r" + line + "\x1b[K" + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()


async def run_demo(
    base_url: str,
    token: str,
    *,
    rate: float = DEFAULT_RATE,
    tenant: str | None = None,
    seed: int | None = None,
    stop_after: float | None = None,
    max_events: int | None = None,
    progress: TextIO | None = None,
    on_published: Callable[[Published], None] | None = None,
    stop: anyio.Event | None = None,
) -> DemoStats:
    """Publish the demo story into the gateway at ``base_url`` until cancelled.

    ``token`` needs the ``publish`` scope; ``tenant`` defaults to its ``tenant`` claim.
    At most ``rate`` publishes per second (one item each).  Returns the counts when
    ``stop_after`` seconds passed or ``max_events`` were published (cancellation, e.g.
    Ctrl-C, ends it too: the progress line is finished either way), or when ``stop`` is
    set: then the publish under way is finished first, so that ``on_published``, called
    with every accepted publish and its cursors, has seen everything that was published.
    """
    if not rate > 0:
        raise DemoError("--rate must be positive")
    tenant = tenant or tenant_of(token)
    story = scenario(
        tenant,
        seed=seed if seed is not None else random.randrange(1 << 32),
        start_ms=int(time.time() * 1000),
    )
    http = _Http(base_url)
    stats = DemoStats()
    line = _Progress(progress)
    interval = 1.0 / rate
    jitter = random.Random()
    stopping = stop or anyio.Event()
    try:
        with anyio.move_on_after(stop_after):
            next_at = anyio.current_time()
            for publish in story:
                if max_events is not None and stats.published >= max_events:
                    break
                with anyio.move_on_after(next_at - anyio.current_time()):
                    await stopping.wait()
                if stopping.is_set():
                    break
                cursors = await _publish(http, publish, token, stats, jitter)
                stats.published += 1
                stats.team += publish.kind == "team"
                stats.run += publish.kind == "run"
                stats.feeds.add(publish.feed)
                stats.last = f"{publish.feed} {cursors[-1]}"
                if on_published is not None:
                    on_published(Published(publish, cursors))
                line.show(stats, rate)
                # After a stall (retries) go on at the rate, without a burst to catch up.
                next_at = max(next_at + interval, anyio.current_time())
    finally:
        with anyio.CancelScope(shield=True):
            await http.aclose()
        line.show(stats, rate, final=True)
    return stats


async def _publish(
    http: _Http,
    publish: Publish,
    token: str,
    stats: DemoStats,
    jitter: random.Random,
) -> list[str]:
    """POST one publish, retrying (the same bytes) until the gateway accepts it."""
    body = msgspec.json.encode(publish.body)
    headers = [("authorization", f"Bearer {token}")]
    if publish.idempotency_key is not None:
        headers.append(("idempotency-key", publish.idempotency_key))
    attempt = 0
    while True:
        wait: float | None = None
        try:
            with anyio.fail_after(REQUEST_TIMEOUT):
                status, answer, raw = await http.post(publish.path, body, headers)
        except _BROKEN:
            await http.aclose()
        else:
            if status == 200:
                cursors: list[str] = msgspec.json.decode(raw)["cursors"]
                return cursors
            if status not in _RETRYABLE_STATUS:
                raise DemoError(
                    f"{publish.path} answered {status}: {raw[:500].decode(errors='replace')}"
                )
            if status == 429 and answer.get("retry-after", "").isdigit():
                wait = float(answer["retry-after"])
        attempt += 1
        stats.retries += 1
        if wait is None:
            wait = jitter.uniform(0, min(RETRY_MAX, RETRY_MIN * 2 ** min(attempt, 10)))
        await anyio.sleep(min(wait, RETRY_MAX * 6))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway demo",
        description=(
            "Publish a realistic, continuous stream (an agent team's messages and tasks, "
            "and AG-UI runs) into a gateway, until Ctrl-C."
        ),
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("GATEWAY_URL", DEFAULT_URL),
        help=f"the gateway's base URL (default: $GATEWAY_URL or {DEFAULT_URL})",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("GATEWAY_TOKEN"),
        help="a token with the publish scope (default: $GATEWAY_TOKEN, else one minted "
        "from $GATEWAY_JWT_SECRET for --tenant)",
    )
    parser.add_argument(
        "--tenant", default=None, help="the tenant (default: the token's, or 'demo')"
    )
    parser.add_argument(
        "--rate", type=float, default=DEFAULT_RATE, help="events per second (default: 4)"
    )
    parser.add_argument("--seed", type=int, default=None, help="replay the same story")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``gateway demo [--url URL] [--token T] [--rate R] ...``; returns the exit code."""
    args = _parser().parse_args(argv)
    token = args.token
    if token is None:
        secret = os.environ.get("GATEWAY_JWT_SECRET")
        if not secret:
            print(
                "gateway demo: pass --token (or set GATEWAY_TOKEN), or set "
                "GATEWAY_JWT_SECRET to mint one",
                file=sys.stderr,
            )
            return 2
        from gateway.auth import mint

        token = mint(secret, tenant=args.tenant or "demo", subject="demo", scopes=["publish"])

    async def go() -> None:
        await run_demo(
            args.url,
            token,
            rate=args.rate,
            tenant=args.tenant,
            seed=args.seed,
            stop_after=args.duration,
            progress=sys.stderr,
        )

    try:
        anyio.run(go)
    except KeyboardInterrupt:
        return 130
    except DemoError as exc:
        print(f"gateway demo: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
