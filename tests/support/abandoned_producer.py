"""A producer process that starts an AG-UI run, opens a text message and then hangs.

Usage: ``python abandoned_producer.py BASE_URL TOKEN THREAD_ID RUN_ID LEASE_SECONDS``

It publishes over HTTP, one event per request: ``RUN_STARTED`` (asking for the lease),
``TEXT_MESSAGE_START`` and two ``TEXT_MESSAGE_CONTENT``; then prints one JSON line,
``{"published": N, "last_sent": T0, "last_answered": T1}`` (``time.monotonic()`` just
before the last publish was sent and just after its answer came: on Linux one clock for
every process of the machine), and blocks until it is killed.  It never ends its run: a
test kills it to play a producer that crashed mid-run.  Any refused publish exits 1.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import httpx


def events(thread_id: str, run_id: str) -> list[dict[str, object]]:
    """The run as far as the producer gets: started, a text message left open."""
    message = f"{run_id}-m1"
    return [
        {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id},
        {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": "Hello, "},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": "wor"},
    ]


def main(base_url: str, token: str, thread_id: str, run_id: str, lease: str) -> None:
    path = f"/v1/threads/{thread_id}/runs/{run_id}/ui/ag-ui"
    headers = {"Authorization": f"Bearer {token}"}
    published = events(thread_id, run_id)
    with httpx.Client(base_url=base_url, headers=headers, timeout=10) as client:
        for index, event in enumerate(published):
            params = {"lease_seconds": lease} if index == 0 else {}
            sent = time.monotonic()
            r = client.post(path, json=event, params=params)
            answered = time.monotonic()
            if r.status_code != 200:
                print(json.dumps({"refused": r.status_code, "body": r.text}), flush=True)
                sys.exit(1)
    line = {"published": len(published), "last_sent": sent, "last_answered": answered}
    print(json.dumps(line), flush=True)
    threading.Event().wait()  # hang, as a stuck or dead producer would, until killed


if __name__ == "__main__":
    main(*sys.argv[1:])
