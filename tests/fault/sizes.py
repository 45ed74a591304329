"""Every size, bound and node setting of the fault suite and the soak, in one place.

The suite runs in CI next to the rest (CI has 90 minutes for everything on a 2-core
machine; the rest takes about 3); these sizes keep ``pytest -m fault`` to a few
minutes there.  Bounds marked D9 are the contract under test, not tuning: a test
fails when the gateway takes longer.
"""

from __future__ import annotations

# -- topology and load -----------------------------------------------------------

#: Gateway nodes behind HAProxy.
NODES = 3
#: Team feeds every scenario publishes to and every follower follows.
TEAMS = 3
#: WebSocket followers (one socket each, every feed) and SSE followers (one stream per
#: feed each) through HAProxy.
WS_CLIENTS = 9
SSE_CLIENTS = 4
#: Items per feed every follower must have received between two faults.
ITEMS_BETWEEN = 15
#: Reconnect storms per storm test (every stream of every node cut at once).
STORM_ROUNDS = 3

#: Feeds of the cluster tests: enough that every shard holds some (random team ids;
#: a test checks that every master got at least one).
CLUSTER_TEAMS = 9

# -- bounds ----------------------------------------------------------------------

#: Seconds one scenario may take in all (a hung scenario fails instead of hanging CI).
SCENARIO_TIMEOUT = 150.0
#: Seconds for every follower to catch up with the last acknowledged item at the end.
SETTLE = 30.0
#: D9: a publish or subscribe during a Redis hang answers 503 ``unavailable`` within
#: this many seconds (GATEWAY_REDIS_TIMEOUT_SECONDS is 3 by default; the contract's
#: upper bound is 10), and /readyz turns 503 within it.
HANG_BOUND = 5.0
#: How long a Redis hang lasts in the hang tests (longer than HANG_BOUND, so that an
#: answer that only comes when the hang ends is told apart from a bounded one).
HANG_SECONDS = HANG_BOUND + 4.0
#: D9: seconds for a loss of history to reach every connected follower as
#: ``epoch_restarted``, with nothing published after the loss.
NOTICE_BOUND = 10.0
#: Seconds for delivery to resume by itself after a fault ends.
RESUME_BOUND = 20.0

# -- drain -----------------------------------------------------------------------

#: GATEWAY_DRAIN_SECONDS of the drain test: the window its streams end over.
DRAIN_SECONDS = 3.0
#: The drained node's reconnects must span at least this share of the drain window...
DRAIN_MIN_SPAN = 0.3
#: ...and no tenth of the window may hold more than this share of them.
DRAIN_MAX_SLICE_SHARE = 0.5

# -- slow consumers --------------------------------------------------------------

#: Clients that subscribe and stop reading.
STALLED_CLIENTS = 20
#: Healthy WebSocket followers whose latency is measured, with and without the stalled.
MEASURED_CLIENTS = 5
#: Items per feed published in each phase (baseline, stalled).
PHASE_ITEMS = 300
#: Bytes of text per event (large enough that the stalled sockets fill quickly).
STALL_TEXT_BYTES = 8192
#: GATEWAY_MAX_QUEUE_BYTES and GATEWAY_SLOW_CLIENT_TIMEOUT of that test.
STALL_QUEUE_BYTES = 256 * 1024
STALL_SLOW_TIMEOUT = 3.0
#: GATEWAY_HISTORY_PAGE of that test.  A subscription taken off the live path catches up
#: from the store one history page at a time, and the page is bounded in items, not
#: bytes, nor counted in gateway_buffered_bytes: with the default 500 items of 8 KiB each
#: page is 4 MiB per stalled subscription (measured: 61 MiB of growth, against 25 MiB
#: with 50).
STALL_HISTORY_PAGE = 50
#: Subscriptions the stalled clients hold: the WebSocket half follows every feed, the
#: SSE half one feed each.
STALL_SUBSCRIPTIONS = STALLED_CLIENTS // 2 * TEAMS + STALLED_CLIENTS // 2
#: An event's bytes on the wire: its text plus the TeamItem envelope.
STALL_ITEM_BYTES = STALL_TEXT_BYTES + 512
#: The gateway's RSS may grow by at most this much over its baseline peak while the
#: stalled clients hold their sockets: per stalled subscription its queue and one
#: history page, plus slack for the allocator.
STALL_RSS_GROWTH = (
    STALL_SUBSCRIPTIONS * (STALL_QUEUE_BYTES + STALL_HISTORY_PAGE * STALL_ITEM_BYTES)
    + 24 * 1024 * 1024
)
#: Others' p99 with the stalled clients may be at most this factor of the baseline's,
#: plus STALL_P99_SLACK seconds (the machine has 2 cores shared with the clients).
STALL_P99_FACTOR = 5.0
STALL_P99_SLACK = 0.1

# -- half-open TCP ---------------------------------------------------------------

PING_INTERVAL = 1.0
PING_TIMEOUT = 1.0
#: Seconds after the link goes down by which the gateway must have freed the socket.
HALF_OPEN_BOUND = PING_INTERVAL + PING_TIMEOUT + 4.0

# -- gateway settings ------------------------------------------------------------

#: The environment of every fault-suite node (tests add the Redis URL and their own).
NODE_ENV: dict[str, str] = {
    "GATEWAY_KEEPALIVE_SECONDS": "1",
    "GATEWAY_READ_BLOCK_MS": "200",
    "GATEWAY_DRAIN_SECONDS": str(DRAIN_SECONDS),
    "GATEWAY_WS_PING_INTERVAL": "2",
    "GATEWAY_WS_PING_TIMEOUT": "2",
    "GATEWAY_SLOW_CLIENT_TIMEOUT": "5",
    "GATEWAY_PUBLISH_RATE": "1000000",
    "GATEWAY_PUBLISH_BURST": "1000000",
    "GATEWAY_TEAM_RETENTION": "1000000",
}
