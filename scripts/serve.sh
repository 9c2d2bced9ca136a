#!/usr/bin/env bash
# Sets up, builds (the first build compiles faiss and packs the index) and serves the scorer
# with the embedded index. Extra arguments go to `local-runner serve` (default 127.0.0.1:9999).
# The build is the one CI and scripts/test.sh make (`cargo xtask build`), so the tests reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
cargo xtask build --bin local-runner
exec "${CARGO_TARGET_DIR:-target}/ci/local-runner" serve "$@"
