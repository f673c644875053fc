# rund: two commands for a newcomer on Debian 12 — `make demo` and `make test`.
CARGO ?= cargo
TARGET_DIR ?= $(CURDIR)/target
BIN_DIR := $(TARGET_DIR)/debug
export RUND_BIN_DIR := $(BIN_DIR)

.PHONY: all deps build demo test test-unit test-integration lint fmt bench bench-quick bench-micro soak clean

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
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p rund-benches --all-targets --features spec-bench,devices-bench -- -D warnings

test-unit:
	$(CARGO) test --workspace --exclude rund-tests

# Each test binary starts its own containerd; two at a time suit 2 cores.
test-integration:
	RUND_REQUIRE_BINS=1 $(CARGO) test -p rund-tests -- --test-threads=2

fmt:
	$(CARGO) fmt --all

# Not in `make test` (long): 1000 create/exec/delete cycles in one pod, then
# 200 pods at once; prints latency first-100 vs last-100, fds/RSS over time,
# dying memcgs and every leak counter, and fails on any failure or leak.
# RUND_SOAK_CYCLES and RUND_SOAK_CONCURRENCY change the sizes.
soak: build
	RUND_REQUIRE_BINS=1 $(CARGO) test -p rund-tests --test soak -- --ignored --nocapture --test-threads=1

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

clean:
	$(CARGO) clean
