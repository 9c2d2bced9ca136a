-- wrk script of the overload gate (`cargo xtask stack overload`, docs/RESILIENCE.md): POST
-- /fraud-score with real payloads, cycling through the request bodies in $WRK_BODIES (one compact
-- JSON object per line, written by the xtask from tests/data/test-data.json.gz). Counts statuses
-- other than 200 in response() and prints one line `WRKJSON {...}` in done(), which the xtask
-- parses (serde).
-- wrk is closed-loop; WRK_DELAY_MS > 0 makes each connection wait that long before each request,
-- so C connections offer at most C * 1000 / (WRK_DELAY_MS + latency) req/s (a paced rate).
-- Usage: WRK_BODIES=bodies.txt [WRK_DELAY_MS=10] wrk -t2 -c20 -d10s -s k6/wrk-post.lua http://127.0.0.1:9999
local threads = {}
local counter = 0
local delay_ms = tonumber(os.getenv("WRK_DELAY_MS") or "0") or 0
if delay_ms > 0 then
  function delay()
    return delay_ms
  end
end

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  table.insert(threads, thread)
end

function init(args)
  local path = os.getenv("WRK_BODIES") or "bodies.txt"
  local f = assert(io.open(path, "r"), "cannot open " .. path)
  reqs = {}
  local headers = { ["Content-Type"] = "application/json" }
  for line in f:lines() do
    if #line > 0 then
      table.insert(reqs, wrk.format("POST", "/fraud-score", headers, line))
    end
  end
  f:close()
  assert(#reqs > 0, "no bodies in " .. path)
  -- each thread starts at a different offset so threads do not send the same sequence
  idx = ((id or 1) * 97) % #reqs
  non200 = 0
  ok200 = 0
end

function request()
  idx = idx % #reqs + 1
  return reqs[idx]
end

function response(status, headers, body)
  if status == 200 then
    ok200 = ok200 + 1
  else
    non200 = non200 + 1
  end
end

function done(summary, latency, requests)
  local ok, bad = 0, 0
  for _, t in ipairs(threads) do
    ok = ok + (t:get("ok200") or 0)
    bad = bad + (t:get("non200") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"status200":%d,"non200":%d,' ..
    '"connect":%d,"read":%d,"write":%d,"timeout":%d,' ..
    '"p50_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, ok, bad, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
