#!/usr/bin/env bash
# Builds the local stand-in for the Lambda base image public.ecr.aws/lambda/provided:al2023-x86_64
# (docker/lambda-base/), so that `sam local invoke` runs where no registry can be pulled from.
# Idempotent: does nothing when an image with that name exists (FORCE=1 rebuilds it).
#
# The root filesystem comes from this machine's Debian packages: busybox-static (the /bin/sh,
# mv and chmod that SAM's derived "rapid" image runs at build time) and the glibc runtime
# libraries, for a dynamically linked bootstrap (ours is static and needs none of them).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${LAMBDA_BASE_IMAGE:-public.ecr.aws/lambda/provided:al2023-x86_64}
if [ "${FORCE:-0}" != 1 ] && docker image inspect "$IMAGE" > /dev/null 2>&1; then
  echo "lambda-base-image: $IMAGE exists (FORCE=1 to rebuild)"
  exit 0
fi
if [ ! -x /bin/busybox ] && [ ! -x /usr/bin/busybox ]; then
  apt-get install -y -q busybox-static > /dev/null || { apt-get update -q > /dev/null && apt-get install -y -q busybox-static > /dev/null; }
fi
busybox=$(command -v busybox)
if ldd "$busybox" > /dev/null 2>&1; then
  echo "lambda-base-image: $busybox is not static (install busybox-static)" >&2
  exit 1
fi

ctx=${CARGO_TARGET_DIR:-target}/lambda-base
rm -rf "$ctx"
root=$ctx/rootfs
mkdir -p "$root"/{bin,usr/bin,usr/local/bin,lib64,etc,var/task,var/runtime,var/rapid,opt,tmp,dev,proc,sys}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for tool in sh ash mv cp chmod rm ls cat mkdir ln env echo sleep ps kill; do
  ln -s busybox "$root/bin/$tool"
done
# glibc runtime (AL2023 keeps it in /lib64 = /usr/lib64).
for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libgcc_s.so.1 libpthread.so.0 libdl.so.2 librt.so.1; do
  src=$(ls /lib/x86_64-linux-gnu/$lib /lib64/$lib 2>/dev/null | head -1 || true)
  [ -n "$src" ] && cp -L "$src" "$root/lib64/$lib"
done
ln -s ../lib64 "$root/usr/lib64"
printf 'root:x:0:0:root:/root:/bin/sh\nsbx_user1051:x:993:990::/home/sbx_user1051:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nsbx_user1051:x:990:\n' > "$root/etc/group"
printf 'NAME="Amazon Linux (local stand-in)"\nVERSION="2023"\nID="amzn"\n' > "$root/etc/os-release"
cp docker/lambda-base/lambda-entrypoint.sh "$root/lambda-entrypoint.sh"
chmod 755 "$root/lambda-entrypoint.sh"
tar --owner=0 --group=0 -C "$root" -cf "$ctx/rootfs.tar" .
cp docker/lambda-base/Dockerfile "$ctx/Dockerfile"
docker build -q -t "$IMAGE" "$ctx"
echo "lambda-base-image: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
