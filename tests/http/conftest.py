"""The HTTP tests' node: a real node on each log with keepalives every 0.2 s (the
``client`` fixture of ``tests/conftest.py`` then talks to this one)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.app import Gateway
from tests.support.node import start_node


@pytest.fixture
async def node(node_redis: tuple[str | None, str]) -> AsyncIterator[Gateway]:
    """A node on the embedded log and on Redis (``node_redis``); keepalives every 0.2 s.

    A module that needs other settings defines its own ``node``.
    """
    url, prefix = node_redis
    async with start_node(url, prefix, keepalive_seconds=0.2) as n:
        yield n
