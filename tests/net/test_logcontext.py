"""A connection's log fields: bound for what is logged inside, and only there."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from gateway.net import logcontext


def lines_of(fn: Any) -> list[dict[str, Any]]:
    with structlog.testing.capture_logs(processors=[logcontext.merge]) as logs:
        fn(structlog.get_logger("gateway.test"))
    return logs


def test_bound_fields_reach_the_lines_inside_and_no_others() -> None:
    def fn(log: Any) -> None:
        log.info("before")
        with logcontext.bound(conn_id="c1", transport="ws"):
            log.info("inside")
            with logcontext.bound(feed="team/t"):
                log.info("nested")
            log.info("after nested")
        log.info("after")

    got = {
        line["event"]: {k: v for k, v in line.items() if k != "log_level"} for line in lines_of(fn)
    }
    assert got == {
        "before": {"event": "before"},
        "inside": {"event": "inside", "conn_id": "c1", "transport": "ws"},
        "nested": {"event": "nested", "conn_id": "c1", "transport": "ws", "feed": "team/t"},
        "after nested": {"event": "after nested", "conn_id": "c1", "transport": "ws"},
        "after": {"event": "after"},
    }


def test_a_field_the_line_names_itself_wins() -> None:
    def fn(log: Any) -> None:
        with logcontext.bound(conn_id="c1", reason="bound"):
            log.info("closed", reason="client")

    [line] = lines_of(fn)
    assert line["reason"] == "client" and line["conn_id"] == "c1"


def test_fields_are_reset_when_the_block_raises() -> None:
    def fn(log: Any) -> None:
        try:
            with logcontext.bound(conn_id="c1"):
                raise ValueError
        except ValueError:
            log.info("after")

    [line] = lines_of(fn)
    assert "conn_id" not in line


def test_tasks_started_inside_carry_the_fields_and_do_not_leak_theirs() -> None:
    async def main(log: Any) -> None:
        async def child() -> None:
            with logcontext.bound(entry="e1"):
                log.info("child")

        with logcontext.bound(conn_id="c1"):
            await asyncio.create_task(child())
            log.info("parent")

    logs = lines_of(lambda log: asyncio.run(main(log)))
    by_event = {line["event"]: line for line in logs}
    assert by_event["child"]["conn_id"] == "c1" and by_event["child"]["entry"] == "e1"
    assert "entry" not in by_event["parent"] and by_event["parent"]["conn_id"] == "c1"
