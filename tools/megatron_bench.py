#!/usr/bin/env python3
"""Predict Megatron-LM's published throughput (SC'21, Table 1) with plancc's template mode.

For every row of ../shared/data/megatron_sc21_a100.csv it runs plancc on models/megatron-*.json
and models/clusters/dgx-a100.json with that row's template:

    --devices GPUS --dp DP --tp TP --pp PP --global-batch GB --micro-batch-size MB --recompute full
    [--virtual-stages V]    where the row interleaves (V = layers / pp / layers_per_virtual_stage)
    --policy megatron-layout.json    Megatron-LM's own tensor-parallel layout of 2021 (MEGATRON_LAYOUT)

and reads the template's estimate of one step (--estimate-only --json). TFLOP/s per GPU is
counted the paper's way, from the predicted step time:

    F = 96 B s l h^2 (1 + s/(6h)) + 6 B s h V,   TFLOP/s per GPU = F / (step * GPUs) / 1e12

(B global batch, s sequence, l layers, h hidden, V vocabulary). Every row is also compiled into
a real plan (plan_check passes, the same estimate; "does not fit" where the memory planner finds
the plan too big), interleaved 1F1B included.

The cluster's device figures are first principles (models/clusters/README.md): datasheet peaks
and measured best-case GEMM and HBM streaming fractions, none fitted to this table. --first-principles
adds a column with the figures of FIRST_PRINCIPLES below in place of the cluster's (the same today;
for trying other measured figures).

usage: megatron_bench.py [--plancc PATH] [--root DIR] [--csv FILE] [--no-emit] [--first-principles] [--json]
The exit code is 0 when every row ran; it does not judge the errors (tests/megatron_check.py does).
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, VOCAB = 2048, 51200
CLUSTER = os.path.join("models", "clusters", "dgx-a100.json")
# Measured first-principles figures (models/clusters/README.md): cuBLAS bf16 GEMM on A100 with
# random inputs, 257 of 312 TFLOP/s over the cost model's 0.99 shape factor; HBM streaming at 1.80
# of 2.04 TB/s.
FIRST_PRINCIPLES = {"gemm_efficiency": 0.83, "memory_efficiency": 0.88}


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def paper_flops(r):
    """FLOPs per iteration as the paper counts them (the CSV's header)."""
    b, l, h = int(r["global_batch"]), int(r["layers"]), int(r["hidden"])
    return 96 * b * SEQ * l * h * h * (1 + SEQ / (6 * h)) + 6 * b * SEQ * h * VOCAB


def virtual_stages(r):
    lpv = r.get("layers_per_virtual_stage", "").strip()
    if not lpv:
        return 1
    per_stage = int(r["layers"]) // int(r["pp"])
    return per_stage // int(lpv)


# Megatron-LM's tensor-parallel layout (its paper's Figure 3), pinned by a policy so that the
# estimate is of the plan the paper measured: q, k, v and the MLP's first product column-parallel,
# attention along the heads, the output projection and the MLP's second product row-parallel, and
# the layer norms, dropouts and residual adds whole on every rank of the tp group ("rather than
# having one GPU compute part of the dropout, layer normalization, or residual connections and
# broadcast the results to other GPUs, we choose to duplicate the computation across GPUs":
# Shoeybi et al. 2019, section 3; sequence parallelism, which splits them along the sequence, came
# in 2022, after the SC'21 runs). The embeddings and the head are the ILP's. Unpinned, the ILP
# splits the norms, dropouts and adds along the sequence (1/tp of their memory passes, each
# all-reduce becoming a reduce-scatter and an all-gather), and on some rows the output projection
# too: plans faster than Megatron-LM's of 2021 (estimated 3% on tp 2, 5 to 12% on tp 8), which
# would make this table compare two different plans.
MEGATRON_LAYOUT = {
    "version": 1,
    "description": "Megatron-LM's tensor-parallel layout of a GPT block (tools/megatron_bench.py)",
    "rules": [{"ops": "layer.[qkvf]", "split": "n", "note": "column-parallel"},
              {"type": "attention", "split": "n", "note": "attention along the heads"},
              {"ops": "layer.[pz]", "split": "k", "note": "row-parallel"},
              {"type": "layernorm", "split": "replicate", "note": "whole on every tp rank (no sequence parallelism in 2021)"},
              {"type": "dropout", "split": "replicate", "note": "whole on every tp rank"},
              {"type": "add", "split": "replicate", "note": "whole on every tp rank"}],
}


def write_layout(tmp):
    path = os.path.join(tmp, "megatron-layout.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(MEGATRON_LAYOUT, f)
    return path


def args_for(r, root, cluster, policy=None):
    a = [os.path.join(root, "models", "megatron-%s.json" % r["model"].lower()), "--cluster", cluster,
         "--devices", r["gpus"], "--dp", r["dp"], "--tp", r["tp"], "--pp", r["pp"],
         "--global-batch", r["global_batch"], "--micro-batch-size", r["micro_batch"], "--recompute", "full"]
    if policy:
        a += ["--policy", policy]
    v = virtual_stages(r)
    if v > 1:
        a += ["--virtual-stages", str(v)]
    return a, v


def estimate(plancc, a):
    p = subprocess.run([plancc, *a, "--estimate-only", "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("plancc %s: exit %d: %s" % (" ".join(a), p.returncode, p.stderr.strip()))
    return json.loads(p.stdout)


def predict(plancc, r, root, emit, tmp, raw_cluster, policy=None):
    """One row: the estimate (and, where plancc can emit it, the plan). Returns a dict."""
    a, v = args_for(r, root, os.path.join(root, CLUSTER), policy)
    t0 = time.perf_counter()
    est = estimate(plancc, a)
    plan = "not emitted"
    if emit:
        out = os.path.join(tmp, "megatron-%s.plan" % r["model"].lower())
        q = subprocess.run([plancc, *a, "-q", "-o", out], capture_output=True, text=True)
        plan = {0: "plan written", 3: "does not fit (exit 3)"}.get(q.returncode, "emit failed (exit %d)" % q.returncode)
    dt = time.perf_counter() - t0
    step = est["estimate"]["step_s"]
    raw = estimate(plancc, args_for(r, root, raw_cluster, policy)[0])["estimate"]["step_s"] if raw_cluster else None
    pub = float(r["tflops_per_gpu"])
    tflops = lambda s: paper_flops(r) / (s * int(r["gpus"])) / 1e12
    pred = tflops(step)
    return {"model": r["model"], "gpus": int(r["gpus"]), "tp": int(r["tp"]), "pp": int(r["pp"]), "dp": int(r["dp"]),
            "mb": int(r["micro_batch"]), "global_batch": int(r["global_batch"]), "v": v,
            "micro_batches": est["micro_batches"], "published": pub, "predicted": pred,
            "error_pct": 100 * (pred - pub) / pub, "step_s": step, "estimate": est["estimate"], "plan": plan,
            "first_principles": tflops(raw) if raw else None,
            "first_principles_error_pct": 100 * (tflops(raw) - pub) / pub if raw else None, "seconds": dt}


def table(results):
    fp = results[0]["first_principles"] is not None
    head = ("%-5s %5s %3s %3s %3s %3s %6s %3s %4s %9s %9s %7s %8s" %
            ("model", "gpus", "tp", "pp", "dp", "mb", "gbatch", "v", "m", "published", "predicted", "error", "step s"))
    head += "  %-15s %s" % ("first principles", "plan") if fp else "  plan"
    lines = [head, "-" * len(head)]
    for x in results:
        line = "%-5s %5d %3d %3d %3d %3d %6d %3d %4d %9.1f %9.1f %+6.1f%% %8.3f" % (
            x["model"], x["gpus"], x["tp"], x["pp"], x["dp"], x["mb"], x["global_batch"], x["v"], x["micro_batches"],
            x["published"], x["predicted"], x["error_pct"], x["step_s"])
        if fp:
            line += "  %6.1f (%+5.1f%%)" % (x["first_principles"], x["first_principles_error_pct"])
        lines.append(line + "  " + x["plan"])
    worst = max(results, key=lambda x: abs(x["error_pct"]))
    lines.append("largest error: %+.1f%% (%s); mean absolute error %.1f%%" % (
        worst["error_pct"], worst["model"], sum(abs(x["error_pct"]) for x in results) / len(results)))
    if fp:
        w = max(results, key=lambda x: abs(x["first_principles_error_pct"]))
        lines.append("first principles (gemm_efficiency %g, memory_efficiency %g): largest error %+.1f%% (%s)" % (
            FIRST_PRINCIPLES["gemm_efficiency"], FIRST_PRINCIPLES["memory_efficiency"], w["first_principles_error_pct"],
            w["model"]))
    return "\n".join(lines)


def raw_cluster(root, tmp):
    """The cluster with its calibrated figures set back to FIRST_PRINCIPLES, in tmp."""
    with open(os.path.join(root, CLUSTER)) as f:
        c = json.load(f)
    c["device"].update(FIRST_PRINCIPLES)
    path = os.path.join(tmp, "dgx-a100-first-principles.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def run(plancc, root, csv_path, emit=True, first_principles=True):
    """Every row, in the CSV's order; returns (results, seconds)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        raw = raw_cluster(root, tmp) if first_principles else None
        policy = write_layout(tmp)
        results = [predict(plancc, r, root, emit, tmp, raw, policy) for r in rows(csv_path)]
    return results, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plancc", default=os.path.join(ROOT, "build", "plancc"))
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--csv", default=os.path.join(ROOT, "data", "megatron_sc21_a100.csv"))
    ap.add_argument("--no-emit", action="store_true", help="estimates only; do not compile the plans")
    ap.add_argument("--first-principles", action="store_true",
                    help="add a column with the device figures of FIRST_PRINCIPLES in place of the cluster's")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    o = ap.parse_args()
    try:
        results, dt = run(os.path.abspath(o.plancc), os.path.abspath(o.root), o.csv, emit=not o.no_emit,
                          first_principles=o.first_principles)
    except (OSError, RuntimeError) as e:
        sys.exit("megatron_bench: %s" % e)
    if o.json:
        print(json.dumps({"rows": results, "seconds": dt}, indent=1))
        return
    print("Megatron-LM SC'21 Table 1 on DGX A100 (models/clusters/dgx-a100.json): published vs plancc's template estimate,")
    print("TFLOP/s per GPU counted the paper's way, F = 96 B s l h^2 (1 + s/6h) + 6 B s h V over the predicted step time")
    print(table(results))
    print("bench took %.2f s (%d rows; slowest %s, %.2f s)" % (
        dt, len(results), max(results, key=lambda x: x["seconds"])["model"], max(x["seconds"] for x in results)))


if __name__ == "__main__":
    main()
