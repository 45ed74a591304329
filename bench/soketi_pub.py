"""Load-generator publisher for soketi, or any Pusher-compatible HTTP API.

``--pub py:bench/soketi_pub.py:make``: signs ``POST /apps/<id>/batch_events`` requests
of up to 10 events (the Pusher limit per batch).  Environment: ``PUSHER_URL`` (default
``http://127.0.0.1:6001``), ``PUSHER_APP_ID``, ``PUSHER_KEY``, ``PUSHER_SECRET`` (the
app ``bench/peers/soketi.js`` defines).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from typing import Any

import httpx

BASE = os.environ.get("PUSHER_URL", "http://127.0.0.1:6001")
APP_ID = os.environ.get("PUSHER_APP_ID", "app-id")
KEY = os.environ.get("PUSHER_KEY", "app-key")
SECRET = os.environ.get("PUSHER_SECRET", "app-secret")
BATCH = 10


class PusherPublisher:
    def __init__(self) -> None:
        self.client = httpx.AsyncClient(base_url=BASE, timeout=10)

    async def post(self, path: str, body: dict[str, Any]) -> None:
        """One signed request (Pusher's HTTP API authentication, version 1.0)."""
        raw = json.dumps(body).encode()
        query = (
            f"auth_key={KEY}&auth_timestamp={int(time.time())}&auth_version=1.0"
            f"&body_md5={hashlib.md5(raw).hexdigest()}"  # MD5: what the protocol signs
        )
        signed = f"POST\n{path}\n{query}".encode()
        signature = hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
        response = await self.client.post(
            f"{path}?{query}&auth_signature={signature}",
            content=raw,
            headers={"content-type": "application/json"},
        )
        response.raise_for_status()

    async def many(self, items: list[tuple[int, str, str]]) -> None:
        for start in range(0, len(items), BATCH):
            batch = [
                {"name": "ev", "channel": channel, "data": data}
                for _, channel, data in items[start : start + BATCH]
            ]
            await self.post(f"/apps/{APP_ID}/batch_events", {"batch": batch})

    async def aclose(self) -> None:
        await self.client.aclose()


def make(args: Any) -> PusherPublisher:
    return PusherPublisher()
