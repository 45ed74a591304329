"""The gateway's HTTP/1.1 parser (``gateway/net/h1.py``) against llhttp behind the same
interface (httptools, ``tests/support/httptools_parser.py``): CPU per request, in
process, no sockets.

    uv run python bench/h1_parsers.py [--rounds 5] [--requests 20000]
    uv run python bench/h1_parsers.py --compiled-h1 DIR   # + h1 compiled with mypyc

Three workloads, each request parsed whole (head, fields, body) and handed out:

- ``publish``: a single-event publish as a client sends it (tests/http/test_h1_server.py
  ``publish()``): POST, host, a ~300-byte bearer JWT, content type and length, a
  ~600-byte JSON body; one request per ``receive``;
- ``pipelined``: ten such publishes in one ``receive`` (a keep-alive batch);
- ``chunked``: the publish with its body in three chunks and no content-length.

Rounds alternate the parsers (h1, adapter, h1, ...); the table has the best and the
median round of each, in microseconds per request.  ``--compiled-h1 DIR`` adds h1
compiled by mypyc, as the gateway runs it: DIR holds an extension module ``h1c``
compiled from gateway/net/h1.py (copy the file to DIR/h1c.py and run ``mypyc h1c.py``
there with mypy and setuptools installed); ``--compiled-adapter DIR`` likewise adds the
adapter compiled, as it would run if it replaced h1: DIR holds ``llad`` compiled from
tests/support/httptools_parser.py (copied to DIR/llad.py, ``import httptools`` marked
``# type: ignore[import-not-found]``, ``MYPYPATH=<checkout> mypyc llad.py``).  Run it
pinned (``taskset -c 1``) on a quiet core: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.net import h1  # noqa: E402
from tests.support.httptools_parser import LlhttpRequestParser  # noqa: E402

MAX_HEAD = 16 * 1024
MAX_BODY = 1 << 20


def _jwt() -> bytes:
    """A JWT of the shape and size the gateway's clients send (HS256, ~300 bytes)."""

    def part(obj: dict[str, Any]) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=")

    claims = {
        "sub": "tester",
        "tenant": "acme",
        "scopes": ["subscribe", "publish"],
        "iat": 1796173989,
        "exp": 1796177589,
        "iss": "gateway-tests",
    }
    return part({"alg": "HS256", "typ": "JWT"}) + b"." + part(claims) + b"." + b"s" * 43


BODY = json.dumps(
    {
        "source": {"kind": "agent", "id": "planner-7f3a"},
        "event": {
            "event_id": "0190f5a2-7c1e-7b3d-8a4f-00000000a1b2",
            "type": "team_message",
            "thread_id": "thread-42",
            "text": "x" * 420,
        },
    }
).encode()
TARGET = b"/v1/teams/0190f5a2-7c1e-7b3d-8a4f-0000000000ff/events"
HEAD = (
    b"POST " + TARGET + b" HTTP/1.1\r\nHost: gw.test\r\n"
    b"Authorization: Bearer " + _jwt() + b"\r\nContent-Type: application/json\r\n"
)
PUBLISH = HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
CHUNKED = (
    HEAD
    + b"Transfer-Encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (BODY[:200], BODY[200:400], BODY[400:]))
    + b"0\r\n\r\n"
)
#: (name, bytes per receive, requests in them)
WORKLOADS = [("publish", PUBLISH, 1), ("pipelined", PUBLISH * 10, 10), ("chunked", CHUNKED, 1)]

Parser = Any


def timed(make: Callable[[], Parser], data: bytes, per: int, n: int) -> float:
    """Microseconds per request over ``n`` requests on one keep-alive parser."""
    parser = make()
    rounds = n // per
    started = time.process_time()
    for _ in range(rounds):
        parser.receive(data)
        for _ in range(per):
            request = parser.next_request()
            assert request is not None
    spent = time.process_time() - started
    assert request.body == BODY and parser.next_request() is None
    return spent / (rounds * per) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20_000, help="per round and parser")
    ap.add_argument("--compiled-h1", type=Path, help="a directory with h1c (see above)")
    ap.add_argument("--compiled-adapter", type=Path, help="a directory with llad (see above)")
    args = ap.parse_args()
    parsers: list[tuple[str, Callable[[], Parser]]] = [
        ("h1", lambda: h1.RequestParser(max_head=MAX_HEAD, max_body=MAX_BODY)),
        ("httptools adapter", lambda: LlhttpRequestParser(max_head=MAX_HEAD, max_body=MAX_BODY)),
    ]
    if args.compiled_h1 is not None:
        sys.path.insert(0, str(args.compiled_h1))
        compiled = importlib.import_module("h1c")
        assert not compiled.__file__.endswith(".py"), compiled.__file__
        parsers.insert(
            1,
            (
                "h1 compiled",
                lambda: compiled.RequestParser(max_head=MAX_HEAD, max_body=MAX_BODY),
            ),
        )
    if args.compiled_adapter is not None:
        sys.path.insert(0, str(args.compiled_adapter))
        adapter = importlib.import_module("llad")
        assert not adapter.__file__.endswith(".py"), adapter.__file__
        parsers.append(
            (
                "httptools adapter compiled",
                lambda: adapter.LlhttpRequestParser(max_head=MAX_HEAD, max_body=MAX_BODY),
            )
        )
    print(f"h1: {h1.__file__}; publish {len(PUBLISH)} bytes, chunked {len(CHUNKED)} bytes")
    print("| workload | parser | best us/request | median us/request |")
    print("|---|---|---|---|")
    for name, data, per in WORKLOADS:
        times: dict[str, list[float]] = {p: [] for p, _ in parsers}
        for _ in range(args.rounds):
            for parser_name, make in parsers:
                times[parser_name].append(timed(make, data, per, args.requests))
        for parser_name, spent in times.items():
            print(f"| {name} | {parser_name} | {min(spent):.2f} | {statistics.median(spent):.2f} |")


if __name__ == "__main__":
    main()
