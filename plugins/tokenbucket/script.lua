-- tokenbucket: at most burst permits, refilled at rate permits per period
-- from elapsed Redis time.
-- KEYS[1] hash {l = level, t = time the level was computed at (us),
--               u = per_us the level is counted in}; absent when full
-- ARGV: rate, per_us, burst, hits, best_effort (0|1)
-- Reply: {allowed, granted, limit, remaining, reset_us, retry_after_us}
-- Counting is exact: level = permits * per_us, one permit is per_us units,
-- each elapsed microsecond adds rate units and the capacity is
-- burst * per_us. Configure keeps burst * per_us + rate below 2^53, where
-- Lua's doubles are exact integers; math.fmod is exact, and every division
-- below divides a multiple, so no rounding happens anywhere. Stored numbers
-- are written with %d, never tostring.
-- The config comes with every call, so a reloaded rule applies at once: a
-- level above a lowered burst is clamped, and a changed per converts the
-- level to the new unit, keeping whole permits.
local rate = tonumber(ARGV[1])
local unit = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
local best = ARGV[5] == '1'
local cap = burst * unit

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
local level, t = cap, now -- no state: a full bucket
do
  local st = redis.call('HMGET', KEYS[1], 'l', 't', 'u')
  local l0, t0, u0 = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
  if l0 and t0 and u0 and u0 >= 1 then
    if u0 ~= unit then
      l0 = math.min(floordiv(math.max(l0, 0), u0), burst) * unit
    end
    level = math.max(math.min(l0, cap), 0)
    t = t0
    if now > t then
      local deficit = cap - level
      -- elapsed * rate only when below the deficit: it stays below cap + rate
      if deficit > 0 then
        local elapsed = now - t
        if elapsed >= ceildiv(deficit, rate) then
          level = cap
        else
          level = level + elapsed * rate
        end
      end
      t = now
    end
  end
end
local avail = floordiv(level, unit)

-- Time until the bucket is full.
local function reset()
  return ceildiv(cap - level, rate)
end

-- Time until n permits (n <= burst) are available.
local function wait_for(n)
  local need = n * unit - level
  if need <= 0 then return 0 end
  return ceildiv(need, rate)
end

-- A full bucket is the same as no state, under any later config too.
local function store()
  if level >= cap then
    redis.call('DEL', KEYS[1])
    return
  end
  redis.call('HSET', KEYS[1], 'l', string.format('%d', level), 't', string.format('%d', t),
    'u', string.format('%d', unit))
  redis.call('PEXPIRE', KEYS[1], math.floor(reset() / 1000) + 1000)
end

if hits == 0 then
  if avail >= 1 then
    return {1, 0, burst, avail, reset(), 0}
  end
  return {0, 0, burst, 0, reset(), wait_for(1)}
end

if hits < 0 then
  local n = math.min(-hits, burst)
  local before = avail
  if n * unit >= cap - level then
    level = cap
  else
    level = level + n * unit
  end
  avail = floordiv(level, unit)
  store()
  return {1, before - avail, burst, avail, reset(), 0}
end

local granted = 0
if hits <= avail then
  granted = hits
elseif best and avail >= 1 then
  granted = avail
end
if granted > 0 then
  level = level - granted * unit
  avail = avail - granted
  store()
  return {1, granted, burst, avail, reset(), 0}
end

local retry
if best then
  retry = wait_for(1)
elseif hits > burst then
  retry = reset()
else
  retry = wait_for(hits)
end
return {0, 0, burst, avail, reset(), retry}
