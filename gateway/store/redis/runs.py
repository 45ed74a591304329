"""The latest-run index in Redis: one string key per tenant and thread.

``<prefix>:{<tenant>:thread:<thread_id>}:latest`` holds ``<run_id> <started_at>`` (the
wall-clock seconds at which the run's RUN_STARTED was recorded).  The hash tag is the
thread's, not the run feed's: on a cluster the key lives on another slot than the run
feed, so recording is a command of its own after the feed's append (docs/storage.md).
The key has no expiry while its run is going; when the run ends it gets the run feed's
grace period, unless a later run has replaced it meanwhile (one script call, so the check
and the expiry cannot be split by another record).
"""

from __future__ import annotations

from urllib.parse import quote

from gateway.store.interfaces import LatestRun, RunIndex
from gateway.store.redis.connection import RedisConnection

#: PEXPIRE the key only if it still names the run (ARGV[1]) that ended.
EXPIRE_IF_LATEST = """
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


class RedisRuns(RunIndex):
    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn
        self._redis = conn.redis
        self._expire = self._redis.script(EXPIRE_IF_LATEST)

    def key(self, tenant: str, thread_id: str) -> str:
        """The thread's index key; the tenant is percent-encoded as in feed tags, so no
        tenant can reach another's keys."""
        return f"{self.conn.prefix}:{{{quote(tenant, safe='')}:thread:{thread_id}}}:latest"

    async def record_run(self, tenant: str, thread_id: str, run_id: str, at: float) -> None:
        # SET without options also removes an expiry a previous run's end set.
        key, value = self.key(tenant, thread_id), f"{run_id} {at!r}".encode()
        await self._redis.call("record_run", lambda redis: redis.set(key, value), metric="set")

    async def latest_run(self, tenant: str, thread_id: str) -> LatestRun | None:
        key = self.key(tenant, thread_id)
        raw: bytes | None = await self._redis.call(
            "latest_run", lambda redis: redis.get(key), metric="get"
        )
        if raw is None:
            return None
        run_id, _, at = raw.decode("utf-8", "replace").partition(" ")
        try:
            started = float(at)
        except ValueError:
            started = 0.0  # written by something else: the run id is still usable
        return LatestRun(run_id, started)

    async def expire_run(self, tenant: str, thread_id: str, run_id: str, seconds: float) -> None:
        ms = max(1, int(seconds * 1000))
        key = self.key(tenant, thread_id)
        await self._redis.call(
            "expire_run",
            lambda redis: self._expire(keys=[key], args=[run_id, ms]),
            metric="expire_run",
        )
