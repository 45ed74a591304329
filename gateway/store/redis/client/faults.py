"""The raw Redis connections' failures.

:mod:`.pipelined`, :mod:`.resp` and :mod:`.subscriber` raise them, and the
client's one error map (:mod:`.error_map`) takes them in.  Each is an ``OSError``
(``ConnectionError``), so a caller that treats any socket failure as "Redis may have
moved" treats these the same way.
"""

from __future__ import annotations


class PubSubConnectionLost(ConnectionError):
    """The listening connection failed or fell too far behind; replace it."""


class PipelinedConnectionLost(ConnectionError):
    """The pipelined connection failed (or was closed) before every reply came."""


class PipelinedConnectionTimeout(PipelinedConnectionLost):
    """Redis left a write of the pipelined connection unanswered for its whole bound:
    the connection went."""
