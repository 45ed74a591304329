"""Bounded waiting for state that another task or process changes."""

from __future__ import annotations

from collections.abc import Callable

import anyio


async def until(predicate: Callable[[], object], within: float, what: str = "condition") -> None:
    """Return once ``predicate()`` is truthy; fail with TimeoutError after ``within`` s."""
    with anyio.fail_after(within, reason=f"{what} not reached within {within}s"):
        while not predicate():  # noqa: ASYNC110 - polls state owned by other tasks
            await anyio.sleep(0.005)
