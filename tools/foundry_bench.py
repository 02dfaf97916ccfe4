#!/usr/bin/env python3
"""Predict MosaicML's published MPT throughput (LLM Foundry, H100 and A100) with plancc: held-out rows.

The cost model's device figures come from measurements and datasheets (models/clusters/README.md);
none was set from this table, so it checks the model where it was not tuned: another framework
(PyTorch FSDP under Composer), another GPU (H100), other plans (ZeRO-2/3 data parallelism, no tensor
or pipeline parallelism), sequences up to 64k.

For every row of data/llmfoundry_mpt.csv it writes the MPT model of that size (tools/gen_models.py
gpt(): GPT-2's layout, which the row's published parameter count confirms) and runs

    plancc MODEL --cluster models/clusters/dgx-h100.json|dgx-a100.json --devices G --dp G
           --zero 3 (FULL_SHARD) | 2 (SHARD_GRAD_OP) --global-batch GBS --micro-batch-size MBS
           --recompute full (activation checkpointing) | none --attention flash --estimate-only --json

and compares tokens per second per GPU, GBS * seq / (step * G), with the published figure.
Where plancc's memory model finds that the row does not fit (exit 3), the estimate is taken on a
copy of the cluster with eight times the memory and the row says so (a ZeRO-3 row that fits with
--prefetch none, one gathered layer, says that): the time is still a prediction of the row's own
plan, the disagreement on memory is a finding. With --json, each row's "fits" is that text.

The MPT runs use FlashAttention 2 (attn_impl flash), so the rows are compiled with
--attention flash (compiler/cost.c's flash form); --attention unfused shows what the unfused
form (Megatron-LM 2021's, plancc's default) would predict.

usage: foundry_bench.py [--plancc PATH] [--root DIR] [--csv FILE] [--system h100_80gb|a100_80gb]
                        [--max-seq N] [--attention flash|unfused] [--json]
The exit code is 0 when every row ran; it does not judge the errors.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gen_models  # noqa: E402
from megatron_bench import rows  # noqa: E402  (a published table: CSV under '#' comment lines)

VOCAB = 50368
# scripts/train/yamls/pretrain/mpt-<size>.yaml: d_model, n_heads, n_layers.
MPT = {"125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24), "1b": (2048, 16, 24),
       "3b": (2560, 20, 32), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48),
       "70b": (8192, 64, 80)}
CLUSTERS = {"h100_80gb": "dgx-h100.json", "a100_80gb": "dgx-a100.json"}
ZERO = {"FULL_SHARD": "3", "SHARD_GRAD_OP": "2"}


def params(h, layers, seq):
    """GPT-2's layout: l (12 h^2 + 13 h) + (V + s) h + 2 h."""
    return layers * (12 * h * h + 13 * h) + (VOCAB + seq) * h + 2 * h


def model_path(r, tmp, cache):
    """The row's MPT model, written once per (size, seq, micro-batch)."""
    key = (r["model"], r["seq"], r["micro_batch"])
    if key in cache:
        return cache[key]
    h, heads, layers = MPT[r["model"]]
    seq, mb = int(r["seq"]), int(r["micro_batch"])
    if params(h, layers, seq) != int(r["num_params"]):
        raise RuntimeError("MPT-%s at seq %d: GPT-2's layout has %d parameters, the table %s" % (
            r["model"], seq, params(h, layers, seq), r["num_params"]))
    m = gen_models.gpt("mpt-%s-s%d" % (r["model"], seq), "MPT-%s (LLM Foundry) at sequence %d" % (r["model"], seq),
                       layers=layers, hidden=h, heads=heads, seq=seq, vocab=VOCAB, batch=mb, dtype="bf16",
                       optimizer=gen_models.adamw(6e-4, (0.9, 0.95), 1e-8, 0.0))
    path = os.path.join(tmp, "mpt-%s-s%d-b%d.json" % (r["model"], seq, mb))
    with open(path, "w") as f:
        f.write(gen_models.dump(m.to_json()) + "\n")
    cache[key] = path
    return path


def roomy(root, name, tmp):
    """A copy of the cluster with eight times the memory per device (for rows plancc says do not fit)."""
    with open(os.path.join(root, "models", "clusters", name)) as f:
        c = json.load(f)
    c["device"]["memory_bytes"] *= 8
    c["name"] += "-8x-memory"
    path = os.path.join(tmp, "roomy-" + name)
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def estimate(plancc, a):
    p = subprocess.run([plancc, *a, "--estimate-only", "--json"], capture_output=True, text=True)
    return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else p.stderr.strip())


def predict(plancc, r, root, tmp, cache, attention="flash"):
    g = int(r["gpus"])
    gbs, mb, ga = int(r["global_batch"]), int(r["micro_batch"]), int(r["grad_accum"])
    if gbs != g * mb * ga:
        raise RuntimeError("row %s: global batch %d is not gpus x micro-batch x accumulation" % (r, gbs))
    cluster = CLUSTERS[r["system"]]
    a = [model_path(r, tmp, cache), "--devices", str(g), "--dp", str(g), "--zero", ZERO[r["sharding"]],
         "--global-batch", str(gbs), "--micro-batch-size", str(mb),
         "--recompute", "full" if r["activation_checkpointing"] == "True" else "none", "--attention", attention]
    t0 = time.perf_counter()
    rc, est = estimate(plancc, a + ["--cluster", os.path.join(root, "models", "clusters", cluster)])
    fits = "fits" if rc == 0 else "plancc: does not fit"
    if rc == 3 and ZERO[r["sharding"]] == "3":  # one gathered layer, each gradient reduce-scattered as it is made
        if estimate(plancc, a + ["--prefetch", "none", "--cluster", os.path.join(root, "models", "clusters", cluster)])[0] == 0:
            fits = "fits with --prefetch none"
    if rc == 3:  # the row's own plan (FSDP prefetches), on more memory
        rc, est = estimate(plancc, a + ["--cluster", roomy(root, cluster, tmp)])
    if rc != 0:
        raise RuntimeError("plancc %s: exit %d: %s" % (" ".join(a), rc, est))
    step = est["estimate"]["step_s"]
    pub = float(r["tokens_per_s_per_gpu"])
    pred = gbs * int(r["seq"]) / (step * g)
    return {"system": r["system"], "model": r["model"], "seq": int(r["seq"]), "gpus": g, "mb": mb, "ga": ga,
            "zero": int(ZERO[r["sharding"]]), "recompute": r["activation_checkpointing"] == "True",
            "published": pub, "predicted": pred, "error_pct": 100 * (pred - pub) / pub, "step_s": step,
            "fits": fits, "peak_gib": est.get("memory", {}).get("peak_gib") if isinstance(est, dict) else None,
            "seconds": time.perf_counter() - t0}


def summary(res, what):
    if not res:
        return "%s: no rows" % what
    e = [abs(x["error_pct"]) for x in res]
    within = sum(1 for v in e if v <= 10)
    return "%s: %d rows, mean absolute error %.1f%%, largest %.1f%%, %d within 10%%" % (
        what, len(res), sum(e) / len(e), max(e), within)


def table(results):
    head = "%-9s %5s %6s %5s %3s %3s %4s %3s %10s %10s %7s  %s" % (
        "system", "model", "seq", "gpus", "mb", "ga", "zero", "ckp", "published", "predicted", "error", "memory")
    lines = [head, "-" * len(head)]
    for x in results:
        lines.append("%-9s %5s %6d %5d %3d %3d %4d %3s %10.0f %10.0f %+6.1f%%  %s" % (
            x["system"], x["model"], x["seq"], x["gpus"], x["mb"], x["ga"], x["zero"], "yes" if x["recompute"] else "no",
            x["published"], x["predicted"], x["error_pct"], x["fits"]))
    for system in sorted({x["system"] for x in results}):
        mine = [x for x in results if x["system"] == system]
        lines.append(summary(mine, "%s, all" % system))
        lines.append(summary([x for x in mine if x["seq"] <= 2048], "%s, seq <= 2048" % system))
        lines.append(summary([x for x in mine if x["seq"] <= 2048 and x["gpus"] <= 8], "%s, seq <= 2048, one node" % system))
    lines += scaling(results)
    return "\n".join(lines)


def scaling(results):
    """Weak scaling: where a configuration ran on both the fewest and the most GPUs of its table,
    the throughput per GPU at the most over that at the fewest, published against predicted. The
    ratio cancels what the rows share (the compute's rate) and leaves the communication's growth."""
    runs = {}
    for x in results:
        key = (x["system"], x["model"], x["seq"], x["mb"], x["ga"], x["zero"], x["recompute"])
        if x["gpus"] >= 64:  # multi-node runs
            runs.setdefault(key, {})[x["gpus"]] = x
    out, errs = [], []
    for key, by in sorted(runs.items()):
        lo, hi = min(by), max(by)
        if hi < 4 * lo:  # over a fourfold range at least
            continue
        pub, pred = by[hi]["published"] / by[lo]["published"], by[hi]["predicted"] / by[lo]["predicted"]
        errs.append(abs(pred - pub) / pub)
        out.append("weak scaling %s %s seq %d ZeRO-%d: %d over %d GPUs, published %.3f, predicted %.3f" % (
            key[0], key[1], key[2], key[5], hi, lo, pub, pred))
    if errs:
        out.append("weak scaling: %d configurations, mean absolute error of the ratio %.1f%%, largest %.1f%%" % (
            len(errs), 100 * sum(errs) / len(errs), 100 * max(errs)))
    return out


def run(plancc, root, csv_path, system=None, max_seq=None, attention="flash"):
    t0 = time.perf_counter()
    cache = {}
    with tempfile.TemporaryDirectory() as tmp:
        results = [predict(plancc, r, root, tmp, cache, attention) for r in rows(csv_path)
                   if (not system or r["system"] == system) and (not max_seq or int(r["seq"]) <= max_seq)]
    return results, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plancc", default=os.path.join(ROOT, "build", "plancc"))
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--csv", default=os.path.join(ROOT, "data", "llmfoundry_mpt.csv"))
    ap.add_argument("--system", choices=sorted(CLUSTERS), help="only this table's rows")
    ap.add_argument("--max-seq", type=int, help="only rows with at most this sequence length")
    ap.add_argument("--attention", choices=["flash", "unfused"], default="flash",
                    help="the attention form to compile with (default flash, as the MPT runs used)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    o = ap.parse_args()
    try:
        results, dt = run(os.path.abspath(o.plancc), os.path.abspath(o.root), o.csv, o.system, o.max_seq, o.attention)
    except (OSError, RuntimeError, KeyError) as e:
        sys.exit("foundry_bench: %s" % e)
    if o.json:
        print(json.dumps({"rows": results, "seconds": dt}, indent=1))
        return
    print("LLM Foundry's MPT throughput (data/llmfoundry_mpt.csv): published vs plancc's template estimate (--attention %s), "
          "tokens/s per GPU" % o.attention)
    print(table(results))
    print("bench took %.2f s (%d rows)" % (dt, len(results)))


if __name__ == "__main__":
    main()
