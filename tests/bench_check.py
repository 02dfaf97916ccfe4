#!/usr/bin/env python3
"""Benchmark: `plancc --check` time and peak memory against a block's repeat count.

It rewrites models/gpt3-175b.json's block to repeat 1, 96 (the real model), 960 and 9600 and
prints wall time and peak RSS of `plancc --check` for each. Because a block is stored once,
neither should grow with the repeat count; the ratio against repeat 1 (measured in the same run)
is what to look at. Fails only on a wrong result (a run that does not succeed), never on time.

usage: bench_check.py PLANCC SOURCE_ROOT
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def run_once(plancc, path):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([plancc, "--check", "--json", path], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"plancc failed on {path}: {p.stderr}")
    # ru_maxrss of children is the max over all children so far: run each size in a fresh process.
    return dt, after.ru_maxrss, json.loads(p.stdout)["totals"]["params"]


def main():
    plancc, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with open(os.path.join(root, "models", "gpt3-175b.json")) as f:
        model = json.load(f)
    blocks = [e for e in model["ops"] if "block" in e]
    print(f"plancc --check on GPT-3 175B with the layer block repeated N times ({len(blocks)} block)")
    print(f"{'repeat':>7} {'params':>14} {'wall ms (best of 5)':>20} {'peak RSS MiB':>13} {'time vs N=1':>12}")
    base = None
    with tempfile.TemporaryDirectory() as d:
        for n in (1, 96, 960, 9600):
            for b in blocks:
                b["repeat"] = n
            path = os.path.join(d, f"gpt3-{n}.json")
            with open(path, "w") as f:
                json.dump(model, f)
            # A fresh interpreter per size so that RUSAGE_CHILDREN's max is this size's alone.
            code = ("import sys; sys.path.insert(0, %r); import bench_check as b; "
                    "r = [b.run_once(%r, %r) for _ in range(5)]; "
                    "print(min(x[0] for x in r), max(x[1] for x in r), r[0][2])") % (os.path.dirname(__file__), plancc, path)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
            dt, rss, params = float(out[0]), int(out[1]), float(out[2])
            base = base or dt
            print(f"{n:>7} {params:>14.4g} {dt * 1e3:>20.2f} {rss / 1024:>13.1f} {dt / base:>11.2f}x")


if __name__ == "__main__":
    main()
