#!/usr/bin/python3
"""gpu_bench_sync.py: what background synchronization (plancc --sync background, ShadowSync) costs
the training step on one GPU, as a table: the DLRM-style model's step time with synchronous
training and with each background algorithm, their ratio to the synchronous step, and the
compiler's estimate beside the measurement. Then the synchronous plan's slowest operators
(planrun's CUDA profile), so that the cost model's figures can be checked.

  /usr/bin/python3 tools/gpu_bench_sync.py                     models/dlrm.json, DGX H100's device
  /usr/bin/python3 tools/gpu_bench_sync.py --model models/dlrm-small.json --steps 100

One GPU holds one rank, so the round's all-reduce has no peer: what this measures is the price of
a round on the foreground (its kernels on the low-priority stream, the snapshot and the delta, the
events that order the next step's optimizer after it). What a round saves, the dense all-reduce
in the step, needs two or more GPUs; tools/bench_shadowsync_sim.py gives it at 8-128 GPUs on the
simulator, and tools/bench_shadowsync.py on CPU ranks.

Each variant: plancc --devices 1 on the --cluster file; planrun --backend cuda for --steps steps,
--repeats times, the variants interleaved (the host's noise moves a run by 10-20% on a shared
machine); per run the median of the step times planrun prints after --warmup steps, then the
median of the runs, with their range. Exits 77 without a GPU or a
cuda backend (skipped, not failed).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = [("sync", []), ("ma, every step", ["--sync", "background:algo=ma,period=1"]),
            ("ma, p1, bucket", ["--sync", "background:algo=ma,period=1,bucket=4194304"]),
            ("ma, continuous", ["--sync", "background:algo=ma,period=continuous"]),
            ("easgd, every 4", ["--sync", "background:algo=easgd,period=4"]),
            ("bmuf, every 4", ["--sync", "background:algo=bmuf,period=4"])]


def sh(*args, env=None):
    return subprocess.run([str(x) for x in args], capture_output=True, text=True, env=env)


def main(argv):
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--model", default=os.path.join(ROOT, "models", "dlrm.json"))
    a.add_argument("--cluster", default=os.path.join(ROOT, "models", "clusters", "dgx-h100.json"))
    a.add_argument("--plancc", default=os.path.join(ROOT, "build", "plancc"))
    a.add_argument("--planrun", default=os.path.join(ROOT, "build", "planrun"))
    a.add_argument("--plandump", default=None, help="default: beside --plancc")
    a.add_argument("--steps", type=int, default=60)
    a.add_argument("--warmup", type=int, default=5)
    a.add_argument("--top", type=int, default=10, help="operators of the profile to print")
    a.add_argument("--repeats", type=int, default=3, help="runs of each variant, interleaved")
    a = a.parse_args(argv)
    plandump = a.plandump or os.path.join(os.path.dirname(os.path.abspath(a.plancc)), "plandump")
    if "cuda" not in sh(a.planrun, "--version").stdout:
        print("SKIP: this planrun has no cuda backend")
        return 77
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        plans = []
        for k, (name, extra) in enumerate(VARIANTS):
            plan = os.path.join(tmp, f"v{k}.plan")
            p = sh(a.plancc, "-q", a.model, "--cluster", a.cluster, "--devices", 1, *extra, "-o", plan)
            if p.returncode:
                sys.exit(f"plancc {' '.join(extra)} failed ({p.returncode}): {p.stderr[-1500:]}")
            est = re.search(r"estimate\s+([0-9.e+-]+) s per step", sh(plandump, plan).stdout)
            plans.append(plan)
            rows.append([name, [], float(est.group(1)) * 1e3 if est else None, "-"])
        for _ in range(a.repeats):  # the variants interleaved: the host's noise hits each alike
            for k, (name, extra) in enumerate(VARIANTS):
                p = sh(a.planrun, plans[k], "--backend", "cuda", "--steps", a.steps, "--timeout", 600)
                if p.returncode == 9:
                    print("SKIP: no GPU: " + p.stderr.strip())
                    return 77
                if p.returncode:
                    sys.exit(f"planrun ({name}) failed ({p.returncode}):\n{p.stdout[-1500:]}\n{p.stderr[-2500:]}")
                times = [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+\s+loss \S+\s+([0-9.]+) ms", p.stdout, re.M)]
                if len(times) <= a.warmup:
                    sys.exit(f"planrun ({name}) printed {len(times)} step times; need more than --warmup {a.warmup}")
                rounds = re.search(r"background rounds: (\d+) to (\d+)", p.stdout)
                rows[k][1].append(statistics.median(times[a.warmup:]))
                rows[k][3] = rounds.group(1) if rounds else "-"
        prof = os.path.join(tmp, "profile.json")  # the sync plan's, in a run of its own: its events slow the step
        q = sh(a.planrun, plans[0], "--backend", "cuda", "--steps", a.steps, "--timeout", 600, env=dict(os.environ, PLANRUN_CUDA_PROFILE=prof))
        if q.returncode:
            sys.exit(f"planrun (profile) failed ({q.returncode}):\n{q.stderr[-2500:]}")
        with open(prof) as f:
            profile = json.load(f)
    gpu = re.search(r"GPU \d+ of \d+ \(([^,]+),", p.stdout)
    print(f"GPU: {gpu.group(1) if gpu else '?'}; model {os.path.basename(a.model)}, one rank; {a.repeats} runs of "
          f"{a.steps} steps per variant, interleaved; each run's median after {a.warmup}, then the median of the runs")
    print(f"{'variant':18} {'ms/step':>9} {'runs from':>10} {'to':>8} {'vs sync':>8} {'estimate ms':>12} {'rounds':>7}")
    sync = statistics.median(rows[0][1])
    for name, runs, est, rounds in rows:
        ms = statistics.median(runs)
        print(f"{name:18} {ms:9.3f} {min(runs):10.3f} {max(runs):8.3f} {ms / sync:8.3f} "
              f"{est if est is not None else float('nan'):12.3f} {rounds:>7}")
    steps_seen = a.steps - 1  # the profile skips the first step
    ops = []
    for e in profile["entries"]:
        n = re.search(r"median of (\d+)", e.get("note", ""))
        per_step = int(n.group(1)) / steps_seen if n else 1
        ops.append((e["seconds"] * 1e3 * per_step, e["op"], e["shapes"], e["seconds"] * 1e3, per_step))
    ops.sort(key=lambda r: -r[0])
    total = sum(r[0] for r in ops)
    print(f"\nsync plan's operators, {total:.3f} ms a step in all (CUDA events around each; the step's gaps not counted):")
    print(f"{'ms/step':>9} {'share':>6}  {'operator':20} {'ms each':>8} {'per step':>8}  shapes")
    for t, op, shapes, each, per in ops[:a.top]:
        print(f"{t:9.3f} {t / total:6.1%}  {op:20} {each:8.4f} {per:8.1f}  {json.dumps(shapes)[:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
