-- fixedwindow: a counter per window aligned to Redis time plus an offset,
-- or per calendar period.
-- KEYS[1] counter hash: field "<start>:<end>" (window start and end, us)
-- holds the window's count, field w names that field; the hash expires a
-- second after the window ends. Each decision of a window after its first
-- is one HINCRBY. Fields s, n and e are fixedwindow 1's layout (window
-- start, count, end), carried into the new one by the first decision that
-- finds them.
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
local hits = tonumber(ARGV[4])
local dedup = ARGV[5]

local now = ruled_now_us()
local start, stop
if window > 0 then
  start = now - math.fmod(now - tonumber(ARGV[3]), window)
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
local field = string.format('%d:%d', start, stop)

-- Most decisions: hits without a dedup_id, granted in a window that has
-- counted before; one command, and no function made. Otherwise n is the
-- count the hits were added to, settled below.
local n
if hits > 0 and limit > 0 and dedup == '' then
  local c = redis.call('HINCRBY', KEYS[1], field, hits)
  if c > hits and c <= limit then
    if window > 0 then
      return {1, hits, limit, limit - c, reset, 0}
    end
    return {1, hits, limit, limit - c, reset, 0, stop - start, now}
  end
  n = c - hits
end

local start_s = string.format('%d', start)

-- the reply; a calendar's adds the period's length and Redis time
local function reply(allowed, granted, lim, remaining, retry)
  if window > 0 then
    return {allowed, granted, lim, remaining, reset, retry}
  end
  return {allowed, granted, lim, remaining, reset, retry, stop - start, now}
end

-- limit 0 blocks: hits and peeks alike are denied until the window ends
-- (no hit is left, as in an exhausted window), whatever is counted or
-- recorded; neither reads nor writes the keys. Refunds (below) give back
-- what the window counted before the block.
if limit == 0 and hits >= 0 then
  return reply(0, 0, 0, 0, reset)
end

-- whether the count field w belongs to a window of this one's start (a
-- rule's new window that starts where the old one did but ends
-- elsewhere), whose count is this one's
local function same_start(w)
  return string.sub(w, 1, #start_s + 1) == start_s .. ':'
end

-- count reads this window's count without writing
local function count()
  local v = redis.call('HMGET', KEYS[1], field, 'w', 's', 'n')
  if v[1] then return tonumber(v[1]) end
  if v[2] then
    if same_start(v[2]) then return tonumber(redis.call('HGET', KEYS[1], v[2])) or 0 end
    return 0
  end
  if v[3] == start_s then return tonumber(v[4]) or 0 end
  return 0
end

-- adopt makes the hash this window's when its field was empty, once per
-- window: it drops the other window's field (moving its count here when
-- that window starts at the same instant) or fixedwindow 1's fields (the
-- same), drops the dedup records of an earlier window, names the field
-- and sets the expiry. It returns the count moved here.
local function adopt()
  local w = redis.call('HGET', KEYS[1], 'w')
  if w == field then return 0 end
  local moved, found, same = 0, false, false
  if w then
    found, same = true, same_start(w)
    if same then moved = tonumber(redis.call('HGET', KEYS[1], w)) or 0 end
    redis.call('HDEL', KEYS[1], w)
  else
    local old = redis.call('HMGET', KEYS[1], 's', 'n')
    if old[1] then
      found, same = true, old[1] == start_s
      if same then moved = tonumber(old[2]) or 0 end
      redis.call('HDEL', KEYS[1], 's', 'n', 'e')
    end
  end
  if found and not same then
    -- a new window: the last window's dedup records are void
    redis.call('DEL', KEYS[2])
  end
  redis.call('HSET', KEYS[1], 'w', field)
  redis.call('PEXPIRE', KEYS[1], math.floor(reset / 1000) + 1000)
  if moved ~= 0 then redis.call('HINCRBY', KEYS[1], field, moved) end
  return moved
end

-- add adds delta to the window's count and returns the count before it
local function add(delta)
  local c = redis.call('HINCRBY', KEYS[1], field, delta)
  if c ~= delta then return c - delta end
  return adopt()
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

if hits == 0 then
  local remaining = math.max(limit - count(), 0)
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
  local n = count()
  refund = math.min(refund, n)
  if refund > 0 then
    n = add(-refund) - refund
  end
  return reply(1, -refund, limit, math.max(limit - n, 0), 0)
end

if n == nil then
  local g = recorded()
  if g ~= nil then
    return reply(1, g, limit, math.max(limit - count(), 0), 0)
  end
  n = add(hits)
elseif n == 0 then
  n = adopt()
end
-- the hits are counted: take back what is not granted
local granted = 0
if n + hits <= limit then
  granted = hits
elseif n < limit and ARGV[6] == '1' then
  granted = limit - n
end
if granted < hits then
  redis.call('HINCRBY', KEYS[1], field, granted - hits)
end
if granted > 0 then
  n = n + granted
  if dedup ~= '' then
    redis.call('HSET', KEYS[2], dedup, start_s .. ':' .. string.format('%d', granted))
    redis.call('PEXPIRE', KEYS[2], math.floor(reset / 1000) + 1000)
  end
  return reply(1, granted, limit, limit - n, 0)
end
return reply(0, 0, limit, math.max(limit - n, 0), reset)
