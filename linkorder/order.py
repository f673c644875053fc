#!/usr/bin/env python3
"""`order.py BINARY FIRST_PAGES ALL_PAGES [BINARY FIRST_PAGES ALL_PAGES ...]`:
the functions of BINARY's .text that lie on a touched page, for lld's
--symbol-ordering-file. Those on FIRST_PAGES (what an idle shim runs when
polled) come first, then the rest of ALL_PAGES, each group in the first
binary's own order. Given the same program in other layouts (an unordered
link), a function counts only if it lies on a touched page in every layout:
a page holds many functions, and those that merely share one with run code
seldom share one again in another layout."""
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


def touched(binary, first, every):
    """The names on `first` pages, and those on any touched page."""
    hot, warm = set(), set()
    for name, span in functions(binary):
        if any(p in first for p in span):
            hot.add(name)
        if any(p in every or p in first for p in span):
            warm.add(name)
    return hot, warm


def main():
    args = sys.argv[1:]
    if not args or len(args) % 3:
        sys.exit(__doc__)
    layouts = [(args[i], pages(args[i + 1]), pages(args[i + 2])) for i in range(0, len(args), 3)]
    sets = [touched(*layout) for layout in layouts]
    hot = set.intersection(*(h for h, _ in sets))
    warm = set.intersection(*(w for _, w in sets))
    fns = [name for name, _ in functions(layouts[0][0])]
    seen = set()
    for group in (hot, warm | hot):
        for name in fns:
            if name not in seen and name in group:
                seen.add(name)
                print(name)


if __name__ == "__main__":
    main()
