#!/usr/bin/env bash
# The whole test suite: unit and property tests, the public test set through the embedded index,
# the Lambda binary under AWS's emulator, and a smoke run of the contest stack in docker compose.
# Installs what it needs (idempotently). Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "== cargo test (release: shares the build with the binaries) =="
cargo test --release --workspace

echo "== verify: 54,100 exact answers; vectors and 5 neighbours against the labeller (cargo xtask verify) =="
cargo xtask verify

echo "== fuzz: every cargo-fuzz target briefly, under AddressSanitizer (docs/FUZZING.md) =="
scripts/fuzz.sh ci

# The Lambda binary and the stack image embed the same index for other targets: reuse the artifact
# packed by the build above (the build script checks it) instead of packing it once more per
# target (20-50 s each on 2 cores).
if [ -z "${FRAUD_INDEX_ARTIFACT_IN:-}" ]; then
    FRAUD_INDEX_ARTIFACT_IN=$(ls -t "$PWD"/target/release/build/function-*/out/fraud-index.idx | head -n 1)
    export FRAUD_INDEX_ARTIFACT_IN
fi

for extra in scripts/ci-lambda.sh scripts/ci-stack-smoke.sh; do
    if [ -x "$extra" ]; then
        echo "== $extra =="
        "$extra"
    fi
done
echo "== all tests passed =="
