"""How the Redis adapter reaches Redis, behind one interface: :class:`RedisClient`
(:mod:`.redis_client`: call, pipeline, subscribe).  Behind it: the one error map every
path goes through (:mod:`.errors`), where the servers are (:mod:`.topology`: one
server, the master the Sentinels name, a cluster's shards), which server process the
connections reached (:mod:`.identity`), the node's one pipelined connection for the
append step (:mod:`.pipelined`), the pub/sub listening connections (:mod:`.subscriber`),
the calls of one loop iteration sent as one pipeline (:mod:`.batching`) and the RESP
codec of the raw connections (:mod:`.resp`)."""
