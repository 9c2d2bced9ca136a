# `sam build` entry (template.yaml, BuildMethod makefile): SAM runs `make build-FraudScoreFunction`
# in this directory with ARTIFACTS_DIR set. The target runs the same build as the emulator tests
# (`cargo xtask lambda`): target x86_64-unknown-linux-gnu, static glibc, stripped, the index
# artifact of the workspace build reused; cargo does nothing when that binary is up to date. It
# then copies exactly that binary (checked: static, x86_64) into the artifact directory.
.PHONY: build-FraudScoreFunction
build-FraudScoreFunction:
	cargo xtask lambda build --artifacts-dir "$(ARTIFACTS_DIR)"
