# rund: two commands for a newcomer on Debian 12 — `make demo` and `make test`.
CARGO ?= cargo
TARGET_DIR ?= $(CURDIR)/target
BIN_DIR := $(TARGET_DIR)/debug
export RUND_BIN_DIR := $(BIN_DIR)

.PHONY: all deps build demo test test-unit test-integration lint fmt bench bench-quick bench-micro fuzz-quick clean

all: build

deps:
	@sh deploy/install-deps.sh

# rund-init runs inside containers that may have no libc: it is linked static.
build: deps
	$(CARGO) build --workspace --bins
	$(CARGO) rustc -q -p rund-init --bin rund-init -- -C target-feature=+crt-static

# Builds, starts a private containerd and runs containers through rund.
demo: build
	@sh deploy/demo.sh $(BIN_DIR)

# The whole suite: lint, unit tests of every crate, then the integration
# tests against a private containerd 1.6 (they need root).
test: build lint test-unit test-integration

lint:
	$(CARGO) fmt --all -- --check
	rustfmt --edition 2021 --check fuzz/src/lib.rs fuzz/fuzz_targets/*.rs
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p rund-benches --all-targets --features spec-bench,devices-bench -- -D warnings

test-unit:
	$(CARGO) test --workspace --exclude rund-tests

# Each test binary starts its own containerd; two at a time suit 2 cores.
test-integration:
	RUND_REQUIRE_BINS=1 $(CARGO) test -p rund-tests -- --test-threads=2

fmt:
	$(CARGO) fmt --all
	rustfmt --edition 2021 fuzz/src/lib.rs fuzz/fuzz_targets/*.rs

# rund against runc-v2 side by side on one private containerd; results in
# target/bench/ (results.json, plot.svg). BENCH_ARGS passes flags through.
bench: deps
	$(CARGO) build --release -p rund-shim -p rund-agent -p rund-benches
	$(CARGO) rustc -q --release -p rund-init --bin rund-init -- -C target-feature=+crt-static
	RUND_BIN_DIR=$(TARGET_DIR)/release $(TARGET_DIR)/release/rund-bench $(BENCH_ARGS)

bench-quick: deps
	$(CARGO) build --release -p rund-shim -p rund-agent -p rund-benches
	$(CARGO) rustc -q --release -p rund-init --bin rund-init -- -C target-feature=+crt-static
	RUND_BIN_DIR=$(TARGET_DIR)/release $(TARGET_DIR)/release/rund-bench --quick $(BENCH_ARGS)

# criterion micro-benches (cgroup claim vs mkdir, spec processing, device scan).
bench-micro: deps
	$(CARGO) bench -p rund-benches --features spec-bench,devices-bench

# cargo fuzz on the parsers of untrusted input (fuzz/README.md), each target
# for FUZZ_SECONDS on the committed corpus; not part of `make test`. New
# inputs go to fuzz/target/corpus-new, crashing ones to fuzz/artifacts.
# cargo fuzz needs -Z flags: RUSTC_BOOTSTRAP=1 lets stable take them.
FUZZ_SECONDS ?= 30
FUZZ_TARGETS ?= spec_config annotations devices fdpass launch lease_file cdi_spec cgroup_path
fuzz-quick:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	cd fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz build
	@cd fuzz; failed=""; for t in $(FUZZ_TARGETS); do \
		mkdir -p target/corpus-new/$$t; log=target/fuzz-$$t.log; \
		dict=""; [ -f dict/$$t.dict ] && dict="-dict=dict/$$t.dict"; \
		if RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t target/corpus-new/$$t corpus/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 $$dict >$$log 2>&1; \
		then echo "$$t: ok, $$(grep -o 'number_of_executed_units: [0-9]*' $$log | cut -d' ' -f2) runs"; \
		else tail -n 30 $$log; echo "$$t: FAILED (log $$log, input in fuzz/artifacts/$$t)"; failed="$$failed $$t"; fi; \
	done; [ -z "$$failed" ] || { echo "failed:$$failed"; exit 1; }

clean:
	$(CARGO) clean
