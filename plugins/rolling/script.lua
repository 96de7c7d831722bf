-- rolling: a window split into buckets aligned to Redis time; each bucket
-- leaves the window on its own, so the limit is smooth across window edges.
-- KEYS[1] counts hash: {<bucket start (us)> = hits counted in that bucket,
--   n = total of the buckets, o = oldest bucket start that may hold hits,
--   h = newest bucket start holding hits, l = "<window_us>/<bucket_us>"}.
--   Every bucket field lies in [o, h]; empty buckets have no field; the key
--   is absent when no hits are counted. Buckets leave by moving o forward,
--   so a decision costs the same whatever the number of buckets; only
--   denials (retry_after) and refunds walk the buckets, oldest or newest
--   first, and stop as soon as they can.
-- KEYS[2], KEYS[3] dedup hashes, used in turn by window generation
--   (floor(now / window) mod 2): {'#' = generation, '=' .. dedup_id =
--   "<bucket start>:<granted>"}. A generation's hash is wiped when it is
--   reused two generations later, when none of its records can be valid.
-- ARGV: limit (0 blocks), window_us, bucket_us, hits, dedup_id, best_effort (0|1)
-- Reply: {allowed, granted, limit, remaining, reset_us, retry_after_us}
-- All time values are integers in microseconds; Lua numbers are doubles,
-- exact for integers below 2^53, and math.fmod is exact, so no rounding
-- happens anywhere. Stored numbers are written with %d, never tostring.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local bucket = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
local dedup = ARGV[5]
local best = ARGV[6] == '1'
local K = KEYS[1]

local function fmt(x)
  return string.format('%d', x)
end

local now = ruled_now_us()
local cur = now - math.fmod(now, bucket)
local cur_s = fmt(cur)
local low = cur - window + bucket -- the oldest bucket start still in the window
local layout = fmt(window) .. '/' .. fmt(bucket)

-- The bucket boundary at or after s (s itself when aligned).
local function ceil_b(s)
  local r = math.fmod(s, bucket)
  if r ~= 0 then s = s + bucket - r end
  return s
end

-- The first instant a bucket starting at s (aligned) no longer counts.
local function expiry(s)
  return s + window
end

-- limit 0 blocks. Its reset and retry_after are the time until a hit
-- counted now would leave the window (the current bucket's expiry), never
-- 0. Hits and peeks alike are denied (no hit is left, as in an exhausted
-- window) whatever is counted or recorded, and neither reads nor writes the
-- keys; refunds (below) give back what was counted before the block and
-- report the same reset.
local block_reset = expiry(cur) - now
if limit == 0 and hits >= 0 then
  return {0, 0, 0, 0, block_reset, block_reset}
end

local n, o, h = 0, low, nil
local cur_n = 0 -- hits in the current bucket
local dirty = false -- n, o or h changed and must be saved

do
  local st = redis.call('HMGET', K, 'n', 'o', 'h', 'l', cur_s)
  if st[1] and st[4] ~= layout then
    -- A reloaded rule with another window or bucket size: move each
    -- bucket to the new bucket boundary at or after its start, which keeps
    -- the instant it leaves the window, and drop what has left.
    local raw = redis.call('HGETALL', K)
    redis.call('DEL', K)
    local counts, starts = {}, {}
    for i = 1, #raw, 2 do
      local s, c = tonumber(raw[i]), tonumber(raw[i + 1])
      if s and c and c > 0 then
        s = ceil_b(s)
        if s >= low then
          if not counts[s] then
            counts[s] = 0
            starts[#starts + 1] = s
          end
          counts[s] = counts[s] + c
        end
      end
    end
    local args = {}
    for _, s in ipairs(starts) do
      n = n + counts[s]
      if not h or s > h then h = s end
      args[#args + 1] = fmt(s)
      args[#args + 1] = fmt(counts[s])
    end
    if #args > 0 then redis.call('HSET', K, unpack(args)) end
    cur_n = counts[cur] or 0
    dirty = true
  elseif st[1] then
    n, o, h = tonumber(st[1]) or 0, tonumber(st[2]) or low, tonumber(st[3])
    cur_n = tonumber(st[5]) or 0
    if n <= 0 or not h or h < low then
      -- everything has left the window
      redis.call('DEL', K)
      n, o, h, cur_n = 0, low, nil, 0
    elseif o < low then
      -- the buckets [o, low) have left the window
      local gone = {}
      if (low - o) / bucket <= 64 then
        local names = {}
        for s = o, low - bucket, bucket do
          names[#names + 1] = fmt(s)
        end
        local vals = redis.call('HMGET', K, unpack(names))
        for i = 1, #names do
          if vals[i] then
            n = n - tonumber(vals[i])
            gone[#gone + 1] = names[i]
          end
        end
      else -- a long gap: fewer fields than steps
        local raw = redis.call('HGETALL', K)
        for i = 1, #raw, 2 do
          local s = tonumber(raw[i])
          if s and s < low then
            n = n - tonumber(raw[i + 1])
            gone[#gone + 1] = raw[i]
          end
        end
      end
      if #gone > 0 then redis.call('HDEL', K, unpack(gone)) end
      o = low
      dirty = true
    end
  end
end

-- Calls fn(s, c) for each bucket holding c > 0 hits from start a to start b
-- (inclusive) in steps of d (+bucket or -bucket), until fn returns true.
local function scan(a, b, d, fn)
  local s = a
  while (d > 0 and s <= b) or (d < 0 and s >= b) do
    local names = {}
    local t = s
    while #names < 32 and ((d > 0 and t <= b) or (d < 0 and t >= b)) do
      names[#names + 1] = fmt(t)
      t = t + d
    end
    local vals = redis.call('HMGET', K, unpack(names))
    for i = 1, #names do
      local c = tonumber(vals[i])
      if c and c > 0 and fn(s + (i - 1) * d, c) then return end
    end
    s = t
  end
end

-- Time until every hit counted now has left the window.
local function reset()
  if n > 0 then return expiry(h) - now end
  return 0
end

-- Time until at least need (<= n) hits have left the window.
local function wait_for(need)
  local freed, at = 0, nil
  scan(o, h, bucket, function(s, c)
    freed = freed + c
    if freed >= need then
      at = s
      return true
    end
  end)
  if at then return expiry(at) - now end
  return reset()
end

local function remaining()
  return math.max(limit - n, 0)
end

-- Saves n, o and h when they changed, then returns the reply.
local function finish(reply)
  if dirty then
    if n > 0 then
      redis.call('HSET', K, 'n', fmt(n), 'o', fmt(o), 'h', fmt(h), 'l', layout)
      redis.call('PEXPIRE', K, math.floor(reset() / 1000) + 1000)
    else
      redis.call('DEL', K)
    end
  end
  return reply
end

-- Dedup records: the valid one for dedup_id, if any.
local gen = (now - math.fmod(now, window)) / window
local gen_s = fmt(gen)
local dslot = 2 + math.fmod(gen, 2)
local dfield = '=' .. dedup
local dmark = nil -- generation marker of KEYS[dslot]

local function recorded()
  if dedup == '' then return nil end
  local mine = redis.call('HMGET', KEYS[dslot], '#', dfield)
  dmark = mine[1]
  local other = redis.call('HGET', KEYS[5 - dslot], dfield)
  for _, pair in ipairs({{mine[2], KEYS[dslot]}, {other, KEYS[5 - dslot]}}) do
    local v = pair[1]
    if v then
      local sep = string.find(v, ':', 1, true)
      local s = sep and tonumber(string.sub(v, 1, sep - 1))
      local g = sep and tonumber(string.sub(v, sep + 1))
      if s and g and ceil_b(s) >= low then
        return {s = ceil_b(s), g = g, key = pair[2]}
      end
    end
  end
  return nil
end

local function remember(start, granted)
  local key = KEYS[dslot]
  local rec = fmt(start) .. ':' .. fmt(granted)
  if dmark ~= gen_s then
    if dmark then redis.call('DEL', key) end
    redis.call('HSET', key, '#', gen_s, dfield, rec)
  else
    redis.call('HSET', key, dfield, rec)
  end
  local ttl_us = (gen + 2) * window - now
  redis.call('PEXPIRE', key, math.floor(ttl_us / 1000) + 1000)
end

if hits == 0 then
  if n < limit then
    return finish({1, 0, limit, remaining(), reset(), 0})
  end
  return finish({0, 0, limit, 0, reset(), wait_for(n + 1 - limit)})
end

if hits < 0 then
  local refund = 0
  if dedup ~= '' then
    -- Only what this id was granted, once, from the bucket it was counted in.
    local rec = recorded()
    if rec then
      redis.call('HDEL', rec.key, dfield)
      local c = n > 0 and rec.s >= o and rec.s <= h and tonumber(redis.call('HGET', K, fmt(rec.s))) or 0
      refund = math.min(-hits, rec.g, c)
      if refund > 0 then
        if refund < c then
          redis.call('HSET', K, fmt(rec.s), fmt(c - refund))
        else
          redis.call('HDEL', K, fmt(rec.s))
          if rec.s == h then
            -- the newest bucket emptied: find the next one down
            h = nil
            scan(rec.s - bucket, o, -bucket, function(s)
              h = s
              return true
            end)
          end
        end
        n = n - refund
        dirty = true
      end
    end
  elseif n > 0 then
    -- Unattributed refunds come off the newest buckets first.
    refund = math.min(-hits, n)
    local left = refund
    local sets, dels, newest = {}, {}, nil
    scan(h, o, -bucket, function(s, c)
      local x = math.min(left, c)
      left = left - x
      if x == c then
        dels[#dels + 1] = fmt(s)
      elseif x > 0 then
        sets[#sets + 1] = fmt(s)
        sets[#sets + 1] = fmt(c - x)
      end
      if c > x then
        newest = s
        return true
      end
    end)
    if #sets > 0 then redis.call('HSET', K, unpack(sets)) end
    if #dels > 0 then redis.call('HDEL', K, unpack(dels)) end
    n = n - refund
    h = newest
    dirty = true
  end
  if limit == 0 then return finish({1, -refund, 0, 0, block_reset, 0}) end
  return finish({1, -refund, limit, remaining(), reset(), 0})
end

local rec = recorded()
if rec then
  return finish({1, rec.g, limit, remaining(), reset(), 0})
end

local granted = 0
if n + hits <= limit then
  granted = hits
elseif best and n < limit then
  granted = limit - n
end
if granted > 0 then
  -- Counted in the current bucket; if Redis time went back before the
  -- oldest tracked bucket, in that one (counted a little longer, never less).
  local target = cur
  if cur < o then
    target = o
    redis.call('HINCRBY', K, fmt(target), granted)
  else
    cur_n = cur_n + granted
    redis.call('HSET', K, cur_s, fmt(cur_n))
  end
  n = n + granted
  if not h or target > h then h = target end
  dirty = true
  if dedup ~= '' then remember(target, granted) end
  return finish({1, granted, limit, remaining(), reset(), 0})
end

local retry
if best then
  retry = wait_for(n + 1 - limit)
elseif hits > limit then
  retry = reset()
else
  retry = wait_for(n + hits - limit)
end
return finish({0, 0, limit, remaining(), reset(), retry})
