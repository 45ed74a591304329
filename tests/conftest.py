"""Shared test fixtures.

Redis for the test session (fixture ``redis_url``), chosen in this order:

1. ``GATEWAY_TEST_REDIS_URL`` if set (tests only touch keys under their own prefix);
2. a throwaway ``redis:7`` container through testcontainers, if a Docker engine answers;
3. a throwaway ``redis-server`` process (tests/support/redis_server.py) on a free port;
4. otherwise the session stops with a message saying what to install.

``redis_prefix`` gives each test a unique key prefix and deletes its keys afterwards.
"""

from __future__ import annotations

import os
import shutil
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from gateway.app import Gateway
from tests.support.node import start_node
from tests.support.redis_server import RedisServer, delete_keys_with_prefix

# ---------------------------------------------------------------------------
# Redis for the session
# ---------------------------------------------------------------------------

REDIS_URL_ENV = "GATEWAY_TEST_REDIS_URL"
REDIS_IMAGE = "redis:7"
NO_REDIS_MESSAGE = (
    "No Redis for the tests: install redis-server (apt-get install redis-server), "
    f"or set {REDIS_URL_ENV}=redis://host:port/db, or run a Docker engine."
)

_redis_choice: str | None = None  # "env" | "docker" | "redis-server" | "none"


def _docker_answers(timeout: float = 3.0) -> bool:
    """True if a Docker engine answers a ping; never hangs longer than ``timeout``."""
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _choose_redis() -> str:
    """Decide (once per session) where the test Redis comes from."""
    global _redis_choice
    if _redis_choice is None:
        if os.environ.get(REDIS_URL_ENV):
            _redis_choice = "env"
        elif _docker_answers():
            _redis_choice = "docker"
        elif shutil.which("redis-server"):
            _redis_choice = "redis-server"
        else:
            _redis_choice = "none"
    return _redis_choice


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def pytest_report_header(config: pytest.Config) -> str:
    choice = _choose_redis()
    if choice == "env":
        where = f"{REDIS_URL_ENV}={_redact(os.environ[REDIS_URL_ENV])}"
    elif choice == "docker":
        where = f"testcontainers {REDIS_IMAGE} (Docker engine answers)"
    elif choice == "redis-server":
        where = f"throwaway redis-server ({shutil.which('redis-server')}) on a free port"
    else:
        where = "none found (tests that need Redis will stop the session)"
    return f"redis: {where}"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of the Redis server the tests share (see the module docstring)."""
    choice = _choose_redis()
    if choice == "env":
        yield os.environ[REDIS_URL_ENV]
        return
    if choice == "docker":
        try:
            from testcontainers.community.redis import RedisContainer
        except ImportError:  # older testcontainers
            from testcontainers.redis import RedisContainer
        try:
            container = RedisContainer(REDIS_IMAGE).start()
        except Exception as exc:
            if not shutil.which("redis-server"):
                raise
            warnings.warn(
                f"Redis container did not start ({exc!r}); using redis-server instead",
                stacklevel=1,
            )
        else:
            try:
                host = container.get_container_host_ip()
                yield f"redis://{host}:{container.get_exposed_port(6379)}/0"
            finally:
                container.stop()
            return
    elif choice == "none":
        pytest.exit(NO_REDIS_MESSAGE, returncode=1)
    with RedisServer() as server:
        yield server.url


# ---------------------------------------------------------------------------
# Per-test key prefix
# ---------------------------------------------------------------------------


def new_redis_prefix() -> str:
    return f"gwtest:{uuid.uuid4().hex[:8]}"


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A unique key prefix (``gwtest:<8 hex>``); its keys are deleted after the test."""
    prefix = new_redis_prefix()
    yield prefix
    delete_keys_with_prefix(redis_url, prefix)


# ---------------------------------------------------------------------------
# Gateway nodes (tests/support/node.py)
# ---------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["memory", "redis"])
def log_kind(request: pytest.FixtureRequest) -> str:
    """Run a test once on the embedded log and once on Redis (same semantics)."""
    return str(request.param)


@pytest.fixture
def node_redis(log_kind: str, request: pytest.FixtureRequest) -> tuple[str | None, str]:
    """(redis_url or None, key prefix) for the parametrised log kind."""
    if log_kind == "memory":
        return None, "gwtest"
    url: str = request.getfixturevalue("redis_url")
    prefix: str = request.getfixturevalue("redis_prefix")
    return url, prefix


@pytest.fixture
async def node(node_redis: tuple[str | None, str]) -> AsyncIterator[Gateway]:
    """A node with the default test settings, on the embedded log and on Redis.

    A module or folder that needs other settings defines its own ``node``.
    """
    url, prefix = node_redis
    async with start_node(url, prefix) as n:
        yield n


@pytest.fixture
async def client(node: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of ``node`` (whichever ``node`` the test sees)."""
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as c:
        yield c
