# Shared by scripts/ci-lambda.sh and scripts/lambda-*.sh (source it, do not run it).
#
# - lambda_tools: a Python venv with AWS SAM CLI (which ships AWS's Runtime Interface Emulator)
#   and cargo-lambda, installed only when missing; sets SAM, RIE, CARGO_LAMBDA_BIN.
# - lambda_build: the release `bootstrap` (static, so it runs on provided.al2023 whatever the
#   build host's glibc, and stripped), zipped as Lambda wants it; sets BOOTSTRAP, PACKAGE_DIR, ZIP.
#
# Settings (environment):
#   LAMBDA_VENV      venv for the PyPI tools (default ~/.cache/lambda-venv)
#   LAMBDA_MEMORY_MB memory the emulator reports to the function (default 512, as template.yaml)

LAMBDA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LAMBDA_VENV=${LAMBDA_VENV:-$HOME/.cache/lambda-venv}
LAMBDA_MEMORY_MB=${LAMBDA_MEMORY_MB:-512}
LAMBDA_TARGET=x86_64-unknown-linux-gnu
# cargo's target directory (CARGO_TARGET_DIR if set); the scripts' outputs go there too.
LAMBDA_TARGET_DIR=${CARGO_TARGET_DIR:-$LAMBDA_ROOT/target}
LAMBDA_OUT=$LAMBDA_TARGET_DIR/lambda-package
# SAM CLI would otherwise send usage telemetry: nothing here talks to AWS.
export SAM_CLI_TELEMETRY=0

lambda_log() { printf '[lambda %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# Installs (once) and locates the tools. $1 = "sam" (SAM CLI only) or "all" (also cargo-lambda).
lambda_tools() {
  local want=${1:-sam}
  if ! "$LAMBDA_VENV/bin/python" -c 'import samcli' 2>/dev/null; then
    lambda_log "installing aws-sam-cli into $LAMBDA_VENV"
    rm -rf "$LAMBDA_VENV"
    if ! python3 -m venv "$LAMBDA_VENV"; then
      # Debian's python3 ships venv separately.
      rm -rf "$LAMBDA_VENV"
      apt-get install -y -q python3-venv > /dev/null || { apt-get update -q > /dev/null && apt-get install -y -q python3-venv > /dev/null; }
      python3 -m venv "$LAMBDA_VENV"
    fi
    "$LAMBDA_VENV/bin/pip" install -q --disable-pip-version-check aws-sam-cli
  fi
  if [ "$want" = all ] && [ ! -x "$LAMBDA_VENV/bin/cargo-lambda" ]; then
    lambda_log "installing cargo-lambda into $LAMBDA_VENV"
    "$LAMBDA_VENV/bin/pip" install -q --disable-pip-version-check cargo-lambda
  fi
  SAM=$LAMBDA_VENV/bin/sam
  RIE=$("$LAMBDA_VENV/bin/python" -c \
    'import os, samcli; print(os.path.join(os.path.dirname(samcli.__file__), "local", "rapid", "aws-lambda-rie-x86_64"))')
  [ -x "$RIE" ] || chmod +x "$RIE"
  CARGO_LAMBDA_BIN=$LAMBDA_VENV/bin/cargo-lambda
  export SAM RIE CARGO_LAMBDA_BIN
}

# The build environment of the bootstrap, exported for cargo (and for cargo-lambda under SAM):
# - RUSTFLAGS: static glibc, no symbols (a smaller package). provided.al2023 has glibc 2.34,
#   older than many build hosts; a static binary does not care (and needs nothing from the
#   image). With an explicit --target only the target crates get these flags, so build scripts
#   and their dependencies are shared with the workspace build.
# - FRAUD_INDEX_ARTIFACT_IN: the index artifact that the workspace build already packed
#   (build.rs checks it in full before embedding it), instead of packing 3M references again.
#   The copy keeps a fixed path and the source's mtime, so build.rs reruns only when the
#   artifact's content changes. LAMBDA_PACK_INDEX=1 packs from the references instead, and so
#   does an artifact older than the packer's sources.
lambda_build_env() {
  cd "$LAMBDA_ROOT"
  case " ${RUSTFLAGS:-} " in
    *crt-static*) ;;
    *) export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C strip=symbols" ;;
  esac
  if [ -z "${FRAUD_INDEX_ARTIFACT_IN:-}" ] && [ "${LAMBDA_PACK_INDEX:-0}" != 1 ]; then
    local artifact reuse=$LAMBDA_TARGET_DIR/lambda-index.idx
    artifact=$(ls -t "$LAMBDA_TARGET_DIR"/release/build/function-*/out/fraud-index.idx 2>/dev/null | head -1 || true)
    # An artifact older than the packer's sources may be in an older format: pack instead.
    if [ -n "$artifact" ] && [ -n "$(find index-pack function/build.rs -newer "$artifact" -name '*.rs' | head -1)" ]; then
      lambda_log "not reusing $artifact: index-pack changed since it was packed"
      artifact=""
    fi
    if [ -n "$artifact" ] && { cmp -s "$artifact" "$reuse" || cp -p "$artifact" "$reuse"; }; then
      lambda_log "index artifact reused from $artifact"
      export FRAUD_INDEX_ARTIFACT_IN=$reuse
    fi
  fi
}

# Builds target/$LAMBDA_TARGET/release/bootstrap and the deployment package in $LAMBDA_OUT.
lambda_build() {
  lambda_build_env
  local flags=(build --release --target "$LAMBDA_TARGET" -p function --features lambda --bin bootstrap)
  lambda_log "cargo ${flags[*]}"
  if ! cargo "${flags[@]}"; then
    [ -n "${FRAUD_INDEX_ARTIFACT_IN:-}" ] || return 1
    lambda_log "build failed with the reused index artifact; packing the index from the references"
    unset FRAUD_INDEX_ARTIFACT_IN
    cargo "${flags[@]}"
  fi
  BOOTSTRAP=$LAMBDA_TARGET_DIR/$LAMBDA_TARGET/release/bootstrap
  PACKAGE_DIR=$LAMBDA_OUT/bootstrap
  ZIP=$LAMBDA_OUT/bootstrap.zip
  rm -rf "$PACKAGE_DIR" "$ZIP"
  mkdir -p "$PACKAGE_DIR"
  cp "$BOOTSTRAP" "$PACKAGE_DIR/bootstrap"
  lambda_zip "$ZIP" "$PACKAGE_DIR/bootstrap"
  export BOOTSTRAP PACKAGE_DIR ZIP
}

# Zips one executable as "bootstrap" (mode 755), as Lambda wants it, with Python's zipfile at
# zlib's default level: what `sam deploy` uploads is made the same way. (zip(1) may be missing.)
lambda_zip() { # $1 = zip file, $2 = executable
  python3 - "$1" "$2" <<'PY'
import sys, zipfile
info = zipfile.ZipInfo.from_file(sys.argv[2], "bootstrap")
info.external_attr = 0o100755 << 16
with zipfile.ZipFile(sys.argv[1], "w") as z, open(sys.argv[2], "rb") as f:
    z.writestr(info, f.read(), compress_type=zipfile.ZIP_DEFLATED)
PY
}

# Prints "zipped unzipped" package sizes in bytes.
lambda_sizes() {
  printf '%s %s\n' "$(stat -c %s "$ZIP")" "$(stat -c %s "$PACKAGE_DIR/bootstrap")"
}

# A free loopback TCP port.
lambda_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
