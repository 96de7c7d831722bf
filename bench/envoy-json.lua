-- wrk script for bench -envoy: POST /json, envoy ratelimit's HTTP face, one
-- descriptor per request (user=N; with half denied every other request is
-- denied=N instead), and one machine-readable line with the figures at the
-- end. Arguments (after --): the number of users, and 1 for half denied.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

local users, half = 1000, false
function init(args)
  users = tonumber(args[1]) or users
  half = args[2] == "1"
end

-- per thread: requests made, and responses by status
n, ok, over, other = 0, 0, 0, 0

request = function()
  n = n + 1
  local key = "user"
  if half and n % 2 == 1 then key = "denied" end
  local body = '{"domain":"bench","descriptors":[{"entries":[{"key":"' .. key .. '","value":"' ..
    (math.floor(n / 2) % users) .. '"}]}]}'
  return wrk.format(nil, nil, nil, body)
end

response = function(status, headers, body)
  if status == 200 then ok = ok + 1 elseif status == 429 then over = over + 1 else other = other + 1 end
end

done = function(summary, latency, requests)
  local oks, overs, others = 0, 0, 0
  for _, t in ipairs(threads) do
    oks, overs, others = oks + t:get("ok"), overs + t:get("over"), others + t:get("other")
  end
  local bad = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout + others
  io.write(string.format("RESULT %d %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), bad))
  io.write(string.format("STATUS %d %d %d\n", oks, overs, others))
end
