#!/usr/bin/env bash
# The SAM workflow, offline: `sam validate --lint`, `sam build`, then `sam local invoke` of sample
# events in Docker (against the stand-in for the Lambda base image that
# scripts/lambda-base-image.sh builds when no registry is reachable).
#
#   scripts/lambda-sam.sh                 validate + build + invoke events/apigw-v2/{legit,fraud,malformed,ready}
#   scripts/lambda-sam.sh build           validate + build only
#   scripts/lambda-sam.sh invoke EVENT..  invoke these events (after a build)
#
# `sam build` uses BuildMethod rust-cargolambda (template.yaml): SAM runs `cargo lambda build
# --release --bin bootstrap` in function/. SAM passes no cargo flags, so the settings reach
# cargo-lambda through its global configuration file (CARGO_LAMBDA_GLOBAL), written here:
# feature `lambda`, plain cargo as the compiler (no zig: the build script compiles native code
# for the host), and the workspace's own release profile (no cargo-lambda profile overrides).
# The static glibc flag and the reused index artifact come from lambda_build_env, so this build
# shares its artifacts with scripts/ci-lambda.sh. The result is in .aws-sam/build/.
set -euo pipefail
# shellcheck source=scripts/lambda-common.sh
source "$(dirname "$0")/lambda-common.sh"
cd "$LAMBDA_ROOT"
mode=${1:-all}
[ $# -gt 0 ] && shift

lambda_tools all
export PATH=$LAMBDA_VENV/bin:$PATH

sam_build() {
  "$SAM" validate --lint --template template.yaml
  lambda_build_env
  mkdir -p "$LAMBDA_TARGET_DIR/lambda-sam"
  cat > "$LAMBDA_TARGET_DIR/lambda-sam/CargoLambda.toml" <<'EOF'
[build]
features = ["lambda"]
disable_optimizations = true

[build.compiler]
type = "cargo"
EOF
  export CARGO_LAMBDA_GLOBAL=$LAMBDA_TARGET_DIR/lambda-sam/CargoLambda.toml
  if ! "$SAM" build --beta-features --template template.yaml; then
    [ -n "${FRAUD_INDEX_ARTIFACT_IN:-}" ] || return 1
    lambda_log "sam build failed with the reused index artifact; packing the index from the references"
    unset FRAUD_INDEX_ARTIFACT_IN
    "$SAM" build --beta-features --template template.yaml
  fi
  ls -l .aws-sam/build/FraudScoreFunction/bootstrap
}

sam_invoke() {
  bash scripts/lambda-base-image.sh
  mkdir -p "$LAMBDA_TARGET_DIR/lambda-sam"
  local ev out status=0
  for ev in "$@"; do
    lambda_log "sam local invoke FraudScoreFunction -e $ev --skip-pull-image"
    out=$("$SAM" local invoke FraudScoreFunction -e "$ev" --skip-pull-image \
      --template .aws-sam/build/template.yaml 2> "$LAMBDA_TARGET_DIR/lambda-sam/invoke.log") || status=1
    echo "$out"
    if ! printf '%s' "$out" | grep -q '"statusCode"'; then
      status=1
      tail -20 "$LAMBDA_TARGET_DIR/lambda-sam/invoke.log" >&2
    fi
  done
  return $status
}

case $mode in
  build) sam_build ;;
  invoke) sam_invoke "$@" ;;
  all)
    sam_build
    sam_invoke events/apigw-v2/legit.json events/apigw-v2/fraud.json events/apigw-v2/malformed.json \
      events/apigw-v2/ready.json
    ;;
  *) echo "usage: $0 [build | invoke EVENT... | all]" >&2; exit 2 ;;
esac
