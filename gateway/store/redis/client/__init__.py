"""How the Redis adapter reaches Redis: the one error map every path goes through
(:mod:`.errors`: redis-py's pool, the append lane, the pub/sub listeners), where the
servers are (:mod:`.topology`: one server, the master the Sentinels name, a cluster's
shards) and which server process the connections reached (:mod:`.identity`)."""
