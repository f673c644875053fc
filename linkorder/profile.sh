#!/bin/bash
# Regenerates the link order of the shim and the agent (`make link-order`).
#
# Which functions run: the release binaries are copied, dropped from the page
# cache, and driven through a private containerd 1.6 with the disk's
# readahead off, so each page read is a page touched. Pods: start, idle trim,
# polls (State, Metrics, Pids), exec, kill, delete, `ctr run --rm`. Polled
# functions go first (an idle shim maps them back when containerd or the
# kubelet asks), then the rest of a pod's start (a pod not yet trimmed holds
# them), then the rest. lld packs them at the start of .text, so the kernel's
# 64 kB fault-around maps hot code instead of its neighbours.
# Stale entries only cost locality: lld skips names it does not find.
#
# `profile.sh BIN_DIR [BIN_DIR ...]`: the same binaries in other layouts are
# driven the same way, and a function counts only if it sits on a touched
# page in every layout (order.py). `make link-order` adds a build whose every
# Rust function starts a page of its own: a page touched there is one
# function that ran, where in a packed layout it also holds its neighbours,
# which would join the order and grow it at each re-profile.
set -eu
cd "$(dirname "$0")"
BIN_DIRS=()
for d in "${@:-../target/release}"; do BIN_DIRS+=("$(realpath "$d")"); done
BIN_DIR=${BIN_DIRS[0]}
[ "$(id -u)" = 0 ] || { echo "link-order: needs root (containerd, and the disk's readahead)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/rund-linkorder.XXXXXX)
CTD_PID=""
CTR="ctr --address $WORK/c.sock --namespace linkorder"
DEV=$(findmnt -no SOURCE -T "$WORK")
DISK=$(lsblk -no PKNAME "$DEV" 2>/dev/null | head -1)
RA=/sys/block/${DISK:-$(basename "$DEV")}/queue/read_ahead_kb
[ -w "$RA" ] || { echo "link-order: $WORK is on $DEV, which has no readahead setting ($RA): run it where /tmp is on a disk" >&2; rm -rf "$WORK"; exit 1; }
OLD_RA=$(cat "$RA")
cleanup() {
    echo "$OLD_RA" > "$RA"
    [ -n "$CTD_PID" ] && { kill "$CTD_PID"; for _ in $(seq 50); do kill -0 "$CTD_PID" 2>/dev/null || break; sleep 0.2; done; }
    grep -o " $WORK[^ ]*" /proc/mounts 2>/dev/null | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

BINS="containerd-shim-rund-v2 rund-agent"
mkdir -p "$WORK/real" "$WORK/bin"
for b in $BINS rund; do cp "$BIN_DIR/$b" "$WORK/real/$b"; done
for b in $BINS rund; do ln -s "../real/$b" "$WORK/bin/$b"; done
for t in mount umount; do ln -s "$(command -v $t)" "$WORK/bin/$t"; done
ROOTFS=$WORK/rootfs
mkdir -p "$ROOTFS/bin" "$ROOTFS/proc" "$ROOTFS/sys" "$ROOTFS/dev" "$ROOTFS/tmp" "$ROOTFS/etc"
cp /bin/busybox "$ROOTFS/bin/busybox"
for a in sleep true sh; do ln -s busybox "$ROOTFS/bin/$a"; done
. ../deploy/private-containerd.sh
private_containerd_config "$WORK" > "$WORK/config.toml"
printf 'state_dir = "%s/rund"\n' "$WORK" > "$WORK/rund.toml"
# The shim's page-cache warm-up of the agent would read every page and hide
# which ones ran.
RUND_NO_AGENT_WARMUP=1 RUND_CONFIG=$WORK/rund.toml PATH="$WORK/bin:/usr/sbin:/usr/bin:/sbin:/bin" /usr/bin/containerd --config "$WORK/config.toml" > "$WORK/containerd.log" 2>&1 &
CTD_PID=$!
for _ in $(seq 100); do $CTR version >/dev/null 2>&1 && break; sleep 0.1; done
run=(--null-io --runtime io.containerd.rund.v2 --rootfs "$ROOTFS")

snapshot() { for b in $BINS; do python3 pages.py list "$WORK/real/$b" >> "$WORK/$LAYOUT.$b.$1"; done; }
evict() { for b in $BINS rund; do python3 pages.py evict "$WORK/real/$b"; done; }
stop() {
    $CTR task kill "$1"
    for _ in $(seq 100); do $CTR task ls | grep -q "^$1 .*STOPPED" && break; sleep 0.1; done
    $CTR task delete "$1" >/dev/null
    $CTR container rm "$1"
}

echo 0 > "$RA"
for LAYOUT in "${!BIN_DIRS[@]}"; do
    # No pod runs now: the next layout's binaries replace the files in place.
    for b in $BINS rund; do
        cp "${BIN_DIRS[$LAYOUT]}/$b" "$WORK/real/.$b" && mv "$WORK/real/.$b" "$WORK/real/$b"
    done
    evict
    for round in 1 2; do
        $CTR run -d "${run[@]}" "p$LAYOUT$round" /bin/sleep 100000
        sleep 2 # past the idle trim: the shim and agent unmap what they ran
        snapshot start
        evict
        for _ in 1 2; do
            $CTR task ls >/dev/null
            $CTR task metrics "p$LAYOUT$round" >/dev/null
            $CTR task ps "p$LAYOUT$round" >/dev/null
        done
        snapshot polled
        $CTR task exec --exec-id "e$round" "p$LAYOUT$round" /bin/true
        stop "p$LAYOUT$round"
        $CTR run --rm "${run[@]}" "r$LAYOUT$round" /bin/true
        snapshot all
        evict
    done
done
for b in $BINS; do
    args=()
    for i in "${!BIN_DIRS[@]}"; do
        cat "$WORK/$i.$b.start" "$WORK/$i.$b.all" "$WORK/$i.$b.polled" > "$WORK/$i.$b.every"
        args+=("${BIN_DIRS[$i]}/$b" "$WORK/$i.$b.polled" "$WORK/$i.$b.start" "$WORK/$i.$b.every")
    done
    python3 order.py "${args[@]}" > "$b.order"
    echo "$b: $(sort -u "$WORK/0.$b.polled" | wc -l) pages polled, $(sort -u "$WORK/0.$b.start" | wc -l) at start, $(sort -u "$WORK/0.$b.every" | wc -l) in all (first layout); ${#BIN_DIRS[@]} layouts; $(wc -l < "$b.order") functions"
done
# check.py holds missing names against the order only under this toolchain.
rustc --version > toolchain
