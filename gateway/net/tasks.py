"""Plain asyncio tasks that one owner starts, ends and waits for.

anyio's ``start_soon`` costs about 20 us more per task than ``create_task`` on the
project's VM (its task handle, the name, the scope bookkeeping; an empty task group
another ~10 us), and the edges start a task per connection (the HTTP server: one that
handles its requests in turn) and per ``subscribe`` (a WebSocket session): at a
reconnect storm's rate that is a share of every reconnect. :class:`OwnedTasks` keeps
what the task group gave them: the owner cancels what must stop, and in its own exit
path waits, bounded, for every task to end; every task that fails is reported to the
owner, which ends as the task group would have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import structlog

log = structlog.get_logger("gateway.http")


class OwnedTasks:
    """The tasks one owner (a server, a session) runs; see the module's docstring.

    ``on_failure`` is called with each exception a task ends with (not a
    cancellation); :attr:`failure` keeps the first.  Without ``on_failure`` a failure
    is logged.
    """

    __slots__ = ("_on_failure", "_tasks", "failure")

    def __init__(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_failure = on_failure
        #: The first exception a task ended with, if any.
        self.failure: BaseException | None = None

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coro`` as a task of this owner's; the task is returned (to cancel)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if self.failure is None:
            self.failure = exc
        if self._on_failure is not None:
            self._on_failure(exc)
        else:
            log.error("task failed", task=task.get_name(), exc_info=exc)

    def cancel(self) -> None:
        """Cancel every task still running (they end at their next await)."""
        for task in self._tasks:
            task.cancel()

    async def wait(self, within: float) -> bool:
        """Wait until every task has ended, at most ``within`` seconds, shielded from
        the caller's cancellation (an exit path must see its tasks end); True if they
        all did.

        The shield (an anyio scope, ~3% of a reconnect) is entered only when the caller
        is being cancelled or is cancelled during the wait; a session that closes
        normally waits with a plain ``asyncio.wait``.
        """
        tasks = list(self._tasks)
        if not tasks:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        current = asyncio.current_task()
        if current is not None and not current.cancelling():
            try:
                await asyncio.wait(tasks, timeout=within)
            except asyncio.CancelledError:
                await _shielded_wait(tasks, deadline - loop.time())
                raise
        else:
            await _shielded_wait(tasks, within)
        return all(task.done() for task in tasks)


async def _shielded_wait(tasks: list[asyncio.Task[None]], within: float) -> None:
    if within > 0 and not all(task.done() for task in tasks):
        with anyio.move_on_after(within, shield=True):
            await asyncio.wait(tasks)
