#!/usr/bin/env python3
"""Node groups of different devices (the cluster format's "groups"): plans on a mixed cluster.

Usage: hetero.py PLANCC PLANDUMP ROOT

On models/clusters/cpu-hetero.json (2 fast cpu ranks, 2 ranks a quarter as fast with half the
memory) and models/clusters/a100-h100.json (2 DGX A100 + 2 DGX H100 nodes):
  - the faster group's stage gets more layers than the slower group's, and the step estimate is
    below the same plan with the stages cut by FLOPs (what plancc did before node groups);
  - each stage's memory-planner peak fits its own group's device, and the plan passes plan_check;
  - --auto gives a plan on both clusters, the template --pp 2 --dp 2 --tp 8 on a100-h100 too;
  - a stage across two groups (--pp 1) is refused with exit 2 and the cluster's /groups pointer,
    and so are --nodes and --devices.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

failed = 0


def check(ok, what, detail=""):
    global failed
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    failed += 0 if ok else 1


def groups_line(out):
    """(layers per stage, group per stage, step by speed, step by FLOPs) from --estimate-only's text."""
    m = re.search(r"node groups:(.*)\n\s*stages cut by each group's speed: (\S+) s per step; cut by FLOPs instead: (\S+) s", out)
    if not m:
        return None
    stages = re.findall(r"stage \d+ on group (\d+) \(.*?\): (\d+) layers?", m.group(1))
    return [int(n) for _, n in stages], [int(g) for g, _ in stages], float(m.group(2)), float(m.group(3))


def main():
    plancc, plandump, root = sys.argv[1:4]
    cpu = os.path.join(root, "models", "clusters", "cpu-hetero.json")
    mixed = os.path.join(root, "models", "clusters", "a100-h100.json")
    tiny = os.path.join(root, "models", "gpt-tiny.json")
    big = os.path.join(root, "models", "megatron-39b.json")
    run = lambda *a: subprocess.run([plancc, *a], capture_output=True, text=True, timeout=300)

    # The cut: the fast group's stage takes more layers, and the step beats the FLOP-balanced cut.
    for model, cluster, opts in ((tiny, cpu, ["--pp", "2", "--dp", "2"]), (big, mixed, ["--pp", "2", "--dp", "2", "--tp", "8", "--global-batch", "64"]),
                                 (big, mixed, ["--auto", "--global-batch", "64"])):
        name = f"{os.path.basename(model)} on {os.path.basename(cluster)} {' '.join(opts)}"
        p = run(model, "--cluster", cluster, *opts, "--estimate-only")
        g = groups_line(p.stdout) if p.returncode == 0 else None
        check(g is not None, f"{name}: a plan, with its stages' groups", p.stderr[-800:] + p.stdout[-800:])
        if not g:
            continue
        layers, grp, by_speed, by_flops = g
        fast = max(grp)  # group 1 is the faster on a100-h100; on cpu-hetero group 0 is
        if cluster == cpu:
            fast = 0
        f = [n for n, k in zip(layers, grp) if k == fast]
        s = [n for n, k in zip(layers, grp) if k != fast]
        check(f and s and min(f) > max(s), f"{name}: the faster group's stages get more layers ({layers} on groups {grp})",
              f"{layers} on groups {grp}")
        check(by_speed < by_flops, f"{name}: step {by_speed:.4g} s below the FLOP-balanced cut's {by_flops:.4g} s")

    # The plan: plan_check passes (plancc runs it; plandump says so) and each stage fits its group.
    with open(cpu, encoding="utf-8") as f:
        mem = [g["device"]["memory_bytes"] for g in json.load(f)["groups"]]
    with tempfile.TemporaryDirectory() as tmp:
        for opts in (["--pp", "2", "--dp", "2"], ["--auto"]):
            plan = os.path.join(tmp, "h.plan")
            p = run(tiny, "--cluster", cpu, *opts, "-o", plan)
            check(p.returncode == 0, f"gpt-tiny on cpu-hetero {' '.join(opts)}: compiles", p.stderr[-800:])
            if p.returncode:
                continue
            d = subprocess.run([plandump, "--json", plan], capture_output=True, text=True, timeout=60)
            j = json.loads(d.stdout) if d.returncode == 0 else {}
            check(j.get("check", {}).get("ok") is True, "plan_check passes", str(j.get("check")))
            progs = j.get("programs", [])
            check(len(progs) >= 2, f"{len(progs)} stage programs", str(j.get("mesh")))
            per = 4 // max(len(progs), 1)
            for i, pr in enumerate(progs):
                group = (i * per) // 2
                check(pr["arena_bytes"] <= mem[group], f"stage {i}'s peak {pr['arena_bytes']} B fits group {group}'s {mem[group]} B")

    # Refusals: a stage across groups, and the overrides.
    for opts, frag in ((["--pp", "1", "--dp", "4"], "across two node groups"), (["--devices", "4"], "--devices"),
                       (["--nodes", "2"], "--nodes")):
        p = run(tiny, "--cluster", cpu, *opts, "--estimate-only")
        check(p.returncode == 2 and ":/groups: " in p.stderr and frag in p.stderr, f"{' '.join(opts)} refused (exit 2)",
              f"exit {p.returncode}: {p.stderr[-600:]}")
    print(f"hetero: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
