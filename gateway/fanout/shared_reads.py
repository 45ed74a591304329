"""Shared reads: concurrent reads with the same key share one call and its result.

A thousand clients joining a feed at the same cursor ask the store for the same state
and the same history pages; with this they make one request each time, not a
thousand.  Results are shared objects: callers must not mutate them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class _Call(Generic[T]):
    __slots__ = ("done", "error", "has_result", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: T | None = None
        self.has_result = False
        self.error: Exception | None = None


class SharedReads(Generic[T]):
    """Reads by key, each made once for every caller asking while it is in flight
    (the pattern known as single flight)."""

    def __init__(self) -> None:
        self._calls: dict[Hashable, _Call[T]] = {}
        #: Calls answered from another caller's request (for tests and metrics).
        self.shared = 0

    async def do(self, key: Hashable, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` for ``key``, or wait for the run already in flight and share it.

        If the leading caller is cancelled, the waiting ones run ``fn`` themselves.
        """
        while True:
            call = self._calls.get(key)
            if call is None:
                return await self._lead(key, fn)
            await call.done.wait()
            if call.error is not None:
                raise call.error
            if call.has_result:
                self.shared += 1
                return call.result  # type: ignore[return-value]
            # The leader was cancelled: try again (maybe as the new leader).

    async def _lead(self, key: Hashable, fn: Callable[[], Awaitable[T]]) -> T:
        call: _Call[T] = _Call()
        self._calls[key] = call
        try:
            result = await fn()
        except Exception as exc:
            call.error = exc
            raise
        else:
            call.result = result
            call.has_result = True
            return result
        finally:
            del self._calls[key]
            call.done.set()
