#!/usr/bin/env python3
"""Megatron-LM's sequence parallelism (--sequence-parallel): what the plan does, read from it.

usage: sequence_parallel.py PLANCC PLANDUMP SOURCE_ROOT

For gpt-tiny on CPU ranks with --tp 2, --dp 2 --tp 2 and --tp 4, each with and without
--sequence-parallel, compiles the plan and reads its text form (plandump --text):
  - every layernorm, residual add and dropout of the forward pass writes its output split along
    the sequence (S) over tp;
  - the forward pass has no all-reduce on a tp group; inside the block, its tp collectives are
    reduce-scatters that land on the sequence split (after the attention output projection and
    the MLP's second product, one per copy of each) and all-gathers that undo it (before q, k, v
    and the MLP's first product): two of each per block;
  - the per-device peak memory (the plan's peak_bytes) is lower than the same mesh without it;
  - the plan records --sequence-parallel in its options.
And --auto searches it: on Megatron-LM's 18B model over 64 DGX A100 nodes (batch 256, estimate
only, so that dp is at most 256 and some other axis is over 1; at batch 512 and 1024 ZeRO-3 over
dp 512 with tp 1 is faster since its gathers run a layer ahead and its reduce-scatters a layer
behind, one collective per layer each), --auto's answer says whether it uses
sequence parallelism (JSON "sequence_parallel"), and
its step is no slower than the template of its own mesh with and without --sequence-parallel.
What it catches: a constraint that no longer reaches the ILP (norms replicated or hidden-split,
an all-reduce back in the forward pass), a reduce-scatter on the wrong dimension, the memory
saving lost. The numerics are the equivalence suite's (tests/equiv.py, SEQ).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from common import check, summary


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def model_shapes(root):
    """Tensor name -> its dimension names, from models/gpt-tiny.json (top level and the block)."""
    with open(os.path.join(root, "models", "gpt-tiny.json"), encoding="utf-8") as f:
        m = json.load(f)
    shapes = {n: t["shape"] for n, t in m["tensors"].items()}
    for op in m["ops"]:
        for n, t in op.get("tensors", {}).items():
            shapes[n] = t["shape"]
    return shapes


def read_plan(text):
    """The text form's tensors, groups, buffers (of program 0) and instructions, as dicts."""
    tensors, groups, buffers, insns = {}, {}, {}, []
    peak = None
    for line in text.splitlines():
        if m := re.match(r'tensor (\d+) "([^"]*)" \S+ \S+ \[([\d,]*)\]', line):
            tensors[int(m[1])] = m[2]
        elif m := re.match(r"group (\d+) axes (\S+)", line):
            groups[int(m[1])] = m[2]
        elif m := re.match(r"\s*buffer (\d+) tensor (\d+) .*?(?:shard (.*))?$", line):
            if int(m[1]) in buffers:  # program 0 only
                continue
            shard = dict(kv.split("=") for kv in (m[3] or "").split())
            buffers[int(m[1])] = (int(m[2]), shard)
        elif m := re.match(r"\s*\d+:\s+(compute|coll) (\S+) s(\d+) (?:group (\d+) )?args ([\d,]+) -> ([\d,]+) .*phase=(\w+)", line):
            insns.append({"kind": m[1], "name": m[2], "stream": int(m[3]), "group": int(m[4]) if m[4] else None,
                          "in": [int(x) for x in m[5].split(",")], "out": [int(x) for x in m[6].split(",")], "phase": m[7]})
        elif m := re.match(r"estimate .*peak_bytes (\d+)", line):
            peak = int(m[1])
        elif line.startswith("program 1"):
            break
    return tensors, groups, buffers, insns, peak


def seq_split(buf, buffers, tensors, shapes):
    """Whether buffer buf holds its tensor split along S over tp."""
    t, shard = buffers[buf]
    dims = shapes.get(tensors[t])
    return dims is not None and "S" in dims and shard.get("tp") == f"d{dims.index('S')}"


def plan_text(plancc, plandump, root, tmp, n, opts):
    out = os.path.join(tmp, "sp.plan")
    p = run(plancc, os.path.join(root, "models", "gpt-tiny.json"), "--cluster", os.path.join(root, "models", "clusters", "cpu.json"),
            "--devices", n, *opts.split(), "-q", "-o", out)
    if not check(f"{n} ranks {opts}: compiles", p.returncode == 0, p.stderr.strip()):
        return None
    d = run(plandump, "--text", out)
    return d.stdout if check(f"{n} ranks {opts}: plandump --text", d.returncode == 0, d.stderr.strip()) else None


def sp_plan(name, text, shapes):
    tensors, groups, buffers, insns, peak = read_plan(text)
    tp = {g for g, axes in groups.items() if axes == "tp"}
    fwd = [i for i in insns if i["phase"] == "fwd"]
    regions = [i for i in fwd if i["kind"] == "compute" and i["name"] in ("layernorm", "add", "dropout")]
    off = [tensors[buffers[i["out"][0]][0]] for i in regions if not seq_split(i["out"][0], buffers, tensors, shapes)]
    check(f"{name}: {len(regions)} layernorms and residual adds write their output split along S over tp", regions and not off,
          f"not along S: {off}")
    colls = [i for i in fwd if i["kind"] == "coll" and i["group"] in tp]
    ar = [i for i in colls if i["name"] == "all_reduce"]
    check(f"{name}: no all-reduce on tp in the forward pass", not ar, f"{len(ar)} all_reduce")
    # the block's four reshardings (a scratch buffer, as the loss's statistics on the vocabulary pieces, has no tensor)
    block = [i for i in colls if i["in"][0] in buffers and tensors[buffers[i["in"][0]][0]] in ("a", "c", "p", "z")]
    rs = [i for i in block if i["name"] == "reduce_scatter" and seq_split(i["out"][0], buffers, tensors, shapes)]
    ag = [i for i in block if i["name"] == "all_gather" and seq_split(i["in"][0], buffers, tensors, shapes)]
    check(f"{name}: the block's tp collectives are 2 reduce-scatters onto S and 2 all-gathers from S",
          len(rs) == 2 and len(ag) == 2 and len(block) == 4, " ".join(f"{i['name']}({tensors[buffers[i['in'][0]][0]]})" for i in block))
    return peak


def estimate(plancc, root, *opts, may_not_fit=False):
    """plancc's estimate as JSON; None (a pass) where may_not_fit and nothing fits (exit 3)."""
    p = run(plancc, os.path.join(root, "models", "megatron-18b.json"), "--cluster",
            os.path.join(root, "models", "clusters", "dgx-a100.json"), "--nodes", 64, "--global-batch", 256, *opts,
            "--estimate-only", "--json")
    what = f"megatron-18b {' '.join(map(str, opts))}"
    if may_not_fit and p.returncode == 3:
        check(f"{what}: does not fit (exit 3)", True)
        return None
    return json.loads(p.stdout) if check(f"{what}: estimate", p.returncode == 0, p.stderr.strip()[-300:]) else None


def auto_searches_sp(plancc, root):
    auto = estimate(plancc, root, "--auto")
    if auto is None:
        return
    mesh = ["--dp", auto["dp"], "--tp", auto["tp"], "--pp", auto["pp"], "--micro-batches", auto["micro_batches"],
            "--zero", auto["zero"], "--recompute", "auto"]
    if auto["virtual_stages"] > 1:
        mesh += ["--virtual-stages", auto["virtual_stages"]]
    steps = {}
    for sp in (False, True):
        e = estimate(plancc, root, *mesh, *(["--sequence-parallel"] if sp else []), may_not_fit=not sp)
        if e is not None:
            steps[sp] = e["estimate"]["step_s"]
    check("--auto chooses sequence parallelism on megatron-18b (tp %d)" % auto["tp"],
          auto["tp"] > 1 and auto["sequence_parallel"] is True, json.dumps({k: auto[k] for k in ("dp", "tp", "pp", "sequence_parallel")}))
    best = min(steps.values()) if True in steps else None
    check("--auto's step %.4g s <= its mesh's template with and without --sequence-parallel %s" % (auto["estimate"]["step_s"], steps),
          best is not None and auto["estimate"]["step_s"] <= best * (1 + 1e-9))


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    plancc, plandump, root = sys.argv[1:]
    shapes = model_shapes(root)
    with tempfile.TemporaryDirectory() as tmp:
        for n, mesh in [(2, "--tp 2"), (4, "--dp 2 --tp 2"), (4, "--tp 4")]:
            plain = plan_text(plancc, plandump, root, tmp, n, mesh)
            sp = plan_text(plancc, plandump, root, tmp, n, mesh + " --sequence-parallel")
            if plain is None or sp is None:
                continue
            check(f"{n} ranks {mesh} --sequence-parallel: the plan records the option",
                  re.search(r'^options ".*--sequence-parallel', sp, re.M) is not None)
            peak_sp = sp_plan(f"{n} ranks {mesh} --sequence-parallel", sp, shapes)
            peak = read_plan(plain)[4]
            check(f"{n} ranks {mesh}: peak memory per device {peak_sp} bytes with --sequence-parallel < {peak} without",
                  peak_sp is not None and peak is not None and peak_sp < peak)
        auto_searches_sp(plancc, root)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
