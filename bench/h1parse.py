"""The HTTP/1.1 parser alone (``gateway/net/h1.py``): CPU per request for the request
``bench/publish.py`` sends (a single-event publish with a bearer token), no sockets.

    uv run python bench/h1parse.py [--checkout DIR ...]

With ``--checkout`` each named checkout's parser is timed in turn (an A/B of the
parser: run it pinned, e.g. ``taskset -c 1``, and alternate).  Best of 5 rounds of
100,000 requests each.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BODY = b'{"x":"' + b"a" * 700 + b'"}'
REQUEST = (
    b"POST /v1/teams/00000000-0000-4000-8000-000000000001/events HTTP/1.1\r\n"
    b"Host: 127.0.0.1:8080\r\nAuthorization: Bearer " + b"e" * 300 + b"\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
) + BODY


def time_parser(checkout: Path, rounds: int = 5, n: int = 100_000) -> float:
    """Best microseconds per request of ``checkout``'s parser."""
    sys.path.insert(0, str(checkout))
    for name in [m for m in sys.modules if m == "gateway" or m.startswith("gateway.")]:
        del sys.modules[name]
    h1 = importlib.import_module("gateway.net.h1")
    sys.path.pop(0)
    parser = h1.RequestParser(max_head=65536, max_body=1 << 20)
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(n):
            parser.receive(REQUEST)
            parser.next_request()
        best = min(best, (time.perf_counter() - started) / n)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", action="append", type=Path, help="default: this one")
    args = ap.parse_args()
    print(f"| checkout | us per request ({len(REQUEST)} bytes) |")
    print("|---|---|")
    for checkout in args.checkout or [ROOT]:
        print(f"| {checkout} | {time_parser(checkout):.2f} |")


if __name__ == "__main__":
    main()
