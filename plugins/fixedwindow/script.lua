-- fixedwindow: a counter per window aligned to Redis time plus an offset,
-- or per calendar period.
-- KEYS[1] counter hash {s = window start (us), n = count, e = window end
-- (us)}, expiring a second after the window ends
-- KEYS[2] dedup hash {dedup_id = "<window start>:<granted>"}
-- ARGV: limit (0 blocks), window_us, offset_us, hits, dedup_id, best_effort (0|1)
-- Reply: {allowed, granted, limit, remaining, reset_us, retry_after_us}
-- Calendar periods (declared as the script "calendar"): window_us 0,
-- offset_us 0, and from ARGV[7] on ascending period boundaries (us), which
-- the plugin computes in the rule's time zone (Lua has no zone database);
-- the window is the offered period that holds Redis time.
-- Reply: {allowed, granted, limit, remaining, reset_us, retry_after_us,
-- window_us, now_us}; when no offered period holds Redis time, a miss:
-- window_us 0, now_us the Redis time, the rest 0, and nothing read or
-- written.
-- All time values are integers in microseconds; Lua numbers are doubles,
-- exact for integers below 2^53, and math.fmod is exact, so no rounding
-- happens anywhere. Stored times are written with %d, never tostring.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local offset = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
local dedup = ARGV[5]
local best = ARGV[6] == '1'

local now = ruled_now_us()
local start, stop
if window > 0 then
  start = now - math.fmod(now - offset, window)
  stop = start + window
else
  for i = 8, #ARGV do
    local b = tonumber(ARGV[i])
    if now < b then
      local a = tonumber(ARGV[i - 1])
      if now >= a then
        start, stop = a, b
      end
      break
    end
  end
  if not start then
    return {0, 0, 0, 0, 0, 0, 0, now}
  end
end
local reset = stop - now

-- the reply; a calendar's adds the period's length and Redis time
local function reply(allowed, granted, lim, remaining, retry)
  if window > 0 then
    return {allowed, granted, lim, remaining, reset, retry}
  end
  return {allowed, granted, lim, remaining, reset, retry, stop - start, now}
end

local ttl_ms = math.floor(reset / 1000) + 1000
local start_s = string.format('%d', start)

-- limit 0 blocks: hits and peeks alike are denied until the window ends
-- (no hit is left, as in an exhausted window), whatever is counted or
-- recorded; neither reads nor writes the keys. Refunds (below) give back
-- what the window counted before the block.
if limit == 0 and hits >= 0 then
  return reply(0, 0, 0, 0, reset)
end

local cur = redis.call('HMGET', KEYS[1], 's', 'n', 'e')
local count = 0
if cur[1] == start_s then
  count = tonumber(cur[2]) or 0
elseif cur[1] then
  -- a new window: the last window's dedup records are void
  redis.call('DEL', KEYS[2])
end

-- granted amount recorded for dedup in this window, or nil
local function recorded()
  if dedup == '' then return nil end
  local prev = redis.call('HGET', KEYS[2], dedup)
  if not prev then return nil end
  local sep = string.find(prev, ':', 1, true)
  if not sep or string.sub(prev, 1, sep - 1) ~= start_s then return nil end
  return tonumber(string.sub(prev, sep + 1))
end

-- store writes count, changed by delta. A window's first write sets the
-- hash and its expiry (the window's end plus a second); later writes in
-- the window only add, one command instead of two, unless the window's
-- end moved (a rule's new window that starts where the old one did) or
-- the hash predates its end field.
local stop_s = string.format('%d', stop)
local fresh = cur[1] ~= start_s or cur[3] ~= stop_s or not tonumber(cur[2])
local function store(delta)
  if fresh then
    redis.call('HSET', KEYS[1], 's', start_s, 'n', count, 'e', stop_s)
    redis.call('PEXPIRE', KEYS[1], ttl_ms)
    fresh = false
  else
    redis.call('HINCRBY', KEYS[1], 'n', delta)
  end
end

if hits == 0 then
  local remaining = math.max(limit - count, 0)
  if remaining > 0 then
    return reply(1, 0, limit, remaining, 0)
  end
  return reply(0, 0, limit, 0, reset)
end

if hits < 0 then
  local refund = -hits
  if dedup ~= '' then
    local g = recorded()
    if g == nil then
      refund = 0
    else
      refund = math.min(refund, g)
      redis.call('HDEL', KEYS[2], dedup)
    end
  end
  refund = math.min(refund, count)
  if refund > 0 then
    count = count - refund
    store(-refund)
  end
  return reply(1, -refund, limit, math.max(limit - count, 0), 0)
end

local g = recorded()
if g ~= nil then
  return reply(1, g, limit, math.max(limit - count, 0), 0)
end

local granted = 0
if count + hits <= limit then
  granted = hits
elseif best and count < limit then
  granted = limit - count
end
if granted > 0 then
  count = count + granted
  store(granted)
  if dedup ~= '' then
    redis.call('HSET', KEYS[2], dedup, start_s .. ':' .. string.format('%d', granted))
    redis.call('PEXPIRE', KEYS[2], ttl_ms)
  end
  return reply(1, granted, limit, limit - count, 0)
end
return reply(0, 0, limit, math.max(limit - count, 0), reset)
