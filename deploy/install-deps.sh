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
