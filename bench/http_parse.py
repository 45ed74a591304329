"""The HTTP/1.1 request cycle alone: h11 against the gateway's own parser (gateway.net.h1).

    uv run python bench/http_parse.py            # 3 rounds, alternating, 20,000 cycles each

One cycle is what the listener does per keep-alive request: take the bytes of a
single-event publish (request line, host, a bearer token, content type and length, a
~230-byte JSON body), hand out the request with its headers and body, and frame a
200 answer with its headers.  CPU time (``time.process_time``) per cycle; run pinned
(``taskset -c 1``) on a quiet core for stable figures.  No sockets, no handler: only
the parsing and framing that the switch from h11 changed.  A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import h11

from gateway.net.h1 import RequestParser, response_head

BODY = (
    b'{"source":{"kind":"agent","id":"a"},"event":{"event_id":'
    b'"00000000-0000-4000-8000-000000000001","type":"team_message","text":"' + b"x" * 100 + b'"}}'
)
REQUEST = (
    b"POST /v1/teams/00000000-0000-4000-8000-000000000001/events HTTP/1.1\r\n"
    b"host: 127.0.0.1:8080\r\nauthorization: Bearer eyJhbGciOiJIUzI1NiJ9." + b"x" * 180 + b"\r\n"
    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(BODY)
) + BODY
ANSWER = b'{"cursors":["1796173989706:12345"]}'
ANSWER_HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]


def with_h11(n: int) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=16 * 1024)
    for _ in range(n):
        conn.receive_data(REQUEST)
        request = conn.next_event()
        assert isinstance(request, h11.Request)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers}
        data = conn.next_event()
        assert isinstance(data, h11.Data) and headers
        assert isinstance(conn.next_event(), h11.EndOfMessage)
        out = conn.send(h11.Response(status_code=200, headers=ANSWER_HEADERS, reason=b"OK"))
        out += conn.send(h11.Data(data=ANSWER)) + conn.send(h11.EndOfMessage())
        conn.start_next_cycle()


def with_h1(n: int) -> None:
    parser = RequestParser(max_head=16 * 1024, max_body=1 << 20)
    for _ in range(n):
        parser.receive(REQUEST)
        request = parser.next_request()
        assert request is not None and request.body == BODY
        out = response_head(200, ANSWER_HEADERS, close=False) + ANSWER
        assert out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sides: list[tuple[str, Callable[[int], None]]] = [
        ("h11", with_h11),
        ("gateway.net.h1", with_h1),
    ]
    print("| round | parser | us CPU per request cycle |")
    print("|---|---|---|")
    for round_ in range(1, args.rounds + 1):
        for name, cycle in sides:
            started = time.process_time()
            cycle(args.cycles)
            spent = time.process_time() - started
            print(f"| {round_} | {name} | {spent / args.cycles * 1e6:.1f} |")


if __name__ == "__main__":
    main()
