#!/bin/sh
# Installs the Debian 12 packages rund needs to build, test, demo and bench.
# Idempotent: only missing packages are installed.
set -eu
PKGS="containerd runc busybox-static protobuf-compiler libclang-dev libseccomp-dev \
pkg-config libibverbs-dev librdmacm-dev rdma-core perftest containernetworking-plugins \
iproute2 gcc strace"
if [ "${1:-}" = "--list" ]; then
    echo $PKGS
    exit 0
fi
# The static agent and rund-init are built for musl (see the Makefile).
MUSL_TARGET=$(rustc -vV 2>/dev/null | sed -n 's/^host: //p' | sed 's/-gnu$/-musl/')
if [ -n "$MUSL_TARGET" ] &&
    ! [ -d "$(rustc --print target-libdir --target "$MUSL_TARGET" 2>/dev/null)" ]; then
    if ! command -v rustup >/dev/null; then
        echo "deps: the Rust target $MUSL_TARGET is missing (the static agent is built for it), and there is no rustup to add it" >&2
        exit 1
    fi
    echo "deps: adding the Rust target $MUSL_TARGET"
    rustup target add "$MUSL_TARGET"
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "deps: all Debian packages present"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "deps: missing:$missing (run as root to install them)" >&2
    exit 1
fi
echo "deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq $missing >/dev/null
# Debian starts containerd on install; rund never uses the system instance.
echo "deps: done"
