#!/usr/bin/python3
"""train_curve.py: trains gpt-tiny on the King James text with planrun, on one rank and on four,
and shows that it learns and that the parallel plans learn the same curve.

  /usr/bin/python3 tools/train_curve.py                  300 steps, data/kjv.bin, seed 2
  /usr/bin/python3 tools/train_curve.py --steps 100 --every 10

It compiles three plans of models/gpt-tiny.json for models/clusters/cpu.json (one rank; four
ranks with --auto, which picks dp 4; four ranks as dp 2 x tp 2), runs each for --steps steps with
`planrun --data data/kjv.bin --seed S --losses FILE`, and prints the three loss curves side by
side every --every steps, with ln(V) (the loss of a uniform guess over the byte vocabulary, 5.545
for V = 256) for reference, then each run's final loss (the mean of the last --every steps: one
step's loss is over only B x S = 128 tokens and noisy) and its time.

A benchmark in nccl-tests' sense: it prints its figures and also fails on wrong results. It exits 1
  - if a run's final loss is not below --max-final (default 2.5; gpt-tiny reaches 2.29 to 2.36
    after 300 steps over seeds 1 to 12, from 5.60: it has learned the corpus's letter and word
    statistics), or
  - if a four-rank curve differs from the one-rank curve by more than --rtol (default 1e-3)
    relative at any printed step (the plans compute the same sums in other orders, so float32
    rounding is all that may differ: with seed 2 they agree within 1e-5 over all 300 steps),
and exits 2 when plancc or planrun fails. Standard library only; about 4 s on 2 cores.

Why seed 2: some seeds drive this small model through a phase that amplifies rounding. With
seed 1 every run agrees within 2e-6 for 40 steps, then the curves part by up to 2e-2 per step
from step 45 on (their 25-step means by 2.5e-3); PyTorch's own float32 and float64 runs of the
same steps part just as much there (tools/torch_ref.py --steps 60), so no float32 implementation
could meet 1e-3 per step with that seed. Over seeds 1 to 12, seeds 1 and 12 do this (and 9 reaches
2.7e-4); the others stay within 1e-5. A failure with another seed whose first steps agree closely
is that, not a wrong plan; the output says so.
"""
import argparse
import json
import math
import os
import sys
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = [("1 rank", ["--devices", "1"]),
        ("4 ranks --auto", ["--devices", "4", "--auto"]),
        ("4 ranks dp2 x tp2", ["--devices", "4", "--dp", "2", "--tp", "2"])]


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Train gpt-tiny on data/kjv.bin with planrun on 1 and 4 ranks; "
                                             "print the loss curves; fail if it does not learn or the curves differ.")
    ap.add_argument("--plancc", default=os.path.join(ROOT, "build", "plancc"))
    ap.add_argument("--planrun", default=os.path.join(ROOT, "build", "planrun"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gpt-tiny.json"))
    ap.add_argument("--cluster", default=os.path.join(ROOT, "models", "clusters", "cpu.json"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "kjv.bin"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=2, help="default 2 (see the top of this file for why not 1)")
    ap.add_argument("--every", type=int, default=25, help="print every N steps (default 25)")
    ap.add_argument("--max-final", type=float, default=2.5, help="the final loss must be below this (default 2.5)")
    ap.add_argument("--rtol", type=float, default=1e-3,
                    help="largest relative difference of a printed loss from the one-rank run's (default 1e-3)")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.every < 1:
        ap.error("--steps and --every want a positive integer")
    return a


def train(a, tmp, label, opts):
    """Compiles and runs one plan; returns (losses, seconds, plancc's summary line)."""
    tag = "".join(ch if ch.isalnum() else "_" for ch in label)
    plan, losses = os.path.join(tmp, tag + ".plan"), os.path.join(tmp, tag + ".loss")
    p = subprocess.run([a.plancc, a.model, "--cluster", a.cluster, "-o", plan] + opts, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError("plancc %s failed (exit %d):\n%s%s" % (" ".join(opts), p.returncode, p.stdout, p.stderr))
    summary = (p.stdout + p.stderr).strip().splitlines()[0].replace("plancc: ", "")
    t0 = time.time()
    p = subprocess.run([a.planrun, plan, "--steps", str(a.steps), "--seed", str(a.seed), "--data", a.data,
                        "--losses", losses, "--quiet"], capture_output=True, text=True)
    el = time.time() - t0
    if p.returncode:
        raise RuntimeError("planrun (%s) failed (exit %d):\n%s%s" % (label, p.returncode, p.stdout, p.stderr))
    with open(losses) as f:
        curve = [float(x) for x in f.read().split()]
    if len(curve) != a.steps:
        raise RuntimeError("planrun (%s) wrote %d losses for %d steps" % (label, len(curve), a.steps))
    return curve, el, summary


def main(argv):
    a = parse_args(argv)
    with open(a.model) as f:
        dims = json.load(f)["dims"]
    V = dims.get("V", 256)
    lnv = math.log(V)
    print("train_curve: %s on %s, %d steps, seed %d; ln(V) = ln(%d) = %.3f (a uniform guess)"
          % (os.path.relpath(a.model, ROOT), os.path.relpath(a.data, ROOT), a.steps, a.seed, V, lnv))
    curves = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for label, opts in RUNS:
                c, el, summary = train(a, tmp, label, opts)
                curves.append((label, c, el))
                print("  %-18s %s" % (label + ":", summary))
    except (RuntimeError, OSError) as e:
        print("train_curve: %s" % e, file=sys.stderr)
        return 2
    ref = curves[0][1]
    print("\n%6s  %s  %s" % ("step", "  ".join("%18s" % label for label, _, _ in curves), "max rel diff"))
    printed = sorted(set(list(range(a.every, a.steps + 1, a.every)) + [1, a.steps]))
    worst, bad = 0.0, []
    for s in printed:
        row = [c[s - 1] for _, c, _ in curves]
        rel = max(abs(x - row[0]) / row[0] for x in row[1:]) if len(row) > 1 else 0.0
        worst = max(worst, rel)
        if rel > a.rtol:
            bad.append(s)
        print("%6d  %s  %12.2e%s" % (s, "  ".join("%18.6f" % x for x in row), rel, "  DIFFER" if rel > a.rtol else ""))
    print("%6s  %s  (ln V)" % ("", "  ".join("%18.3f" % lnv for _ in curves)))
    n = min(a.every, a.steps)
    finals = [sum(c[-n:]) / n for _, c, _ in curves]
    print("\nfinal loss (mean of the last %d steps): %s" % (n, ", ".join(
        "%s %.4f" % (label, f) for (label, _, _), f in zip(curves, finals))))
    print("time: %s" % ", ".join("%s %.1f s (%.1f steps/s)" % (label, el, a.steps / el) for label, _, el in curves))
    print("largest relative difference from the one-rank curve at a printed step: %.2e (tolerance %g)" % (worst, a.rtol))
    ok = True
    if any(f >= a.max_final for f in finals):
        print("FAIL: a final loss is not below %g (ln V = %.3f)" % (a.max_final, lnv))
        ok = False
    if bad:
        print("FAIL: the curves differ by more than %g at step%s %s" % (a.rtol, "s" if len(bad) > 1 else "",
                                                                     ", ".join(map(str, bad))))
        early = min(a.every, a.steps)
        first = max(abs(c[i] - ref[i]) / ref[i] for _, c, _ in curves[1:] for i in range(early))
        if first <= 1e-5:
            print("  (the first %d steps agree within %.1e: this looks like a seed whose training amplifies float32 "
                  "rounding, as seed 1 does from step 45, rather than a wrong plan; see the top of %s)"
                  % (early, first, os.path.relpath(__file__, ROOT)))
        ok = False
    print("train_curve: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
