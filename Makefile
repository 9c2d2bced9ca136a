# `sam build` entry (template.yaml, BuildMethod makefile): SAM runs `make build-FraudScoreFunction`
# in this directory with ARTIFACTS_DIR set. The target runs the same build as the emulator tests
# (`cargo xtask lambda`): target x86_64-unknown-linux-gnu, static glibc, stripped, the index
# artifact of the workspace build reused; cargo does nothing when that binary is up to date. It
# then copies exactly that binary (checked: static, x86_64) into the artifact directory.
.PHONY: build-FraudScoreFunction
build-FraudScoreFunction:
	cargo xtask lambda build --artifacts-dir "$(ARTIFACTS_DIR)"

# The PreTraffic hook (template.yaml's PreTrafficHook): deploy-hook's static `pretraffic` as
# `bootstrap`, and beside it the labelled sample (`labeller deploy-sample` over the references
# the scorer's index was built from).
.PHONY: build-PreTrafficHook
build-PreTrafficHook:
	cargo xtask lambda build --hook --artifacts-dir "$(ARTIFACTS_DIR)"

# The front over shards (template-sharded.yaml's Front): fan-out's static `front` as `bootstrap`.
.PHONY: build-Front
build-Front:
	cargo xtask lambda build --front --artifacts-dir "$(ARTIFACTS_DIR)"
