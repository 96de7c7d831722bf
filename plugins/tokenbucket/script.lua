-- tokenbucket: at most burst permits, refilled at rate permits per period
-- from elapsed Redis time.
-- KEYS[1] hash {l = level, t = time the level was computed at (us),
--               u = per_us the level is counted in}; absent when full
-- ARGV: rate, per_us, burst, hits, best_effort (0|1)
-- Reply: {allowed, granted, limit, remaining, reset_us, retry_after_us}
-- Counting is exact: level = permits * per_us, one permit is per_us units,
-- each elapsed microsecond adds rate units and the capacity is
-- burst * per_us. Configure keeps burst * per_us + rate below 2^53, where
-- Lua's doubles are exact integers; math.fmod is exact, every division
-- below divides a multiple, and a product that may pass 2^53 is only
-- compared with a smaller integer (rounding keeps the order), so no
-- rounding changes a result. Stored numbers are written with %d, never
-- tostring.
-- The config comes with every call, so a reloaded rule applies at once: a
-- level above a lowered burst is clamped, and a changed per converts the
-- level to the new unit, keeping whole permits.
-- Redis runs this for every decision: its common path (a grant) makes no
-- function and calls no library function but math.fmod and string.format.
local rate = tonumber(ARGV[1])
local unit = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
local cap = burst * unit
local fmod = math.fmod

local now = ruled_now_us()
local level, t = cap, now -- no state: a full bucket
local st = redis.call('HMGET', KEYS[1], 'l', 't', 'u')
local l0, t0, u0 = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
if l0 and t0 and u0 and u0 >= 1 then
  if l0 < 0 then l0 = 0 end
  if u0 ~= unit then
    l0 = (l0 - fmod(l0, u0)) / u0
    if l0 > burst then l0 = burst end
    l0 = l0 * unit
  end
  if l0 > cap then l0 = cap end
  level, t = l0, t0
  if now > t then
    -- (now - t) * rate may pass 2^53, but it is only kept below the
    -- deficit, where it is exact
    local add = (now - t) * rate
    if add >= cap - level then level = cap else level = level + add end
    t = now
  end
end
local avail = (level - fmod(level, unit)) / unit

local granted = 0
if hits > 0 then
  if hits <= avail then
    granted = hits
  elseif ARGV[5] == '1' and avail >= 1 then
    granted = avail
  end
  level = level - granted * unit
  avail = avail - granted
elseif hits < 0 then
  local n = -hits
  if n > burst then n = burst end
  if n * unit >= cap - level then level = cap else level = level + n * unit end
  local was = avail
  avail = (level - fmod(level, unit)) / unit
  granted = was - avail
end

-- time until the bucket is full: ceil((cap - level) / rate)
local short = cap - level
local reset = (short - fmod(short, rate)) / rate
if reset * rate < short then reset = reset + 1 end

-- A full bucket is the same as no state, under any later config too.
if granted > 0 or hits < 0 then
  if level >= cap then
    redis.call('DEL', KEYS[1])
  else
    redis.call('HSET', KEYS[1], 'l', string.format('%d', level), 't', string.format('%d', t), 'u', ARGV[2])
    redis.call('PEXPIRE', KEYS[1], (reset - fmod(reset, 1000)) / 1000 + 1000)
  end
end

if granted ~= 0 or hits < 0 or (hits == 0 and avail >= 1) then
  return {1, granted, burst, avail, reset, 0}
end

-- Denied: the time until enough permits are there (n <= burst).
local n = hits
if ARGV[5] == '1' or hits == 0 then
  n = 1
elseif hits > burst then
  return {0, 0, burst, avail, reset, reset}
end
local need = n * unit - level
local retry = (need - fmod(need, rate)) / rate
if retry * rate < need then retry = retry + 1 end
return {0, 0, burst, avail, reset, retry}
