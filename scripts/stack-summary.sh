#!/usr/bin/env bash
# One line per result in target/stack-results (or $STACK_RESULTS): mode, requests, dropped
# iterations, FP/FN/errors, p50/p99, contest score, and per-container throttling and peak memory.
set -euo pipefail
# shellcheck source=scripts/stack-lib.sh
. "$(dirname "$0")/stack-lib.sh"
python3 - "$RESULTS" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    d = json.load(open(f))
    k = d.get("k6", d)
    if "latency_ms" not in k or "-chaos-" in f or "-overload-" in f:  # resilience runs: their own JSON
        continue
    kind = "floor" if "floor" in os.path.basename(f) else "stack"
    extra = ""
    if "containers_after" in d:
        b = {r["service"]: r for r in d["containers_before"]}
        extra = " ".join(
            f'{r["service"]}:throttled={int(r["nr_throttled"]) - int(b[r["service"]]["nr_throttled"])},peak={int(r["memory_peak"]) / 2**20:.1f}M'
            for r in d["containers_after"])
    score = "" if kind == "floor" else f' score={k["final_score"]:.1f}'
    print(f'{os.path.basename(f)[:16]} {kind:5s} {k["mode"]:5s} n={k["requests"]} dropped={k["dropped_iterations"]} '
          f'fp={k["fp"]} fn={k["fn"]} err={k["errors"]} p50={k["latency_ms"]["med"]:.2f} p99={k["latency_ms"]["p99"]:.2f}{score} {extra}')
PY
