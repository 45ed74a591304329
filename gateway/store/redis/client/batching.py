"""Calls made in one event-loop iteration, sent to Redis as one pipeline.

redis-py spends about 70 µs of CPU on one command round trip (a pooled connection
checked out and back, the retry wrapper, packing, parsing), and about a third of that
per command of a pipeline.  Under load many requests reach their append step in the
same iteration of the loop (the epoll wake-up that delivered their bytes): a
:class:`CallBatcher` lets the first of them wait one iteration (``sleep(0)``: a lone call
is not delayed by more than that) and then send every call submitted meanwhile in one
pipeline, handing each caller its own answer.

Each call stays what it was: a separate command, atomic by itself (an append step is
one script call); calls are sent in the order they were submitted.  A failure of the
whole pipeline (the connection) reaches every caller of the batch.  The batch is sent
shielded from the cancellation of the caller that sends it (the others wait for it);
its own bound is the flush's (``RedisConnection.io``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

Call = TypeVar("Call")
Answer = TypeVar("Answer")

#: Calls in one pipeline at most; more start another batch.
MAX_BATCH = 256


class _Batch(Generic[Call, Answer]):
    __slots__ = ("answers", "calls", "done", "failure")

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.answers: list[Answer] = []
        self.failure: BaseException | None = None
        self.done = anyio.Event()


class CallBatcher(Generic[Call, Answer]):
    """``await submit(call)``: the answer to ``call``, sent with the calls submitted in
    the same loop iteration.  ``flush`` sends a list of calls and returns their answers
    in order (an error for one call is returned in its place, not raised)."""

    def __init__(
        self, flush: Callable[[list[Call]], Awaitable[list[Answer]]], max_batch: int = MAX_BATCH
    ) -> None:
        self._flush = flush
        self._max = max_batch
        self._open: _Batch[Call, Answer] | None = None
        #: Pipelines sent and calls in them (for the benchmarks' breakdown).
        self.batches = 0
        self.calls = 0

    async def submit(self, call: Call) -> Answer:
        batch = self._open
        if batch is not None:
            index = len(batch.calls)
            batch.calls.append(call)
            if len(batch.calls) >= self._max:
                self._open = None  # full: the next call starts another
            await batch.done.wait()
            if batch.failure is not None:
                raise batch.failure
            return batch.answers[index]
        batch = self._open = _Batch()
        batch.calls.append(call)
        with anyio.CancelScope(shield=True):
            await anyio.lowlevel.checkpoint()  # the other calls of this iteration join
            if self._open is batch:
                self._open = None
            self.batches += 1
            self.calls += len(batch.calls)
            try:
                batch.answers = await self._flush(batch.calls)
            except BaseException as exc:
                batch.failure = exc
                raise
            finally:
                batch.done.set()
        return batch.answers[0]
