#!/bin/sh
# Builds gabrielrauch/rinha-2026's two images from a checkout of its source, without a registry:
#   gabrielrauch-rinha-2026:local     the API: static `server` (monoio, KD-tree) + its blob
#   gabrielrauch-rinha-2026-lb:local  the SCM_RIGHTS socket-passing balancer `lb`
#
#   git clone https://github.com/gabrielrauch/rinha-2026 DIR   # measured at 819c9f5 (main)
#   docker/peer/build.sh DIR                                    # ~70 s after the first build
#
# What its own Dockerfiles do (rust:1.84 builder, distroless runtime), changed only where this
# machine needs it: the machine's stable toolchain (its rust-toolchain.toml pins 1.84, which
# cannot be fetched here); the contest's references from this repository (its Dockerfile ADDs
# them from GitHub); static binaries (+crt-static) in images FROM scratch instead of
# distroless/cc; -C target-cpu=haswell for server and lb as in its Dockerfiles.
# KD-tree leaf size 256 by default: what its submission's last image (4bc2f00) was built with;
# PEER_LEAF_SIZE=128 gives its main branch's default. Build outputs go to DIR/target-fraud and
# DIR/build-fraud.
set -eu
SRC=$(cd "${1:?usage: docker/peer/build.sh PEER_SOURCE_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
REFS=$(cd "$HERE/../.." && pwd)/resources/references.json.gz
LEAF=${PEER_LEAF_SIZE:-256}
OUT="$SRC/build-fraud"
TRIPLE=x86_64-unknown-linux-gnu
export RUSTUP_TOOLCHAIN="${RUSTUP_TOOLCHAIN:-stable}"
export CARGO_TARGET_DIR="$SRC/target-fraud"

cd "$SRC"
echo "peer: builder (host flags)"
cargo build --locked --release -p builder
mkdir -p "$OUT/resources" "$OUT/api/index" "$OUT/lb"
cp resources/mcc_risk.json resources/normalization.json "$OUT/resources/"
ln -sf "$REFS" "$OUT/resources/references.json.gz"
echo "peer: blob (leaf $LEAF)"
"$CARGO_TARGET_DIR/release/builder" "$OUT/resources" "$OUT/api/index/blob.bin" "$LEAF"

echo "peer: server and lb (static, haswell)"
RUSTFLAGS="-C target-cpu=haswell -C target-feature=+crt-static" \
    cargo build --locked --release --target "$TRIPLE" -p server -p lb
cp "$CARGO_TARGET_DIR/$TRIPLE/release/server" "$OUT/api/server"
cp "$CARGO_TARGET_DIR/$TRIPLE/release/lb" "$OUT/lb/lb"
for b in "$OUT/api/server" "$OUT/lb/lb"; do
    if readelf -l "$b" | grep -q INTERP; then
        echo "peer: $b is not static (it names a program interpreter)" >&2
        exit 1
    fi
done

docker build -q -f "$HERE/api.Dockerfile" -t gabrielrauch-rinha-2026:local "$OUT/api"
docker build -q -f "$HERE/lb.Dockerfile" -t gabrielrauch-rinha-2026-lb:local "$OUT/lb"
docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^gabrielrauch-rinha-2026'
