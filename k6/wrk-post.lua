-- wrk script for the overload test (scripts/stack-overload-wrk.sh, docs/RESILIENCE.md):
-- POST /fraud-score with real payloads, cycling through the request bodies in $WRK_BODIES (one
-- compact JSON object per line, written by the shell script from tests/data/test-data.json.gz).
-- Counts statuses other than 200 per thread in response() and prints a summary in done().
-- wrk is closed-loop; WRK_DELAY_MS > 0 makes each connection wait that long before each request,
-- so C connections offer at most C * 1000 / (WRK_DELAY_MS + latency) req/s (a paced rate).
-- Usage: WRK_BODIES=bodies.txt [WRK_DELAY_MS=10] wrk -t2 -c64 -d30s --latency -s k6/wrk-post.lua http://127.0.0.1:9999
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
  codes = {}
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
    codes[status] = (codes[status] or 0) + 1
  end
end

function done(summary, latency, requests)
  local ok, bad, bycode = 0, 0, {}
  for _, t in ipairs(threads) do
    ok = ok + (t:get("ok200") or 0)
    bad = bad + (t:get("non200") or 0)
    local c = t:get("codes")
    if c then
      for k, v in pairs(c) do bycode[k] = (bycode[k] or 0) + v end
    end
  end
  local e = summary.errors
  local secs = summary.duration / 1e6
  local codes_s = ""
  for k, v in pairs(bycode) do codes_s = codes_s .. string.format(" %s:%d", tostring(k), v) end
  io.write(string.format(
    "WRKSUMMARY requests=%d duration_s=%.2f rate=%.1f status200=%d non200=%d codes=[%s ] " ..
    "connect=%d read=%d write=%d timeout=%d http_status_errors=%d " ..
    "p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f p999_ms=%.2f max_ms=%.2f\n",
    summary.requests, secs, summary.requests / secs, ok, bad, codes_s,
    e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, latency.max / 1000))
end
