#!/usr/bin/env python3
"""`check.py BIN_DIR`: the release link arguments took effect (`make
test-linkorder`). Fails when a binary lacks DT_RELR, when the agent is not
static-pie (`make release` links it so), or when the functions
its order file names and the binary has are not packed together in .text. Names the binary lacks (code changed since `make link-order`) are
reported; they fail the check only when the toolchain is still the one the
order was made with (`linkorder/toolchain`) and under half remain."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BINS = ["containerd-shim-rund-v2", "rund-agent"]
# Linked static-pie: no program interpreter, still position-independent.
STATIC = {"rund-agent", "containerd-shim-rund-v2"}


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def check(bin_dir, name, same_toolchain):
    path = os.path.join(bin_dir, name)
    problems = []
    if "RELR" not in run("readelf", "-dW", path):
        problems.append("no DT_RELR: -z pack-relative-relocs was not applied")
    if name in STATIC:
        headers = run("readelf", "-hlW", path)
        if "INTERP" in headers or "DYN (" not in headers:
            problems.append("not static-pie: build it with `make release` (static_bins)")
    with open(os.path.join(HERE, name + ".order")) as f:
        order = [line.strip() for line in f if line.strip()]
    wanted = set(order)
    hot, cold = [], []
    for line in run("nm", "-n", "-S", "--defined-only", path).splitlines():
        p = line.split()
        if len(p) != 4 or p[2] not in "tTwW":
            continue
        (hot if p[3] in wanted else cold).append((int(p[0], 16), int(p[1], 16), p[3]))
    # C archives (libc.a, and libseccomp.a in the static agent) may hold several
    # functions, and a few static ones of one name, in one section: lld moves
    # them together. Rust emits a section per function, so only a Rust
    # function inside the ordered span shows that the order was not applied.
    found = len({n for _, _, n in hot})
    share = found / len(wanted)
    print(f"{name}: {found} of {len(wanted)} ordered functions present ({share:.0%})")
    if hot:
        start = min(a for a, _, _ in hot)
        end = max(a + s for a, s, _ in hot)
        size = sum(s for _, s, _ in hot)
        # Packed: no other function sits inside the span the ordered ones occupy.
        inside = [a for a, s, n in cold if s and start <= a < end and n.startswith(("_ZN", "_R"))]
        if inside:
            problems.append(f"{len(inside)} unordered functions inside the ordered span "
                            f"({size} bytes over {end - start}): "
                            "--symbol-ordering-file was not applied")
    if same_toolchain and share < 0.5:
        problems.append("under half the ordered functions remain: run `make link-order`")
    return problems


def main():
    bin_dir = sys.argv[1]
    with open(os.path.join(HERE, "toolchain")) as f:
        recorded = f.read().strip()
    current = run("rustc", "--version").strip()
    same = recorded == current
    if not same:
        print(f"order made with {recorded!r}, building with {current!r}: missing names are not an error")
    problems = [f"{b}: {p}" for b in BINS for p in check(bin_dir, b, same)]
    for p in problems:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
