#!/usr/bin/env python3
"""Dimensions made of the batch: they follow --global-batch, or plancc refuses naming them (exit 2).

usage: batch_dims.py PLANCC PLANDUMP SOURCE_ROOT

  - swin-tiny (windows BW1..BW3 = B x windows) with --global-batch 64, 16 and 48 plans (exit 0):
    --estimate-only and a compile whose plan passes plan_check, the batch the one asked for;
  - a model whose tokens are one dimension (T = B x S, reshaped from [B, S, I]) plans at
    --global-batch 8 and 12, with and without the micro-batch search;
  - a model whose reshape splits the batch into two dimensions neither of which is the batch is
    refused with exit 2 and a message naming the dimensions and the reshape, never exit 1.
  - swin-tiny under --dp 8 computes per replica what one device computes for its 8 images (dp cuts
    the windows, not only the batch), and the Evoformer under dp 2 x tp 2 with 2 samples a
    micro-batch plans (tp nests in dp's cut of its MSA rows only where every axis divides).
What it catches: a batch option that reaches graph_check's assertion (internal error, exit 1),
as `swin-tiny.json --global-batch 64` did; operators over a folded batch run whole on every replica.
"""
import json
import os
import subprocess
import sys
import tempfile

passed = failed = 0


def check(name, ok, p=None):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
        return True
    failed += 1
    print(f"FAIL {name}")
    if p is not None:
        print(f"     exit {p.returncode}\n     stdout: {p.stdout[-800:]}\n     stderr: {p.stderr[-800:]}")
    return False


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def model(name, dims, tensors, ops):
    return {"version": 1, "name": name, "dtype": "f32", "dims": dims, "tensors": tensors, "ops": ops, "loss": "loss",
            "optimizer": {"type": "sgd", "lr": 0.01}}


TOKENS = model("tokens", {"B": 4, "S": 8, "T": 32, "I": 16, "O": 10}, {
    "x": {"kind": "input", "shape": ["B", "S", "I"], "data": {"kind": "normal"}},
    "labels": {"kind": "input", "shape": ["T"], "dtype": "i32", "data": {"kind": "randint", "high": "O"}},
    "w": {"kind": "param", "shape": ["O", "I"], "init": {"kind": "normal", "std": 0.02}},
    "xt": {"shape": ["T", "I"]}, "logits": {"shape": ["T", "O"]}, "loss": {"shape": []}}, [
    {"type": "reshape", "in": ["x"], "out": ["xt"]},
    {"type": "linear", "in": ["xt", "w"], "out": ["logits"]},
    {"type": "cross_entropy", "in": ["logits", "labels"], "out": ["loss"]}])

AMBIGUOUS = model("ambiguous", {"B": 4, "P": 2, "Q": 2, "I": 16, "O": 10}, {
    "x": {"kind": "input", "shape": ["B", "I"], "data": {"kind": "normal"}},
    "labels": {"kind": "input", "shape": ["P", "Q"], "dtype": "i32", "data": {"kind": "randint", "high": "O"}},
    "w": {"kind": "param", "shape": ["O", "I"], "init": {"kind": "normal", "std": 0.02}},
    "xs": {"shape": ["P", "Q", "I"]}, "logits": {"shape": ["P", "Q", "O"]}, "loss": {"shape": []}}, [
    {"type": "reshape", "in": ["x"], "out": ["xs"]},
    {"type": "linear", "in": ["xs", "w"], "out": ["logits"]},
    {"type": "cross_entropy", "in": ["logits", "labels"], "out": ["loss"]}])


def main():
    plancc, plandump, root = (os.path.abspath(a) for a in sys.argv[1:4])
    a100 = os.path.join(root, "models", "clusters", "dgx-a100.json")
    cpu = os.path.join(root, "models", "clusters", "cpu.json")
    swin = os.path.join(root, "models", "swin-tiny.json")
    with tempfile.TemporaryDirectory(prefix="plancc-batchdims-") as tmp:
        for gb in (64, 16, 48):
            p = run(plancc, swin, "--cluster", a100, "--devices", 8, "--global-batch", gb, "--estimate-only", "--json")
            ok = p.returncode == 0 and json.loads(p.stdout)["global_batch"] == gb
            check(f"swin-tiny --global-batch {gb} --estimate-only plans it", ok, p)
        plan = os.path.join(tmp, "swin.plan")
        p = run(plancc, swin, "--cluster", a100, "--devices", 8, "--global-batch", 64, "-o", plan)
        ok = p.returncode == 0 and "plan_check passed" in p.stdout and run(plandump, "--check-only", plan).returncode == 0
        check("swin-tiny --global-batch 64 compiles, and the plan passes plan_check", ok, p)
        paths = {}
        for m in (TOKENS, AMBIGUOUS):
            paths[m["name"]] = os.path.join(tmp, m["name"] + ".json")
            with open(paths[m["name"]], "w", encoding="utf-8") as f:
                json.dump(m, f)
        for gb, extra in ((8, []), (12, []), (8, ["--micro-batches", 2])):
            p = run(plancc, paths["tokens"], "--cluster", cpu, "--devices", 2, "--global-batch", gb, *extra, "-o",
                    os.path.join(tmp, "t.plan"))
            check(f"tokens T = B x S: --global-batch {gb} {' '.join(map(str, extra))} compiles", p.returncode == 0, p)
        p = run(plancc, paths["ambiguous"], "--cluster", cpu, "--devices", 2, "--global-batch", 8, "-o", os.path.join(tmp, "a.plan"))
        check("a batch split into P x Q is refused with exit 2 naming them and the reshape",
              p.returncode == 2 and "dimension P" in p.stderr and "/ops/0" in p.stderr and
              "ambiguous.json" in p.stderr, p)
        p = run(plancc, swin, "--cluster", a100, "--devices", 8, "--global-batch", 64, "--micro-batches", 3, "--estimate-only")
        check("swin-tiny --global-batch 64 --micro-batches 3 is refused (exit 2)", p.returncode == 2, p)
        # Data parallelism cuts the dimensions made of the batch too (the windows, search.c's
        # batch_dims): 8 replicas of 8 images each compute what one device computes for 8 images,
        # not every replica's windows (3x that, before).
        one = run(plancc, swin, "--cluster", a100, "--devices", 1, "--global-batch", 8, "--estimate-only", "--json")
        eight = run(plancc, swin, "--cluster", a100, "--devices", 8, "--dp", 8, "--global-batch", 64, "--estimate-only", "--json")
        ok = one.returncode == 0 and eight.returncode == 0
        c1 = json.loads(one.stdout)["estimate"]["compute_s"] if ok else 0
        c8 = json.loads(eight.stdout)["estimate"]["compute_s"] if ok else 0
        check(f"swin-tiny --dp 8: each replica computes its own 8 images' windows ({c8:.4g} s, one device {c1:.4g} s)",
              ok and abs(c8 - c1) <= 0.01 * c1, eight if ok else one)
        # tp nests in dp's cut of a folded dimension only where every axis its letter runs along
        # divides (a reshape runs the MSA rows B x Ns into B = 2): this mesh aborted in phase 3.
        evo = os.path.join(root, "models", "evoformer.json")
        p = run(plancc, evo, "--cluster", a100, "--devices", 64, "--dp", 2, "--tp", 2, "--pp", 16, "--micro-batches", 32,
                "--estimate-only")
        check("evoformer --dp 2 --tp 2 --pp 16 (2 samples a micro-batch) plans it", p.returncode == 0, p)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
