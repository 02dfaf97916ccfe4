#!/usr/bin/env python3
"""Dimensions made of the batch: they follow --global-batch, or plancc refuses naming them (exit 2).

usage: batch_dims.py PLANCC PLANDUMP SOURCE_ROOT

  - swin-tiny (windows BW1..BW3 = B x windows) with --global-batch 64, 16 and 48 plans (exit 0):
    --estimate-only and a compile whose plan passes plan_check, the batch the one asked for;
  - a model whose tokens are one dimension (T = B x S, reshaped from [B, S, I]) plans at
    --global-batch 8 and 12, with and without the micro-batch search;
  - a model whose reshape splits the batch into two dimensions neither of which is the batch is
    refused with exit 2 and a message naming the dimensions and the reshape, never exit 1.
What it catches: a batch option that reaches graph_check's assertion (internal error, exit 1),
as `swin-tiny.json --global-batch 64` did.
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
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
