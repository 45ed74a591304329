"""The raw Redis connections' failures.

:mod:`.client.pipelined`, :mod:`.client.resp` and :mod:`.client.subscriber` raise
them, and the adapter's one error map (:mod:`gateway.store.redis.client.errors`) takes
them in.  Each is an ``OSError`` (``ConnectionError``), so a caller that treats any
socket failure as "Redis may have moved" treats these the same way.
"""

from __future__ import annotations


class ListenerLost(ConnectionError):
    """The listening connection failed or fell too far behind; replace it."""


class LaneLost(ConnectionError):
    """The pipelined connection failed (or was closed) before every reply came."""


class LaneTimeout(LaneLost):
    """Redis left a write of the pipelined connection unanswered for its whole bound:
    the connection went."""
