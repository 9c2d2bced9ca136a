#!/usr/bin/env bash
# Sets up, builds (the first build compiles faiss and packs the index) and serves the scorer
# with the embedded index. Extra arguments go to `local-runner serve` (default 127.0.0.1:9999).
# Only what local-runner needs is built, with its own features (the tests' build, which
# resolves the whole workspace's, reuses faiss and the packed index but compiles the rest
# again): a newcomer's first answer comes first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
cargo build --quiet --profile ci --package local-runner --bin local-runner
exec "${CARGO_TARGET_DIR:-target}/ci/local-runner" serve "$@"
