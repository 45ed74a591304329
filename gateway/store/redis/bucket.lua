-- A tenant's publish-rate bucket (docs/storage.md, "The publish rate"), prepended to the
-- append step (feed.lua) and to the take of its own (take.lua).
--
-- The bucket is one string key, "<tokens> <stamp>": the tokens it held at the stamp, the
-- server's clock (TIME) in microseconds.  It refills at `rate` tokens a second up to
-- `burst`; the key expires when the bucket is full again, so a missing key is a full
-- bucket and an idle tenant leaves nothing behind.
--
-- take_tokens(key, rate, burst, n) takes n tokens (a negative n gives -n back, up to
-- the burst).  Returns nil when it took them; otherwise it writes nothing and returns
-- the tokens the bucket held, as a string (a Lua number reaches Redis as an integer).
local function take_tokens(key, rate, burst, n)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local tokens = burst
  local held = redis.call('GET', key)
  if held then
    local v, s = string.match(held, '^(%S+) (%d+)$')
    -- A clock that went back (another server after a failover) adds nothing.
    tokens = math.min(burst, tonumber(v) + math.max(0, now - tonumber(s)) * rate / 1000000)
  end
  if n > tokens then return string.format('%.6f', tokens) end
  tokens = math.min(burst, tokens - n)
  -- Rounded up: the key never expires before the bucket is full.
  local ms = math.ceil((burst - tokens) * 1000 / rate)
  if ms > 0 then
    redis.call('SET', key, string.format('%.17g %d', tokens, now), 'PX', ms)
  else
    redis.call('DEL', key)
  end
  return nil
end
