#!/usr/bin/env python3
"""Turns a VM test list into a plan: `binary<TAB>executable<TAB>package dir<TAB>test` per test.

Entries are `<binary>::<test>` or `<binary>` (all its tests); the executables come from cargo's
`--message-format=json` output. Every entry must match a test, else the plan fails before the
VM boots.
"""
import argparse
import json
import os
import subprocess
import sys


def executables(cargo_json):
    out = {}
    with open(cargo_json) as f:
        for line in f:
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("reason") != "compiler-artifact" or not m.get("executable"):
                continue
            if "test" in m["target"]["kind"]:
                pkg_dir = os.path.dirname(m["manifest_path"])
                out[m["target"]["name"].replace("-", "_")] = (m["executable"], pkg_dir)
    return out


def entries(list_path, tests):
    if tests.strip():
        return tests.split()
    out = []
    with open(list_path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                out.append(line)
    return out


def tests_of(exe):
    text = subprocess.run(
        [exe, "--list", "--format", "terse"], check=True, capture_output=True, text=True
    ).stdout
    return [l[: -len(": test")] for l in text.splitlines() if l.endswith(": test")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cargo-json", required=True)
    p.add_argument("--list", required=True)
    p.add_argument("--tests", default="")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    exes = executables(a.cargo_json)
    listed = {}
    plan, errors = [], []
    for e in entries(a.list, a.tests):
        binary, _, test = e.partition("::")
        exe, pkg_dir = exes.get(binary, (None, None))
        if exe is None:
            errors.append(f"{e}: no test binary {binary!r} (known: {' '.join(sorted(exes))})")
            continue
        if binary not in listed:
            listed[binary] = tests_of(exe)
        chosen = [test] if test else listed[binary]
        for t in chosen:
            if t not in listed[binary]:
                errors.append(f"{e}: {binary} has no test {t!r}")
            elif (binary, t) not in [(r[0], r[3]) for r in plan]:
                plan.append((binary, exe, pkg_dir, t))
    if errors or not plan:
        for m in errors or ["the list selects no test"]:
            print(f"vm: {m}", file=sys.stderr)
        sys.exit(1)
    with open(a.out, "w") as f:
        for row in plan:
            f.write("\t".join(row) + "\n")


if __name__ == "__main__":
    main()
