-- The feed log's one atomic server-side step (docs/architecture.md, "The append step").
-- take_tokens (bucket.lua, the publish rate) is prepended to it.
--
-- KEYS: 1 meta hash, 2 stream, 3 idempotency-key hash (one hash slot: same {tag});
--       4, for an append charged to a tenant's publish rate, the tenant's bucket.
--       Whenever the feed exists all three keys do (an empty stream, a placeholder
--       field in the hash), so that a Redis Cluster slot migration, which moves keys
--       one by one, never sees a multi-key call on a slot whose keys are split for
--       longer than the move of this feed's own keys (TRYAGAIN, retried).
--       A feed deleted on purpose (a finished run whose grace period ended) keeps its
--       meta hash, with the field "gone", for a while after its stream expired.
--       A run feed whose end was appended holds the field "end": the epoch it ended in.
--       A live run's feed holds its lease: "rs" when the run started, "rl" the lease's
--       length, "rd" its deadline (ms, this server's clock); "rd" goes with the end.
-- ARGV: 1 mode ("append" | "end" | "check" | "recreate" | "renew" | "lapse"; "end": an
--         append whose batch ends the run, so the feed records its end; "renew": a
--         heartbeat, no items: a live run's deadline moves on; "lapse": an end appended
--         only if the run is live and its lease has run out), 2 retention, 3 known epoch (0: none),
--       4 known offset, 5 known chain, 6 item count n, 7 trim alignment ("" or 0:
--       none; A: trim only so that the first retained offset - 1 is a multiple of A),
--       8 the writer's identity (the server the node reached: "" for none; "@cluster":
--         this shard master's node id, read here),
--       9 the lifetime in ms of a feed "recreate" makes (a tombstone epoch),
--       10 the publish command ("PUBLISH", or "SPUBLISH" on a cluster),
--       11 the head the append expects ("" for any; "<epoch>:<head>", "0:0" for no feed):
--          elsewhere, a batch with new items returns {"moved"} and writes nothing,
--       12 the run's lease ("" for none: not a run, or an end; "r": a batch with new
--          items renews the lease of a live run; "s<ms>": the batch starts the run,
--          which holds a lease of <ms>),
--       then per item (from ARGV[13]): key ("" for none), data, host-opening flag;
--       then, with KEYS[4], the rate (tokens a second), the burst and the request's
--       item count: a batch with new items takes that many tokens from the bucket or
--       returns {"limited", tokens the bucket held} and writes nothing; a batch of
--       retries only takes nothing;
--       in check mode instead, optionally, a history page to read with the state:
--       ARGV[13] where it starts ("*": the first retained item; "<epoch>:<offset>":
--       after that offset, if that is the current epoch) and ARGV[14] its item count.
--
-- Trust: a feed whose metadata names another writer identity than this call's was
-- last written on another server (a promoted replica, a move to another server): its
-- history cannot be proven to continue what was acknowledged there, so it moves to a
-- new epoch ("moved"), as for a rollback this node can see ("rollback") or lost data
-- ("missing").  "recreate" gives a feed whose data was lost, and that the calling node
-- remembers, an empty new epoch with a lifetime, so that its followers and old cursors
-- get epoch_restarted instead of 404; an append makes it a feed like any other.
--
-- After appending, the new items are PUBLISHed on the channel named like the stream
-- (pub/sub channels and keys are separate namespaces), so the nodes that follow the
-- feed get them live without reading the stream:
--   "<epoch> <first offset> <append time> <chain before>\n"
--   then per item "<chain> <byte length>\n<data>"
-- where the append time is the server's clock (TIME) as "<seconds>.<microseconds>" and
-- the chain before is the chain value the first item's was computed from ("" at the
-- start of an epoch): a node that knows the feed up to the offset before compares it
-- with the chain it knows instead of hashing the item again.
--
-- Stream entry ids are "<epoch>-<offset>", so a cursor is an entry id and entries of
-- a newer epoch sort after every entry of an older one.  Entry fields: d (data),
-- c (chain after this item), k (idempotency key), t (append time, as above).
--
-- Returns {status, epoch, head, first, chain, host, reason, previous epoch, previous
-- head, the known epoch sent (0: none), items lost to the calling node, offsets... (in
-- check mode: the page's entries, if one was read)} where status is "ok", "reused" (then the 2nd element is the failing
-- item index and nothing was written), "moved" (the expected head was not the head;
-- nothing was written), "ended" (the run ended in this epoch and the batch has new
-- items; nothing was written), "limited" (see ARGV above) or "absent" (check mode on a feed that does not
-- exist; "gone" when it was deleted on purpose); reason is "" or why the feed moved to a new epoch in this call (missing,
-- rollback, moved), and the previous epoch and head are what the store held before.
-- "renew" returns {"ok", started, renewed, deadline} or {"absent"} (no live run);
-- "lapse" the append's reply when it ended the run, {"live", started, renewed,
-- deadline} when the lease has not run out, {"absent"} when there is no live run.

local M, S, I = KEYS[1], KEYS[2], KEYS[3]
local mode = ARGV[1]
local retention = tonumber(ARGV[2])
local kepoch, koff, kchain = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local n = tonumber(ARGV[6])
local align = tonumber(ARGV[7]) or 0
local ident = ARGV[8]
local cluster = ident == '@cluster'
if cluster then ident = redis.call('CLUSTER', 'MYID') end
local tombstone_ms = tonumber(ARGV[9]) or 0
local publish = ARGV[10]
local expect = ARGV[11]
local lease = ARGV[12]
local ITEMS = 13

local function fmt(x) return string.format('%d', x) end

-- The run's lease is read (in the same HMGET) only by the calls that keep it.
local fields = {'epoch', 'head', 'chain', 'host', 'w', 't', 'gone', 'end'}
if lease ~= '' or mode == 'renew' or mode == 'lapse' or mode == 'end' then
  fields[9], fields[10], fields[11] = 'rs', 'rl', 'rd'
end
local meta = redis.call('HMGET', M, unpack(fields))
local epoch, head, chain, host = tonumber(meta[1]), tonumber(meta[2]), meta[3], meta[4]
local writer, tomb = meta[5], meta[6]
local ended_in = tonumber(meta[8])
local run_started, run_lease, run_deadline = meta[9], tonumber(meta[10]), tonumber(meta[11])
local prev_epoch, prev_head = epoch or 0, head or 0
-- Deleted on purpose: the expiry set the "gone" field and its stream has expired.
local gone = meta[7] and redis.call('EXISTS', S) == 0
if gone then head, chain, host = 0, '', false end

-- The server's clock, read once: the append time of the items and the lease's base.
local now_s, now_us
local function now_ms()
  if not now_s then
    local t = redis.call('TIME')
    now_s, now_us = tonumber(t[1]), tonumber(t[2])
  end
  return now_s * 1000 + math.floor(now_us / 1000)
end

-- A live run: started, its lease not ended by its end (in this epoch or any).
local live = run_deadline and run_lease and not gone and epoch and ended_in ~= epoch
if mode == 'renew' then
  if not live then return {'absent'} end
  local now = now_ms()
  redis.call('HSET', M, 'rd', fmt(now + run_lease))
  return {'ok', run_started, fmt(now), fmt(now + run_lease)}
end
if mode == 'lapse' then
  if not live then return {'absent'} end
  if run_deadline > now_ms() then
    return {'live', run_started, fmt(run_deadline - run_lease), fmt(run_deadline)}
  end
  mode = 'end'  -- the lease ran out: append the end, as the producer's end would be
end

local function entry(off)
  local id = fmt(epoch) .. '-' .. fmt(off)
  local r = redis.call('XRANGE', S, id, id)
  if #r == 0 then return nil end
  local f, t = r[1][2], {}
  for i = 1, #f, 2 do t[f[i]] = f[i + 1] end
  return t
end

-- Does the stored history still continue what this node saw?
local reason = ''
if gone or not epoch then
  reason = 'missing'
elseif kepoch > 0 then
  if kepoch > epoch then
    reason = 'rollback'
  elseif kepoch == epoch then
    if koff > head then
      reason = 'rollback'
    elseif koff == head then
      if chain ~= kchain then reason = 'rollback' end
    elseif koff > 0 then
      local e = entry(koff)
      if e and e['c'] ~= kchain then reason = 'rollback' end
    end
  end
end
-- On a cluster, a feed last written by another master that is still a live master was
-- moved here whole by a slot migration (MIGRATE moves each key with all its data): its
-- history continues.  A writer that failed or is now a replica lost the shard in a
-- failover: nothing proves the promoted replica had every write.
local function live_master(id)
  for line in string.gmatch(redis.call('CLUSTER', 'NODES'), '[^\n]+') do
    local node, _, flags = string.match(line, '^(%S+) (%S+) (%S+)')
    if node == id then
      return string.find(flags, 'master', 1, true) ~= nil
        and string.find(flags, 'fail', 1, true) == nil
    end
  end
  return false
end

if reason == '' and epoch and ident ~= '' and writer and writer ~= ident then
  if not (cluster and live_master(writer)) then reason = 'moved' end
end

local function first_offset()
  local r = redis.call('XRANGE', S, '-', '+', 'COUNT', 1)
  if #r == 0 then return head + 1 end
  return tonumber(string.match(r[1][1], '-(%d+)$'))
end

local function new_epoch()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local prev = epoch or 0
  if kepoch > prev then prev = kepoch end
  -- With the metadata gone the stream may still hold the old epoch's entries.
  local last = redis.call('XREVRANGE', S, '+', '-', 'COUNT', 1)
  if #last > 0 then
    local ms = tonumber(string.match(last[1][1], '^(%d+)'))
    if ms > prev then prev = ms end
  end
  if now <= prev then now = prev + 1 end
  -- A feed in its grace period keeps its deadline across the new epoch.
  local ttl = redis.call('PTTL', S)
  redis.call('DEL', S, I)
  epoch, head, chain = now, 0, ''
  if reason == 'missing' then host = false end
  redis.call('HSET', M, 'epoch', fmt(epoch), 'head', '0', 'chain', '')
  if not host then redis.call('HDEL', M, 'host') end
  -- The empty stream and the placeholder: all three keys exist (see KEYS above).
  redis.call('XADD', S, fmt(epoch) .. '-0', 'd', '', 'c', '', 'k', '', 't', '')
  redis.call('XDEL', S, fmt(epoch) .. '-0')
  redis.call('HSET', I, '', '0')
  if ttl > 0 then
    redis.call('PEXPIRE', S, ttl)
    redis.call('PEXPIRE', I, ttl)
  end
  writer = nil
end

local function sign()
  -- The writer identity this node reached; kept so that the next writer on another
  -- server can tell (see "moved" above).
  if ident ~= '' and writer ~= ident then
    redis.call('HSET', M, 'w', ident)
    writer = ident
  end
end

local function clock()
  now_ms()
  return fmt(now_s) .. '.' .. string.format('%06d', now_us)
end

local function announce(items, stamp, before)
  local parts = {fmt(epoch) .. ' ' .. fmt(head - #items + 1) .. ' ' .. stamp .. ' ' .. before .. '\n'}
  for _, it in ipairs(items) do
    parts[#parts + 1] = it[1] .. ' ' .. #it[2] .. '\n'
    parts[#parts + 1] = it[2]
  end
  redis.call(publish, S, table.concat(parts))
end

-- What the calling node had seen that the store no longer holds, from the position it
-- sent (not from what it knows when the reply arrives: replies to concurrent calls can
-- be taken in another order than they ran).
local function lost()
  if reason == '' or kepoch == 0 then return 0 end
  if kepoch == prev_epoch then return math.max(0, koff - prev_head) end
  return koff
end

local function result(status, offsets)
  local out = {status, fmt(epoch), fmt(head), fmt(first_offset()), chain, host or '', reason,
               fmt(prev_epoch), fmt(prev_head), fmt(kepoch), fmt(lost())}
  for i = 1, #offsets do out[#out + 1] = fmt(offsets[i]) end
  return out
end

if mode == 'check' or mode == 'recreate' then
  if reason == 'missing' then
    if gone then return {'gone'} end
    if mode == 'check' then return {'absent'} end
    new_epoch()
    sign()
    redis.call('HSET', M, 't', '1')
    if tombstone_ms > 0 then
      for _, k in ipairs({M, S, I}) do redis.call('PEXPIRE', k, tombstone_ms) end
    end
    return result('ok', {})
  end
  if reason ~= '' then new_epoch() end
  sign()
  local out = result('ok', {})
  local page = ARGV[13]
  if mode == 'check' and reason == '' and page and page ~= '' then
    -- The join's first history page, read with its state (one round trip): appended
    -- as the 12th element, the entries as XRANGE gives them.
    local start = nil
    if page == '*' then
      start = fmt(epoch) .. '-0'
    else
      local pe, po = string.match(page, '^(%d+):(%d+)$')
      if tonumber(pe) == epoch then start = pe .. '-' .. fmt(tonumber(po) + 1) end
    end
    if start then
      out[#out + 1] = redis.call('XRANGE', S, start, fmt(epoch) .. '-18446744073709551615',
                                 'COUNT', tonumber(ARGV[14]))
    end
  end
  return out
end

-- Plan the batch before writing anything, so a rejected batch writes nothing.
local offsets, new, seen = {}, {}, {}
local next_off = head or 0
if reason ~= '' then next_off = 0 end
for i = 0, n - 1 do
  local key, data = ARGV[ITEMS + i * 3], ARGV[ITEMS + 1 + i * 3]
  local off = nil
  if key ~= '' then
    local prior = seen[key]
    if prior then
      if prior[1] ~= data then return {'reused', i} end
      off = prior[2]
    elseif reason == '' then
      local stored = redis.call('HGET', I, key)
      if stored then
        local e = entry(tonumber(stored))
        if e then
          if e['d'] ~= data then return {'reused', i} end
          off = tonumber(stored)
        end
      end
    end
  end
  if off == nil then
    next_off = next_off + 1
    off = next_off
    new[#new + 1] = i
  end
  if key ~= '' and not seen[key] then seen[key] = {data, off} end
  offsets[#offsets + 1] = off
end

-- A run's end is final: after it only exact retries (answered by the plan) get through.
-- An end recorded in an older epoch belongs to a history this feed no longer holds.
if #new > 0 and reason == '' and ended_in == epoch then return {'ended'} end

if expect ~= '' and #new > 0 then
  local at
  if reason == 'missing' then at = '0:0'
  elseif reason == '' then at = fmt(epoch) .. ':' .. fmt(head)
  else at = '' end  -- moving to a new epoch now: no plan made before can hold
  if at ~= expect then return {'moved'} end
end

-- The tenant's publish rate, last of the checks: a request refused for another reason
-- takes nothing, and one refused here writes nothing.
if KEYS[4] and #new > 0 then
  local r = ITEMS + n * 3
  local held = take_tokens(KEYS[4], tonumber(ARGV[r]), tonumber(ARGV[r + 1]),
                           tonumber(ARGV[r + 2]))
  if held then return {'limited', held} end
end

if reason ~= '' then new_epoch() end
sign()
if (tomb or gone) and #new > 0 then
  -- A recreated (or deleted) feed gets its first item: it is a feed like any other
  -- from now on.
  redis.call('HDEL', M, 't', 'gone')
  for _, k in ipairs({M, S, I}) do redis.call('PERSIST', k) end
end

local published = {}
local before = chain
local stamp = ''
if #new > 0 then stamp = clock() end
for _, i in ipairs(new) do
  local key, data, hostflag = ARGV[ITEMS + i * 3], ARGV[ITEMS + 1 + i * 3], ARGV[ITEMS + 2 + i * 3]
  head = head + 1
  chain = redis.sha1hex(chain .. data)
  published[#published + 1] = {chain, data}
  redis.call('XADD', S, fmt(epoch) .. '-' .. fmt(head), 'd', data, 'c', chain, 'k', key, 't', stamp)
  if key ~= '' then redis.call('HSET', I, key, fmt(head)) end
  if head == 1 and not host then
    host = hostflag
    redis.call('HSET', M, 'host', host)
  end
end
if #new > 0 then
  if mode == 'end' then
    redis.call('HSET', M, 'head', fmt(head), 'chain', chain, 'end', fmt(epoch))
    if run_deadline then redis.call('HDEL', M, 'rd') end
  elseif lease == 'r' and run_deadline and run_lease then
    redis.call('HSET', M, 'head', fmt(head), 'chain', chain, 'rd', fmt(now_ms() + run_lease))
  elseif string.sub(lease, 1, 1) == 's' then
    local length = tonumber(string.sub(lease, 2))
    redis.call('HSET', M, 'head', fmt(head), 'chain', chain, 'rs', fmt(now_ms()),
               'rl', fmt(length), 'rd', fmt(now_ms() + length))
  else
    redis.call('HSET', M, 'head', fmt(head), 'chain', chain)
  end
  announce(published, stamp, before)
end

-- Retention: at most 1000 entries per call, so the step stays short; later appends
-- trim the rest when the limit was lowered.
local len = redis.call('XLEN', S)
local excess = math.min(len - retention, 1000)
if excess > 0 and align > 0 then
  -- Whole blocks only (run feeds keep a fold checkpoint at each block boundary).
  local firstent = redis.call('XRANGE', S, '-', '+', 'COUNT', 1)
  local fo = tonumber(string.match(firstent[1][1], '%-(%d+)$'))
  excess = math.floor((fo - 1 + excess) / align) * align - (fo - 1)
end
if excess > 0 then
  local old = redis.call('XRANGE', S, '-', '+', 'COUNT', excess)
  local ids = {}
  for _, ent in ipairs(old) do
    ids[#ids + 1] = ent[1]
    local f = ent[2]
    for j = 1, #f, 2 do
      if f[j] == 'k' and f[j + 1] ~= '' then redis.call('HDEL', I, f[j + 1]) end
    end
  end
  redis.call('XDEL', S, unpack(ids))
end

return result('ok', offsets)
