#!/bin/sh
# make demo: a private containerd (temp root, state and socket), rund's
# binaries on its PATH, a busybox rootfs, and two containers run through
# io.containerd.rund.v2. Everything is removed afterwards.
set -eu
BIN_DIR=${1:?usage: demo.sh BIN_DIR}
BIN_DIR=$(cd "$BIN_DIR" && pwd)
for b in containerd-shim-rund-v2 rund-agent; do
    [ -x "$BIN_DIR/$b" ] || { echo "demo: $BIN_DIR/$b is missing; run make build" >&2; exit 1; }
done
BUSYBOX=$(command -v busybox || echo /bin/busybox)
[ -x "$BUSYBOX" ] || { echo "demo: busybox-static is missing" >&2; exit 1; }

WORK=$(mktemp -d /tmp/rund-demo.XXXXXX)
CTD_PID=""
cleanup() {
    if [ -n "$CTD_PID" ]; then
        kill "$CTD_PID" 2>/dev/null || true
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$CTD_PID" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$CTD_PID" 2>/dev/null || true
    fi
    grep -o " $WORK[^ ]*" /proc/mounts 2>/dev/null | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# A busybox rootfs: one static binary and its applet links.
ROOTFS=$WORK/rootfs
mkdir -p "$ROOTFS/bin" "$ROOTFS/proc" "$ROOTFS/sys" "$ROOTFS/dev" "$ROOTFS/tmp" "$ROOTFS/etc"
cp "$BUSYBOX" "$ROOTFS/bin/busybox"
for a in $("$ROOTFS/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$ROOTFS/bin/$a"; done
echo "root:x:0:0:root:/:/bin/sh" > "$ROOTFS/etc/passwd"
echo "root:x:0:" > "$ROOTFS/etc/group"

# containerd sees exactly rund's binaries (and no runc) on its PATH.
mkdir -p "$WORK/bin"
for b in containerd-shim-rund-v2 rund-agent rund; do
    [ -e "$BIN_DIR/$b" ] && ln -s "$BIN_DIR/$b" "$WORK/bin/$b"
done
for t in mount umount sh; do ln -s "$(command -v $t)" "$WORK/bin/$t"; done
. "$(dirname "$0")/private-containerd.sh"
{ private_containerd_config "$WORK"; printf '[debug]\n  level = "info"\n'; } > "$WORK/config.toml"
CONTAINERD=$(command -v containerd) || { echo "demo: containerd is missing" >&2; exit 1; }
PATH="$WORK/bin" "$CONTAINERD" --config "$WORK/config.toml" > "$WORK/containerd.log" 2>&1 &
CTD_PID=$!
CTR="ctr --address $WORK/c.sock --namespace rund-demo"
for _ in $(seq 1 50); do $CTR version >/dev/null 2>&1 && break; sleep 0.1; done
$CTR version >/dev/null || { echo "demo: containerd did not start:"; tail -20 "$WORK/containerd.log"; exit 1; }

run() {
    echo "\$ ctr run --rm --runtime io.containerd.rund.v2 --rootfs ROOTFS $*"
    $CTR run --rm --runtime io.containerd.rund.v2 --env PATH=/bin --rootfs "$ROOTFS" "$@"
}
echo "== rund demo: private containerd $(containerd --version | awk '{print $3}'), runtime io.containerd.rund.v2 =="
run demo-hello echo hello
run demo-sh sh -c 'echo "pid $$ in $(hostname), uid $(id -u), $(wc -l < /proc/self/mountinfo) mounts"; echo "uid_map: $(cat /proc/self/uid_map)"; ls /; exit 3' || echo "(exit code $? as expected)"
echo "== done; cleaning up =="
