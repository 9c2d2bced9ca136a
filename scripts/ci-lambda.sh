#!/usr/bin/env bash
# The Lambda gate as scripts/test.sh calls it: `cargo xtask lambda` (xtask/src/lambda/run.rs,
# docs/LAMBDA.md). Arguments are passed on (`--help` lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo xtask lambda "$@"
