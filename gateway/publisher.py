"""Publishing: the one validate-then-append path (docs/contract.md D4).

:class:`Publisher` is shared by the HTTP routes, the inboxes and the Python producer
(:mod:`gateway.producer`), so every entry path applies exactly the same validation.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from typing import Any

import msgspec
import structlog

from gateway.activity import FeedActivity
from gateway.agui.events import check_body, encode
from gateway.cursor import Cursor
from gateway.errors import GatewayError, IdempotencyKeyReused, InvalidRequest
from gateway.fanout.foldcache import BLOCK as FOLD_BLOCK
from gateway.fanout.foldcache import FoldCache
from gateway.feed import (
    FeedKey,
    FeedState,
    NewItem,
    is_run_part,
    is_team_id,
    run_events_feed,
    run_feed,
    team_feed,
)
from gateway.limits import Charge, PublishRate
from gateway.metrics import Metrics
from gateway.publish_dialects import Authorize, DialectRuns
from gateway.run_lease import (
    DEFAULT_LEASE_SECONDS,
    agui_ends,
    agui_starts,
    batch_ends,
    lapse_event,
    lease_ms,
    requested_lease,
    stream_ends,
    stream_lapse_result,
    stream_starts,
)
from gateway.runstream import check_messages, seq_key
from gateway.store.interfaces import RENEWS, FeedStore, Lapse, LiveFeed, RunIndex, RunLease
from gateway.validate import validate_team_publish
from gateway.wire.teamitem import team_payload

log = structlog.get_logger("gateway.publisher")


class Via(enum.StrEnum):
    """How a publish entered the gateway (the ``path`` label of the publish metrics)."""

    HTTP = "http"
    INBOX = "inbox"
    PRODUCER = "producer"


def decode_body(raw: bytes) -> object:
    """A publish body's JSON; InvalidRequest when it is empty, malformed or too deep."""
    if not raw:
        raise InvalidRequest("body: expected JSON, got nothing")
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"body: malformed JSON ({exc})") from exc
    except RecursionError as exc:
        raise InvalidRequest("body: JSON nested too deeply") from exc


class Publisher:
    def __init__(
        self,
        feeds: FeedStore,
        live: LiveFeed,
        folds: FoldCache,
        metrics: Metrics,
        *,
        team_retention: int,
        run_retention: int = 100_000,
        run_finished_ttl: float = 3600.0,
        agui_strict: bool = False,
        activity: FeedActivity | None = None,
        runs: RunIndex | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.feeds = feeds
        self.live = live
        self.metrics = metrics
        self.team_retention = team_retention
        self.run_retention = run_retention
        self.run_finished_ttl = run_finished_ttl
        self.agui_strict = agui_strict
        #: The node's fold cache: a run's fold is kept with its feed before retention
        #: trims its start.
        self.folds = folds
        #: Keeps the feed index (GET /v1/feeds) up to date: told of team and run feed
        #: appends (not of run streams, which are not listed).
        self.activity = activity
        #: SparkTide and A2UI into run feeds (one writer per run on this node).
        #: The latest run of each thread (contract D10) and the live runs, if the
        #: backend keeps them (without, runs hold no lease: nothing would find them).
        self.runs = runs
        #: The lease a run holds unless its producer asks for another.
        self.lease_seconds = lease_seconds
        self.dialects = DialectRuns(
            feeds,
            folds,
            run_retention=run_retention,
            run_finished_ttl=run_finished_ttl,
            on_run=None if runs is None else self._dialect_run,
            lease_for=self._run_lease,
        )

    async def publish_team_json(
        self,
        tenant: str,
        team: str,
        raw: bytes,
        *,
        via: Via,
        rate: PublishRate | None = None,
    ) -> list[Cursor]:
        """:meth:`publish_team` for a body still in JSON text (HTTP, the inbox)."""
        body = self._decoded(raw, via)
        return await self.publish_team(tenant, team, body, via=via, rate=rate)

    def _decoded(self, raw: bytes, via: Via) -> object:
        """The body's JSON; a body that is not JSON is counted as rejected and raised."""
        try:
            return decode_body(raw)
        except InvalidRequest as exc:
            self.reject(exc, via)
            raise

    def reject(self, exc: Exception, via: Via) -> None:
        """Count a rejected publish (every entry path, every reason)."""
        code = getattr(exc, "code", "internal")
        self.metrics.publish_rejections.labels(code=str(code), path=via.value).inc()

    async def publish_team(
        self,
        tenant: str,
        team: str,
        body: object,
        *,
        via: Via,
        rate: PublishRate | None = None,
    ) -> list[Cursor]:
        """Validate a D4 body (one item or an array) and append it, all or nothing.

        Raises InvalidRequest, IdempotencyKeyReused, RateLimited or Unavailable.  ``via``
        names the entry path for metrics.  ``rate``, if given (the HTTP routes), is the
        tenant's publish rate: the append takes the body's item count from the tenant's
        bucket or refuses the whole body (see ``_charge``).
        """
        try:
            charge = _charge(rate, tenant, body)
            new = self._team_items(tenant, team, body)
            feed = team_feed(tenant, team)
            result = await self.feeds.append(
                feed, new, retention=self.team_retention, charge=charge
            )
        except Exception as exc:
            self.reject(exc, via)
            raise
        if self.activity is not None:
            await self.activity.record(feed)
        self.metrics.published.labels("team", via.value).inc(len(new))
        return result.cursors

    def _team_items(self, tenant: str, team: str, body: object) -> list[NewItem]:
        """A D4 body as the items to append; raises InvalidRequest."""
        if not is_team_id(team):
            raise InvalidRequest("team: must be a lowercase UUID")
        try:
            items = validate_team_publish(body, tenant=tenant, team=team)
            return [
                NewItem(item.event_id, team_payload(item.source, item.event), item.host_opening)
                for item in items
            ]
        except RecursionError as exc:
            raise InvalidRequest("body: JSON nested too deeply") from exc

    async def publish_team_many(
        self, tenant: str, bodies: Mapping[str, object], *, via: Via
    ) -> dict[str, list[Cursor] | GatewayError]:
        """:meth:`publish_team` for several teams in one round trip.

        Every body is validated before anything is appended: an invalid one raises
        InvalidRequest (its message names the team) and nothing is appended.  Each
        team's items are then one atomic step, but the teams are not one step
        together: the result maps each team to its cursors or to the error its step
        met (IdempotencyKeyReused, Unavailable).  Raises Unavailable when Redis could
        not be reached at all (then any team's items may or may not be appended;
        retrying keyed items is safe).
        """
        batches: list[tuple[str, list[NewItem]]] = []
        for team, body in bodies.items():
            try:
                batches.append((team, self._team_items(tenant, team, body)))
            except InvalidRequest as exc:
                self.reject(exc, via)
                raise InvalidRequest(f"team {team}: {exc.message}") from exc
        try:
            outcomes = await self.feeds.append_many(
                [(team_feed(tenant, team), new) for team, new in batches],
                retention=self.team_retention,
            )
        except Exception as exc:
            self.reject(exc, via)
            raise
        results: dict[str, list[Cursor] | GatewayError] = {}
        published = self.metrics.published.labels("team", via.value)
        for (team, new), outcome in zip(batches, outcomes, strict=True):
            if isinstance(outcome, GatewayError):
                self.reject(outcome, via)
                results[team] = outcome
            else:
                published.inc(len(new))
                results[team] = outcome.cursors
                if self.activity is not None:
                    await self.activity.record(team_feed(tenant, team))
        return results

    async def publish_run_json(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        raw: bytes,
        *,
        via: Via,
        idempotency_key: str | None = None,
        rate: PublishRate | None = None,
        lease_seconds: float | None = None,
    ) -> list[Cursor]:
        """:meth:`publish_run` for a body still in JSON text (HTTP, the inbox)."""
        body = self._decoded(raw, via)
        return await self.publish_run(
            tenant,
            thread_id,
            run_id,
            body,
            via=via,
            idempotency_key=idempotency_key,
            rate=rate,
            lease_seconds=lease_seconds,
        )

    async def publish_run(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        body: object,
        *,
        via: Via,
        idempotency_key: str | None = None,
        rate: PublishRate | None = None,
        lease_seconds: float | None = None,
    ) -> list[Cursor]:
        """Validate AG-UI events (one or an array, D4/D7) and append them, all or nothing.

        ``idempotency_key`` makes a retried request safe: the same key with the same
        events answers the first cursors again, with other events 409.  A run's
        RUN_FINISHED or RUN_ERROR starts its grace period (``run_finished_ttl``), after
        which the feed is deleted, and ends the run: the append step records the end
        with the events, and refuses any new event after it (RunEnded, 409; exact
        retries are still answered).  A body with events after its end is refused
        whole (RunEnded).  A RUN_STARTED makes the run its thread's latest (``runs``,
        after the append: a step of its own).  ``rate`` as for :meth:`publish_team`.

        A RUN_STARTED starts the run's lease (``lease_seconds``, within
        gateway.run_lease's bounds, else the node's; InvalidRequest outside them), and
        every later append renews it (docs/contract.md, "Runs end").
        """
        try:
            charge = _charge(rate, tenant, body)
            if not is_run_part(thread_id):
                raise InvalidRequest("thread_id: must match ^[A-Za-z0-9_.-]{1,128}$")
            if not is_run_part(run_id):
                raise InvalidRequest("run_id: must match ^[A-Za-z0-9_.-]{1,128}$")
            if idempotency_key is not None and not 0 < len(idempotency_key) <= 200:
                raise InvalidRequest("Idempotency-Key: 1 to 200 characters")
            try:
                events = check_body(
                    body, thread_id=thread_id, run_id=run_id, strict=self.agui_strict
                )
                new = [
                    NewItem(
                        None if idempotency_key is None else f"{idempotency_key}#{i}",
                        encode(event),
                    )
                    for i, event in enumerate(events)
                ]
            except RecursionError as exc:
                raise InvalidRequest("body: JSON nested too deeply") from exc
            types = [e["type"] for e in events]
            ended = batch_ends(agui_ends(types), _where(len(events), isinstance(body, list)))
            started = agui_starts(types)
            feed = run_feed(tenant, thread_id, run_id)
            if idempotency_key is not None:
                await self._check_request_key(feed, idempotency_key, len(new))
            lease = await self._run_lease(feed, started, ended, lease_seconds)
            result = await self.feeds.append(
                feed,
                new,
                retention=self.run_retention,
                align=FOLD_BLOCK,
                charge=charge,
                ends=ended,
                lease=lease,
            )
            if self.run_finished_ttl > 0 and ended:
                await self.feeds.expire(feed, self.run_finished_ttl)
            if self.runs is not None:
                await self._index_run(tenant, thread_id, run_id, started=started, ended=ended)
                if ended:
                    await self._run_ended(feed, tracked=not started)
            await self._persist_fold(feed, result.state)
        except Exception as exc:
            self.reject(exc, via)
            raise
        if self.activity is not None:
            await self.activity.record(feed)
        self.metrics.published.labels("run", via.value).inc(len(new))
        return result.cursors

    async def _dialect_run(self, feed: FeedKey, started: bool, ended: bool) -> None:
        thread_id, run_id = feed.id.split("/", 1)
        await self._index_run(feed.tenant, thread_id, run_id, started=started, ended=ended)
        if ended:
            await self._run_ended(feed, tracked=not started)

    async def _run_lease(
        self, feed: FeedKey, starts: bool, ends: bool, seconds: float | None = None
    ) -> RunLease | None:
        """What an append to the run feed does to its run's lease (None: nothing, for a
        batch that ends the run: the end ends the lease).  A batch that starts the run
        first adds it to the live-run index, so that a live run is never missing from
        it, even when this node stops right after the append (an entry whose append
        failed is dropped when due).  ``seconds``: the lease the producer asks for.
        Raises InvalidRequest (``seconds`` out of bounds) or Unavailable."""
        if seconds is not None:
            requested_lease(seconds, self.lease_seconds)  # refused on any publish, not only a start
        if ends or self.runs is None:
            return None
        if not starts:
            return RENEWS
        length = lease_ms(requested_lease(seconds, self.lease_seconds))
        now = int(time.time() * 1000)
        await self.runs.track(feed, now, now + length)
        return RunLease(True, length)

    async def _run_ended(self, feed: FeedKey, *, tracked: bool) -> None:
        """Its producer ended the run: drop it from the live-run index and count it
        (once: a retried end finds it dropped; ``tracked`` False for a run started in
        the same batch, never indexed)."""
        if await self._untrack_ended(feed) or not tracked:
            self.metrics.runs_ended.labels(by="producer").inc()

    async def _untrack_ended(self, feed: FeedKey) -> int:
        """Drop an ended run from the live-run index; whether it was there (a failure is
        logged and answers 0: the run ended all the same, and the sweep finds it ended
        and drops the entry when it comes due)."""
        assert self.runs is not None
        try:
            return await self.runs.untrack([feed])
        except GatewayError as exc:
            log.warning("dropping an ended run from the live-run index failed", error=exc.message)
            return 0

    async def _persist_fold(self, feed: FeedKey, state: FeedState) -> None:
        """Keep the run's fold before retention trims its start (a failure is logged:
        appended all the same; the next append near the limit tries again)."""
        try:
            await self.folds.persist(feed, state, self.run_retention)
        except GatewayError as exc:
            log.warning("keeping a run's fold failed", error=exc.message)

    async def heartbeat(self, tenant: str, thread_id: str, run_id: str) -> bool:
        """Renew the lease of a live run without publishing (docs/contract.md, "Runs
        end"): False when the run is not live (never started, ended, no such run).
        Raises InvalidRequest (bad ids) or Unavailable."""
        if not is_run_part(thread_id) or not is_run_part(run_id):
            raise InvalidRequest("thread_id and run_id must match ^[A-Za-z0-9_.-]{1,128}$")
        return await self.feeds.renew(run_feed(tenant, thread_id, run_id)) is not None

    async def lapse(self, feed: FeedKey) -> Lapse:
        """End the run ``feed`` holds if its lease ran out (the lease sweep): one
        ``RUN_ERROR`` with the code ``producer_lost``, appended atomically with the
        check however many nodes try at once, then what follows any run's end (the
        grace period, the latest-run index, the fold).  Keeps the live-run index: a
        run still live is due again at its deadline, a run no longer live leaves it.
        Raises Unavailable."""
        assert self.runs is not None
        stream = _is_stream(feed)
        if stream:
            found = await self._stream_lapse(feed)
            if found is None:  # no committed event to end: nothing of a run there
                await self.runs.untrack([feed])
                return Lapse()
            end = found
        else:
            end = NewItem(None, lapse_event(int(time.time() * 1000)))
        outcome = await self.feeds.lapse(
            feed, end, retention=self.run_retention, align=0 if stream else FOLD_BLOCK
        )
        if outcome.live is not None:
            await self.runs.postpone(feed, outcome.live.deadline_ms)
            return outcome
        if outcome.ended is None:
            await self.runs.untrack([feed])
            return outcome
        # Counted and told first: what follows is upkeep, which may fail on its own.
        self.metrics.runs_ended.labels(by="lease").inc()
        thread_id, run_id = feed.id.split("/")[:2]
        log.warning(
            "run ended: its lease ran out",
            tenant=feed.tenant,
            thread_id=thread_id,
            run_id=run_id,
            stream=stream,
            end=str(outcome.ended.cursors[-1]),
        )
        await self._untrack_ended(feed)
        if self.run_finished_ttl > 0:
            await self.feeds.expire(feed, self.run_finished_ttl)
        if stream:
            return outcome  # no latest-run entry, fold or feed index for a stream
        await self._index_run(feed.tenant, thread_id, run_id, started=False, ended=True)
        await self._persist_fold(feed, outcome.ended.state)
        if self.activity is not None:
            await self.activity.record(feed)
        return outcome

    async def _index_run(
        self, tenant: str, thread_id: str, run_id: str, *, started: bool, ended: bool
    ) -> None:
        """Keep the latest-run index: a started run becomes its thread's latest; an
        ended one's entry gets the run feed's grace period (contract D10)."""
        assert self.runs is not None
        try:
            if started:
                await self.runs.record_run(tenant, thread_id, run_id, time.time())
            if ended and self.run_finished_ttl > 0:
                await self.runs.expire_run(tenant, thread_id, run_id, self.run_finished_ttl)
        except GatewayError as exc:
            # Appended all the same (failing the request would make a retry without an
            # Idempotency-Key append the events again); the index keeps its previous
            # entry for the thread (docs/storage.md).
            log.warning("keeping the thread's latest run failed", error=exc.message)

    async def _stream_lapse(self, feed: FeedKey) -> NewItem | None:
        """The result that ends a threads run stream whose lease ran out (its ids from
        the stream's last committed event); None when it holds none."""
        state = await self.feeds.state(feed)
        if state is None or state.head == 0:
            return None
        last = await self.feeds.read(feed, Cursor(state.epoch, state.head - 1), 1)
        if not last:
            return None
        _, run_id, _ = feed.id.split("/")
        data = stream_lapse_result(run_id, last[0].data)
        return None if data is None else NewItem("result", data)

    async def _check_request_key(self, feed: FeedKey, key: str, n: int) -> None:
        """A retained ``Idempotency-Key`` must come back with as many events (the events
        themselves are compared by the append step, item by item)."""
        if await self.feeds.offset_of(feed, f"{key}#0") is None:
            return
        if (
            await self.feeds.offset_of(feed, f"{key}#{n - 1}") is None
            or await self.feeds.offset_of(feed, f"{key}#{n}") is not None
        ):
            raise IdempotencyKeyReused(
                "Idempotency-Key was already used for a different list of events"
            )

    async def publish_run_stream_json(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        raw: bytes,
        *,
        via: Via,
        rate: PublishRate | None = None,
        lease_seconds: float | None = None,
    ) -> list[Cursor | None]:
        """:meth:`publish_run_stream` for a body still in JSON text."""
        body = self._decoded(raw, via)
        return await self.publish_run_stream(
            tenant, thread_id, run_id, body, via=via, rate=rate, lease_seconds=lease_seconds
        )

    async def publish_run_stream(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        body: object,
        *,
        via: Via,
        rate: PublishRate | None = None,
        lease_seconds: float | None = None,
    ) -> list[Cursor | None]:
        """Publish SseMessages to a run's threads stream (D7b), in order.

        Committed events (appended with the key ``seq:<seq>``) must continue the last
        committed seq; a retained seq sent again with the same body is a safe retry
        (answered with its cursor), with another body 409.  The result is stored too
        (key ``result``); ``delta`` and ``status`` messages go to live followers only
        (their cursor is None).  Everything is checked before anything is sent.  The
        result ends the run: nothing may follow it in the body, and once appended the
        append step refuses new committed events (RunEnded, 409; exact retries are
        still answered).
        ``rate`` as for :meth:`publish_team`: the whole body's count is taken by the
        first of its store steps (an append, or a transient message's publish) that
        does something new, so a refused body sends nothing.  The stream's first
        committed event starts its run's lease (``lease_seconds`` as for
        :meth:`publish_run`), every later append renews it.
        """
        try:
            charge = _charge(rate, tenant, body)
            if not is_run_part(thread_id) or not is_run_part(run_id):
                raise InvalidRequest("thread_id and run_id must match ^[A-Za-z0-9_.-]{1,128}$")
            messages = check_messages(body, thread_id=thread_id, run_id=run_id)
            requested_lease(lease_seconds, self.lease_seconds)  # checked before anything is sent
            batch_ends(
                stream_ends([m["kind"] for m in messages]),
                _where(len(messages), isinstance(body, list)),
            )
            feed = run_events_feed(tenant, thread_id, run_id)
            first = next((m["event"]["seq"] for m in messages if m["kind"] == "event"), None)
            # The stream's run starts with its first committed event (gateway.run_lease).
            starts = False
            if first is not None and await self.feeds.offset_of(feed, seq_key(first)) is None:
                state = await self.feeds.state(feed)
                starts = stream_starts(0 if state is None else state.head, ["event"])
                if (
                    state is not None
                    and state.head > 0
                    and await self.feeds.offset_of(feed, seq_key(first - 1)) is None
                ):
                    raise InvalidRequest(
                        f"event.seq: {first} does not follow the last committed seq"
                    )
            cursors: list[Cursor | None] = []
            pending: list[NewItem] = []

            async def flush(ends: bool = False) -> None:
                nonlocal starts
                if pending:
                    lease = await self._run_lease(feed, starts, ends, lease_seconds)
                    result = await self.feeds.append(
                        feed,
                        pending,
                        retention=self.run_retention,
                        charge=_due(charge),
                        ends=ends,
                        lease=lease,
                    )
                    if ends and self.runs is not None:
                        await self._run_ended(feed, tracked=not starts)
                    starts = False
                    cursors.extend(result.cursors)
                    pending.clear()

            for message in messages:
                kind = message["kind"]
                if kind == "event":
                    data = msgspec.json.encode({"kind": "event", "event": message["event"]})
                    pending.append(NewItem(seq_key(message["event"]["seq"]), data))
                elif kind == "result":
                    data = msgspec.json.encode(
                        {"kind": "result", "run_id": run_id, "result": message["result"]}
                    )
                    pending.append(NewItem("result", data))
                    await flush(ends=True)  # the body's last message (batch_ends)
                else:
                    await flush()
                    await self.live.broadcast(
                        feed, msgspec.json.encode(message), charge=_due(charge)
                    )
                    cursors.append(None)
            await flush()
            if self.run_finished_ttl > 0 and any(m["kind"] == "result" for m in messages):
                await self.feeds.expire(feed, self.run_finished_ttl)
        except Exception as exc:
            self.reject(exc, via)
            raise
        self.metrics.published.labels("run", via.value).inc(len(messages))
        return cursors

    # -- other dialects in (docs/dialects/sparktide.md, docs/dialects/a2ui.md) -----------

    async def publish_sparktide_json(
        self,
        tenant: str,
        raw: bytes,
        *,
        via: Via,
        rate: PublishRate | None = None,
        authorize: Authorize | None = None,
    ) -> list[Cursor]:
        """:meth:`publish_sparktide` for a body still in JSON text (HTTP, the inbox)."""
        body = self._decoded(raw, via)
        return await self.publish_sparktide(tenant, body, via=via, rate=rate, authorize=authorize)

    async def publish_sparktide(
        self,
        tenant: str,
        body: object,
        *,
        via: Via,
        rate: PublishRate | None = None,
        authorize: Authorize | None = None,
    ) -> list[Cursor]:
        """Translate SparkTide events (one or an array of one run) to AG-UI and append
        them to the run feed ``run/<conversationId>/<runId>``, all or nothing.

        One cursor per SparkTide event: that of the last AG-UI event derived from it (a
        retried event answers its first cursor).  ``authorize(thread_id, run_id)`` may
        refuse the run the body names (the HTTP route's ``threads`` claim); ``rate`` as
        for :meth:`publish_team`, counting SparkTide events (a body of retries only
        appends nothing and takes nothing).
        """
        try:
            charge = _charge(rate, tenant, body)
            cursors, appended = await self.dialects.sparktide(
                tenant, body, authorize=authorize, charge=charge
            )
        except Exception as exc:
            self.reject(exc, via)
            raise
        self.metrics.published.labels("run", via.value).inc(appended)
        if self.activity is not None and appended:
            # Accepted, so the body names one run (its first event says which).
            first: Any = body[0] if isinstance(body, list) else body
            await self.activity.record(run_feed(tenant, first["conversationId"], first["runId"]))
        return cursors

    async def publish_a2ui_json(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        raw: bytes,
        *,
        via: Via,
        idempotency_key: str | None = None,
        rate: PublishRate | None = None,
    ) -> list[Cursor]:
        """:meth:`publish_a2ui` for a body still in JSON text (HTTP, the inbox)."""
        body = self._decoded(raw, via)
        return await self.publish_a2ui(
            tenant, thread_id, run_id, body, via=via, idempotency_key=idempotency_key, rate=rate
        )

    async def publish_a2ui(
        self,
        tenant: str,
        thread_id: str,
        run_id: str,
        body: object,
        *,
        via: Via,
        idempotency_key: str | None = None,
        rate: PublishRate | None = None,
    ) -> list[Cursor]:
        """Check A2UI messages (one or an array) against the seed and the run's surfaces
        and append them to the run feed as AG-UI activities, all or nothing; one cursor
        per message.  ``idempotency_key`` as for :meth:`publish_run`, ``rate`` as for
        :meth:`publish_team` (counting messages)."""
        try:
            charge = _charge(rate, tenant, body)
            cursors, appended = await self.dialects.a2ui(
                tenant, thread_id, run_id, body, idempotency_key=idempotency_key, charge=charge
            )
        except Exception as exc:
            self.reject(exc, via)
            raise
        self.metrics.published.labels("run", via.value).inc(appended)
        if self.activity is not None and appended:
            await self.activity.record(run_feed(tenant, thread_id, run_id))
        return cursors


def _charge(rate: PublishRate | None, tenant: str, body: object) -> Charge | None:
    """What a body costs at the tenant's publish rate: its item count (an array's
    length, else 1); None without a rate.  A body over the burst is refused here
    (RateLimited), before any validation."""
    if rate is None:
        return None
    return rate.charge(tenant, len(body) if isinstance(body, list) else 1)


def _where(n: int, array: bool) -> list[str]:
    """How error messages name a body's ``n`` items: ``[i]`` in an array, else ``event``."""
    return [f"[{i}]" for i in range(n)] if array else ["event"]


def _due(charge: Charge | None) -> Charge | None:
    """The charge for a request's next store step: None once a step took it."""
    return None if charge is None or charge.taken else charge


def _is_stream(feed: FeedKey) -> bool:
    """Whether a run feed is a threads run stream (``<thread>/<run>/events``)."""
    return feed.id.count("/") == 2
