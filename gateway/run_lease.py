"""The rules of a run's life: when it starts, when it ends, and the lease it holds.

Pure: no I/O, no clock of its own (times are passed in), so every rule is checked by
fast unit tests and shared by every publish path and by the store adapters.

A run is live from its start to its end (docs/contract.md, "Runs end"):

- **AG-UI** (the run route, SparkTide and A2UI, which append AG-UI events): it starts
  with ``RUN_STARTED`` (:data:`AGUI_START`) and ends with ``RUN_FINISHED`` or
  ``RUN_ERROR`` (:data:`AGUI_ENDS`, which ``gateway.agui.events`` calls ``TERMINAL``).
- **The threads run stream**: it starts with its first committed event and ends with
  its ``result``.

Nothing of a run may follow its end: a batch that holds the end must hold it last
(:func:`batch_ends`), and the append step refuses new items once the feed records the
end (``RunEnded``).  While live, a run holds a lease of ``GATEWAY_RUN_LEASE_SECONDS``
(or what its producer asked for, within :data:`MIN_LEASE_SECONDS` ..
:data:`MAX_LEASE_SECONDS`), renewed by every publish to it; its deadline is
:func:`deadline_ms`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from gateway.errors import InvalidRequest, RunEnded

#: The ``code`` of the end a run gets when its lease runs out.
PRODUCER_LOST: Final = "producer_lost"

#: The AG-UI event that starts a run, and those that end it.
AGUI_START: Final = "RUN_STARTED"
AGUI_ENDS: Final = frozenset({"RUN_FINISHED", "RUN_ERROR"})

#: The lease a run holds unless configured otherwise (``GATEWAY_RUN_LEASE_SECONDS``).
DEFAULT_LEASE_SECONDS: Final = 60.0
#: Bounds of a lease, configured or asked for by a producer when it starts a run: short
#: enough leases would end runs between two publishes of a healthy producer; longer
#: ones would leave viewers waiting for a dead producer for more than an hour.
MIN_LEASE_SECONDS: Final = 5.0
MAX_LEASE_SECONDS: Final = 3600.0


def _in_bounds(seconds: object) -> bool:
    return (
        isinstance(seconds, int | float)
        and not isinstance(seconds, bool)
        and not math.isnan(seconds)
        and MIN_LEASE_SECONDS <= seconds <= MAX_LEASE_SECONDS
    )


def check_lease_setting(seconds: float) -> None:
    """Raise ValueError unless ``seconds`` is a lease the node may be configured with."""
    if not _in_bounds(seconds):
        raise ValueError(
            f"run_lease_seconds must be between {MIN_LEASE_SECONDS:g} and "
            f"{MAX_LEASE_SECONDS:g} seconds"
        )


def requested_lease(value: object, default: float, where: str = "lease_seconds") -> float:
    """The lease a run holds: ``value``, a producer's request (None: ``default``, the
    node's setting); InvalidRequest naming ``where`` when it is outside the bounds."""
    if value is None:
        return default
    if not _in_bounds(value):
        raise InvalidRequest(
            f"{where}: a number of seconds from {MIN_LEASE_SECONDS:g} to {MAX_LEASE_SECONDS:g}"
        )
    assert isinstance(value, int | float)
    return float(value)


def deadline_ms(now_ms: int, lease_seconds: float) -> int:
    """When a lease renewed at ``now_ms`` (wall clock, ms) runs out, in ms."""
    return now_ms + math.ceil(lease_seconds * 1000)


def expired(deadline: int, now_ms: int) -> bool:
    """Whether a lease with this deadline has run out at ``now_ms`` (at the deadline it
    has: the lease is the time before it)."""
    return now_ms >= deadline


def batch_ends(ends: Sequence[bool], where: Iterable[str] | None = None) -> bool:
    """Whether a batch ends its run; ``ends`` says, item by item, whether the item is an
    end.  RunEnded when anything follows the end (nothing of the batch is then
    appended); ``where`` names the items (``[0]``, ...) for the message."""
    names = list(where) if where is not None else [f"[{i}]" for i in range(len(ends))]
    for index, is_end in enumerate(ends):
        if is_end and index < len(ends) - 1:
            raise RunEnded(
                f"{names[index + 1]}: follows the run's end at {names[index]}: nothing may "
                "follow a run's end; nothing was appended"
            )
    return bool(ends) and ends[-1]


def agui_ends(types: Sequence[object]) -> list[bool]:
    """Which AG-UI events (by ``type``) end their run."""
    return [t in AGUI_ENDS for t in types]


def agui_starts(types: Iterable[object]) -> bool:
    """Whether AG-UI events (by ``type``) start a run."""
    return any(t == AGUI_START for t in types)


def stream_ends(kinds: Sequence[object]) -> list[bool]:
    """Which threads run stream messages (by ``kind``) end their run: its ``result``."""
    return [k == "result" for k in kinds]


def stream_starts(head: int, kinds: Iterable[object]) -> bool:
    """Whether threads run stream messages start their run: a committed event appended
    to a stream that held none (``head`` 0: no feed, or an empty one)."""
    return head == 0 and any(k == "event" for k in kinds)


def lease_ms(seconds: float) -> int:
    """A lease of ``seconds`` in whole milliseconds (rounded up)."""
    return math.ceil(seconds * 1000)


def lapse_event(now_ms: int) -> bytes:
    """The AG-UI event that ends a run whose lease ran out: ``RUN_ERROR`` with the code
    :data:`PRODUCER_LOST`, stamped ``now_ms`` (every dialect renders it as its end)."""
    return msgspec.json.encode(
        {
            "type": "RUN_ERROR",
            "message": (
                "the run's producer was lost: no publish or heartbeat renewed the run's "
                "lease before it ran out"
            ),
            "code": PRODUCER_LOST,
            "timestamp": now_ms,
        }
    )


def stream_lapse_result(run_id: str, last: bytes) -> bytes | None:
    """The final ``result`` that ends a threads run stream whose lease ran out, from the
    stream's last stored message ``last`` (its committed event names the thread and the
    branch); None when ``last`` is not a committed event.

    The seed's RunOutcome has no outcome for a lost producer: ``failed`` needs a code
    from a closed list that has none for it, so the run is ``cancelled`` (stopped without
    an output, by something other than the agent) (docs/contract.md, "Runs end").
    """
    try:
        message = msgspec.json.decode(last)
        if message.get("kind") != "event":
            return None
        thread_id, branch_id = message["event"]["thread_id"], message["event"]["branch_id"]
    except (msgspec.DecodeError, AttributeError, KeyError, TypeError):
        return None
    outcome = {"status": "cancelled", "thread_id": thread_id, "branch_id": branch_id}
    return msgspec.json.encode({"kind": "result", "run_id": run_id, "result": outcome})
