#!/usr/bin/env python3
"""Plans unchanged: every model x strategy of the compile and equivalence suites compiles to the
same bytes as the recorded digest in tests/golden/plans.sha256.

usage: plans_unchanged.py PLANCC SOURCE_ROOT             compare (exit 1 on any difference)
       plans_unchanged.py --write PLANCC SOURCE_ROOT     record the digests anew

This guards restructurings of the compiler and the plan library (they must not change one byte of
any plan) and makes every change to what plancc emits visible: a commit that means to change plans
rewrites the list with --write and says in its message which plans changed and why.

The cases: mlp, gpt-tiny, cnn-small and dlrm under the compile suite's strategies on 1, 2, 4 and 8
CPU ranks; dlrm-small and resnet-small under the equivalence suite's (interleaved pipelines, ZeRO
1/2/3, gradient buckets, DeepPool's --burst with the cost model's and with given widths); gpt-tiny
with 6 layers in deep pipelines; ShadowSync's background plans; and a few larger models on the GPU
clusters (the search, the cost model and the memory planner at scale, templates only where
--auto would take long). A strategy plancc refuses is recorded by its exit code.
"""
import concurrent.futures
import hashlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compile_plans  # noqa: E402  (the compile suite's strategies)
import equiv  # noqa: E402  (the equivalence suite's)

GOLDEN = os.path.join(HERE, "golden", "plans.sha256")

BACKGROUND = ["--dp 4 --sync background:algo=ma,period=1", "--dp 4 --sync background:algo=easgd,period=2",
              "--dp 4 --sync background:algo=bmuf,period=4", "--dp 4 --sync background:algo=ma,period=continuous",
              "--dp 4 --sync background:algo=ma,period=1,chunk=256",
              "--dp 4 --sync background:algo=ma,period=1,bucket=4194304",
              "--dp 2 --tp 2 --sync background:algo=ma,period=1", "--dp 1 --tp 4 --tp-batch", "--dp 2 --tp 2 --tp-batch"]

# (model, cluster, devices, options): the search and the cost model on real clusters.
LARGE = [
    ("gpt2-small", "dgx-a100", 8, "--auto"),
    ("gpt2-small", "dgx-a100", 8, "--auto --global-batch 64"),
    ("swin-tiny", "dgx-a100", 8, "--auto"),
    ("vgg16", "dgx-a100", 8, "--burst --global-batch 64"),
    ("wrn-50-2", "dgx-a100", 16, "--burst --global-batch 64"),
    ("dlrm-ctr", "cpu-ethernet", 4, "--tp 4 --tp-batch"),
    ("megatron-1.7b", "dgx-a100", 32, "--auto --global-batch 512"),
    ("megatron-18b", "dgx-a100", 256, "--dp 32 --tp 8 --pp 1 --global-batch 1024 --recompute full"),
    ("gpt3-175b", "dgx-a100", 1024, "--dp 8 --tp 8 --pp 16 --global-batch 1536 --micro-batches 192"),
    ("gpt3-175b", "dgx-a100", 64, "--dp 1 --tp 8 --pp 8 --micro-batches 16 --virtual-stages 2 --recompute full"),
]


def cases(root):
    """(name, argv after plancc, model path) for every case, in a fixed order."""
    out = []
    cpu = os.path.join(root, "models", "clusters", "cpu.json")

    def add(model, n, opts, cluster=cpu, path=None):
        path = path or os.path.join(root, "models", model + ".json")
        out.append((f"{model} {os.path.basename(cluster)[:-5]} {n}: {opts.replace(root + os.sep, '')}",
                    [path, "--cluster", cluster, "--devices", str(n), *opts.split()]))

    for model in ["mlp", "gpt-tiny", "cnn-small", "dlrm"]:
        for n in (1, 2, 4, 8):
            for s in compile_plans.strategies(n):
                add(model, n, s)
    for model in ["mlp", "gpt-tiny", "cnn-small", "dlrm-small", "resnet-small"]:
        for n in (1, 2, 4, 8):
            for s in equiv.strategies(n) + equiv.burst_strategies(model, n):
                if model in ("mlp", "gpt-tiny", "cnn-small") and s in compile_plans.strategies(n):
                    continue
                add(model, n, s)
    for s in BACKGROUND:
        add("dlrm-small", 4, s)
    add("mlp", 1, "--sync background:algo=ma,period=1")
    pol = os.path.join(root, "models", "policies")  # interlaced operators (their phases, sends and collectives over pp)
    add("gpt-tiny", 8, "--policy " + os.path.join(pol, "interlaced-gpt-tiny.json"))
    add("gpt-tiny", 8, "--policy " + os.path.join(pol, "interlaced-1f1b-gpt-tiny.json"))
    add("mt5-large", 32, "--global-batch 1024 --bf16 --policy " + os.path.join(pol, "interlaced-mt5-large.json"),
        os.path.join(root, "models", "clusters", "dgx-a100.json"))
    for model, cluster, n, opts in LARGE:
        add(model, n, opts, os.path.join(root, "models", "clusters", cluster + ".json"))
    return out


def digest(plancc, tmp, i, case, deep):
    name, argv = case
    argv = [a.replace("@DEEP@", deep) for a in argv]
    plan = os.path.join(tmp, f"{i}.plan")
    p = subprocess.run([plancc, "-q", *argv, "-o", plan], capture_output=True, text=True)
    if p.returncode != 0:
        return name, f"exit-{p.returncode}", p.stderr.strip().splitlines()[-1:] or [""]
    with open(plan, "rb") as f:
        h = hashlib.sha256(f.read()).hexdigest()
    os.unlink(plan)
    return name, h, None


def main():
    args = sys.argv[1:]
    write = args[:1] == ["--write"]
    if write:
        args = args[1:]
    if len(args) != 2:
        print(__doc__)
        return 2
    plancc, root = (os.path.abspath(a) for a in args)
    with tempfile.TemporaryDirectory(prefix="plancc-golden-") as tmp:
        deep = os.path.join(tmp, "gpt-tiny-6.json")
        with open(os.path.join(root, "models", "gpt-tiny.json"), encoding="utf-8") as f:
            text = f.read()
        with open(deep, "w", encoding="utf-8") as f:
            f.write(text.replace('"repeat": 2', '"repeat": 6', 1))
        all_cases = cases(root)
        for opts in equiv.DEEP:
            w = opts.split()
            n = int(w[w.index("--pp") + 1])
            all_cases.append((f"gpt-tiny-6 cpu {n}: {opts}", ["@DEEP@", "--cluster", os.path.join(root, "models", "clusters", "cpu.json"),
                                                           "--devices", str(n), *w]))
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            got = list(pool.map(lambda ic: digest(plancc, tmp, ic[0], ic[1], deep), enumerate(all_cases)))
    names = [n for n, _, _ in got]
    if len(set(names)) != len(names):
        print("FAIL: two cases share a name")
        return 1
    if write:
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        with open(GOLDEN, "w", encoding="utf-8") as f:
            for name, h, _ in got:
                f.write(f"{h}  {name}\n")
        print(f"wrote {len(got)} digests to {os.path.relpath(GOLDEN, root)}")
        return 0
    want = {}
    with open(GOLDEN, encoding="utf-8") as f:
        for line in f:
            h, name = line.rstrip("\n").split("  ", 1)
            want[name] = h
    bad = 0
    for name, h, why in got:
        if name not in want:
            bad += 1
            print(f"FAIL {name}: not in {os.path.basename(GOLDEN)} (record it with --write)")
        elif want[name] != h:
            bad += 1
            detail = f" ({why[0]})" if why else ""
            print(f"FAIL {name}: {h[:16]}{detail}, recorded {want[name][:16]}")
    for name in sorted(set(want) - set(names)):
        bad += 1
        print(f"FAIL {name}: recorded but no longer a case")
    refused = sum(1 for _, h, _ in got if h.startswith("exit-"))
    print(f"{len(got) - bad} of {len(got)} plans the same bytes as recorded ({refused} of them refusals)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
