#!/usr/bin/env python3
"""The estimate against the simulator: simulated step over estimated step.

For the recorded pipeline plans of tests/plans_unchanged.py (every case with --pp, --auto or
--virtual-stages) and three DLRM plans on 64 A100s, or with --all for every recorded plan,
compiles each with PLANCC (and BEFORE, when given), simulates it with `plandump --sim --json` and
prints simulated / estimate per plan, then per kind (pipelines: 1F1B, GPipe and interleaved on CPU
ranks; with --all also ZeRO, burst, ShadowSync's background sync and the rest; the GPU clusters'
plans) the mean absolute log of it, the farthest and how many are within 5% and 10%. With
BEFORE, only the plans whose estimate or simulated step differs between the two builds are
listed and summed (docs/results.md, "The pipeline timed by walking its schedule", "The estimate
against the simulator on every recorded plan").

usage: estimate_vs_sim.py [--root DIR] [--plandump PATH] [--jobs N] [--filter TEXT] [--all] PLANCC [BEFORE]
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cases(root, every=False):
    sys.path.insert(0, os.path.join(root, "tests"))
    import plans_unchanged  # noqa: E402  (the recorded plans)
    out = [(name, argv) for name, argv, *_ in plans_unchanged.cases(root)
           if every or any(k in " ".join(argv) for k in ("--pp", "--auto", "--virtual-stages"))]
    dlrm = [os.path.join(root, "models", "dlrm.json"), "--cluster", "dgx-a100", "--devices", "64", "--global-batch", "65536"]
    out += [("dlrm 64 A100s: --pp 8 --tp 8 --micro-batches 8", dlrm + ["--pp", "8", "--tp", "8", "--micro-batches", "8"]),
            ("dlrm 64 A100s: --pp 16 --tp 4 --micro-batches 4", dlrm + ["--pp", "16", "--tp", "4", "--micro-batches", "4"]),
            ("dlrm 64 A100s: --auto", dlrm + ["--auto"])]
    return out


def simulate(plancc, plandump, argv, tmp, tag):
    """(estimate, simulated step) of the plan, or None where plancc refuses it."""
    path = os.path.join(tmp, tag + ".plan")
    if subprocess.run([plancc, *argv, "-o", path, "-q"], capture_output=True).returncode:
        return None
    r = subprocess.run([plandump, "--sim", "--json", path], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("plandump --sim %s: %s" % (path, r.stderr.strip()))
    j = json.loads(r.stdout)
    return j["estimate_s"], j["step_s"]


def kind(name):
    if "dgx" in name or "A100" in name:
        return "on GPU clusters"
    if "--burst" in name:
        return "burst, CPU ranks"
    if "virtual" in name:
        return "interleaved 1F1B, CPU ranks"
    if "--pp" in name or "--auto" in name:
        return "GPipe, CPU ranks" if "gpipe" in name else "1F1B, CPU ranks"
    if "--zero" in name:
        return "ZeRO, CPU ranks"
    if "background" in name:
        return "background sync, CPU ranks"
    return "other, CPU ranks"


def summary(rows, col):
    v = [r[col][1] / r[col][0] for r in rows]
    mean = sum(abs(math.log(x)) for x in v) / len(v)
    far = max(v, key=lambda x: abs(math.log(x)))
    return "%.3f  farthest %.3f  within 5%% %d, 10%% %d" % (mean, far, sum(1 for x in v if abs(x - 1) <= 0.05),
                                                         sum(1 for x in v if abs(x - 1) <= 0.10))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plancc")
    ap.add_argument("before", nargs="?")
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--plandump", default=os.path.join(ROOT, "build", "plandump"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--filter", default="", help="only the plans whose name contains TEXT")
    ap.add_argument("--all", action="store_true", help="every recorded plan, not only the pipelines")
    a = ap.parse_args()
    todo = [c for c in cases(a.root, a.all) if a.filter in c[0]]

    def one(item):
        i, (name, argv) = item
        with tempfile.TemporaryDirectory() as tmp:
            now = simulate(a.plancc, a.plandump, argv, tmp, "now%d" % i)
            old = simulate(a.before, a.plandump, argv, tmp, "old%d" % i) if a.before else None
        return name, now, old

    rows = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for name, now, old in ex.map(one, enumerate(todo)):
            if not now or (a.before and (not old or old == now)):
                continue
            rows.append((name, now, old))
            line = "%-64s est %.4g sim %.4g (%.3f)" % (name[:64], now[0], now[1], now[1] / now[0])
            if old:
                line += "   before: est %.4g sim %.4g (%.3f)" % (old[0], old[1], old[1] / old[0])
            print(line)
    if not rows:
        print("no plans%s" % (" differ between the two builds" if a.before else ""))
        return 0
    print("\nsimulated / estimate, mean absolute log%s:" % (" (before -> now)" if a.before else ""))
    for k in sorted({kind(r[0]) for r in rows}) + ["all"]:
        group = [r for r in rows if k == "all" or kind(r[0]) == k]
        text = summary(group, 1)
        if a.before:
            text = summary(group, 2) + "  ->  " + text
        print("  %-30s %3d plans: %s" % (k, len(group), text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
