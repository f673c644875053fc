#!/bin/bash
# Runs integration tests inside a VM booted from Debian 12's own kernel (pure cgroup v2) with
# virtme-ng: the host's root shared read-only, test binaries built here, results written back
# to a shared directory. Exits non-zero when any test fails or the VM does not report.
#
#   tests/vm/run.sh [--suite v2|rdma] [--list FILE | --tests 'bin::test bin ...']
#                   [--runtime RUNTIME] [--out DIR] [--timeout SECS] [--ignored]
#                   [--env NAME=VALUE ...]
#
# --ignored also runs tests marked #[ignore] (long ones such as churn_v2); --env sets NAME for
# the tests in the VM.
#
# Environment: RUND_VM_CACHE (virtme-ng venv; default ~/.cache/rund-vm), RUND_VM_KERNEL
# (default the newest /boot/vmlinuz-6.1.0-*-amd64), RUND_VM_MEMORY (4G), RUND_VM_CPUS (2),
# RUND_VM_KVM (auto: KVM only when a probe boot works; 0: TCG; 1: KVM), RUND_VM_TIMEOUT (the
# whole VM, default 2700 s; --timeout is per test, default 600 s), RUND_VM_BLOCK (1: the tests'
# ext4 is a virtio disk, a sparse file in --out, instead of a loop device), RUND_VM_STALL (the
# seconds without a write to --out after which the guest counts as wedged: it is stopped and
# booted once more, resuming after its last recorded test; default --timeout + 120), CARGO.
# `--env RUND_VM_TEST_WEDGE=bin::test` makes the first boot stand still at that test, to check
# the watchdog and the resume.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ws=$(cd "$here/../.." && pwd)
suite=v2 list= tests= runtime= out= timeout=600 ignored= envs=
while [ $# -gt 0 ]; do
    case $1 in
    --suite) suite=$2; shift 2 ;;
    --list) list=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --ignored) ignored=--ignored; shift ;;
    --env)
        [[ $2 =~ ^[A-Z_][A-Z0-9_]*=[A-Za-z0-9._/:-]*$ ]] ||
            { echo "vm: --env wants NAME=VALUE (plain characters), not $2" >&2; exit 2; }
        envs="$envs --env $2"; shift 2 ;;
    *) echo "vm: unknown argument $1" >&2; exit 2 ;;
    esac
done
rm_disk() { rm -f "${out:?}/disk.img"; }
case $suite in v2|rdma) ;; *) echo "vm: --suite is v2 or rdma, not $suite" >&2; exit 2 ;; esac
[ -n "$list" ] || list=$here/$suite.list
[ -n "$out" ] || out=$ws/target/vm/$suite${runtime:+-${runtime//[^a-z0-9]/_}}
cache=${RUND_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rund-vm}
vng=$cache/venv/bin/vng
CARGO=${CARGO:-cargo}
start=$(date +%s)
say() { echo "vm: $*" >&2; }

[ -x "$vng" ] || { say "no virtme-ng at $vng: run tests/vm/setup.sh"; exit 1; }
kernel=${RUND_VM_KERNEL:-$(ls /boot/vmlinuz-6.1.0-*-amd64 2>/dev/null | sort -V | tail -1)}
[ -n "$kernel" ] && [ -r "$kernel" ] || { say "no Debian 12 kernel in /boot: run tests/vm/setup.sh"; exit 1; }

# Build on the host; the VM only runs what is built.
(cd "$ws" && $CARGO build -q -p rund-shim -p rund-agent)
rm -rf "$out" && mkdir -p "$out/logs"
(cd "$ws" && $CARGO test -q -p rund-tests -p rund-cgroup --no-run --message-format=json) >"$out/cargo.json"
python3 "$here/plan.py" --cargo-json "$out/cargo.json" --list "$list" --tests "$tests" \
    --out "$out/plan.tsv"
say "$(wc -l <"$out/plan.tsv") tests planned ($suite${runtime:+, $runtime}); results in $out"

# KVM only where a guest kernel really boots with it (nested KVM often does not).
kvm_flag=--disable-kvm
case ${RUND_VM_KVM:-auto} in
1) kvm_flag= ;;
auto)
    probe=$cache/kvm-$(uname -r)-$(basename "$kernel")
    if [ ! -f "$probe" ]; then
        if [ -w /dev/kvm ] && timeout 120 "$vng" -r "$kernel" --memory 1G --cpus 1 \
            -- 'echo RUND_KVM_OK' 2>/dev/null | grep -q RUND_KVM_OK; then
            echo ok >"$probe"
        else
            echo no >"$probe"
        fi
    fi
    [ "$(cat "$probe")" = ok ] && kvm_flag=
    ;;
esac
accel=KVM; [ -n "$kvm_flag" ] && accel=TCG
say "booting $(basename "$kernel") ($accel)"

# A real block device for the tests' ext4 (as on a node): the loop driver's per-cgroup workers
# hold each writer's io cgroup for a minute after its last write.
disk_flag= block=
if [ "${RUND_VM_BLOCK:-0}" = 1 ]; then
    truncate -s "${RUND_VM_DISK:-2G}" "$out/disk.img"
    disk_flag="--disk $out/disk.img" block=" --block"
fi

# One boot; the guest script prints its progress and writes its results under $out. `timeout`
# leads its own process group (its pid, in vm.pid), so the watchdog can stop the whole VM.
boot_vm() {
    set +e
    PATH=$(dirname "$vng"):$PATH bash -c 'echo $$ >"$0"; exec "$@"' "$out/vm.pid" \
        timeout "${RUND_VM_TIMEOUT:-2700}" \
        "$vng" $kvm_flag -r "$kernel" --memory "${RUND_VM_MEMORY:-4G}" --cpus "${RUND_VM_CPUS:-2}" \
        --rwdir "$out" --cwd "$ws" $disk_flag \
        -- "bash $here/guest.sh --out $out --suite $suite --timeout $timeout --runtime '$runtime'$block $ignored$envs$1" \
        </dev/null 2>&1 | tee -a "$out/console.log"
    return "${PIPESTATUS[0]}"
}

# A TCG guest has wedged (both vCPUs busy, its own per-test `timeout` never firing, nothing
# written for 20 minutes): waits for boot $1, stopping it once $out has not been written for
# $stall seconds (a test writes its log when it starts and when it ends; the guest's timeout
# ends any test within --timeout). Returns the boot's status, or 3 when it was stopped.
stall=${RUND_VM_STALL:-$((timeout + 120))}
watch_vm() {
    local pid=$1 booted last idle group
    booted=$(date +%s)
    while kill -0 "$pid" 2>/dev/null; do
        sleep 5
        # The guest's own files only (console.log is the host's copy of the console, which a
        # wedged kernel may keep printing to), and no earlier than this boot.
        last=$( (echo "$booted"; stat -c %Y "$out/logs" "$out/guest.log" "$out/results.tsv" \
            "$out"/logs/* 2>/dev/null) | sort -n | tail -1)
        idle=$(($(date +%s) - last))
        [ "$idle" -gt "$stall" ] || continue
        say "nothing written to $out for ${idle}s (limit ${stall}s): the guest is wedged; stopping it"
        group=$(cat "$out/vm.pid" 2>/dev/null || true)
        if [ -n "$group" ]; then
            kill -TERM -- "-$group" 2>/dev/null || true
            sleep 10
            kill -KILL -- "-$group" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
        return 3
    done
    wait "$pid"
}

# The test a wedged boot was in: the newest log without a result.
wedged_in() {
    local log
    log=$(ls -t "$out"/logs/*.log 2>/dev/null | head -1)
    if [ -n "$log" ]; then basename "$log" .log; else echo "the boot, before any test"; fi
}

vm_start=$(date +%s)
resume=
for attempt in 1 2; do
    boot_vm "$resume" &
    set +e
    watch_vm $!
    vm_rc=$?
    set -e
    if [ "$vm_rc" -ne 3 ] || [ -f "$out/done" ] || [ "$attempt" = 2 ]; then
        break
    fi
    echo "$(wedged_in)" >>"$out/wedged"
    say "booting once more, resuming after the last recorded test"
    resume=" --resume"
done
vm_secs=$(($(date +%s) - vm_start))

if [ ! -f "$out/done" ]; then
    rm_disk
    say "the VM ended (rc $vm_rc) before reporting; see $out/console.log and guest.log"
    tail -n 30 "$out/console.log" 2>/dev/null >&2 || true
    exit 1
fi
rm_disk
python3 "$here/report.py" "$out" --suite "$suite" --vm-secs "$vm_secs" \
    --total-secs $(($(date +%s) - start))
