#!/usr/bin/env python3
"""Each example policy of models/policies/ against the best template of plancc's grid, on the cost
model and the plan simulator.

usage: bench_policy.py [--plancc PATH] [--root DIR] [--only SUBSTRING[,SUBSTRING...]]

For every models/policies/X-MODEL.json (gpt-tiny and llama-tiny on CPU ranks, the others on the
DGX A100 nodes their mesh fills, 16 where it leaves one open): the plan of `plancc MODEL --policy FILE`, and every template of the grid on the
same devices and micro-batch count - each factorization dp x tp x pp (tp inside a node), ZeRO 0,
1 and 3 (with dp > 1), recompute auto and full - compiled (refused or infeasible ones left out).
Prints the policy's estimated and simulated step (plancc --json's estimate.step_s and
simulation.step_s), the best template by the simulated step, and the ratio template / policy
(above 1: the policy's plan is faster). Exits 1 when a policy does not compile or a plan's figure
is missing; never on speed.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def compile_json(plancc, model, cluster, devs, opts, out):
    p = subprocess.run([plancc, model, "--cluster", cluster, *devs, *opts, "-o", out, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        return None, p
    d = json.loads(p.stdout)
    return d, p


# Options a model's examples compile with besides the policy (tests/policy.py's): mT5-Large as
# pre-trained (its file's batch is 2).
EXTRA = {"mt5-large": ["--global-batch", "1024", "--bf16"]}


def where(root, name):
    """(model path, cluster, device options, devices) an example goes with."""
    for m in ("gpt-tiny", "llama-tiny"):
        if name.endswith(f"-{m}.json"):
            mesh = json.load(open(os.path.join(root, "models", "policies", name), encoding="utf-8")).get("mesh", {})
            n = mesh["dp"] * mesh["tp"] * mesh["pp"] if all(k in mesh for k in ("dp", "tp", "pp")) else 8
            path = os.path.join(root, "models" if m == "gpt-tiny" else "tests/models", m + ".json")
            return path, "cpu", ["--devices", str(n)], n, n
    model = next(m for m in ("gpt3-175b", "mt5-large") if name.endswith(f"-{m}.json"))
    mesh = json.load(open(os.path.join(root, "models", "policies", name), encoding="utf-8")).get("mesh", {})
    nodes = mesh["dp"] * mesh["tp"] * mesh["pp"] // 8 if all(k in mesh for k in ("dp", "tp", "pp")) else 16
    extra = EXTRA.get(model, [])
    return os.path.join(root, "models", model + ".json"), "dgx-a100", ["--nodes", str(nodes)] + extra, 8 * nodes, 8


def grid(n, per_node, mb):
    for tp in (t for t in range(1, n + 1) if n % t == 0 and t <= per_node):
        for pp in (p for p in range(1, n // tp + 1) if (n // tp) % p == 0):
            dp = n // tp // pp
            for zero in (0, 1, 3) if dp > 1 else (0,):
                for rc in ("auto", "full"):
                    yield ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp), "--zero", str(zero), "--recompute", rc,
                           "--micro-batches", str(mb)]


def main():
    args = sys.argv[1:]
    plancc = os.path.join(HERE, "..", "build", "plancc")
    root = os.path.join(HERE, "..")
    only = ""
    while len(args) >= 2 and args[0] in ("--plancc", "--root", "--only"):
        if args[0] == "--plancc":
            plancc = args[1]
        elif args[0] == "--root":
            root = args[1]
        else:
            only = args[1]
        args = args[2:]
    bad = 0
    d = os.path.join(root, "models", "policies")
    print(f"{'policy':28} {'strategy':44} {'est s':>10} {'sim s':>10}   {'best template (by simulated step)':48} {'sim s':>10} {'tmpl/policy':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "x.plan")
        for name in sorted(f for f in os.listdir(d) if f.endswith(".json") and any(o in f for o in only.split(","))):
            model, cluster, devs, n, per_node = where(root, name)
            pol, p = compile_json(plancc, model, cluster, devs, ["--policy", os.path.join(d, name)], out)
            if pol is None or "simulation" not in pol:
                bad += 1
                print(f"{name:28} FAILED: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
                continue
            mb = pol["strategy"]["micro_batches"]
            best = None
            for opts in grid(n, per_node, mb):
                t, _ = compile_json(plancc, model, cluster, devs, opts, out)
                if t and "simulation" in t and (best is None or t["simulation"]["step_s"] < best[1]["simulation"]["step_s"]):
                    best = (" ".join(o for o in opts), t)
            ps, pe = pol["simulation"]["step_s"], pol["estimate"]["step_s"]
            desc = pol["strategy"].get("text") or pol["strategy"].get("mesh") or ""
            if best:
                bs = best[1]["simulation"]["step_s"]
                print(f"{name:28} {str(desc)[:44]:44} {pe:10.4g} {ps:10.4g}   {best[0]:48} {bs:10.4g} {bs / ps:11.3f}")
            else:
                print(f"{name:28} {str(desc)[:44]:44} {pe:10.4g} {ps:10.4g}   (no template compiles)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
