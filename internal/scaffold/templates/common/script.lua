-- __NAME__: at most limit hits per window, windows aligned to Redis time.
-- KEYS[1] holds {s = the window's start (µs), n = hits granted in it}.
-- ARGV: limit, window (µs), hits. ruled_now_us() is Redis's clock, which
-- ruled provides. The reply is ruled's decision shape: {allowed, granted,
-- limit, remaining, reset_us, retry_after_us}.
local limit, window, hits = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = ruled_now_us()
local start = now - math.fmod(now, window)
local reset = start + window - now
local cur = redis.call('HMGET', KEYS[1], 's', 'n')
local count = 0
if cur[1] == string.format('%d', start) then count = tonumber(cur[2]) end
if hits <= 0 then return {1, 0, limit, math.max(limit - count, 0), reset, 0} end
if count + hits > limit then return {0, 0, limit, math.max(limit - count, 0), reset, reset} end
count = count + hits
redis.call('HSET', KEYS[1], 's', string.format('%d', start), 'n', count)
redis.call('PEXPIRE', KEYS[1], math.floor(reset / 1000) + 1000)
return {1, hits, limit, limit - count, reset, 0}
