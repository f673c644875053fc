#!/bin/sh
# Installs what the VM suites need on a Debian 12 machine: QEMU, Debian 12's own kernel
# (/boot/vmlinuz-6.1.0-*-amd64), soft-RoCE's user space, and virtme-ng from PyPI in a venv
# under $RUND_VM_CACHE (default ~/.cache/rund-vm). Idempotent; root installs packages.
set -eu
VNG_VERSION=1.42
PKGS="qemu-system-x86 linux-image-amd64 python3-venv e2fsprogs kmod iproute2 \
rdma-core ibverbs-providers ibverbs-utils perftest"
cache=${RUND_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rund-vm}

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "vm-deps: missing:$missing (run as root to install them)" >&2
        exit 1
    fi
    echo "vm-deps: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# shellcheck disable=SC2012
ls /boot/vmlinuz-6.1.0-*-amd64 >/dev/null 2>&1 || {
    echo "vm-deps: no /boot/vmlinuz-6.1.0-*-amd64 after installing linux-image-amd64" >&2
    exit 1
}

if ! "$cache/venv/bin/python" -m pip show virtme-ng 2>/dev/null | grep -qx "Version: $VNG_VERSION"; then
    echo "vm-deps: virtme-ng $VNG_VERSION into $cache/venv"
    mkdir -p "$cache"
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install -q "virtme-ng==$VNG_VERSION"
fi
echo "vm-deps: ready ($(ls /boot/vmlinuz-6.1.0-*-amd64 | sort -V | tail -1), virtme-ng $VNG_VERSION)"
