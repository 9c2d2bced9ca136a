#!/usr/bin/env bash
# DIAGNOSTIC: the floor of this machine. HAProxy (same image, port and limits as the contest
# balancer) answers a constant 200 by itself (docker/haproxy/floor.cfg, no APIs), and the same
# k6 scenario as the replica runs against it. Only the latency figures mean anything (every
# fraud is a "FN" here). Usage: scripts/stack-floor.sh [full|smoke]
set -euo pipefail
# shellcheck source=scripts/stack-lib.sh
. "$(dirname "$0")/stack-lib.sh"

mode=${1:-full}
docker info >/dev/null 2>&1 || die "docker info fails: no usable Docker engine"
ensure_k6
data=$(test_data)
[ "${STACK_SKIP_BUILD:-0}" = 1 ] || "$ROOT/scripts/stack-images.sh" haproxy
mkdir -p "$RESULTS"
trap '"${FLOOR_COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
"${FLOOR_COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
"${FLOOR_COMPOSE[@]}" up -d 2>&1 | sed 's/^/  /' >&2
wait_http_200 /ready 30 || die "floor HAProxy did not answer"
sleep 1
before=$(container_stats FLOOR_COMPOSE haproxy)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
log "k6 floor $mode run (load: $(cut -d' ' -f1-3 /proc/loadavg))"
MODE=$mode TEST_DATA=$data SUMMARY=$RESULTS/$stamp-floor-$mode.json BASE_URL=http://localhost:9999 \
  k6 run --quiet --no-color "$ROOT/k6/fraud-test.js" || true
after=$(container_stats FLOOR_COMPOSE haproxy)
print_stats "$before" "$after"
log "results: $RESULTS/$stamp-floor-$mode.json (only latency_ms counts)"
