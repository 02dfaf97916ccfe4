#!/usr/bin/env python3
"""One memory figure: what the search ranks and fits by is the emitted plan's memory-planner peak.

usage: memory_agree.py PLANCC PLANDUMP SOURCE_ROOT

For every model x device count x strategy of the compile suite (tests/compile_plans.py: mlp,
gpt-tiny, cnn-small and dlrm on 1, 2, 4 and 8 CPU ranks under --auto and the template families):
  - plancc --estimate-only --json and a compile of the same options agree on the strategy (mesh,
    micro-batches, ZeRO), and the memory the estimate reports is the plan's peak (plandump --json:
    estimate.peak_bytes) within 2%;
  - a strategy the model cannot take is refused by both with the same exit code.
And where nothing fits (the 1T GPT on one DGX A100 node, --auto and a template): --estimate-only
exits 3 with the compile's message, word for word (progress lines aside).

What it catches: a search that ranks candidates by a memory model the memory planner disagrees
with (a 314B GPT whose estimate said 15 GiB and whose plan needed 599 GiB), and an
--estimate-only that prints a plan needing more memory than the device has with exit 0.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compile_plans as cp  # noqa: E402  (the suite's models and strategies)

TOLERANCE = 0.02
PROGRESS = re.compile(r"^plancc: \d+ s: ")  # a long compile's progress lines (glpk.c), not its message
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}{': ' + detail if detail else ''}")
    return ok


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def agree(plancc, plandump, tmp, what, args):
    e = run(plancc, *args, "--estimate-only", "--json")
    plan = os.path.join(tmp, "x.plan")
    c = run(plancc, *args, "-q", "-o", plan)
    if not check(f"{what}: same exit code", e.returncode == c.returncode,
                 f"--estimate-only {e.returncode}, compile {c.returncode}: {e.stderr.strip()[-300:]} | {c.stderr.strip()[-300:]}"):
        return
    if c.returncode != 0:
        check(f"{what}: same refusal", e.stderr == c.stderr, f"{e.stderr.strip()!r} vs {c.stderr.strip()!r}")
        return
    est = json.loads(e.stdout)
    d = run(plandump, "--json", plan)
    if not check(f"{what}: plandump --json", d.returncode == 0, d.stderr.strip()[-300:]):
        return
    p = json.loads(d.stdout)
    peak = p["estimate"]["peak_bytes"]
    mesh = {a["axis"]: a["size"] for a in p["mesh"]}
    same = all(est[k] == mesh.get(k, 1) for k in ("pp", "dp", "tp"))
    check(f"{what}: the same strategy", same and est["micro_batches"] == p["micro_batches"] and est["zero"] == p["zero_stage"],
          f"estimate {est['pp']}x{est['dp']}x{est['tp']}, {est['micro_batches']} micro-batches; plan {mesh}")
    err = abs(est["memory_bytes"] - peak) / max(peak, 1)
    check(f"{what}: memory {est['memory_bytes']:.0f} vs plan peak {peak:.0f}", err <= TOLERANCE, f"{100 * err:.2f}% apart")


def main():
    plancc, plandump, root = (os.path.abspath(a) for a in sys.argv[1:4])
    cpu = os.path.join(root, "models", "clusters", "cpu.json")
    with tempfile.TemporaryDirectory(prefix="plancc-memory-") as tmp:
        for model in ["mlp", "gpt-tiny", "cnn-small", "dlrm"]:
            batch, layers = cp.model_facts(root, model)
            path = os.path.join(root, "models", model + ".json")
            for n in [1, 2, 4, 8]:
                for strat in cp.strategies(n):
                    agree(plancc, plandump, tmp, f"{model} {n} {strat}", [path, "--cluster", cpu, "--devices", n, *strat.split()])
        # Nothing fits: the same message from both.
        a100 = os.path.join(root, "models", "clusters", "dgx-a100.json")
        t1 = os.path.join(root, "models", "megatron-1t.json")
        for args in ([t1, "--cluster", a100, "--devices", 8], [t1, "--cluster", a100, "--devices", 8, "--tp", 8]):
            e = run(plancc, *args, "--estimate-only")
            c = run(plancc, *args, "-o", os.path.join(tmp, "none.plan"))
            check(f"{' '.join(map(str, args[3:]))}: --estimate-only exits 3 when nothing fits", e.returncode == 3,
                  f"exit {e.returncode}: {e.stderr.strip()[-300:]}")
            said = lambda p: [ln for ln in p.stderr.splitlines() if not PROGRESS.match(ln)]
            check(f"{' '.join(map(str, args[3:]))}: with the compile's message", said(e) == said(c) and c.returncode == 3,
                  f"{e.stderr!r} vs {c.stderr!r}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
