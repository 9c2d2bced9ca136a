#!/usr/bin/env bash
# The whole test suite (what CI runs): installs what it needs, then `cargo xtask ci`:
# formatting, the workspace build linted by clippy, unit and property tests, the public test set
# and the neighbour-level comparison with the labeller, fuzzing, the Lambda binary under AWS's
# emulator and `sam build`, and the contest stack's gates (smoke, instance loss, overload) in
# docker compose. `scripts/test.sh --quick` is the loop of a change (README, "Checking").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
if [[ " $* " == *" --quick "* ]]; then
    exec cargo xtask ci "$@"
fi
# The test tools download and install while the workspace compiles (network against CPU); the
# CI's build step then finds the build done (or reports why it failed).
log="${CARGO_TARGET_DIR:-target}/setup-tools.log"
mkdir -p "$(dirname "$log")"
scripts/setup.sh tools >"$log" 2>&1 &
tools=$!
cargo xtask build || true
if ! wait "$tools"; then
    cat "$log" >&2
    echo "test.sh: scripts/setup.sh tools failed (above)" >&2
    exit 1
fi
cat "$log"
exec cargo xtask ci "$@"
