-- sortedset: a rolling log of a subject's actions, checked against several
-- rates and a minimum gap between admitted actions, all in one script.
-- KEYS[1] log zset: score = action time (us), member = "<time>:<seq>"
-- KEYS[2] meta hash {n = last sequence number used, g = time of the last
--         admitted action (us)}
-- ARGV: nrates, then limit (0 blocks) and window_us for each rate, min_gap_us,
--       count_denied (0|1), hits, best_effort (0|1)
-- Reply: {allowed, granted, limit, remaining, reset_us, retry_after_us,
--         delay_us (always 0), window_us of the rate that limit/remaining/reset describe}
--
-- An entry at time s counts for a rate with window w at time now when
-- s > now - w. Times are integer microseconds below 2^53, exact in Lua's
-- doubles; the one division (for TTLs) is exact. Stored values use %d.
--
-- The log keeps at most max(limit) entries, the newest: every decision
-- depends only on whether a rate's count reaches its limit and on the time
-- of its limit-th newest entry, so older entries never matter.
local log, meta = KEYS[1], KEYS[2]
local n = tonumber(ARGV[1])
local limits, windows = {}, {}
local maxlimit, minlimit, maxwindow = 0, math.huge, 0
for i = 1, n do
  limits[i] = tonumber(ARGV[2 * i])
  windows[i] = tonumber(ARGV[2 * i + 1])
  maxlimit = math.max(maxlimit, limits[i])
  minlimit = math.min(minlimit, limits[i])
  maxwindow = math.max(maxwindow, windows[i])
end
local gap = tonumber(ARGV[2 * n + 2])
local count_denied = ARGV[2 * n + 3] == '1'
local hits = tonumber(ARGV[2 * n + 4])
local best = ARGV[2 * n + 5] == '1'

local function fmt(x) return string.format('%d', x) end

-- A rate of limit 0 blocks: bwin is the longest window of such rates, the
-- block's reset and retry_after. Hits and peeks alike are denied (no action
-- is left, as in a full window), without touching the keys (Decide answers
-- these without calling the script); a refund forgets entries as usual and
-- reports the block.
local bwin = nil
for i = 1, n do
  if limits[i] == 0 then bwin = math.max(bwin or 0, windows[i]) end
end
if bwin and hits >= 0 then
  return {0, 0, 0, 0, bwin, bwin, 0, bwin}
end

-- ceil(a / b) for integers a >= 0, b >= 1, without rounding (math.fmod is exact)
local function cdiv(a, b)
  local x = a + b - 1
  return (x - math.fmod(x, b)) / b
end

local now = ruled_now_us()
local now_s = fmt(now)

-- Entries at or before now - maxwindow are outside every window.
redis.call('ZREMRANGEBYSCORE', log, '-inf', fmt(now - maxwindow))
local m = redis.call('HMGET', meta, 'n', 'g')
local seq = tonumber(m[1]) or 0
local last = tonumber(m[2]) -- nil: no admitted action within reach
local counts = {}
for i = 1, n do
  counts[i] = redis.call('ZCOUNT', log, '(' .. fmt(now - windows[i]), '+inf')
end

-- time until the gap since the last admitted action has passed
local function gapwait()
  if last == nil then return 0 end
  return math.max(0, last + gap - now)
end

-- time of the k-th newest entry (k >= 1, and at least k entries exist)
local function newest(k)
  local e = redis.call('ZRANGE', log, k - 1, k - 1, 'REV', 'WITHSCORES')
  return tonumber(e[2])
end

local granted = 0
local allowed = false
if hits < 0 then
  -- Refund: forget the newest entries. The gap is not rewound.
  local r = math.min(-hits, redis.call('ZCARD', log))
  if r > 0 then
    redis.call('ZREMRANGEBYRANK', log, -r, -1)
    for i = 1, n do counts[i] = counts[i] - math.min(r, counts[i]) end
  end
  granted = -r
  allowed = true
elseif hits == 0 then
  allowed = gapwait() == 0
  for i = 1, n do
    if counts[i] + 1 > limits[i] then allowed = false end
  end
else
  local room = hits
  if gapwait() > 0 then room = 0 end
  for i = 1, n do room = math.min(room, limits[i] - counts[i]) end
  if room >= hits then
    granted = hits
  elseif best and room > 0 then
    granted = room
  end
  allowed = granted > 0
  local logged = granted
  if not allowed and count_denied then logged = math.min(hits, maxlimit) end
  if logged > 0 then
    local args = {}
    for _ = 1, logged do
      seq = seq + 1
      args[#args + 1] = now_s
      args[#args + 1] = now_s .. ':' .. fmt(seq)
      if #args >= 1000 then
        redis.call('ZADD', log, unpack(args))
        args = {}
      end
    end
    if #args > 0 then redis.call('ZADD', log, unpack(args)) end
    redis.call('ZREMRANGEBYRANK', log, 0, -(maxlimit + 1))
    -- in-window entries are the newest ones, so a window holds at most maxlimit
    for i = 1, n do counts[i] = math.min(counts[i] + logged, maxlimit) end
    if allowed and (last == nil or now > last) then last = now end
    if last == nil then
      redis.call('HSET', meta, 'n', fmt(seq))
    else
      redis.call('HSET', meta, 'n', fmt(seq), 'g', fmt(last))
    end
    local ttl = cdiv(math.max(maxwindow, gap), 1000) + 1000
    redis.call('PEXPIRE', log, ttl)
    redis.call('PEXPIRE', meta, ttl)
  end
end

-- The rate reported is the one with the least remaining, then the longest
-- reset, then the first declared.
local top = nil
local idx, rem, reset = 1, 0, 0
for i = 1, n do
  local ri = math.max(0, limits[i] - counts[i])
  local ti = 0
  if counts[i] > 0 then
    if top == nil then top = newest(1) end
    ti = top + windows[i] - now
  end
  if i == 1 or ri < rem or (ri == rem and ti > reset) then
    idx, rem, reset = i, ri, ti
  end
end

local retry = 0
if not allowed then
  local need = 1
  if hits > 0 and not best then need = hits end
  if need > minlimit then
    -- can never pass whole: back off by the longest window that forbids it
    for i = 1, n do
      if limits[i] < need then retry = math.max(retry, windows[i]) end
    end
  else
    retry = gapwait()
    for i = 1, n do
      if counts[i] + need > limits[i] then
        retry = math.max(retry, newest(limits[i] - need + 1) + windows[i] - now)
      end
    end
  end
end

local a = 0
if allowed then a = 1 end
if bwin then return {a, granted, 0, 0, bwin, retry, 0, bwin} end -- a refund under a block
return {a, granted, limits[idx], rem, reset, retry, 0, windows[idx]}
