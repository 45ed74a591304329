"""Fixtures shared by the store tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.store.interfaces import Backend
from tests.support.backends import open_backend


@pytest.fixture
async def store(node_redis: tuple[str | None, str]) -> AsyncIterator[Backend]:
    """A store on the test's backend (the embedded one, or a Redis of its own), closed
    after the test."""
    url, prefix = node_redis
    backend = open_backend(url, prefix)
    try:
        yield backend
    finally:
        await backend.aclose()
