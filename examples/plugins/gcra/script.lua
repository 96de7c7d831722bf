-- gcra: the generic cell rate algorithm, as redis-cell's CL.THROTTLE.
-- KEYS[1] hash {t = TAT in whole µs, f = the rest of TAT below 1µs, in ticks};
--         absent, or with TAT <= now, when the subject has its full burst
-- ARGV: rate, per_us, burst, hits, best_effort (0|1)
-- Reply: {allowed, granted, limit, remaining, reset_us, retry_after_us}
--
-- Time is counted in ticks of 1/rate µs, in which the emission interval
-- per/rate is exactly per_us ticks and the tolerance is tau = (burst + 1) *
-- per_us ticks. The script works with debt = (TAT - now) in ticks, clamped
-- to [0, tau]; Configure keeps tau + rate below 2^53, where Lua's doubles
-- are exact integers. Every division below is math.fmod-exact, so nothing
-- is ever rounded except the answers, which round up to the microsecond.
-- Stored numbers are written with %d, never tostring.
local rate = tonumber(ARGV[1])
local per = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
local best = ARGV[5] == '1'
local limit = burst + 1
local tau = limit * per

-- a / b rounded down and up, for a >= 0 and b > 0
local function floordiv(a, b)
  return (a - math.fmod(a, b)) / b
end

local function ceildiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

local now = ruled_now_us()
local debt = 0
local clamped = false
do
  local st = redis.call('HMGET', KEYS[1], 't', 'f')
  local t, f = tonumber(st[1]), tonumber(st[2])
  if t and f then
    local dt = t - now
    if dt >= 0 then
      if dt > floordiv(tau, rate) then
        debt = tau + 1 -- dt * rate is more than tau, and might not be exact
      else
        -- f is below rate unless the rate was lowered since: less than 1µs
        -- either way
        debt = dt * rate + math.min(math.max(f, 0), rate - 1)
      end
      if debt > tau then
        -- TAT beyond the tolerance: the rule was reloaded with a lower
        -- burst, a longer per or a higher rate. TAT moves back to
        -- now + tau, stored below, so that retry_after stays true.
        debt, clamped = tau, true
      end
    end
  end
end
local avail = floordiv(tau - debt, per)

-- Time until TAT, when the full burst is back.
local function reset()
  return ceildiv(debt, rate)
end

-- Time until n units (n <= limit) would be allowed.
local function wait_for(n)
  return ceildiv(n * per - (tau - debt), rate)
end

-- TAT = now + debt ticks; no TAT is the same as a TAT in the past.
local function store()
  if debt <= 0 then
    redis.call('DEL', KEYS[1])
    return
  end
  local f = math.fmod(debt, rate)
  local t = now + (debt - f) / rate
  redis.call('HSET', KEYS[1], 't', string.format('%d', t), 'f', string.format('%d', f))
  redis.call('PEXPIRE', KEYS[1], floordiv(reset(), 1000) + 1000)
end

if clamped then store() end

if hits == 0 then
  if avail >= 1 then
    return {1, 0, limit, avail, reset(), 0}
  end
  return {0, 0, limit, 0, reset(), wait_for(1)}
end

if hits < 0 then
  local before = avail
  if -hits >= limit then
    debt = 0
  else
    debt = math.max(debt + hits * per, 0)
  end
  avail = floordiv(tau - debt, per)
  store()
  return {1, before - avail, limit, avail, reset(), 0}
end

local granted = 0
if hits <= avail then
  granted = hits
elseif best and avail >= 1 then
  granted = avail
end
if granted > 0 then
  debt = debt + granted * per
  avail = avail - granted
  store()
  return {1, granted, limit, avail, reset(), 0}
end

local retry
if best then
  retry = wait_for(1)
elseif hits > limit then
  retry = reset()
else
  retry = wait_for(hits)
end
return {0, 0, limit, avail, reset(), retry}
