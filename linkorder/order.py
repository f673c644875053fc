#!/usr/bin/env python3
"""`order.py BINARY FIRST_PAGES ALL_PAGES`: the functions of BINARY's .text
that lie on a touched page, for lld's --symbol-ordering-file. Those on
FIRST_PAGES (what an idle shim runs when polled) come first, then the rest
of ALL_PAGES, each group in the binary's own order."""
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


def main():
    binary, first, every = sys.argv[1], pages(sys.argv[2]), pages(sys.argv[3])
    fns = list(functions(binary))
    seen = set()
    for group in (first, every | first):
        for name, span in fns:
            if name not in seen and any(p in group for p in span):
                seen.add(name)
                print(name)


if __name__ == "__main__":
    main()
