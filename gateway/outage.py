"""Failures of a loop that retries, logged once: when it starts failing (and when the
reason changes), and when it works again, each time with the reason.

A loop that retries a store every few hundred milliseconds would otherwise write the
same line again and again, or nothing: an operator needs the cause once, at warning,
and the recovery once.
"""

from __future__ import annotations

import time
from typing import Any


class Outage:
    """One loop's failing state.  :meth:`failed` on every failure, :meth:`recovered` on
    every success (cheap while nothing failed: one attribute test)."""

    def __init__(self, logger: Any, event: str, **fields: Any) -> None:
        """``event``: the warning's message (``"feed read failed"``); ``fields``: what
        every line of it carries (``inbox="team"``)."""
        self._log = logger
        self._event = event
        self._fields = fields
        #: The reason of the failure being lived through (None: none).
        self.reason: str | None = None
        #: When it started (``time.monotonic()``), and the failures since.
        self.since = 0.0
        self.failures = 0

    def failed(self, reason: str, **fields: Any) -> None:
        """A failure: logged at warning if the loop worked until now or failed for
        another reason; counted otherwise."""
        if self.reason is None:
            self.since = time.monotonic()
            self.failures = 0
        self.failures += 1
        if reason != self.reason:
            self.reason = reason
            self._log.warning(self._event, reason=reason, **self._fields, **fields)

    def recovered(self) -> None:
        """A success: logged at info if the loop was failing."""
        if self.reason is None:
            return
        self._log.info(
            self._event + ": recovered",
            after_seconds=round(time.monotonic() - self.since, 3),
            failures=self.failures,
            was=self.reason,
            **self._fields,
        )
        self.reason = None
