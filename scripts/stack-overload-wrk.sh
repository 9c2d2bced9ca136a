#!/usr/bin/env bash
# Overload (issue 4, docs/RESILIENCE.md "Overload at 3x with wrk"), offered with wrk instead of
# k6: k6 needs too much CPU on this 2-core box to offer 2,700 req/s. wrk is closed-loop (each
# connection sends its next request when the previous answer arrives). The normal phases are
# paced (k6/wrk-post.lua WRK_DELAY_MS: each connection waits D ms before each request, so C
# connections offer at most C*1000/D req/s); the overload has many connections and no delay
# (OVER_DELAY=0), so the rate achieved is what the stack can serve.
#   warm:     WARM (15) s,  WARM_C (11) connections, WARM_DELAY (10) ms (~890 req/s)
#   overload: OVER (30) s,  OVER_C (512) connections, OVER_DELAY (0) ms
#   after:    AFTER (30) s, AFTER_C (11) connections, AFTER_DELAY (10) ms (recovery: latency, errors)
# Requests: POST /fraud-score with NBODIES (400) real bodies from tests/data/test-data.json.gz
# (k6/wrk-post.lua; non-200 statuses counted there). wrk --timeout TIMEOUT (2s, like k6's 2001 ms).
# Evidence: cgroup v1 peak memory (max_usage_in_bytes reset before the run), failcnt, oom_kill,
# CPU and nr_throttled per container (stack-lib.sh print_stats), docker inspect restarts and
# OOMKilled, HAProxy stats and each API's /ready sampled every 250 ms (stack_monitor).
# Usage: STACK_SKIP_BUILD=1 scripts/stack-overload-wrk.sh   (needs `apt-get install wrk`)
# Env:   WARM OVER AFTER WARM_C OVER_C AFTER_C WARM_DELAY OVER_DELAY AFTER_DELAY THREADS (2) TIMEOUT NBODIES LABEL STACK_KEEP=1
# Results: $STACK_RESULTS/<time>-overload-wrk-<label>.{log,monitor.jsonl,haproxy.log}
set -euo pipefail
# shellcheck source=scripts/stack-lib.sh
. "$(dirname "$0")/stack-lib.sh"

WARM=${WARM:-15} OVER=${OVER:-30} AFTER=${AFTER:-30}
WARM_C=${WARM_C:-11} OVER_C=${OVER_C:-512} AFTER_C=${AFTER_C:-11} THREADS=${THREADS:-2}
WARM_DELAY=${WARM_DELAY:-10} OVER_DELAY=${OVER_DELAY:-0} AFTER_DELAY=${AFTER_DELAY:-10}
TIMEOUT=${TIMEOUT:-2s} NBODIES=${NBODIES:-400} LABEL=${LABEL:-c$OVER_C}
command -v wrk >/dev/null 2>&1 || die "wrk not found (apt-get install -y wrk)"
stack_prepare --no-k6
bodies=$RESULTS/wrk-bodies.txt
# One compact request body per line, NBODIES of them spread over the whole test set.
python3 - "$data" "$NBODIES" "$bodies" <<'PY'
import json, sys
src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
e = json.load(open(src))["entries"]
step = max(1, len(e) // n)
with open(out, "w") as f:
    for x in e[::step][:n]:
        f.write(json.dumps(x["request"], separators=(",", ":")) + "\n")
PY
export WRK_BODIES=$bodies

trap stack_teardown EXIT
stack_up

stamp=$(date -u +%Y%m%dT%H%M%SZ)
base=$RESULTS/$stamp-overload-wrk-$LABEL
stack_monitor_start "$base.monitor.jsonl" 0.25
before=$(container_stats COMPOSE haproxy api1 api2)

phase() { # name seconds connections delay-ms
  local name=$1 secs=$2 c=$3 d=$4
  log "$name: ${secs}s, $c connections, delay ${d} ms, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "=== $name ${secs}s c=$c delay=${d}ms start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$base.log"
  WRK_DELAY_MS=$d /usr/bin/time -f 'wrk_cpu user=%U sys=%S maxrss_kb=%M' wrk -t"$THREADS" -c"$c" -d"${secs}s" \
    --timeout "$TIMEOUT" --latency -s "$ROOT/k6/wrk-post.lua" http://127.0.0.1:9999 >>"$base.log" 2>&1 || true
  echo "=== $name end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$base.log"
  grep -E "WRKSUMMARY|wrk_cpu" "$base.log" | tail -2 | sed "s/^/  $name /" >&2
}
phase warm "$WARM" "$WARM_C" "$WARM_DELAY"
t_over=$(date +%s%3N)
phase overload "$OVER" "$OVER_C" "$OVER_DELAY"
t_after=$(date +%s%3N)
phase after "$AFTER" "$AFTER_C" "$AFTER_DELAY"
sleep 1
stack_monitor_stop
after=$(container_stats COMPOSE haproxy api1 api2)
print_stats "$before" "$after" | tee -a "$base.log" >&2
states=$(container_states)
echo "containers: $states" | tee -a "$base.log" >&2
docker logs -t "$(stack_id haproxy)" >"$base.haproxy.log" 2>&1 || true
/usr/bin/python3 - "$base.monitor.jsonl" "$t_over" "$t_after" <<'PY' | tee -a "$base.log" >&2
import json, sys
mon = [json.loads(l) for l in open(sys.argv[1])]
t_over, t_after = int(sys.argv[2]), int(sys.argv[3])
num = lambda x: int(x) if x not in (None, "") else 0
for name, rows in (("overload", [r for r in mon if t_over <= r["t"] < t_after]), ("after", [r for r in mon if r["t"] >= t_after])):
    notup = sum(1 for r in rows if any((r.get(a) or {}).get("status") not in ("UP", None) for a in ("api1", "api2")))
    notready = sum(1 for r in rows if any(v != 200 for v in r["ready"].values()))
    mx = lambda f: max((f(r) for r in rows), default=None)
    mem = {s: mx(lambda r: (r.get("mem_mb") or {}).get(s) or 0) for s in ("haproxy", "api1", "api2")}
    print(f"monitor {name}: samples {len(rows)}, server not UP {notup}, /ready not 200 {notready}, "
          f"max frontend scur {mx(lambda r: num((r.get('frontend') or {}).get('scur')))}, "
          f"backend qcur {mx(lambda r: num((r.get('backend') or {}).get('qcur')))}, "
          f"api1 scur {mx(lambda r: num((r.get('api1') or {}).get('scur')))}, api2 scur {mx(lambda r: num((r.get('api2') or {}).get('scur')))}, "
          f"sampled max mem MB {mem}")
PY
log "results: $base.log"
echo "$states" | grep -q "oomkilled=true" && die "a container was OOM-killed"
echo "$states" | grep -q "running=false" && die "a container is not running after the test"
echo "$states" | grep -Eq "restarts=[1-9]" && die "a container restarted during the test"
exit 0
