#!/bin/sh
# Fetches Debian sid's containerd 2.1.x into a cache dir and unpacks it there.
# It is never installed, and the system's apt sources are never touched: apt
# runs with a private sources list, list dir and cache under the cache dir.
#
#   RUND_CACHE       cache root (default /var/cache/rund)
#   RUND_CTRD_SERIES the containerd series to fetch (default 2.1)
#
# Prints the unpacked binary dir (…/usr/bin) on its last line.
set -eu
cache=${RUND_CACHE:-/var/cache/rund}
series=${RUND_CTRD_SERIES:-2.1}
dest=$cache/containerd-$series
bindir=$dest/usr/bin

have() {
    [ -x "$bindir/containerd" ] && [ -x "$bindir/ctr" ] &&
        "$bindir/containerd" --version 2>/dev/null | grep -Eq " v?$series\."
}
if have; then
    echo "fetch-containerd: $("$bindir/containerd" --version) (cached)" >&2
    echo "$bindir"
    exit 0
fi

apt_dir=$cache/apt-sid
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
echo "deb http://deb.debian.org/debian sid main" >"$apt_dir/sources.list"
set -- -o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-" \
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" \
    -o "APT::Get::List-Cleanup=0"
echo "fetch-containerd: apt-get update (private sid list in $apt_dir)" >&2
apt-get "$@" -qq update >&2
# The newest sid version of the series; sid may already be past it.
version=$(apt-cache "$@" madison containerd | awk -F'|' '{gsub(/ /,"",$2); print $2}' |
    grep -E "^([0-9]+:)?$series\." | head -n1 || true)
if [ -z "$version" ]; then
    echo "fetch-containerd: Debian sid has no containerd $series.x any more:" >&2
    apt-cache "$@" madison containerd >&2 || true
    exit 1
fi
echo "fetch-containerd: downloading containerd=$version" >&2
(cd "$apt_dir/debs" && rm -f containerd_*.deb && apt-get "$@" -o APT::Sandbox::User=root -qq download "containerd=$version" >&2)
deb=$(ls "$apt_dir"/debs/containerd_*.deb)
tmp=$(mktemp -d "$cache/containerd-$series.new.XXXXXX")
dpkg-deb -x "$deb" "$tmp"
rm -rf "$dest"
mv "$tmp" "$dest"
chmod 755 "$dest"
if ! have; then
    echo "fetch-containerd: $bindir/containerd does not run or is not $series.x" >&2
    exit 1
fi
echo "fetch-containerd: $("$bindir/containerd" --version)" >&2
echo "$bindir"
