"""Fixtures and conventions of the fault suite (``pytest -m fault``).

- Every test here starts its own processes on loopback (Redis servers, ``gateway
  serve`` nodes, HAProxy, Sentinels, a cluster) and never touches the machine's Redis.
- What the suite needs but a machine lacks (``haproxy``, root for namespaces) fails the
  test with what to install; nothing is skipped (``scripts/test`` installs ``haproxy``).
- ``needs_gateway_work``: a scenario that is complete and honest but cannot pass until
  the gateway work it names lands (Sentinel and Cluster settings, losses announced
  without a publish, bounded Redis waits).  Such tests run as strict ``xfail``: they must
  fail today, and the run fails as soon as one passes, so that its marker is removed
  the moment the gateway does what it asserts.  ``FAULT_GATEWAY_WORK=run`` runs them as
  ordinary tests instead (to see their failures in full).
- ``measure(key, value)`` records a measurement (reconnect spread, p99, RSS, notice
  times); the run ends with a table of them ("fault suite measurements").
- A Python traceback in any gateway log of a test (``<tmp_path>/*.log``) is listed in
  that table and fails the test at teardown, unless the test is marked
  ``needs_gateway_work`` (whose expected failure must not hide a crash: it is listed).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import haproxy
from tests.support.gateway_process import tracebacks
from tests.support.redis_server import RedisServer

_MEASUREMENTS: list[tuple[str, str, str]] = []
GATEWAY_WORK_ENV = "FAULT_GATEWAY_WORK"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(GATEWAY_WORK_ENV) == "run":
        return
    for item in items:
        if not item.nodeid.startswith("tests/fault/"):
            continue  # the hook sees the whole session's items: only the suite's own
        marker = item.get_closest_marker("needs_gateway_work")
        if marker is not None:
            what = marker.args[0] if marker.args else "gateway work"
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"needs gateway work: {what}"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _MEASUREMENTS:
        return
    terminalreporter.section("fault suite measurements")
    for nodeid, key, value in _MEASUREMENTS:
        terminalreporter.write_line(f"{nodeid.split('::')[-1]}: {key} = {value}")


@pytest.fixture
def measure(request: pytest.FixtureRequest) -> Callable[[str, object], None]:
    """Record a measurement for the end-of-run table and the JUnit properties."""

    def record(key: str, value: object) -> None:
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        _MEASUREMENTS.append((request.node.nodeid, key, text))
        request.node.user_properties.append((key, text))

    return record


@pytest.fixture(autouse=True)
def no_gateway_tracebacks(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[None]:
    yield
    found = tracebacks(tmp_path)
    for line in found:
        _MEASUREMENTS.append((request.node.nodeid, "GATEWAY TRACEBACK", line))
    if found and request.node.get_closest_marker("needs_gateway_work") is None:
        pytest.fail("a gateway logged a traceback: " + "; ".join(found))


@pytest.fixture
def needs_haproxy() -> None:
    missing = haproxy.available()
    if missing is not None:
        pytest.fail(missing)


@pytest.fixture
def redis_single() -> Iterator[RedisServer]:
    """One ``redis-server`` of the test's own (no persistence: a restart loses everything)."""
    with RedisServer() as server:
        yield server
