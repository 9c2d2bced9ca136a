#!/usr/bin/env bash
# Sets up, builds (the first build compiles faiss and packs the index) and serves the scorer
# with the embedded index. Extra arguments go to `local-runner serve` (default 127.0.0.1:9999).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
cargo build --release -p local-runner
exec target/release/local-runner serve "$@"
