#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ (see docs/FUZZING.md).
#
#   scripts/fuzz.sh ci                       every target for FUZZ_CI_SECONDS (default 35) each
#   scripts/fuzz.sh long [SECONDS] [TARGET]  every target (or one) for SECONDS (default 1800),
#                                            one after the other, pinned to CPU FUZZ_CPU (0)
#   scripts/fuzz.sh build                    build the targets only
#
# Fails on any crash, panic, sanitizer report, leak, timeout (an input slower than
# FUZZ_TIMEOUT, default 10 s) or out-of-memory. Prints executions per target. libFuzzer's
# growing corpora live in fuzz/work/<target> (not committed); the committed seeds in
# fuzz/corpus/<target> are only read. Crash inputs land in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
# 35 s keeps the CI addition (cold build + 3 targets) within ~4 minutes on 2 cores.
ci) seconds=${FUZZ_CI_SECONDS:-35} ;;
long) seconds=${2:-1800} ;;
build) seconds=0 ;;
*)
    echo "usage: scripts/fuzz.sh ci | long [SECONDS] [TARGET] | build" >&2
    exit 2
    ;;
esac

command -v cargo-fuzz >/dev/null 2>&1 || scripts/setup.sh

# cargo fuzz needs nightly for -Zsanitizer=address. A machine may have only the stable
# toolchain (no other can be fetched offline); stable ships the same sanitizer runtimes, so
# RUSTC_BOOTSTRAP lets it accept the flag.
if rustup run nightly rustc --version >/dev/null 2>&1; then
    fuzz=(cargo +nightly fuzz)
    toolchain="nightly ($(rustup run nightly rustc --version))"
else
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
    toolchain="stable with RUSTC_BOOTSTRAP=1 ($(rustc --version))"
fi
echo "fuzz: $toolchain, cargo-fuzz $(cargo fuzz --version 2>/dev/null | awk '{print $2}'), AddressSanitizer on"

cd fuzz
started=$(date +%s)
# Release build with debug assertions and overflow checks (cargo fuzz's default), ASan on.
"${fuzz[@]}" build
echo "fuzz: build took $(($(date +%s) - started)) s"
[ "$mode" = build ] && exit 0

targets=$("${fuzz[@]}" list)
if [ "$mode" = long ] && [ -n "${3:-}" ]; then
    targets=$3
fi
pin=()
if [ "$mode" = long ]; then
    # The benchmarks of the search run on CPU 1: long runs stay on one core, at low priority.
    pin=(taskset -c "${FUZZ_CPU:-0}" nice -n 10)
fi

mkdir -p work/logs
summary=()
failed=0
for t in $targets; do
    mkdir -p "work/$t" "artifacts/$t" "corpus/$t"
    args=(
        -max_total_time="$seconds"
        -timeout="${FUZZ_TIMEOUT:-10}"
        -rss_limit_mb=2048
        -print_final_stats=1
        -artifact_prefix="artifacts/$t/"
    )
    [ -f "dict/$t.dict" ] && args+=(-dict="dict/$t.dict")
    # CI explores the same mutations every time (fixed seed): a failure there is reproducible,
    # not luck. Long runs keep libFuzzer's random seed.
    [ "$mode" = ci ] && args+=(-seed=1)
    [ -f "options/$t.max_len" ] && args+=(-max_len="$(cat "options/$t.max_len")")
    log=work/logs/$t.log
    echo "== fuzz $t: $seconds s =="
    t0=$(date +%s)
    rc=0
    # The outer timeout is a backstop for a fuzzer that stops reporting (a hang outside an
    # input's own timeout); libFuzzer ends by itself at max_total_time.
    timeout $((seconds + 300)) "${pin[@]}" "${fuzz[@]}" run "$t" "work/$t" "corpus/$t" -- \
        "${args[@]}" >"$log" 2>&1 || rc=$?
    elapsed=$(($(date +%s) - t0))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
    corpus=$(find "work/$t" -type f | wc -l)
    if [ "$rc" -ne 0 ] || [ -z "$execs" ]; then
        failed=1
        status="FAILED (exit $rc)"
        echo "---- last lines of fuzz/$log ----"
        tail -n 60 "$log"
        find "artifacts/$t" -type f | sed 's/^/artifact: fuzz\//'
    else
        status=ok
    fi
    rate=$(( ${execs:-0} / (elapsed > 0 ? elapsed : 1) ))
    line="$t: $status, ${execs:-?} executions in $elapsed s ($rate/s), corpus $corpus new + $(find "corpus/$t" -type f | wc -l) seeds, peak RSS ${rss:-?} MB"
    echo "$line"
    summary+=("$line")
done
echo "== fuzz summary ($mode, $(date -u +%Y-%m-%dT%H:%MZ)) =="
printf '%s\n' "${summary[@]}"
echo "fuzz: total $(($(date +%s) - started)) s"
exit $failed
