#!/usr/bin/env bash
# Installs the system packages the build needs (faiss is compiled from source by the faiss-sys
# crate: cmake and OpenBLAS), and rustfmt/clippy. Idempotent; needs root for apt-get.
set -euo pipefail
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
dpkg -s libopenblas-dev >/dev/null 2>&1 || need+=(libopenblas-dev)
command -v g++ >/dev/null 2>&1 || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi
if command -v rustup >/dev/null 2>&1; then
    rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
    rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
# cargo-fuzz for scripts/fuzz.sh (pinned; ~1 min to build once, then cached in ~/.cargo/bin).
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
