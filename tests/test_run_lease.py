"""The rules of a run's life (gateway.run_lease): lease bounds, deadlines, what starts
and ends a run in each dialect, and that nothing may follow a run's end in a batch."""

from __future__ import annotations

import math

import msgspec
import pytest

from gateway import run_lease
from gateway.agui.events import TERMINAL
from gateway.errors import InvalidRequest, RunEnded


def test_the_default_lease_is_within_its_bounds() -> None:
    assert run_lease.DEFAULT_LEASE_SECONDS == 60.0
    run_lease.check_lease_setting(run_lease.DEFAULT_LEASE_SECONDS)
    assert run_lease.MIN_LEASE_SECONDS == 5.0 and run_lease.MAX_LEASE_SECONDS == 3600.0


@pytest.mark.parametrize("seconds", [5, 5.0, 60, 3600, 3599.5])
def test_leases_within_the_bounds_are_accepted(seconds: float) -> None:
    run_lease.check_lease_setting(seconds)
    assert run_lease.requested_lease(seconds, 60.0) == float(seconds)


@pytest.mark.parametrize("seconds", [0, 4.999, 3600.001, -1, math.nan, math.inf, -math.inf])
def test_leases_outside_the_bounds_are_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="run_lease_seconds"):
        run_lease.check_lease_setting(seconds)
    with pytest.raises(InvalidRequest, match=r"^lease: a number of seconds from 5 to 3600$"):
        run_lease.requested_lease(seconds, 60.0, "lease")


@pytest.mark.parametrize("value", [True, "60", [60], {"s": 60}])
def test_a_requested_lease_must_be_a_number(value: object) -> None:
    with pytest.raises(InvalidRequest):
        run_lease.requested_lease(value, 60.0)


def test_no_requested_lease_is_the_nodes_setting() -> None:
    assert run_lease.requested_lease(None, 42.0) == 42.0


def test_deadlines_and_expiry() -> None:
    assert run_lease.deadline_ms(1_000, 60) == 61_000
    # Part of a millisecond rounds up: a lease never runs out early.
    assert run_lease.deadline_ms(1_000, 5.0004) == 6_001
    deadline = run_lease.deadline_ms(1_000, 5)
    assert not run_lease.expired(deadline, deadline - 1)
    assert run_lease.expired(deadline, deadline)
    assert run_lease.expired(deadline, deadline + 1)


def test_agui_starts_and_ends() -> None:
    assert run_lease.AGUI_ENDS == TERMINAL == {"RUN_FINISHED", "RUN_ERROR"}
    assert run_lease.agui_starts(["RUN_STARTED", "TEXT_MESSAGE_START"])
    assert not run_lease.agui_starts(["TEXT_MESSAGE_START", "RUN_FINISHED"])
    assert run_lease.agui_ends(["RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "CUSTOM"]) == [
        False,
        True,
        True,
        False,
    ]


def test_threads_run_stream_starts_and_ends() -> None:
    assert run_lease.stream_ends(["event", "delta", "status", "result"]) == [
        False,
        False,
        False,
        True,
    ]
    assert run_lease.stream_starts(0, ["delta", "event"])
    assert not run_lease.stream_starts(0, ["delta", "status"])
    assert not run_lease.stream_starts(3, ["event"])


def test_a_batch_ends_its_run_only_with_its_last_item() -> None:
    assert run_lease.batch_ends([False, False, True])
    assert run_lease.batch_ends([True])
    assert not run_lease.batch_ends([False, False])
    assert not run_lease.batch_ends([])


def test_anything_after_the_end_refuses_the_batch_naming_the_items() -> None:
    with pytest.raises(RunEnded, match=r"^\[2\]: follows the run's end at \[1\]") as info:
        run_lease.batch_ends([False, True, False])
    assert info.value.status == 409 and info.value.code == "run_ended"
    with pytest.raises(RunEnded, match=r"^\[1\]: follows the run's end at \[0\]"):
        run_lease.batch_ends([True, True])
    with pytest.raises(RunEnded, match=r"^b: follows the run's end at a"):
        run_lease.batch_ends([True, False], ["a", "b"])


def test_a_lease_in_milliseconds_rounds_up() -> None:
    assert run_lease.lease_ms(5) == 5000
    assert run_lease.lease_ms(5.0001) == 5001
    assert run_lease.lease_ms(3600) == 3_600_000


def test_the_lapse_event_is_a_strict_ag_ui_run_error_with_producer_lost() -> None:
    from gateway.agui.events import check_body

    event = msgspec.json.decode(run_lease.lapse_event(1_760_000_000_123))
    assert event["type"] == "RUN_ERROR" and event["code"] == run_lease.PRODUCER_LOST
    assert event["timestamp"] == 1_760_000_000_123 and event["message"]
    assert event["type"] in TERMINAL
    # It passes the publish path's own strict validation (AG-UI 1.0).
    assert check_body(event, thread_id="t", run_id="r", strict=True) == [event]


def test_the_lapse_result_of_a_stream_is_a_valid_cancelled_outcome() -> None:
    from gateway.runstream import check_messages
    from tests.support import events as ev

    last = msgspec.json.encode({"kind": "event", "event": ev.message("hi")})
    data = run_lease.stream_lapse_result("run-1", last)
    assert data is not None
    result = msgspec.json.decode(data)
    assert result == {
        "kind": "result",
        "run_id": "run-1",
        "result": {
            "status": "cancelled",
            "thread_id": "0190f5a2-7c1e-7b3d-8a4f-000000000002",
            "branch_id": "0190f5a2-7c1e-7b3d-8a4f-000000000003",
        },
    }
    # The stream route's own validation (the seed's SseMessage) takes it.
    assert check_messages(result, thread_id="t", run_id="run-1") == [result]
    # Not a committed event (a result, garbage): nothing to end a run with.
    assert run_lease.stream_lapse_result("run-1", data) is None
    assert run_lease.stream_lapse_result("run-1", b"{not json") is None
    assert run_lease.stream_lapse_result("run-1", b'{"kind":"event","event":{}}') is None
