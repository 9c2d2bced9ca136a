#!/usr/bin/env bash
# Instance loss under load (issue 4, docs/RESILIENCE.md): k6 sends the contest payloads at the
# official peak rate, one API container is killed mid-run, restarted a few seconds later, and the
# run reports:
#   - failed requests (any non-200, timeout or broken connection), each with its time from the
#     kill, FP/FN (must stay 0);
#   - p99 per second around the event;
#   - when HAProxy marked the dead server DOWN (stats socket sampled every 100 ms, and HAProxy's
#     own "Server apis/apiN is DOWN" line with docker's timestamp);
#   - after the restart: when the instance's own /ready (asked on its Unix socket, bypassing
#     HAProxy) first said 200, when HAProxy put it back UP, and that it received no session
#     between the kill and that moment (its `stot` counter).
#
# Usage: scripts/stack-chaos.sh [RUNS]        (default 3; one stack for all runs, fresh per call)
# Env:   MODE=steady (constant RATE/s for DURATION s) | replica (the official 1 -> 900/s ramp)
#        RATE=900 DURATION=40 KILL_AT=10 (s after k6 starts; replica default 100) DOWN_FOR=10
#        (s between kill and `docker start`; replica default 6)
#        VICTIM=alternate (api1, api2 or alternate between runs)
#        KILL_HOW=docker (`docker kill`, SIGKILL; restarted by `docker start` after DOWN_FOR) |
#                 crash (SIGKILL to the container's process from the host, as a crash or OOM
#                 kill would do; `restart: unless-stopped` brings it back, no docker start)
#        STACK_SKIP_BUILD=1, STACK_OVERRIDE=file.yml (e.g. docker/experiments/chaos-untuned.yml),
#        LABEL (added to the result file names), STACK_KEEP=1.
# Results: $STACK_RESULTS/<time>-chaos-<label>-runN.json (+ .monitor.jsonl, .k6.log).
set -euo pipefail
# shellcheck source=scripts/stack-lib.sh
. "$(dirname "$0")/stack-lib.sh"

runs=${1:-3}
MODE=${MODE:-steady}
case $MODE in
  steady) KILL_AT=${KILL_AT:-10} DOWN_FOR=${DOWN_FOR:-10} ;;
  replica) KILL_AT=${KILL_AT:-100} DOWN_FOR=${DOWN_FOR:-6} ;;
  *) die "MODE must be steady or replica" ;;
esac
RATE=${RATE:-900} DURATION=${DURATION:-40} VICTIM=${VICTIM:-alternate} KILL_HOW=${KILL_HOW:-docker}
LABEL=${LABEL:-$MODE-$KILL_HOW}
stack_prepare --k6

trap stack_teardown EXIT
stack_up
"$ROOT/scripts/stack-check.sh" --running >&2

now_ms() { date +%s%3N; }

# Waits (at most 60 s) until both servers are UP in HAProxy.
wait_both_up() {
  local i s
  for ((i = 0; i < 600; i++)); do
    # Field 18 of `show stat` is the server's status.
    s=$(haproxy_stat | awk -F, '/^apis,api/ && $18 == "UP"' | wc -l)
    [ "$s" = 2 ] && return 0
    sleep 0.1
  done
  return 1
}

# Returns once HAProxy's backend holds more than 10 connections (k6 has started; its keep-alive
# connections stay open, the monitor's probes last a millisecond). Byte counters would not do:
# in mode tcp HAProxy adds a stream's bytes only when it ends.
wait_traffic() {
  local i n
  for ((i = 0; i < 300; i++)); do
    n=$(be_conns)
    [ "$n" -gt 10 ] && return 0
    sleep 0.1
  done
  return 1
}
# Current connections of the backend (field 5 of `show stat`).
be_conns() { haproxy_stat | awk -F, '/^apis,BACKEND/ {n += $5} END {print n + 0}'; }

# HAProxy's `show stat` CSV from its stats socket (nothing if the socket does not answer).
haproxy_stat() {
  python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"show stat\n")
while True:
    c = s.recv(65536)
    if not c: break
    sys.stdout.write(c.decode())' "$(sock_dir)/haproxy.sock" 2>/dev/null || true
}

for ((run = 1; run <= runs; run++)); do
  victim=$VICTIM
  [ "$victim" != alternate ] || { [ $((run % 2)) = 1 ] && victim=api1 || victim=api2; }
  wait_both_up || die "both servers not UP before run $run"
  sleep 2
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  base=$RESULTS/$stamp-chaos-$LABEL-run$run
  vid=$(stack_id "$victim")
  hid=$(stack_id haproxy)
  MON_PROBE=1 stack_monitor "$base.monitor.jsonl" 0.1 &
  mon_pid=$! # no memory figures here: the victim's cgroup changes when it restarts
  before=$(container_stats COMPOSE haproxy api1 api2)
  log "run $run/$runs: $MODE at ${RATE}/s, kill $victim ($KILL_HOW) at ${KILL_AT}s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  k6_start=$(now_ms)
  MODE=$MODE RATE=$RATE DURATION=$DURATION TEST_DATA=$data SUMMARY=$base.k6.json BASE_URL=http://localhost:9999 \
    k6 run --quiet --no-color "$ROOT/k6/resilience.js" >"$base.k6.log" 2>&1 &
  k6_pid=$!
  # KILL_AT counts from the first requests (k6 needs a few seconds to load the test set first).
  wait_traffic || die "no traffic through HAProxy 30 s after k6 started"
  sleep "$KILL_AT"
  t_kill=$(now_ms)
  if [ "$KILL_HOW" = crash ]; then
    kill -9 "$(docker inspect -f '{{.State.Pid}}' "$vid")"
  else
    docker kill "$vid" >/dev/null
  fi
  t_kill_done=$(now_ms)
  t_start=0 t_start_done=0
  if [ "$KILL_HOW" = docker ]; then
    sleep "$DOWN_FOR"
    t_start=$(now_ms)
    docker start "$vid" >/dev/null
    t_start_done=$(now_ms)
  fi
  load_mid=$(cut -d' ' -f1-3 /proc/loadavg)
  set +e
  wait "$k6_pid"
  k6_rc=$?
  set -e
  sleep 1
  stack_monitor_stop
  after=$(container_stats COMPOSE haproxy api1 api2)
  docker logs -t "$hid" >"$base.haproxy.log" 2>&1 || true
  docker logs -t "$vid" >"$base.$victim.log" 2>&1 || true
  states=$(container_states)
  /usr/bin/python3 - "$base" "$victim" "$KILL_HOW" "$k6_start" "$t_kill" "$t_kill_done" "$t_start" "$t_start_done" \
    "$k6_rc" "$load_mid" "$(cut -d' ' -f1-3 /proc/loadavg)" "$before" "$after" "$states" "$MODE" "$RATE" <<'PY'
import json, re, sys, datetime
(base, victim, how, k6_start, t_kill, t_kill_done, t_start, t_start_done, k6_rc, load_mid, load_end,
 before, after, states, mode, rate) = sys.argv[1:]
k6_start, t_kill, t_kill_done, t_start, t_start_done = map(int, (k6_start, t_kill, t_kill_done, t_start, t_start_done))
k6 = json.load(open(base + ".k6.json"))
t0 = k6["t0_ms"]
fails = []
for line in open(base + ".k6.log", errors="replace"):
    m = re.search(r'FAIL (\d+) (\d+) (\d+) (\d+) (.*?)" source=console', line)
    if m:
        fails.append({"start_rel_kill_ms": int(m.group(1)) - t_kill, "took_ms": int(m.group(2)),
                      "status": int(m.group(3)), "error_code": int(m.group(4)), "error": m.group(5)})
mon = [json.loads(l) for l in open(base + ".monitor.jsonl")]
def first(pred, after_t):
    for r in mon:
        if r["t"] >= after_t and pred(r):
            return r
    return None
st = lambda r: (r.get(victim) or {}).get("status", "")
down = first(lambda r: st(r).startswith("DOWN") or st(r).startswith("MAINT"), t_kill)
# HAProxy's own log line (docker logs -t timestamps, ns precision)
hap_events = []
for line in open(base + ".haproxy.log", errors="replace"):
    m = re.match(r"(\S+) .*Server apis/(api\d) is (UP|DOWN)(.*)", line)
    if m and m.group(2) == victim:
        ts = datetime.datetime.fromisoformat(m.group(1)[:26].rstrip("Z")).replace(tzinfo=datetime.timezone.utc).timestamp() * 1000
        if ts < t_kill - 1000:  # an earlier run on the same stack
            continue
        hap_events.append({"t_rel_kill_ms": round(ts - t_kill, 1), "state": m.group(3), "detail": m.group(4).strip()[:160]})
restart_ref = t_start if how == "docker" else t_kill_done
ready_back = first(lambda r: r["ready"].get(victim) == 200, restart_ref) if restart_ref else None
up_back = first(lambda r: st(r) == "UP", (down or {"t": t_kill})["t"]) if down else None
# sessions HAProxy assigned to the victim while it was DOWN (must be 0), from its `stot` counter
stot = lambda r: int((r.get(victim) or {}).get("stot") or 0)
leak = None
if down and up_back:
    last_out = [r for r in mon if down["t"] <= r["t"] < up_back["t"] and victim in r]
    leak = stot(last_out[-1]) - stot(down) if last_out else None
first_traffic = first(lambda r: stot(r) > stot(up_back), up_back["t"]) if up_back else None
probe_fail = [{"t_rel_kill_ms": r["t"] - t_kill, "probe": r["probe"]} for r in mon if "probe" in r and r["probe"] != 200]
ready_seq = []
prev = None
for r in mon:
    if r["t"] < t_kill - 500:
        continue
    cur = (r["ready"].get(victim), st(r))
    if cur != prev:
        ready_seq.append({"t_rel_kill_ms": r["t"] - t_kill, "ready": cur[0], "haproxy": cur[1]})
        prev = cur
kill_w = (t_kill - t0) / 1000
wins = [dict(w, t_rel_kill_s=round(w["w"] - kill_w, 1)) for w in k6["windows"]]
around = [w for w in wins if -3 <= w["t_rel_kill_s"] <= (((restart_ref - t_kill) / 1000 + 6) if restart_ref else 8)]
steady = [w for w in wins if w["t_rel_kill_s"] < -1 and w["w"] >= 2]
rel = lambda r: None if r is None else r["t"] - t_kill
res = {
    "when": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
    "mode": mode, "rate": int(rate), "victim": victim, "kill_how": how, "k6_rc": int(k6_rc),
    "load_mid": load_mid, "load_end": load_end,
    "requests": k6["requests"], "failed": k6["errors"], "fp": k6["fp"], "fn": k6["fn"],
    "dropped_iterations": k6["dropped_iterations"], "error_kinds": k6["error_kinds"],
    "kill_offset_s": round(kill_w, 2), "kill_cmd_ms": t_kill_done - t_kill,
    "markdown_ms_after_kill": rel(down), "haproxy_log": hap_events,
    "restart_ms_after_kill": (restart_ref - t_kill) if restart_ref else None,
    "ready200_ms_after_restart": (ready_back["t"] - restart_ref) if ready_back else None,
    "up_ms_after_restart": (up_back["t"] - restart_ref) if up_back and restart_ref else None,
    "up_ms_after_ready200": (up_back["t"] - ready_back["t"]) if up_back and ready_back else None,
    "victim_sessions_while_out": leak,
    "first_traffic_ms_after_up": (first_traffic["t"] - up_back["t"]) if first_traffic else None,
    "p99_run_ms": k6["latency_ms"]["p99"], "p50_run_ms": k6["latency_ms"]["med"],
    "p99_max_window_around_event_ms": max((w["p99"] for w in around), default=None),
    "p99_median_window_before_ms": sorted(w["p99"] for w in steady)[len(steady) // 2] if steady else None,
    "probes": sum(1 for r in mon if "probe" in r), "probe_failures": probe_fail,
    "windows_around_event": around, "failures": fails, "victim_timeline": ready_seq,
    "containers_before": json.loads(before), "containers_after": json.loads(after), "containers": states,
}
json.dump(res, open(base + ".json", "w"), indent=1)
print(f"run {base.rsplit('/', 1)[1]}: {victim} {how} at {kill_w:.1f}s ({mode} {rate}/s), load {load_mid}")
print(f"  requests {res['requests']}  failed {res['failed']} {json.dumps({k: v['n'] for k, v in res['error_kinds'].items()})}  FP {res['fp']} FN {res['fn']}  dropped {res['dropped_iterations']}")
for f in fails[:12]:
    print(f"    fail at {f['start_rel_kill_ms']:+d} ms (took {f['took_ms']} ms): {f['status']} {f['error_code']} {f['error']}")
print(f"  marked DOWN {res['markdown_ms_after_kill']} ms after the kill (monitor, 100 ms); HAProxy log: " +
      "; ".join(f"{e['state']} at {e['t_rel_kill_ms']:+.0f} ms" for e in hap_events))
print(f"  restart at +{res['restart_ms_after_kill']} ms; own /ready 200 {res['ready200_ms_after_restart']} ms after it; "
      f"UP in HAProxy {res['up_ms_after_restart']} ms after it ({res['up_ms_after_ready200']} ms after /ready 200); "
      f"sessions to {victim} while out: {res['victim_sessions_while_out']}; first traffic {res['first_traffic_ms_after_up']} ms after UP")
print(f"  monitor probes through HAProxy (new connection each 100 ms): {res['probes']}, failed {len(probe_fail)} {probe_fail[:5]}")
print(f"  p99 whole run {res['p99_run_ms']:.2f} ms (p50 {res['p50_run_ms']:.2f}); p99 per second before the kill (median) "
      f"{res['p99_median_window_before_ms']}; worst second around the event {res['p99_max_window_around_event_ms']} ms")
print("  per second around the kill: " + "  ".join(f"{w['t_rel_kill_s']:+.1f}s:{w['p99']:.1f}ms/{w['errors']}err" for w in around))
print("  victim timeline (ms from kill, own /ready, HAProxy state): " + ", ".join(f"{e['t_rel_kill_ms']:+d} {e['ready']} {e['haproxy']}" for e in res["victim_timeline"][:14]))
PY
  log "run $run: $base.json"
done
log "containers: $(container_states)"
