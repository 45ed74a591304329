-- A take from a tenant's publish-rate bucket of its own (take_tokens, bucket.lua, is
-- prepended), then, if it took, a transient message published.  For what has no append
-- step to take in: a threads run stream request that starts with a transient message,
-- and every charged publish on a Redis Cluster, whose bucket lives on another shard
-- than the feed (docs/storage.md, "The publish rate").
--
-- KEYS: 1 the bucket.  ARGV: 1 rate (tokens a second), 2 burst, 3 tokens to take
-- (negative: given back), then optionally 4 the publish command, 5 the channel, 6 the
-- message.  Returns nil when it took (and published), else the tokens the bucket held.

local held = take_tokens(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))
if held then return held end
if ARGV[4] then redis.call(ARGV[4], ARGV[5], ARGV[6]) end
return nil
