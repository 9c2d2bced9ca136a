#!/usr/bin/env bash
# The whole test suite (what CI runs): installs what it needs, then `cargo xtask ci`:
# formatting, the workspace build linted by clippy, unit and property tests, the public test set
# and the neighbour-level comparison with the labeller, fuzzing, the Lambda binary under AWS's
# emulator and `sam build`, and the contest stack's gates (smoke, instance loss, overload) in
# docker compose. `scripts/test.sh --quick` is the loop of a change (README, "Checking").
set -euo pipefail
cd "$(dirname "$0")/.."
# The build's Debian packages install while cargo downloads the crates; the build then reports
# anything that could not be fetched.
scripts/setup.sh build &
setup=$!
cargo fetch --quiet || true
wait "$setup"
target="${CARGO_TARGET_DIR:-target}"
# The harness binary, built as the workspace build builds it: features resolved over the whole
# workspace and clippy's lints on (xtask's `util::linted`), so that the workspace build reuses
# every unit it compiled. `cargo xtask` resolves xtask's features alone and compiled some 150
# crates a second time (134 s of the 2 cores' work).
build_xtask() {
    RUSTC_WORKSPACE_WRAPPER=clippy-driver CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__ \
        cargo build --quiet --profile ci --workspace --all-features --bin xtask
}
if [[ " $* " == *" --quick "* ]]; then
    build_xtask
    exec "$target/ci/xtask" ci "$@"
fi
# The test tools download and install while the workspace compiles (network against CPU); the
# CI's build step then finds the build done (or reports why it failed).
log="$target/setup-tools.log"
mkdir -p "$(dirname "$log")"
scripts/setup.sh tools >"$log" 2>&1 &
tools=$!
build_ok=true
build_xtask && "$target/ci/xtask" build || build_ok=false
if ! wait "$tools"; then
    cat "$log" >&2
    echo "test.sh: scripts/setup.sh tools failed (above)" >&2
    exit 1
fi
cat "$log"
if [ "$build_ok" = false ] && [ ! -x "$target/ci/xtask" ]; then
    echo "test.sh: the harness did not build (above)" >&2
    exit 1
fi
exec "$target/ci/xtask" ci "$@"
