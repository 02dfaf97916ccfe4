#!/usr/bin/env python3
"""Teacher labels (data "teacher", runtime/data.c) on models/dlrm-ctr.json.

usage: teacher.py PLANCC PLANRUN PLANDUMP SOURCE_ROOT

- the plan carries the source: plandump --text writes "data teacher 3 -1" for the labels, and
  the text assembles back into a plan that passes plan_check;
- one rank, 1500 steps: planrun's teacher line says the mean label is within 0.01 of the teacher's
  mean probability, that the CTR is neither 0 nor 1, and that the teacher's best loss is below
  the CTR's entropy; the mean loss over the last 300 steps is below 0.8 x the CTR's entropy (the
  labels are learnable) and above the teacher's best loss (nothing beats the generating model);
- dp 4: the first step's loss equals one rank's (every rank draws the labels of its own rows
  from the same keyed rule as the features it holds; a mismatch changes the loss).
"""
import math
import os
import re
import subprocess
import sys
import tempfile

fails = 0


def check(name, ok, detail=""):
    global fails
    print(("ok    " if ok else "FAIL  ") + name + ("" if ok or not detail else "\n      " + str(detail)[-2000:]))
    fails += 0 if ok else 1


def entropy(p):
    return -(p * math.log(p) + (1 - p) * math.log(1 - p)) if 0 < p < 1 else 0.0


def main():
    plancc, planrun, plandump, root = sys.argv[1:5]
    model = os.path.join(root, "models", "dlrm-ctr.json")
    cluster = os.path.join(root, "models", "clusters", "cpu.json")
    with tempfile.TemporaryDirectory() as tmp:
        plans = {}
        for n in (1, 4):
            plans[n] = os.path.join(tmp, f"ctr{n}.plan")
            p = subprocess.run([plancc, model, "--cluster", cluster, "--devices", str(n), "--dp", str(n), "-o", plans[n]],
                               capture_output=True, text=True)
            check(f"plancc dlrm-ctr --dp {n}", p.returncode == 0, p.stderr)
            if p.returncode:
                return 1
        p = subprocess.run([plandump, "--text", plans[1]], capture_output=True, text=True)
        check("plandump --text: labels' data teacher 3 -1",
              re.search(r'^tensor \d+ "labels" f32 input \[128,1\] data teacher 3 -1$', p.stdout, re.M), p.stdout[-500:])
        text = os.path.join(tmp, "ctr1.txt")
        open(text, "w").write(p.stdout)
        p = subprocess.run([plandump, "--assemble", text, "-o", os.path.join(tmp, "back.plan")], capture_output=True, text=True)
        check("plandump --assemble reads the teacher source back", p.returncode == 0, p.stderr)

        losses = os.path.join(tmp, "l1.txt")
        p = subprocess.run([planrun, plans[1], "--steps", "1500", "--log-every", "0", "--losses", losses],
                           capture_output=True, text=True)
        check("planrun dlrm-ctr 1500 steps", p.returncode == 0, p.stderr)
        t = re.search(r"teacher labels: (\d+) drawn, mean label ([0-9.]+), mean probability ([0-9.]+), best loss ([0-9.]+)",
                      p.stdout)
        check("planrun prints the teacher line", t, p.stdout)
        if p.returncode or not t:
            return 1
        n, ctr, prob, best = int(t.group(1)), float(t.group(2)), float(t.group(3)), float(t.group(4))
        check(f"{n} labels drawn = 1500 steps x 128", n == 1500 * 128)
        check(f"mean label {ctr:.4f} within 0.01 of the mean probability {prob:.4f}", abs(ctr - prob) < 0.01)
        check(f"CTR {ctr:.4f} in (0.2, 0.8)", 0.2 < ctr < 0.8)
        h = entropy(ctr)
        check(f"teacher's best loss {best:.4f} below the CTR's entropy {h:.4f}", best < 0.9 * h)
        ls = [float(x) for x in open(losses)]
        tail = sum(ls[-300:]) / 300
        check(f"mean loss of the last 300 steps {tail:.4f} below 0.8 x the CTR's entropy ({0.8 * h:.4f})", tail < 0.8 * h)
        check(f"... and above the teacher's best loss {best:.4f}", tail > best)

        l4 = os.path.join(tmp, "l4.txt")
        p = subprocess.run([planrun, plans[4], "--steps", "1", "--log-every", "0", "--losses", l4], capture_output=True, text=True)
        check("planrun dlrm-ctr --dp 4, 1 step", p.returncode == 0, p.stderr)
        if p.returncode == 0:
            a, b = ls[0], float(open(l4).read().split()[0])
            check(f"dp 4's first loss {b:.9g} equals one rank's {a:.9g}", abs(a - b) <= 1e-5 * abs(a), (a, b))
    print(f"{fails} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
