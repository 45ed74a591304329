"""How the Redis adapter reaches Redis, behind one interface: :class:`RedisClient`
(:mod:`.redis_client`: call, pipeline, run a script on the pool or on the pipelined
connection, subscribe).  The store modules import this package's names below and
nothing else of it: replies come back as values, failures as
:class:`~gateway.errors.Unavailable` (:class:`PubSubLost` for a pub/sub connection's).

Behind it: the one error map every path goes through (:mod:`.error_map`), where the
servers are (:mod:`.topology`: one server, the master the Sentinels name, a cluster's
shards), which server process the connections reached (:mod:`.identity`), the node's
one pipelined connection for the append step (:mod:`.pipelined`:
:class:`~.pipelined.PipelinedConnection`), the pub/sub connections (:mod:`.subscriber`:
:class:`PubSubConnection`), the calls of one loop iteration sent as one pipeline
(:mod:`.batching`: :class:`~.batching.CallBatcher`) and the RESP codec of the raw
connections (:mod:`.resp`)."""

from gateway.store.redis.client.error_map import PubSubLost
from gateway.store.redis.client.redis_client import RedisClient
from gateway.store.redis.client.subscriber import HandOver, Messages, PubSubConnection, Waker
from gateway.store.redis.client.topology import ListenerAddress

__all__ = [
    "HandOver",
    "ListenerAddress",
    "Messages",
    "PubSubConnection",
    "PubSubLost",
    "RedisClient",
    "Waker",
]
