-- Concurrency limiter: at most limit leases per subject, each a member of
-- one sorted set scored by its expiry in Redis microseconds.
-- KEYS[1] leases; ARGV limit, ttl_us, hits (1, 0 or -1), lease id.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local hits = tonumber(ARGV[3])
local id = ARGV[4]
local now = ruled_now_us()

-- Leases whose expiry has come are gone: a crashed client holds its slot
-- for ttl at most.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local count = redis.call('ZCARD', key)
local allowed, granted = 1, 0

if hits > 0 then
  local held = redis.call('ZSCORE', key, id)
  if held or count < limit then
    -- A new lease, or the renewal of one held: its expiry moves to now + ttl.
    if not held then count = count + 1 end
    redis.call('ZADD', key, now + ttl, id)
    redis.call('PEXPIRE', key, math.floor((ttl + 999) / 1000) + 1000)
    granted = 1
  else
    allowed = 0
  end
elseif hits < 0 then
  -- Release: frees the slot once; releasing again frees nothing.
  local removed = redis.call('ZREM', key, id)
  count = count - removed
  granted = -removed
elseif count >= limit then
  allowed = 0
end

local reset, retry = 0, 0
if count > 0 then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  reset = tonumber(last[2]) - now
  if allowed == 0 then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    retry = tonumber(first[2]) - now
  end
end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
return {allowed, granted, limit, remaining, reset, retry}
