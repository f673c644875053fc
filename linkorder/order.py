#!/usr/bin/env python3
"""`order.py BINARY POLLED START ALL [BINARY POLLED START ALL ...]`: the
functions of BINARY's .text that lie on a touched page, for lld's
--symbol-ordering-file. Those on POLLED pages (what an idle shim runs when
polled) come first, then those on START pages (a pod's start: what a pod
holds until its first trim), then the rest of ALL, each group in the first
binary's own order. Given the same program in other layouts, a function
counts only if it lies on a touched page in every layout: a page holds many
functions, and one that merely shares a page with run code in one layout
does not share it in a layout where each function starts its own page
(`make link-order`'s aligned build; C functions from archives are not
aligned, and still seldom share a page again in another layout)."""
import re
import subprocess
import sys

PAGE = 4096


def text_section(binary):
    out = subprocess.run(["readelf", "-SW", binary], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+\.text\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            return tuple(int(g, 16) for g in m.groups())
    sys.exit(f"{binary}: no .text section")


def functions(binary):
    addr, off, size = text_section(binary)
    out = subprocess.run(["nm", "--defined-only", "-S", "-n", binary], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[2] not in "tTwW":
            continue
        a, s = int(parts[0], 16), int(parts[1], 16)
        if s == 0 or not addr <= a < addr + size:
            continue
        start = a - addr + off
        yield parts[3], range(start // PAGE, (start + s - 1) // PAGE + 1)


def pages(path):
    with open(path) as f:
        return {int(x) for x in f if x.strip()}


def touched(binary, *tiers):
    """For each tier of pages, the names on a page of it."""
    names = tuple(set() for _ in tiers)
    for name, span in functions(binary):
        for pages_of, found in zip(tiers, names):
            if any(p in pages_of for p in span):
                found.add(name)
    return names


def main():
    args = sys.argv[1:]
    if not args or len(args) % 4:
        sys.exit(__doc__)
    layouts = [(args[i], *(pages(p) for p in args[i + 1:i + 4])) for i in range(0, len(args), 4)]
    sets = [touched(*layout) for layout in layouts]
    # A name counts in a tier only if it is there in every layout.
    polled, start, every = (set.intersection(*(s[t] for s in sets)) for t in range(3))
    fns = [name for name, _ in functions(layouts[0][0])]
    seen = set()
    for group in (polled, start, every | start | polled):
        for name in fns:
            if name not in seen and name in group:
                seen.add(name)
                print(name)


if __name__ == "__main__":
    main()
