#!/bin/sh
# Entry point of the provided.al2023 stand-in: outside Lambda (no AWS_LAMBDA_RUNTIME_API), run
# the bootstrap under the Runtime Interface Emulator when the image carries one, as the real
# image does; inside Lambda (or under an emulator that set the variable), run it directly.
if [ -z "${AWS_LAMBDA_RUNTIME_API:-}" ] && [ -x /usr/local/bin/aws-lambda-rie ]; then
  exec /usr/local/bin/aws-lambda-rie /var/runtime/bootstrap "$@"
fi
for b in /var/runtime/bootstrap /var/task/bootstrap /opt/bootstrap; do
  [ -x "$b" ] && exec "$b" "$@"
done
echo "lambda-entrypoint: no bootstrap in /var/runtime, /var/task or /opt" >&2
exit 1
