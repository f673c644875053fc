#!/bin/bash
# Inside the VM (started by run.sh): check that only cgroup2 is mounted, give the tests an ext4
# /tmp/rund-it (the VM's /tmp overlay cannot be idmapped), optionally bring up soft-RoCE, then
# run every test of the plan alone and write `key<TAB>result<TAB>seconds<TAB>note` lines to
# $out/results.tsv and each test's output to $out/logs/.
set -uo pipefail
out= suite=v2 timeout=600 runtime= ignored= block= resume=
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=$2; shift 2 ;;
    --suite) suite=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --ignored) ignored=--include-ignored; shift ;;
    --block) block=1; shift ;;
    --resume) resume=1; shift ;;
    --env) export "${2?}"; shift 2 ;;
    *) echo "guest: unknown argument $1" >&2; exit 2 ;;
    esac
done
here=$(cd "$(dirname "$0")" && pwd)
exec > >(tee -a "$out/guest.log") 2>&1
results=$out/results.tsv
# A second boot after a wedged one (run.sh) keeps what the first recorded.
[ -n "$resume" ] || : >"$results"
say() { echo "vm: $*"; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$results"; }
die() {
    say "$*"
    record vm::setup FAIL 0 "$*"
    touch "$out/done"
    exit 1
}

say "up $(cut -d" " -f1 /proc/uptime)s: kernel $(uname -r), $(nproc) cpus, $(awk '/MemTotal/ {print int($2/1024) " MiB"}' /proc/meminfo)"
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || die "/sys/fs/cgroup is not cgroup2"
if awk '$3 == "cgroup" {found=1} END {exit !found}' /proc/mounts; then
    die "a cgroup v1 hierarchy is mounted"
fi
say "cgroup2 only: $(cat /sys/fs/cgroup/cgroup.controllers)"
say "root: $(awk '$2 == "/" {print $1, $3, $4}' /proc/mounts | tail -1)"

# containerd's root and the harness dirs on ext4 (in a sized tmpfs: the image is sparse and
# mounted with discard, so it takes only the memory in use).
modprobe ext4 && modprobe loop || die "modprobe ext4 loop failed"
disk=/tmp/rund-vm-disk vol=/tmp/rund-vm
mkdir -p "$disk" "$vol" /tmp/rund-it /tmp/rund-direct
if [ -n "$block" ]; then
    # run.sh attached a disk (RUND_VM_BLOCK=1): virtme-ng gives it as virtio-blk.
    dev=
    for _ in $(seq 100); do
        for d in /dev/vda /dev/sda; do [ -b $d ] && dev=$d && break 2; done
        sleep 0.1
    done
    [ -n "$dev" ] || die "no disk at /dev/vda or /dev/sda (RUND_VM_BLOCK)"
    mkfs.ext4 -q -F "$dev" || die "mkfs.ext4 $dev failed"
    mount "$dev" "$vol" || die "mount $dev failed"
    say "the tests' ext4 is $dev"
else
    mount -t tmpfs -o size="${RUND_VM_DISK:-2G}" rund-vm-disk "$disk" || die "tmpfs for the image"
    truncate -s "${RUND_VM_DISK:-2G}" "$disk/ext4.img"
    mkfs.ext4 -q -F "$disk/ext4.img" || die "mkfs.ext4 failed"
    mount -o loop,discard "$disk/ext4.img" "$vol" || die "loop mount of the ext4 image failed"
fi
mkdir -p "$vol/it" "$vol/direct" "$vol/tmp"
mount --bind "$vol/it" /tmp/rund-it && mount --bind "$vol/direct" /tmp/rund-direct ||
    die "bind mounts of the ext4 dirs failed"
chmod 1777 "$vol/tmp"
say "ext4 on /tmp/rund-it, /tmp/rund-direct and TMPDIR"
ip link set lo up

if [ "$suite" = rdma ]; then
    # shellcheck source=tests/vm/soft-roce.sh
    . "$here/soft-roce.sh"
    soft_roce_smoke || die "soft-RoCE smoke failed"
fi

# The host's binaries come over 9p: a cold first read of containerd under TCG can outlast the
# harness's 20 s version probe, so read them once here.
cat /usr/bin/containerd /usr/bin/ctr /usr/bin/containerd-shim-runc-v2 >/dev/null 2>&1

export RUND_REQUIRE_ALL=1 RUND_REQUIRE_BINS=1 RUND_SUITE=v2 RUST_BACKTRACE=1
export TMPDIR=$vol/tmp
[ -n "$runtime" ] && export RUND_IT_RUNTIME=$runtime
n=$(wc -l <"$out/plan.tsv") i=0
while IFS=$'\t' read -r bin exe pkg test; do
    i=$((i + 1))
    key=$bin::$test
    if [ -n "$resume" ] && cut -f1 "$results" | grep -qxF "$key"; then
        continue
    fi
    log=$out/logs/$bin.${test//::/.}.log
    export RUND_BIN_DIR
    # RUND_VM_BIN_DIR (e.g. target/release, through --env) picks other rund binaries.
    RUND_BIN_DIR=${RUND_VM_BIN_DIR:-$(dirname "$(dirname "$exe")")}
    # RUND_VM_LOCAL_BINS=1 runs rund's binaries from the VM's ext4 disk, as a node runs them
    # from its own disk (the shared host root is 9p, whose page cache behaves otherwise).
    if [ "${RUND_VM_LOCAL_BINS:-0}" = 1 ]; then
        mkdir -p "$vol/bin"
        for b in containerd-shim-rund-v2 rund-agent rund; do
            [ -e "$vol/bin/$b" ] || cp "$RUND_BIN_DIR/$b" "$vol/bin/$b" 2>/dev/null || true
        done
        RUND_BIN_DIR=$vol/bin
    fi
    if [ -z "$resume" ] && [ "${RUND_VM_TEST_WEDGE:-}" = "$key" ]; then
        # run.sh's own test: stand still as a wedged guest does (nothing written).
        : >"$log"
        sleep infinity
    fi
    t0=$(date +%s)
    (cd "$pkg" && timeout -k 10 "$timeout" "$exe" --exact "$test" --nocapture \
        --test-threads=1 $ignored) </dev/null >"$log" 2>&1
    rc=$? secs=$(($(date +%s) - t0))
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        res=TIMEOUT
    elif [ $rc -eq 0 ] && grep -q '^test result: ok. 1 passed' "$log"; then
        if grep -q "SKIP $key: .*(allowed by" "$log"; then res=SKIP; else res=PASS; fi
    else
        res=FAIL
    fi
    note=
    if [ $res = FAIL ]; then
        # The panic message, or the failed command's stderr in it.
        note=$(awk '/panicked at/ {getline; print; exit}' "$log" | sed 's/.*stderr: "//' |
            cut -c1-240)
    fi
    record "$key" "$res" "$secs" "$note"
    say "[$i/$n] $key $res (${secs}s)"
done <"$out/plan.tsv"

say "done at $(cut -d" " -f1 /proc/uptime)s"
dmesg >"$out/dmesg.log" 2>&1
touch "$out/done"
