#!/usr/bin/env python3
"""A loss computed after a loss operator reports its real value.

usage: composite_loss.py PLANCC PLANRUN SOURCE_ROOT

tests/models/mlp-composite.json is models/mlp.json with loss = scale(ce, 2) + ce: three times
mlp's cross-entropy, the same parameters, initializers and data. planrun reads the step's loss
from the buffer of the operator that writes the loss tensor, whatever operator that is (before
this test, only from a loss operator's, and a composite loss printed 0.000000 every step).
Checks, each on 1 rank, --dp 4, --dp 2 --tp 2 and --auto on 4 CPU ranks, and --pp 2 with 4 micro-batches:
  - step 1's loss is 3 x mlp's step-1 loss under the same options within 1e-6 relative (the same
    weights and data);
  - every step's loss is finite and not 0, and equals the one-rank composite plan's (as many micro-batches)
    within 1e-5;
  - the later steps stay within 1e-3 of 3 x mlp's (AdamW's update is nearly invariant to the
    gradient's scale, so both train alike).
"""
import math
import os
import subprocess
import sys
import tempfile

STEPS = 4


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def losses(plancc, planrun, model, n, opts, tmp, tag):
    plan, lf = os.path.join(tmp, tag + ".plan"), os.path.join(tmp, tag + ".loss")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = run(plancc, model, "--cluster", os.path.join(root, "models", "clusters", "cpu.json"), "--devices", n, *opts, "-o", plan)
    if p.returncode:
        raise SystemExit(f"FAIL plancc {model} {opts}: exit {p.returncode}\n{p.stderr}")
    p = run(planrun, plan, "--steps", STEPS, "--quiet", "--losses", lf)
    if p.returncode:
        raise SystemExit(f"FAIL planrun {model} {opts}: exit {p.returncode}\n{p.stderr}")
    with open(lf, encoding="utf-8") as f:
        return [float(x) for x in f.read().split()]


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    plancc, planrun, root = sys.argv[1:]
    comp = os.path.join(root, "tests", "models", "mlp-composite.json")
    base = os.path.join(root, "models", "mlp.json")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        one = {}
        for n, opts in ((1, []), (4, ["--dp", "4"]), (4, ["--dp", "2", "--tp", "2"]), (4, ["--auto"]), (2, ["--pp", "2", "--micro-batches", "4"])):
            ref = losses(plancc, planrun, base, n, opts, tmp, "mlp")
            got = losses(plancc, planrun, comp, n, opts, tmp, "comp")
            mb = opts[opts.index("--micro-batches") + 1] if "--micro-batches" in opts else "1"
            if mb not in one:  # the one-rank composite plan with as many micro-batches (the same data)
                one[mb] = got if n == 1 else losses(plancc, planrun, comp, 1, ["--micro-batches", mb], tmp, "one")
            name = f"{n} rank(s) {' '.join(opts)}"
            bad = [s for s, x in enumerate(got, 1) if not math.isfinite(x) or x == 0]
            if bad:
                failed += 1
                print(f"FAIL {name}: step {bad[0]}'s loss is {got[bad[0] - 1]}")
                continue
            if abs(got[0] - 3 * ref[0]) > 1e-6 * 3 * ref[0]:
                failed += 1
                print(f"FAIL {name}: step 1 loss {got[0]:.9g}, but 3 x mlp's is {3 * ref[0]:.9g}")
                continue
            far = [s for s, (a, b) in enumerate(zip(got, one[mb]), 1) if abs(a - b) > 1e-5 * abs(b)]
            drift = max(abs(a - 3 * b) / (3 * b) for a, b in zip(got, ref))
            if far or drift > 1e-3:
                failed += 1
                print(f"FAIL {name}: losses {got}; one rank {one[mb]}; 3 x mlp {[3 * x for x in ref]}")
                continue
            print(f"ok   {name}: losses {' '.join(f'{x:.6f}' for x in got)} (3 x mlp within {drift:.2g})")
    print("failed" if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
