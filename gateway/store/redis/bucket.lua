-- A tenant's publish-rate bucket (docs/storage.md, "The publish rate"), prepended to the
-- append step (feed.lua) and to the take of its own (take.lua).
--
-- A token bucket of `burst` tokens refilled at `rate` tokens a second, kept as one
-- number: the moment the bucket is full again, on the server's clock (TIME) in
-- microseconds.  At time t it holds burst - (full_at - t) * rate / 1e6 tokens (burst
-- once t is past full_at).  The key expires at full_at, so a missing key is a full
-- bucket and an idle tenant leaves nothing behind.
--
-- take_tokens(key, rate, burst, n) takes n tokens (a negative n gives -n back, up to
-- the burst).  Returns nil when it took them; otherwise it writes nothing and returns
-- the tokens the bucket held, as a string (a Lua number reaches Redis as an integer).
local function take_tokens(key, rate, burst, n)
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  local per = 1000000 / rate
  -- Full already (no key, or full_at has passed): counted from now.  A clock that went
  -- back makes the bucket look emptier, never fuller.
  local full_at = tonumber(redis.call('GET', key)) or now
  if full_at < now then full_at = now end
  local after = full_at + n * per
  if after - now > burst * per then
    return string.format('%.6f', burst - (full_at - now) / per)
  end
  if after > now then
    -- Rounded up: the key never expires before the bucket is full.
    redis.call('SET', key, string.format('%.17g', after), 'PX', math.ceil((after - now) / 1000))
  else
    redis.call('DEL', key)
  end
  return nil
end
