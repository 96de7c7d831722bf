-- Concurrency limiter: at most limit leases per subject, each a member of
-- one sorted set scored by its expiry in Redis microseconds, and a line of
-- the requests waiting for a slot, served in order of arrival.
-- KEYS[1] leases {lease id: expiry}; KEYS[2] line {lease id: arrival};
-- KEYS[3] the line's deadlines {lease id: when it leaves the line unless
-- it asks again}.
-- ARGV limit, ttl_us, hits (1, 0 or -1), lease id, queue (1 or 0),
-- line_ttl_us.
local leases, line, waits = KEYS[1], KEYS[2], KEYS[3]
local limit = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local hits = tonumber(ARGV[3])
local id = ARGV[4]
local queue = ARGV[5] == '1'
local line_ttl = tonumber(ARGV[6])
local now = ruled_now_us()

-- Leases whose expiry has come are gone: a crashed client holds its slot
-- for ttl at most. Waiters that stopped asking leave the line (at most 64
-- a call, the earliest deadlines first). With nobody in line (the line and
-- its deadlines hold the same ids) the line costs one ZCARD.
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local waiting = redis.call('ZCARD', line)
if waiting > 0 then
  local gone = redis.call('ZRANGEBYSCORE', waits, '-inf', now, 'LIMIT', 0, 64)
  if #gone > 0 then
    redis.call('ZREM', line, unpack(gone))
    redis.call('ZREM', waits, unpack(gone))
    waiting = redis.call('ZCARD', line)
  end
end
local count = redis.call('ZCARD', leases)
local allowed, granted = 1, 0

if hits > 0 then
  local held = redis.call('ZSCORE', leases, id)
  -- Those ahead: the waiters before this one in line, or all of them.
  local ahead = false
  if waiting > 0 then ahead = redis.call('ZRANK', line, id) end
  local inline = ahead ~= false
  if not inline then ahead = waiting end
  if held or ahead < limit - count then
    -- A new lease, or the renewal of one held: its expiry moves to now + ttl.
    if not held then count = count + 1 end
    redis.call('ZADD', leases, now + ttl, id)
    redis.call('PEXPIRE', leases, math.floor((ttl + 999) / 1000) + 1000)
    if inline then
      redis.call('ZREM', line, id)
      redis.call('ZREM', waits, id)
      waiting = waiting - 1
    end
    granted = 1
  else
    allowed = 0
    if queue then
      -- In line, in order of arrival; asking again keeps the place.
      if not inline then
        redis.call('ZADD', line, now, id)
        waiting = waiting + 1
      end
      redis.call('ZADD', waits, now + line_ttl, id)
      local keep = math.floor((line_ttl + 999) / 1000) + 1000
      redis.call('PEXPIRE', line, keep)
      redis.call('PEXPIRE', waits, keep)
    end
  end
elseif hits < 0 then
  -- Release: frees the slot once; releasing again frees nothing. A waiter
  -- that gives up leaves the line.
  local removed = redis.call('ZREM', leases, id)
  count = count - removed
  granted = -removed
  if waiting > 0 then
    waiting = waiting - redis.call('ZREM', line, id)
    redis.call('ZREM', waits, id)
  end
elseif waiting >= limit - count then
  -- A peek: an acquire now would wait behind the line.
  allowed = 0
end

local reset, retry = 0, 0
if count > 0 then
  local last = redis.call('ZRANGE', leases, -1, -1, 'WITHSCORES')
  reset = tonumber(last[2]) - now
  if allowed == 0 then
    local first = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
    retry = tonumber(first[2]) - now
  end
end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
return {allowed, granted, limit, remaining, reset, retry}
