#!/usr/bin/env bash
# Overload (issue 4, docs/RESILIENCE.md): the contest stack at FACTOR (3) times the official peak
# rate for OVER (30) s, between two periods at the normal rate, and the evidence that it survives:
#   - no crash, no restart, no OOM kill (`docker inspect` RestartCount / State.OOMKilled, cgroup
#     memory.oom_control oom_kill), peak memory per container against its limit (cgroup v1
#     memory.max_usage_in_bytes, reset just before k6 starts; usage sampled every 250 ms);
#   - errors by kind and how long they took (fast connection closes vs 2 s timeouts), dropped
#     iterations (k6 could not start the request in time: the generator's own limit);
#   - p99 per phase and per second, and the recovery time: seconds from the end of the overload
#     to the first of 5 consecutive one-second windows that are error-free with p99 at most the
#     worst one-second p99 of the normal period before it (seconds 2..BEFORE-1); the first such
#     single second too. (On this shared 2-core box foreign jobs put single seconds above that
#     line at any time, so "every later second" would measure them, not the stack.)
#   - HAProxy's queue and session counts over time (stats socket).
#
# Usage: scripts/stack-overload.sh
# Env:   RATE=900 FACTOR=3 BEFORE=15 OVER=30 AFTER=45 OVER_VUS=600 MAX_VUS=3000 (k6/resilience.js),
#        STACK_SKIP_BUILD=1, STACK_OVERRIDE=file.yml, LABEL, STACK_KEEP=1.
# Results: $STACK_RESULTS/<time>-overload-<label>.json (+ .monitor.jsonl, .k6.log, .haproxy.log).
set -euo pipefail
# shellcheck source=scripts/stack-lib.sh
. "$(dirname "$0")/stack-lib.sh"

RATE=${RATE:-900} FACTOR=${FACTOR:-3} BEFORE=${BEFORE:-15} OVER=${OVER:-30} AFTER=${AFTER:-45}
OVER_VUS=${OVER_VUS:-600} MAX_VUS=${MAX_VUS:-3000}
LABEL=${LABEL:-x$FACTOR}
stack_prepare --k6

trap stack_teardown EXIT
stack_up
"$ROOT/scripts/stack-check.sh" --running >&2

stamp=$(date -u +%Y%m%dT%H%M%SZ)
base=$RESULTS/$stamp-overload-$LABEL
stack_monitor_start "$base.monitor.jsonl" 0.25
before=$(container_stats COMPOSE haproxy api1 api2)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
log "overload: ${RATE}/s ${BEFORE}s, $((FACTOR * RATE))/s ${OVER}s, ${RATE}/s ${AFTER}s (load $load_start)"
set +e
/usr/bin/time -f '%U %S %M' -o "$base.k6.time" env MODE=overload RATE="$RATE" FACTOR="$FACTOR" BEFORE="$BEFORE" OVER="$OVER" \
  AFTER="$AFTER" OVER_VUS="$OVER_VUS" MAX_VUS="$MAX_VUS" TEST_DATA="$data" SUMMARY="$base.k6.json" \
  BASE_URL=http://localhost:9999 k6 run --quiet --no-color "$ROOT/k6/resilience.js" >"$base.k6.log" 2>&1
k6_rc=$?
set -e
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
sleep 1
stack_monitor_stop
after=$(container_stats COMPOSE haproxy api1 api2)
print_stats "$before" "$after"
states=$(container_states)
log "containers: $states"
docker logs -t "$(stack_id haproxy)" >"$base.haproxy.log" 2>&1 || true
/usr/bin/python3 - "$base" "$k6_rc" "$load_start" "$load_end" "$before" "$after" "$states" "$BEFORE" "$OVER" "$AFTER" \
  "$(tail -1 "$base.k6.time" 2>/dev/null)" <<'PY'
import json, sys, datetime
base, k6_rc, load_start, load_end, before, after, states, B, O, A, k6time = sys.argv[1:]
B, O, A = int(B), int(O), int(A)
k6 = json.load(open(base + ".k6.json"))
mon = [json.loads(l) for l in open(base + ".monitor.jsonl")]
wins = k6["windows"]
ph = lambda w: "before" if w["w"] < B else ("overload" if w["w"] < B + O else "after")
normal = [w for w in wins if 2 <= w["w"] < B]
limit = max(w["p99"] for w in normal)
after_w = [w for w in wins if B + O <= w["w"] < B + O + A]
ok = lambda x: x["errors"] == 0 and x["p99"] <= limit
rec = next((w["w"] - (B + O) for i, w in enumerate(after_w) if len(after_w[i:i + 5]) == 5 and all(ok(x) for x in after_w[i:i + 5])), None)
first_ok = next((w["w"] - (B + O) for w in after_w if ok(w)), None)
t0 = k6["t0_ms"]
def mon_max(f):
    vals = [f(r) for r in mon if r["t"] >= t0]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None
num = lambda x: int(x) if x not in (None, "") else None
aft = {r["service"]: r for r in json.loads(after)}
mem = {s: {"peak_mb": round(int(r["memory_peak"]) / 2**20, 1), "limit_mb": round(int(r["memory_limit"]) / 2**20),
           "failcnt": r["memory_failcnt"], "oom_kill": r["oom_kill"],
           "sampled_max_mb": mon_max(lambda m: (m.get("mem_mb") or {}).get(s))} for s, r in aft.items()}
u, s_, maxrss = (k6time.split() + [None] * 3)[:3]
res = {
    "when": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
    "load_start": load_start, "load_end": load_end, "k6_rc": int(k6_rc),
    "k6_cpu_s": round(float(u) + float(s_), 1) if u else None, "k6_maxrss_mb": round(int(maxrss) / 1024) if maxrss else None,
    "rate": k6["rate"], "requests": k6["requests"], "errors": k6["errors"], "fp": k6["fp"], "fn": k6["fn"],
    "dropped_iterations": k6["dropped_iterations"], "vus_max": k6["vus_max"],
    "phases": k6["phases"], "error_kinds": k6["error_kinds"],
    "normal_p99_limit_ms": limit, "recovery_s": rec, "first_normal_second_s": first_ok,
    "haproxy_max": {"frontend_scur": mon_max(lambda r: num((r.get("frontend") or {}).get("scur"))),
                    "backend_qcur": mon_max(lambda r: num((r.get("backend") or {}).get("qcur"))),
                    "api1_scur": mon_max(lambda r: num((r.get("api1") or {}).get("scur"))),
                    "api2_scur": mon_max(lambda r: num((r.get("api2") or {}).get("scur")))},
    "servers_not_up_samples": sum(1 for r in mon if r["t"] >= t0 and any((r.get(a) or {}).get("status") not in ("UP", None) for a in ("api1", "api2"))),
    "memory": mem, "containers": states,
    "windows": wins,
    "containers_before": json.loads(before), "containers_after": json.loads(after),
}
json.dump(res, open(base + ".json", "w"), indent=1)
print(f"overload {base.rsplit('/', 1)[1]}: load {load_start} -> {load_end}; k6 {res['k6_cpu_s']} s CPU, {res['k6_maxrss_mb']} MB, vus_max {res['vus_max']}")
print(f"  requests {res['requests']}  errors {res['errors']}  FP {res['fp']} FN {res['fn']}  dropped {res['dropped_iterations']}")
for p, v in res["phases"].items():
    l = v["latency_ms"] or {}
    print(f"  {p:8s} n {l.get('n', 0):6d} errors {v['errors']:6d} dropped {v['dropped_iterations']:6d}  p50 {l.get('med', 0):8.2f}  p99 {l.get('p99', 0):8.2f}  max {l.get('max', 0):8.2f} ms")
for k, v in res["error_kinds"].items():
    d = v["duration_ms"] or {}
    print(f"  error {k}: {v['n']} (time to fail: median {d.get('med', 0):.1f} ms, p99 {d.get('p99', 0):.1f}, max {d.get('max', 0):.1f})")
print(f"  recovery: first normal second {first_ok} s after the overload, 5 normal seconds in a row from {rec} s (normal: no errors, p99 <= {limit:.2f} ms)")
print(f"  HAProxy max: {res['haproxy_max']}; samples with a server not UP: {res['servers_not_up_samples']}")
for s, m in mem.items():
    print(f"  {s:8s} peak {m['peak_mb']} MB of {m['limit_mb']} MB (sampled max {m['sampled_max_mb']}), failcnt {m['failcnt']}, oom_kill {m['oom_kill']}")
print("  per second (w: n/errors/p99 ms): " + " ".join(f"{w['w']}:{w['n']}/{w['errors']}/{w['p99']:.0f}" for w in wins))
PY
log "results: $base.json"
echo "$states" | grep -q "oomkilled=true" && die "a container was OOM-killed"
echo "$states" | grep -q "running=false" && die "a container is not running after the test"
echo "$states" | grep -Eq "restarts=[1-9]" && die "a container restarted during the test"
exit 0
