"""The rig of the fault suite and the soak: nodes behind HAProxy, a producer, followers.

:class:`Rig` starts :data:`sizes.NODES` ``gateway serve`` processes on one Redis URL
(any topology: the caller starts Redis), a real HAProxy in front of them, a
:class:`Publisher` through HAProxy, and runs followers and the publisher in a task
group of its own.  At the end, :meth:`Rig.report` stops the publisher, reads every
feed's final stream, lets every follower catch up (bounded) and runs the delivery
checker over everything that was acknowledged and received::

    async with Rig(tmp_path, redis.url) as rig:
        await rig.create_feeds()
        rig.follow(ws=9, sse=4)
        await rig.wait_received(15)
        rig.start_publishing()
        ...  # faults
        report = await rig.report()
        report.assert_clean()

Everything is torn down on exit (followers cancelled, nodes SIGKILLed, HAProxy
stopped); :meth:`diagnostics` says what each part saw, for failure messages.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import anyio
import anyio.abc

from tests.fault import sizes
from tests.support import events as ev
from tests.support.delivery import DeliveryReport, check, pos
from tests.support.followers import Follower, SseFollower, WsFollower, read_feed
from tests.support.gateway_process import Fleet, GatewayProcess
from tests.support.haproxy import HAProxy
from tests.support.publisher import Publisher
from tests.support.wait import until


class Rig:
    """See the module docstring."""

    def __init__(
        self,
        log_dir: Path,
        redis_url: str,
        *,
        nodes: int = sizes.NODES,
        teams: int | list[str] = sizes.TEAMS,
        env: Mapping[str, str] | None = None,
        text_bytes: int = 64,
    ) -> None:
        node_env = {**sizes.NODE_ENV, "GATEWAY_REDIS_URL": redis_url, **(env or {})}
        self.fleet = Fleet(log_dir, nodes, node_env)
        self.lb: HAProxy | None = None
        self.teams = [ev.team_id() for _ in range(teams)] if isinstance(teams, int) else teams
        self.feeds = [f"team/{t}" for t in self.teams]
        self.publisher: Publisher | None = None
        self.followers: list[Follower] = []
        self._text_bytes = text_bytes
        self._stack = contextlib.AsyncExitStack()
        self._tg: anyio.abc.TaskGroup | None = None
        self._stop_publishing: anyio.Event | None = None
        self._publishing_done: anyio.Event | None = None
        self.publish_error: BaseException | None = None

    @property
    def nodes(self) -> list[GatewayProcess]:
        return self.fleet.nodes

    @property
    def haproxy(self) -> HAProxy:
        assert self.lb is not None, "the rig is not running"
        return self.lb

    @property
    def pub(self) -> Publisher:
        assert self.publisher is not None, "the rig is not running"
        return self.publisher

    # -- lifecycle ---------------------------------------------------------

    async def __aenter__(self) -> Self:
        try:
            await self._stack.enter_async_context(self.fleet)
            self.lb = self._stack.enter_context(HAProxy([(n.name, n.port) for n in self.nodes]))
            await self.lb.wait_states({n.name: "UP" for n in self.nodes})
            self.publisher = await self._stack.enter_async_context(
                Publisher(self.lb.url, self.teams, text_bytes=self._text_bytes)
            )
            self._tg = await self._stack.enter_async_context(anyio.create_task_group())
            # Registered last, so it runs first on exit: stops every follower.
            self._stack.callback(self._tg.cancel_scope.cancel)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

    # -- load --------------------------------------------------------------

    async def create_feeds(self) -> None:
        """One item in every feed (a feed with nothing published is ``not_found``)."""
        for team in self.teams:
            await self.pub.publish(team, 1)

    def follow(
        self, *, ws: int = 0, sse: int = 0, url: str | None = None, prefix: str = ""
    ) -> list[Follower]:
        """Start followers of every feed through HAProxy (or ``url``); returns them."""
        assert self._tg is not None
        lb = self.haproxy
        new: list[Follower] = []
        for i in range(ws):
            f: Follower = WsFollower(f"{prefix}ws{len(self.followers) + len(new)}-{i}", self.feeds)
            self._tg.start_soon(f.run, url.replace("http", "ws") + "/v1/ws" if url else lb.ws_url)
            new.append(f)
        for i in range(sse):
            f = SseFollower(f"{prefix}sse{len(self.followers) + len(new)}-{i}", self.feeds)
            self._tg.start_soon(f.run, url or lb.url)
            new.append(f)
        self.followers += new
        return new

    def start_publishing(self, *, pace: float = 0.01) -> None:
        assert self._tg is not None
        self._stop_publishing, self._publishing_done = anyio.Event(), anyio.Event()
        self._tg.start_soon(self._publish, self._stop_publishing, self._publishing_done, pace)

    async def _publish(self, stop: anyio.Event, done: anyio.Event, pace: float) -> None:
        try:
            await self.pub.run(stop, pace=pace)
        except Exception as exc:  # reported by stop_publishing, with the rig's diagnostics
            self.publish_error = exc
        finally:
            done.set()

    async def stop_publishing(self) -> None:
        if self._stop_publishing is not None and self._publishing_done is not None:
            self._stop_publishing.set()
            with anyio.fail_after(sizes.SETTLE, reason="the publisher did not stop"):
                await self._publishing_done.wait()
        if self.publish_error is not None:
            raise AssertionError(
                f"publishing failed: {self.publish_error}\n{self.diagnostics()}"
            ) from self.publish_error

    async def publish_more(self, n: int, within: float = sizes.SETTLE) -> None:
        """Wait until the running publisher has had ``n`` more items acknowledged per feed."""
        target = {feed: len(self.pub.acked[feed]) + n for feed in self.feeds}
        await until(
            lambda: (
                self.publish_error is not None
                or all(len(self.pub.acked[f]) >= target[f] for f in self.feeds)
            ),
            within,
            f"{n} more acknowledged items per feed",
        )
        if self.publish_error is not None:
            await self.stop_publishing()  # raises with the diagnostics

    # -- waiting -----------------------------------------------------------

    async def wait_received(
        self, n: int, within: float = sizes.SETTLE, followers: Sequence[Follower] | None = None
    ) -> None:
        """Until every follower has received at least ``n`` items of every feed."""
        group = self.followers if followers is None else followers
        await until(
            lambda: all(f.received(feed) >= n for f in group for feed in self.feeds),
            within,
            f"every follower holding {n} items per feed",
        )

    def caught_up(self, heads: Mapping[str, str | None]) -> bool:
        """Every follower at (or past) ``heads`` (feed -> cursor; None: nothing to reach)."""
        for f in self.followers:
            for feed, head in heads.items():
                if head is None:
                    continue
                here = f.position(feed)
                if here is None or here < pos(head):
                    return False
        return True

    def notices_since(self, since: float) -> dict[tuple[str, str], float | None]:
        """Per (follower, feed): seconds from ``since`` to its first ``epoch_restarted``
        after it, or None."""
        out: dict[tuple[str, str], float | None] = {}
        for f in self.followers:
            for feed in f.feeds:
                times = [o.at for o in f.restarts(feed) if o.at >= since]
                out[(f.name, feed)] = times[0] - since if times else None
        return out

    async def wait_notices(
        self, since: float, within: float = sizes.NOTICE_BOUND
    ) -> dict[tuple[str, str], float | None]:
        """Wait (bounded, without failing) until every follower got ``epoch_restarted``
        for every feed after ``since``; :meth:`notices_since` then."""
        with contextlib.suppress(TimeoutError):  # the caller asserts on who was not told
            await until(
                lambda: all(t is not None for t in self.notices_since(since).values()),
                within,
                "epoch_restarted at every follower",
            )
        return self.notices_since(since)

    # -- the end -----------------------------------------------------------

    async def final_streams(self) -> dict[str, list[tuple[str, str]]]:
        return {feed: await read_feed(self.haproxy.ws_url, feed) for feed in self.feeds}

    async def report(self, within: float = sizes.SETTLE) -> DeliveryReport:
        """Stop publishing, read the final streams, let followers catch up, check.

        Every node must still be running (the tests restart the ones they stop).
        """
        await self.stop_publishing()
        dead = [f"{n.name} (exit {n.returncode})" for n in self.nodes if not n.running]
        if dead:
            raise AssertionError(f"nodes not running: {dead}\n{self.diagnostics()}")
        final = await self.final_streams()
        heads = {feed: items[-1][0] if items else None for feed, items in final.items()}
        with contextlib.suppress(TimeoutError):  # the checker says precisely who is behind
            await until(lambda: self.caught_up(heads), within, "followers caught up")
        traces = [f.traces[feed] for f in self.followers for feed in f.feeds]
        return check(self.pub.acked, traces, final, self.pub.attempted)

    def diagnostics(self, lines: int = 20) -> str:
        out = [f"publisher: {self.publisher.summary() if self.publisher else '-'}"]
        if self.lb is not None:
            with contextlib.suppress(OSError):
                out.append(f"haproxy states: {self.lb.states()}")
        for f in self.followers:
            counts = {feed[-4:]: f.received(feed) for feed in f.feeds}
            reasons = [c.reason for c in f.connections[-5:]]
            notes = [n.what[:120] for n in f.notes[-3:]]
            out.append(
                f"{f.name}: received {counts} restarts {len(f.restarts())} "
                f"connections {len(f.connections)} last {reasons} notes {notes}"
            )
        out.append(self.fleet.diagnostics(lines))
        if self.lb is not None:
            out.append(self.lb.log_tail(lines))
        return "\n".join(out)


def now() -> float:
    return time.monotonic()


__all__ = ["Rig", "now"]
