-- wrk script for ruled's load harness: POST /v1/check over many subjects,
-- and one machine-readable line with the figures at the end.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local n = 0
request = function()
  n = n + 1
  local ip = "10.0." .. (math.floor(n / 256) % 40) .. "." .. (n % 256)
  return wrk.format(nil, nil, nil, '{"request":{"ip":"' .. ip .. '","method":"GET","path":"/"}}')
end

done = function(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT %d %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), bad))
end
