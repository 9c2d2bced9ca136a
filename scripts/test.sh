#!/usr/bin/env bash
# The whole test suite (what CI runs): installs what it needs, then `cargo xtask ci`:
# formatting, lints, unit and property tests, the public test set and the neighbour-level
# comparison with the labeller, fuzzing, the Lambda binary under AWS's emulator and `sam build`,
# and the contest stack's gates (smoke, instance loss, overload) in docker compose.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec cargo xtask ci "$@"
