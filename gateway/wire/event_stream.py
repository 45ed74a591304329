"""Server-Sent Events framing (pure).  LF only, never CR (contract D3).

A message is ``id: <id>\\n`` (optional) then one ``data:`` line per line of the data,
then a blank line.  Our data never holds a newline (RFC 8785 JSON and compact AG-UI
JSON escape them), but :func:`message` splits defensively so that a stray line break
can never end a message early or inject a field.
"""

from __future__ import annotations

#: The keepalive: one comment line.  No blank line after it: a blank line alone ends no
#: message per the SSE spec, but some clients (httpx-sse among them) then dispatch an
#: empty event carrying the last id; a comment line alone keeps every client quiet.
KEEPALIVE = b": keepalive\n"

HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def message(data: bytes, event_id: bytes | None = None) -> bytes:
    """One SSE message carrying ``data`` with an optional ``id`` field."""
    head = b"id: " + event_id + b"\n" if event_id is not None else b""
    if b"\n" in data or b"\r" in data:
        lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        return head + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"
    return head + b"data: " + data + b"\n\n"


def comment(text: bytes) -> bytes:
    """An SSE comment line (ignored by clients; keeps proxies from timing out)."""
    return b": " + text.replace(b"\r", b" ").replace(b"\n", b" ") + b"\n\n"
