# rund: two commands for a newcomer on Debian 12 — `make demo` and `make test`.
CARGO ?= cargo
TARGET_DIR ?= $(CURDIR)/target
BIN_DIR := $(TARGET_DIR)/debug
export RUND_BIN_DIR := $(BIN_DIR)
# Where Debian sid's containerd 2.1 is unpacked (never installed).
RUND_CACHE ?= /var/cache/rund
export RUND_CACHE

.PHONY: all deps build release demo test test-unit test-integration test-integration-1.6 \
	test-integration-2.1 containerd-2.1 vm-deps test-v2 churn-v2 test-rdma-vm lint fmt bench \
	bench-quick bench-micro link-order test-linkorder fuzz-quick soak clean static-bins

all: build

deps:
	@sh deploy/install-deps.sh

build: deps
	$(CARGO) build --workspace --bins
	$(call static_bins,debug,)

# rund-agent and containerd-shim-rund-v2 are linked static-pie (glibc, and
# libseccomp in the agent, inside): a pod's start runs no ld.so and searches
# no library path (containerd hands its children
# LD_LIBRARY_PATH=/opt/containerd/lib:), and an idle shim maps back no
# windows of libc when it is polled. Each is a build of its own, for the host
# triple, since cargo's rustflags cover a whole build and `rund` stays
# dynamic: it dlopens libibverbs and NVML, for itself and for the shim
# (`rund helper`). The result replaces
# the dynamic binaries that any other cargo build puts in
# $(TARGET_DIR)/<profile>; the integration tests install them again first,
# and rund_install's static-pie tests (RUND_REQUIRE_BINS=1) and
# test-linkorder fail on a dynamic one.
HOST_TRIPLE := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
SECCOMP_ENV = LIBSECCOMP_LINK_TYPE=static \
	LIBSECCOMP_LIB_PATH="$$(dirname "$$($${CC:-cc} -print-file-name=libseccomp.a)")"
STATIC_RUSTFLAGS = -C target-feature=+crt-static
STATIC_ENV = RUSTFLAGS="$(STATIC_RUSTFLAGS)" $(SECCOMP_ENV)
STATIC_BINS := rund-agent containerd-shim-rund-v2
# $(1): debug or release; $(2): more environment.
define static_bins
	$(2) $(STATIC_ENV) $(CARGO) build $(if $(filter release,$(1)),--release) -p rund-agent --target $(HOST_TRIPLE)
	$(2) $(STATIC_ENV) $(CARGO) build $(if $(filter release,$(1)),--release) -p rund-shim --bin containerd-shim-rund-v2 --target $(HOST_TRIPLE)
	for b in $(STATIC_BINS); do \
		cp $(TARGET_DIR)/$(HOST_TRIPLE)/$(1)/$$b $(TARGET_DIR)/$(1)/.$$b.static && \
		mv -f $(TARGET_DIR)/$(1)/.$$b.static $(TARGET_DIR)/$(1)/$$b || exit 1; done
endef

static-bins:
	$(call static_bins,debug,)

# Builds, starts a private containerd and runs containers through rund.
demo: build
	@sh deploy/demo.sh $(BIN_DIR)

# The whole suite: lint, unit tests of every crate, then the integration
# tests against a private containerd 1.6 and again against 2.1 (they need root),
# and the release link (test-linkorder).
test: build containerd-2.1 lint test-unit test-integration test-linkorder

lint:
	$(CARGO) fmt --all -- --check
	rustfmt --edition 2021 --check fuzz/src/lib.rs fuzz/fuzz_targets/*.rs
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p rund-benches --all-targets --features spec-bench,devices-bench,keeper-bench -- -D warnings

# RUND_REQUIRE_ALL=1: a test that would skip fails unless tests/skips/host.txt allows it.
test-unit:
	RUND_REQUIRE_ALL=1 $(CARGO) test --workspace --exclude rund-tests

# Each test binary starts its own containerd; two at a time suit 2 cores.
# Every file runs on both lines (about 2.5 minutes each).
test-integration: test-integration-1.6 test-integration-2.1

test-integration-1.6: static-bins
	RUND_IT_CONTAINERD=1.6 RUND_REQUIRE_ALL=1 RUND_REQUIRE_BINS=1 $(CARGO) test -p rund-tests -- --test-threads=2

test-integration-2.1: containerd-2.1 static-bins
	RUND_IT_CONTAINERD=2.1 RUND_REQUIRE_ALL=1 RUND_REQUIRE_BINS=1 $(CARGO) test -p rund-tests -- --test-threads=2

# Debian sid's containerd 2.1.x into $(RUND_CACHE)/containerd-2.1 (cached).
containerd-2.1:
	@sh tests/scripts/fetch-containerd.sh >/dev/null

# The VM suites: Debian 12's kernel under virtme-ng (TCG unless KVM really boots), only
# cgroup2 mounted; results in target/vm/. VM_RUNTIME=io.containerd.runc.v2 runs the rund
# suites against runc; VM_TESTS='bin::test bin' replaces the checked-in list.
VM_RUN = bash tests/vm/run.sh $(if $(VM_RUNTIME),--runtime $(VM_RUNTIME)) \
	$(if $(VM_TESTS),--tests '$(VM_TESTS)')

vm-deps:
	@sh tests/vm/setup.sh

# The integration tests that matter on pure cgroup v2 (tests/vm/v2.list).
test-v2: build vm-deps
	$(VM_RUN) --suite v2

# Not in test-v2 (long, ignored tests): in the v2 VM, pod churn of kubelet-shaped pods for runc
# and rund (default config, and reclaim_on_remove = true) with the dying cgroups left and the
# delete cost, then single-start medians rund vs runc-v2; results in target/vm/churn-v2/logs/.
# containerd's root is on a virtio disk (RUND_VM_BLOCK=0: a loop device) and rund's binaries on
# it too (RUND_VM_LOCAL_BINS=0: the 9p-shared host root), as on a node. RUND_CHURN_PODS
# (default 200) and RUND_CHURN_STARTS (default 10) change the sizes, RUND_CHURN_VARIANTS,
# RUND_CHURN_WORKLOAD and RUND_CHURN_KEEP what is run (see tests/tests/churn_v2.rs);
# RUND_VM_BIN_DIR=$(CURDIR)/target/release measures release binaries.
churn-v2: build vm-deps
	RUND_VM_BLOCK=$${RUND_VM_BLOCK:-1} RUND_VM_TIMEOUT=$${RUND_VM_TIMEOUT:-14400} \
		bash tests/vm/run.sh --suite v2 --tests 'churn_v2' \
		--ignored --timeout 10800 --out $(CURDIR)/target/vm/churn-v2 \
		--env RUND_VM_LOCAL_BINS=$${RUND_VM_LOCAL_BINS:-1} \
		$(foreach v,RUND_CHURN_PODS RUND_CHURN_STARTS RUND_CHURN_VARIANTS RUND_CHURN_WORKLOAD RUND_CHURN_KEEP RUND_VM_BIN_DIR,$(if $($(v)),--env $(v)=$($(v))))

# soft-RoCE (rxe0 on dummy0) and an ib_write_bw loopback in the VM, then tests/vm/rdma.list:
# discovery, write_bw against ib_write_bw, ib_write_bw -a in a container, the gate.
test-rdma-vm: build vm-deps
	$(VM_RUN) --suite rdma

fmt:
	$(CARGO) fmt --all
	rustfmt --edition 2021 fuzz/src/lib.rs fuzz/fuzz_targets/*.rs

# Not in `make test` (long): 1000 create/exec/delete cycles in one pod, then
# 200 pods at once; prints latency first-100 vs last-100, fds/RSS over time,
# dying memcgs and every leak counter, and fails on any failure or leak.
# RUND_SOAK_CYCLES and RUND_SOAK_CONCURRENCY change the sizes.
soak: build
	RUND_REQUIRE_BINS=1 $(CARGO) test -p rund-tests --test soak -- --ignored --nocapture --test-threads=1

# rund against runc-v2 side by side on one private containerd, plus the
# Kubernetes-shaped study (CRI pods in kubelet-made cgroups: runc-v2, rund pool
# on/off; --skip-kube, --kube-pods 1,50,200); results in target/bench/
# (results.json, plot.svg). BENCH_ARGS passes flags through.
bench: release
	$(CARGO) build --release -p rund-benches
	RUND_BIN_DIR=$(TARGET_DIR)/release $(TARGET_DIR)/release/rund-bench $(BENCH_ARGS)

bench-quick: release
	$(CARGO) build --release -p rund-benches
	RUND_BIN_DIR=$(TARGET_DIR)/release $(TARGET_DIR)/release/rund-bench --quick $(BENCH_ARGS)

# The release binaries (target/release: containerd-shim-rund-v2, rund,
# rund-agent), built on their own: built together with other packages, cargo
# unifies features and the functions get other symbol names than the ones
# linkorder/*.order lists.
release: deps
	$(CARGO) build --release -p rund-shim
	$(call static_bins,release,)

# The release link as make release makes it: DT_RELR, and the functions of
# linkorder/*.order packed first in .text.
test-linkorder: release
	python3 linkorder/check.py $(TARGET_DIR)/release

# Re-profile which functions the shim and agent run and rewrite
# linkorder/*.order (root: it turns the disk's readahead off for the run).
# The release binaries are profiled as linked and in a second build whose
# every Rust function starts a page of its own (LLVM's
# -align-all-functions=12, in a target dir of its own): there a page read
# names the one function that ran, not its neighbours. A function is kept if
# its page was read in both layouts.
LINK_ORDER_BINS := containerd-shim-rund-v2 rund-agent rund
ALIGNED_ENV = RUSTFLAGS="$(STATIC_RUSTFLAGS) -C llvm-args=-align-all-functions=12" \
	$(SECCOMP_ENV) CARGO_TARGET_DIR=$(TARGET_DIR)/linkorder-aligned
link-order: release
	rm -rf $(TARGET_DIR)/linkorder && mkdir -p $(TARGET_DIR)/linkorder/ordered $(TARGET_DIR)/linkorder/aligned
	for b in $(LINK_ORDER_BINS); do cp $(TARGET_DIR)/release/$$b $(TARGET_DIR)/linkorder/ordered/; done
	$(ALIGNED_ENV) $(CARGO) build --release -p rund-agent --target $(HOST_TRIPLE)
	$(ALIGNED_ENV) $(CARGO) build --release -p rund-shim --bin containerd-shim-rund-v2 --target $(HOST_TRIPLE)
	for b in $(STATIC_BINS); do cp $(TARGET_DIR)/linkorder-aligned/$(HOST_TRIPLE)/release/$$b $(TARGET_DIR)/linkorder/aligned/; done
	cp $(TARGET_DIR)/release/rund $(TARGET_DIR)/linkorder/aligned/
	linkorder/profile.sh $(TARGET_DIR)/linkorder/ordered $(TARGET_DIR)/linkorder/aligned
	$(CARGO) build --release -p rund-shim
	$(call static_bins,release,)

# criterion micro-benches (cgroup claim and recycle against mkdir and rmdir, raw and
# through rund-cgroup; spec processing, device scan,
# the per-node keeper's datagrams per request).
bench-micro: deps
	$(CARGO) bench -p rund-benches --features spec-bench,devices-bench,keeper-bench

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
