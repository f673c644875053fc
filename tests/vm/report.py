#!/usr/bin/env python3
"""Prints the VM run's results (results.tsv against plan.tsv), writes summary.txt beside them,
and exits 1 unless every planned test passed or was an allow-listed skip."""
import argparse
import os
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--suite", required=True)
    p.add_argument("--vm-secs", type=int, default=0)
    p.add_argument("--total-secs", type=int, default=0)
    a = p.parse_args()
    results = {}
    with open(os.path.join(a.out, "results.tsv")) as f:
        for line in f:
            key, res, secs, note = (line.rstrip("\n").split("\t") + [""] * 4)[:4]
            # A boot after a wedged one records its set-up steps again: the last counts.
            results.pop(key, None)
            results[key] = (key, res, int(secs or 0), note)
    results = list(results.values())
    seen = {r[0] for r in results}
    with open(os.path.join(a.out, "plan.tsv")) as f:
        for line in f:
            b, _, _, t = line.rstrip("\n").split("\t")
            if f"{b}::{t}" not in seen:
                results.append((f"{b}::{t}", "NOT-RUN", 0, "the VM stopped before it"))
    width = max(len(r[0]) for r in results)
    lines = [f"{k:<{width}}  {res:<7} {secs:>5}s  {note}".rstrip() for k, res, secs, note in results]
    count = lambda *rs: sum(1 for r in results if r[1] in rs)
    passed, skipped = count("PASS"), count("SKIP")
    failed = len(results) - passed - skipped
    lines.append(
        f"vm: tests {sum(r[2] for r in results)}s, VM {a.vm_secs}s, with the build "
        f"{a.total_secs}s; logs in {os.path.join(a.out, 'logs')}"
    )
    wedged = os.path.join(a.out, "wedged")
    if os.path.exists(wedged):
        with open(wedged) as f:
            for where in f.read().split():
                lines.append(f"vm: the guest wedged in {where} (no write for the stall limit); it was stopped and booted again")
    lines.append(f"{a.suite}: {passed} passed, {failed} failed, {skipped} skipped")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
