#!/usr/bin/env bash
# Builds the two images docker-compose.yml names, without any registry:
#   fraud-api:latest  FROM scratch + the static local-runner (index embedded), built for the
#                     contest CPU (-C target-cpu=haswell), running as uid 65534;
#   haproxy:2.6       stand-in for the public image, from Debian's haproxy package (2.6.x).
#
# Usage: scripts/stack-images.sh [api|haproxy|all]   (default all)
# Env:   STACK_TARGET_DIR  cargo target dir for the static build (default target/image, so the
#                          normal target/ is not invalidated; CI passes target/ to reuse the
#                          host build of faiss and the index packer).
# Idempotent: cargo and docker only redo what changed.
set -euo pipefail
# shellcheck source=scripts/stack-lib.sh
. "$(dirname "$0")/stack-lib.sh"

what=${1:-all}
TARGET_DIR=${STACK_TARGET_DIR:-$ROOT/target/image}
TRIPLE=x86_64-unknown-linux-gnu
WORK=$ROOT/target/stack-images

build_api() {
  log "building the static local-runner (target dir $TARGET_DIR; first build packs the index, a few minutes)"
  # --target keeps RUSTFLAGS off build scripts and host tools (faiss, the index packer).
  (cd "$ROOT" && RUSTFLAGS="-C target-cpu=haswell -C target-feature=+crt-static" \
    cargo build --release -p local-runner --target "$TRIPLE" --target-dir "$TARGET_DIR")
  local bin=$TARGET_DIR/$TRIPLE/release/local-runner
  # ldd prints "statically linked" (static-pie) or "not a dynamic executable" for static files.
  if ldd "$bin" 2>&1 | grep -q '=>'; then
    die "$bin is dynamically linked; expected a static binary"
  fi
  local ctx=$WORK/api stage=$WORK/api/rootfs
  rm -rf "$stage" && mkdir -p "$stage/etc" "$stage/sock"
  cp "$bin" "$stage/local-runner"
  printf 'root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534:nobody:/:/nonexistent\n' >"$stage/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$stage/etc/group"
  chmod 0755 "$stage/local-runner"
  chmod 1777 "$stage/sock"
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -C "$stage" -cf "$ctx/rootfs.tar" .
  cp "$ROOT/docker/api/Dockerfile" "$ctx/Dockerfile"
  docker build -q -t fraud-api:latest "$ctx" >/dev/null
  log "fraud-api:latest built ($(du -h "$bin" | cut -f1) binary)"
}

build_haproxy() {
  if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
    log "installing Debian's haproxy (for the stand-in image)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy >&2 || {
      apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy >&2
    }
  fi
  local hap
  hap=$(command -v haproxy || echo /usr/sbin/haproxy)
  local ver
  ver=$("$hap" -v | sed -n 's/^HAProxy version \([0-9]*\.[0-9]*\).*/\1/p')
  [ "$ver" = 2.6 ] || die "Debian's haproxy is $ver; docker-compose.yml names haproxy:2.6 (change both together)"
  local ctx=$WORK/haproxy stage=$WORK/haproxy/rootfs
  rm -rf "$stage" && mkdir -p "$stage/usr/local/sbin" "$stage/usr/local/etc/haproxy" "$stage/etc" "$stage/var/lib/haproxy" "$stage/tmp" "$stage/sock"
  cp "$hap" "$stage/usr/local/sbin/haproxy"
  # Every library ldd lists (and the loader), at the same paths, symlinks resolved.
  local lib
  for lib in $(ldd "$hap" | grep -o '/[^ ]*'); do
    mkdir -p "$stage$(dirname "$lib")"
    cp -L "$lib" "$stage$lib"
  done
  cp "$ROOT/docker/haproxy/haproxy.cfg" "$stage/usr/local/etc/haproxy/haproxy.cfg"
  printf 'root:x:0:0:root:/root:/nonexistent\nhaproxy:x:99:99:haproxy:/var/lib/haproxy:/nonexistent\n' >"$stage/etc/passwd"
  printf 'root:x:0:\nhaproxy:x:99:\n' >"$stage/etc/group"
  # /sock as in the API image (1777), so the shared volume gets the same mode whichever
  # container mounts it first.
  chmod 1777 "$stage/tmp" "$stage/sock"
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -C "$stage" -cf "$ctx/rootfs.tar" .
  cp "$ROOT/docker/haproxy/Dockerfile" "$ctx/Dockerfile"
  docker build -q -t haproxy:2.6 "$ctx" >/dev/null
  log "haproxy:2.6 stand-in built from $("$hap" -v | head -1)"
}

mkdir -p "$WORK/api" "$WORK/haproxy"
case $what in
  api) build_api ;;
  haproxy) build_haproxy ;;
  all) build_haproxy; build_api ;;
  *) die "usage: $0 [api|haproxy|all]" ;;
esac
