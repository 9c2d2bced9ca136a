#!/usr/bin/env bash
# One command for the contest replica: build the images, bring the compose stack up, wait for
# /ready, run k6, print the score, per-container peak memory and CFS throttling, tear down.
#
# Usage: scripts/stack-run.sh [full|smoke]     (default full)
#   full   the official scenario (1 -> 900 req/s over 120 s, ~54,060 requests)
#   smoke  RATE req/s (default 200) for DURATION (default 15s); exits non-zero on any HTTP
#          error, FP or FN
# Env: STACK_OVERRIDE=file.yml (extra compose file, for CPU-split experiments), STACK_SKIP_BUILD=1 (use the images as they are), STACK_KEEP=1 (leave the stack up),
#      STACK_RESULTS (folder for the JSON results; default target/stack-results),
#      STACK_TARGET_DIR (see stack-images.sh), RATE, DURATION.
# Results: $STACK_RESULTS/<utc time>-<mode>.json = k6 summary + container stats.
set -euo pipefail
# shellcheck source=scripts/stack-lib.sh
. "$(dirname "$0")/stack-lib.sh"

mode=${1:-full}
case $mode in full | smoke) ;; *) die "usage: $0 [full|smoke]" ;; esac
docker info >/dev/null 2>&1 || die "docker info fails: no usable Docker engine"
command -v docker-compose >/dev/null || die "docker-compose (v1, Debian's package) not found"
ensure_k6
data=$(test_data)
[ "${STACK_SKIP_BUILD:-0}" = 1 ] || "$ROOT/scripts/stack-images.sh" all

teardown() {
  if [ "${STACK_KEEP:-0}" = 1 ]; then
    log "STACK_KEEP=1: stack left up (${COMPOSE[*]} down -v)"
    return
  fi
  "${COMPOSE[@]}" logs --no-color --tail=20 >"$RESULTS/last-logs.txt" 2>&1 || true
  "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
}
mkdir -p "$RESULTS"
trap teardown EXIT
stack_up
"$ROOT/scripts/stack-check.sh" --running >&2

before=$(container_stats COMPOSE haproxy api1 api2)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
summary=$RESULTS/$stamp-$mode.k6.json
log "k6 $mode run (load: $(cut -d' ' -f1-3 /proc/loadavg))"
set +e
MODE=$mode TEST_DATA=$data SUMMARY=$summary BASE_URL=http://localhost:9999 \
  k6 run --quiet --no-color "$ROOT/k6/fraud-test.js"
k6_rc=$?
set -e
after=$(container_stats COMPOSE haproxy api1 api2)
print_stats "$before" "$after"
restarts=$(container_states)
log "containers: $restarts"
python3 - "$summary" "$RESULTS/$stamp-$mode.json" "$before" "$after" "$restarts" <<'PY'
import json, sys
k6 = json.load(open(sys.argv[1]))
out = {"k6": k6, "containers_before": json.loads(sys.argv[3]), "containers_after": json.loads(sys.argv[4]), "containers": sys.argv[5]}
json.dump(out, open(sys.argv[2], "w"), indent=2)
PY
rm -f "$summary"
log "results: $RESULTS/$stamp-$mode.json"
echo "$restarts" | grep -q "oomkilled=true" && die "a container was OOM-killed"
echo "$restarts" | grep -q "running=false" && die "a container is not running after the test"
if [ $k6_rc -ne 0 ]; then
  die "k6 exited $k6_rc (thresholds: no HTTP error, FP or FN in smoke mode)"
fi
python3 - "$RESULTS/$stamp-$mode.json" "$mode" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["k6"]
bad = r["errors"] + r["fp"] + r["fn"]
if sys.argv[2] == "smoke" and (bad or r["requests"] == 0):
    sys.exit(f"smoke failed: errors {r['errors']} FP {r['fp']} FN {r['fn']} requests {r['requests']}")
PY
