-- wrk script for ruled's load harness: POST /v1/check over many subjects,
-- and one machine-readable line with the figures at the end.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

-- The script's argument, when given, is how many client IPs the requests
-- cycle through (wrk -s wrk.lua URL -- 1000); without one, 10,240.
local subjects = 40 * 256
init = function(args)
  if args[1] then subjects = tonumber(args[1]) end
end

local n = 0
request = function()
  n = n + 1
  local k = n % subjects
  local ip = "10." .. math.floor(k / 65536) .. "." .. (math.floor(k / 256) % 256) .. "." .. (k % 256)
  return wrk.format(nil, nil, nil, '{"request":{"ip":"' .. ip .. '","method":"GET","path":"/"}}')
end

done = function(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT %d %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), bad))
end
