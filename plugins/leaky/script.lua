-- leaky: a leaky bucket (funnel) per subject that drains rate units per per.
-- KEYS[1] bucket hash {t = time of the last change (us), l = level}
-- ARGV: capacity, per_us, rate, shape (0|1), hits, best_effort (0|1), window_us
-- Reply: {allowed, granted, limit, remaining, reset_us, retry_after_us, delay_us}
--
-- The level is kept scaled by per_us: one unit in the bucket is per_us, and
-- draining for e microseconds removes e * rate. So a capacity of C units is
-- C * per_us and every quantity is an integer. Configure keeps C * per_us and
-- rate below 2^52, so every sum below stays under 2^53, where Lua's doubles
-- are exact. Divisions go through math.fmod (exact) and only ever divide
-- exact multiples, so nothing is rounded anywhere; ceilings make sure the
-- bucket never holds more than its capacity. Stored values use %d.
--
-- Both modes admit exactly the same requests. In shape mode the bucket is a
-- queue: a request admitted now starts leaving when everything already in
-- the queue has left, ceil(level / rate) microseconds from now, and that is
-- its delay.
local capacity = tonumber(ARGV[1])
local per = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local shape = ARGV[4] == '1'
local hits = tonumber(ARGV[5])
local best = ARGV[6] == '1'
local window = tonumber(ARGV[7])

-- ceil(a / b) for integers a >= 0, b >= 1, a + b < 2^53, without rounding.
local function cdiv(a, b)
  if a <= 0 then return 0 end
  local x = a + b - 1
  return (x - math.fmod(x, b)) / b
end

local now = ruled_now_us()
local full = capacity * per
local cur = redis.call('HMGET', KEYS[1], 't', 'l')
local t = tonumber(cur[1]) or now
local level = tonumber(cur[2]) or 0

-- Drain. A clock that went backwards drains nothing and keeps t.
if now > t then
  local elapsed = now - t
  if elapsed >= cdiv(level, rate) then
    level = 0
  else
    level = level - elapsed * rate
  end
  t = now
end

local function remaining() return capacity - cdiv(level, per) end
local function reset() return cdiv(level, rate) end

local function store()
  if level <= 0 then
    redis.call('DEL', KEYS[1])
    return
  end
  redis.call('HSET', KEYS[1], 't', string.format('%d', t), 'l', string.format('%d', level))
  redis.call('PEXPIRE', KEYS[1], cdiv(reset(), 1000) + 1000)
end

-- time until need units fit
local function wait(need)
  if need > capacity then return window end
  return cdiv(level - (capacity - need) * per, rate)
end

if hits == 0 then
  if remaining() >= 1 then
    local delay = 0
    if shape then delay = reset() end
    return {1, 0, capacity, remaining(), reset(), 0, delay}
  end
  return {0, 0, capacity, 0, reset(), wait(1), 0}
end

if hits < 0 then
  local units = math.min(-hits, cdiv(level, per))
  if units > 0 then
    level = math.max(level - units * per, 0)
    store()
  end
  return {1, -units, capacity, remaining(), reset(), 0, 0}
end

local room = remaining()
local granted = 0
if hits <= room then
  granted = hits
elseif best then
  granted = room
end
if granted > 0 then
  local delay = 0
  if shape then delay = reset() end
  level = level + granted * per
  store()
  return {1, granted, capacity, remaining(), reset(), 0, delay}
end
local need = hits
if best then need = 1 end
return {0, 0, capacity, room, reset(), wait(need), 0}
