#!/usr/bin/env python3
"""Command-line behaviour of plancc: --help/--version, usage errors, exit codes, --json.

usage: cli.py PLANCC SOURCE_ROOT
"""
import json
import os
import re
import subprocess
import sys
import tempfile

plancc, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
passed = failed = 0


def run(*args):
    return subprocess.run([plancc, *args], cwd=root, capture_output=True, text=True)


def check(name, cond, p=None):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}")
        if p is not None:
            print(f"     exit {p.returncode}\n     stdout: {p.stdout[:500]!r}\n     stderr: {p.stderr[:500]!r}")


p = run("--help")
check("--help: usage on stdout, exit 0", p.returncode == 0 and "usage: plancc" in p.stdout and p.stderr == "", p)
check("--help documents the exit codes", "Exit codes" in p.stdout, p)
p = run("--version")
check("--version: version on stdout, exit 0", p.returncode == 0 and p.stdout.startswith("plancc "), p)
p = run()
check("no model: exit 2 with a message", p.returncode == 2 and "no model" in p.stderr and p.stdout == "", p)
p = run("--check", "models/mlp.json", "models/gpt-tiny.json")
check("two models: exit 2", p.returncode == 2 and "more than one model" in p.stderr, p)
p = run("--bogus", "models/mlp.json")
check("unknown option: exit 2, named", p.returncode == 2 and "--bogus" in p.stderr, p)
p = run("--check", "--micro-batches", "0", "models/mlp.json")
check("--micro-batches 0: exit 2", p.returncode == 2 and "micro-batches" in p.stderr, p)
p = run("--check", "--micro-batches")
check("option without value: exit 2", p.returncode == 2 and "needs a value" in p.stderr, p)
p = run("--check", "models/does-not-exist.json")
check("missing file: exit 2, FILE named", p.returncode == 2 and p.stderr.startswith("plancc: models/does-not-exist.json:") and "cannot open" in p.stderr, p)
p = run("--check", "models")
check("a directory: exit 2", p.returncode == 2, p)
p = run("models/mlp.json")
check("compile without --cluster: exit 2, says it needs one", p.returncode == 2 and "--cluster" in p.stderr, p)
p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--dp", "2", "--auto", "-o", "/dev/null")
check("--auto with --dp: exit 2", p.returncode == 2 and "--auto" in p.stderr, p)
p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--devices", "4", "--dp", "2", "-o", "/dev/null")
check("--dp 2 on 4 devices: exit 2, names the count", p.returncode == 2 and "4" in p.stderr and "--dp 2" in p.stderr, p)
p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--recompute", "some")
check("--recompute some: exit 2", p.returncode == 2 and "none, full or auto" in p.stderr, p)
p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--attention", "fused")
check("--attention fused: exit 2, names the choices", p.returncode == 2 and "unfused or flash" in p.stderr and '"fused"' in p.stderr, p)
for form in ("unfused", "flash"):
    p = run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "--dp", "2", "--attention", form,
            "--json", "-o", "/dev/null")
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    check("--attention %s: in --json" % form, j.get("attention") == form, p)
    p = run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "--dp", "2", "--attention", form,
            "-o", "/dev/null")
    check("--attention %s: in the summary" % form, p.returncode == 0 and ("flash attention" in p.stdout) == (form == "flash"), p)
p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--zero", "4")
check("--zero 4: exit 2", p.returncode == 2 and "--zero" in p.stderr, p)
p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--schedule", "zb")
check("--schedule zb: exit 2", p.returncode == 2 and "gpipe or 1f1b" in p.stderr, p)
p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--prefetch", "two")
check("--prefetch two: exit 2, names the choices", p.returncode == 2 and "layer or none" in p.stderr and '"two"' in p.stderr, p)
# --prefetch none: ZeRO-3 gathers each layer at its start (one slot, no layer_delta), recorded in
# the plan's options; the default gathers a layer ahead (layer+1 in the forward loop).
with tempfile.TemporaryDirectory() as pftmp:
    for pf, ahead in (("layer", True), ("none", False)):
        out = os.path.join(pftmp, "pf.plan")
        p = run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "--dp", "2", "--zero", "3",
                "--prefetch", pf, "-o", out)
        d = subprocess.run([os.path.join(os.path.dirname(plancc), "plandump"), "--text", out], capture_output=True, text=True)
        check(f"--prefetch {pf}: compiles, gathers a layer ahead: {ahead}", p.returncode == 0 and d.returncode == 0
              and ("layer+1" in d.stdout) == ahead and ("--prefetch none" in d.stdout) == (not ahead), p)
# --burst: bad combinations and values name the option, exit 2; a burst plan compiles.
CPU = ("--cluster", "models/clusters/cpu.json")
burst_bad = [
    (("--devices", "6", "--burst"), "power-of-two device count"),
    (("--devices", "4", "--burst", "--tp", "2"), "--dp, --tp and --pp"),
    (("--devices", "4", "--burst", "--pp", "2"), "--dp, --tp and --pp"),
    (("--devices", "4", "--burst", "--micro-batches", "2"), "--micro-batches"),
    (("--devices", "4", "--burst", "--zero", "1"), "--zero"),
    (("--devices", "4", "--burst", "--amp-limit", "1"), "--amp-limit wants a number above 1"),
    (("--devices", "4", "--burst", "--amp-limit", "x"), "--amp-limit wants a number above 1"),
    (("--devices", "4", "--amp-limit", "2"), "--amp-limit is burst parallelism's amplification limit: it needs --burst"),
    (("--devices", "4", "--burst-widths", "4,4,4,4"), "--burst-widths"),
    (("--devices", "4", "--burst", "--burst-widths", "4,3,4,4"), "layer 1 (/ops/1) wants a power of two"),
    (("--devices", "4", "--burst", "--burst-widths", "4,4,4"), "the model has 4 layers"),
]
for args, msg in burst_bad:
    p = run("models/mlp.json", *CPU, *args, "-o", "/dev/null")
    check(f"{' '.join(args)}: exit 2, says {msg!r}", p.returncode == 2 and msg in p.stderr, p)
p = run("models/gpt-tiny.json", *CPU, "--devices", "4", "--burst", "-o", "/dev/null")
check("--burst on a model with blocks: exit 2", p.returncode == 2 and "repeated blocks" in p.stderr, p)
p = run("models/cnn-small.json", *CPU, "--devices", "4", "--burst", "--burst-widths", "4,2,1,1,4,4,4,4,4,4", "-o", "/dev/null")
check("--burst-widths: batch norm cannot split the batch", p.returncode == 2 and "layer 1 (/ops/1)" in p.stderr
      and "from 1 to 1" in p.stderr, p)
# Ghost batch norm (resnet-small: ghost_batch 2 of a batch of 8): the batch splits in whole pairs.
p = run("models/resnet-small.json", *CPU, "--devices", "8", "--burst", "--burst-widths", "8,8,1,1,1,1,1,1,1,1,1", "-o", "/dev/null")
check("--burst-widths: a ghost batch norm of 2 runs on at most 4 of 8", p.returncode == 2 and "layer 1 (/ops/1)" in p.stderr
      and "from 1 to 4" in p.stderr, p)
p = run("models/resnet-small.json", *CPU, "--devices", "8", "--burst", "-o", "/dev/null")
check("--burst: ghost batch norm layers on 4 of 8 GPUs", p.returncode == 0 and re.search(r"bn2\s+batchnorm\s+4\s+2\s", p.stdout), p)
p = run("models/resnet-small.json", *CPU, "--devices", "2", "--global-batch", "8", "--micro-batches", "8", "-o", "/dev/null")
check("--global-batch 8 in 8 micro-batches: ghost_batch 2 does not divide 1, exit 2, names the attr",
      p.returncode == 2 and "resnet-small.json:/ops/1/attrs/ghost_batch: ghost_batch 2 does not divide the batch" in p.stderr, p)
p = run("models/resnet-small.json", *CPU, "--devices", "2", "--global-batch", "8", "-o", "/dev/null")
check("--global-batch 8 --auto: the micro-batch search skips counts that break ghost groups", p.returncode == 0, p)
p = run("models/mlp.json", *CPU, "--devices", "4", "--burst", "--amp-limit", "2", "-o", "/dev/null")
check("--burst --amp-limit 2: the per-layer table", p.returncode == 0 and "GPUs" in p.stdout and "batch/GPU" in p.stdout
      and "amplification limit 2" in p.stdout and "simulated step" in p.stdout, p)
p = run("models/gpt-tiny.json", *CPU, "--devices", "1", "--auto", "--sync", "background:algo=ma", "-o", "/dev/null")
check("--auto where every ranked plan meets a phase-3 limit (--sync background, parameters in a repeated block): exit 3, "
      "the limit once and the fix", p.returncode == 3 and "is in repeated block" in p.stderr and "larger batch (--global-batch)" in p.stderr
      and p.stderr.count("is in repeated block") == 1, p)
p = run("models/gpt-tiny.json", *CPU, "--devices", "2", "--auto", "--sync", "background:algo=ma", "-o", "/dev/null")
check("--auto --sync background on 2 ranks: no ZeRO candidate (background sync keeps whole replicas), the same exit 3",
      p.returncode == 3 and "is in repeated block" in p.stderr and "internal error" not in p.stderr, p)
p = run("models/t5-small.json", "--cluster", "models/clusters/dgx-a100.json", "--devices", "64", "--auto", "-o", "/dev/null")
check("--auto for T5 of batch 2 on 64 GPUs: a plan (pipelines that cut a block summing its bias gradient are plannable)",
      p.returncode == 0 and "plan_check passed" in p.stdout, p)
p = run("--check", "models/mlp.json", "-o", "x.plan")
check("--check with -o: exit 2", p.returncode == 2 and "--check" in p.stderr, p)
p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "-o", "/nonexistent-dir/x.plan")
check("unwritable -o: exit 8 (an unusable output file), names the file", p.returncode == 8 and "/nonexistent-dir/x.plan" in p.stderr, p)

p = run("--check", "models/gpt-tiny.json")
check("text report: totals", p.returncode == 0 and "parameters" in p.stdout and "FLOPs per step" in p.stdout
      and "memory" in p.stdout and "block layer" in p.stdout, p)
p = run("--check", "--json", "models/gpt-tiny.json")
try:
    r = json.loads(p.stdout)
    ok = (p.returncode == 0 and r["model"] == "gpt-tiny" and r["totals"]["params"] > 0
          and len(r["blocks"]) == 1 and r["blocks"][0]["repeat"] >= 1
          and sum(o["params"] for o in r["ops"] if o["block"] is None)
          + sum(b["params_per_copy"] * b["repeat"] for b in r["blocks"]) == r["totals"]["params"]
          and abs(sum(o["flops_forward"] for o in r["ops"] if o["block"] is None)
                  + sum(b["flops_forward_per_copy"] * b["repeat"] for b in r["blocks"])
                  - r["totals"]["flops"]["forward"]) <= 1e-9 * r["totals"]["flops"]["forward"])
except (ValueError, KeyError) as e:
    ok = False
    print("     ", e)
check("--json report parses; per-op and per-block figures add up to the totals", ok, p)
p = run("--check", "--micro-batches", "4", "--json", "models/mlp.json")
check("--micro-batches accepted", p.returncode == 0 and json.loads(p.stdout)["totals"]["params"] > 0, p)

p = run("--help")
check("--help documents --cluster, --nodes, --devices", all(o in p.stdout for o in ("--cluster FILE", "--nodes N", "--devices N")), p)

# --cluster, --nodes, --devices
A100 = "models/clusters/dgx-a100.json"
p = run("--check", "models/gpt3-175b.json", "--cluster", A100, "--nodes", "128")
check("--cluster --nodes 128: the cluster section", p.returncode == 0 and "cluster dgx-a100" in p.stdout
      and "1024 devices = 128 nodes x 8 per node" in p.stdout and "peak 312.00 TFLOP/s bf16" in p.stdout
      and "does not fit" in p.stdout and "at least" in p.stdout, p)
p = run("--check", "models/mlp.json", "--cluster", A100, "--devices", "4")
check("--devices 4 on dgx-a100: one node of 4; mlp fits", p.returncode == 0
      and "4 devices = 1 node x 4 per node" in p.stdout and "fits: needs" in p.stdout, p)
p = run("--check", "models/mlp.json", "--cluster", "models/clusters/cpu.json", "--devices", "3")
check("--devices 3 on the cpu cluster: one node of 3", p.returncode == 0 and "3 devices = 1 node x 3 per node" in p.stdout, p)
p = run("--check", "models/mlp.json", "--cluster", "models/clusters/cpu-ethernet.json", "--devices", "3")
check("--devices 3 on a cpu cluster with a network: 3 servers", p.returncode == 0 and "3 devices = 3 nodes x 1 per node" in p.stdout, p)
p = run("--check", "--json", "models/gpt3-175b.json", "--cluster", A100, "--nodes", "2")
try:
    r = json.loads(p.stdout)
    c, t = r["cluster"], r["totals"]
    flops = sum(t["flops"][k] for k in ("forward", "backward", "optimizer"))
    need = t["memory_bytes"]["total"]
    ok = (p.returncode == 0 and c["name"] == "dgx-a100" and c["nodes"] == 2 and c["devices"] == 16
          and c["devices_per_node"] == 8 and c["device"]["memory_bytes"] == 80000000000
          and c["device"]["peak_flops"]["bf16"] == 312e12 and c["model_math"] == "bf16" and c["peak_flops"] == 312e12
          and c["one_device"]["memory_needed_bytes"] == need and c["one_device"]["fits"] is False
          and c["one_device"]["memory_spare_bytes"] == 80000000000 - need
          and abs(c["one_device"]["step_lower_bound_s"] - flops / 312e12) <= 1e-12 * flops / 312e12
          and abs(c["all_devices"]["step_lower_bound_s"] * 16 - flops / 312e12) <= 1e-12 * flops / 312e12)
except (ValueError, KeyError) as e:
    ok = False
    print("     ", e)
check("--json --cluster: a \"cluster\" object with the same figures", ok, p)
p = run("--check", "--json", "models/mlp.json", "--cluster", A100)
check("--json --cluster on an f32 model: the f32 peak", p.returncode == 0
      and json.loads(p.stdout)["cluster"]["peak_flops"] == 19.5e12 and json.loads(p.stdout)["cluster"]["one_device"]["fits"], p)
p = run("--check", "models/mlp.json", "--nodes", "2")
check("--nodes without --cluster: usage error", p.returncode == 2 and "--nodes needs --cluster" in p.stderr and p.stdout == "", p)
p = run("--check", "models/mlp.json", "--devices", "2")
check("--devices without --cluster: usage error", p.returncode == 2 and "--devices needs --cluster" in p.stderr, p)
for flag, value in (("--nodes", "0"), ("--nodes", "-1"), ("--nodes", "two"), ("--devices", "0"), ("--devices", "3.5"),
                    ("--devices", ""), ("--devices", "99999999999"), ("--nodes", "1048577")):
    p = run("--check", "models/mlp.json", "--cluster", A100, flag, value)
    check(f"{flag} {value!r}: exit 2", p.returncode == 2 and f"{flag} wants an integer" in p.stderr and p.stdout == "", p)
p = run("--check", "models/mlp.json", "--cluster")
check("--cluster without a value: exit 2", p.returncode == 2 and "needs a value" in p.stderr, p)
p = run("--check", "models/mlp.json", "--cluster", "models/clusters/none.json")
check("--cluster missing file: exit 2, FILE named", p.returncode == 2
      and p.stderr.startswith("plancc: models/clusters/none.json:") and "cannot open" in p.stderr and p.stdout == "", p)
p = run("--check", "models/mlp.json", "--cluster", "tests/bad_cluster/device-kind-tpu.json")
check("bad cluster: exit 2, no report printed", p.returncode == 2 and p.stdout == ""
      and p.stderr.startswith("plancc: tests/bad_cluster/device-kind-tpu.json:/device/kind: "), p)
bad_overrides = [
    ((A100, "--devices", "12"), f"plancc: {A100}:: --devices 12 is not a whole number of nodes (8 devices each) nor fewer than one node"),
    ((A100, "--nodes", "2", "--devices", "4"), f"plancc: {A100}:: --nodes 2 and --devices 4 disagree"),
    ((A100, "--nodes", "3", "--devices", "16"), f"plancc: {A100}:: --nodes 3 and --devices 16 disagree"),
    (("models/clusters/cpu.json", "--nodes", "2"), "plancc: models/clusters/cpu.json:: --nodes 2: the cluster has no network"),
    (("models/clusters/cpu.json", "--nodes", "2", "--devices", "4"), "plancc: models/clusters/cpu.json:: --nodes 2: "),
    (("models/clusters/cpu-ethernet.json", "--nodes", "2", "--devices", "4"),
     "plancc: models/clusters/cpu-ethernet.json:: --nodes 2 and --devices 4 disagree: 4 devices are 4 nodes"),
]
for args, want in bad_overrides:
    p = run("--check", "models/mlp.json", "--cluster", *args)
    check(f"--cluster {' '.join(args)}: refused at the file", p.returncode == 2 and p.stderr.startswith(want)
          and len(p.stderr.splitlines()) == 1 and p.stdout == "", p)
p = run("--check", "models/mlp.json", "--cluster", A100, "--nodes", "2", "--devices", "16")
check("--nodes 2 --devices 16 agree on dgx-a100", p.returncode == 0 and "16 devices = 2 nodes x 8 per node" in p.stdout, p)

# Phases 1 and 2 as dumps (-d), their options, and "does not fit" as exit code 3.
p = run("--check", "-q", "models/mlp.json", "-d", "s")
check("-d without --cluster: exit 2", p.returncode == 2 and "needs --cluster" in p.stderr, p)
p = run("--check", "-q", "models/mlp.json", "--cluster", "models/clusters/dgx-a100.json", "--devices", "4", "-d", "x")
check("-d with an unknown letter: exit 2", p.returncode == 2 and "-d wants letters" in p.stderr, p)
p = run("--check", "-q", "models/mlp.json", "--cluster", "models/clusters/dgx-a100.json", "--time-limit", "0")
check("--time-limit 0: exit 2", p.returncode == 2 and "--time-limit" in p.stderr, p)
p = run("--check", "-q", "models/mlp.json", "--cluster", "models/clusters/dgx-a100.json", "--mip-gap", "x")
check("--mip-gap not a number: exit 2", p.returncode == 2 and "--mip-gap" in p.stderr, p)
for bad in ("-1", "x", "1e7"):
    p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "--bucket-mb", bad, "-o", "/dev/null")
    check(f"--bucket-mb {bad}: exit 2", p.returncode == 2 and p.stderr.startswith("plancc: --bucket-mb wants a number in [0, 1e+06]")
          and len(p.stderr.splitlines()) == 1, p)
VS = ("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "--pp", "2", "--estimate-only")
for extra, want in ((("--micro-batches", "4", "--virtual-stages", "8"), "is 16 model chunks, but the model has only 8 layers"),
                    (("--micro-batches", "3", "--virtual-stages", "2"), "runs the micro-batches in groups of --pp 2"),
                    (("--micro-batches", "4", "--virtual-stages", "0"), "--virtual-stages wants an integer")):
    p = run(*VS, *extra)
    check(f"--virtual-stages {extra[3]} with {extra[1]} micro-batches on 8 layers: exit 2", p.returncode == 2 and want in p.stderr
          and len(p.stderr.splitlines()) == 1, p)
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "il.plan")
    p = run(*VS[:-1], "--micro-batches", "4", "--virtual-stages", "2", "-o", out)
    check("--virtual-stages 2: exit 0, an interleaved plan", p.returncode == 0 and "1f1b interleaved, 2 virtual stages" in p.stdout, p)
    t = subprocess.run([os.path.join(os.path.dirname(plancc), "plandump"), "--text", out], capture_output=True, text=True)
    check("--virtual-stages 2: schedule 1f1b_interleaved, backward gradients on tag 1", t.returncode == 0
          and "schedule 1f1b_interleaved" in t.stdout and " tag 1 " in t.stdout, t)
for extra, want in ((("--schedule", "gpipe"), "does not combine with --schedule gpipe"), (("--dp", "2", "--zero", "2"), "--zero 2 with --virtual-stages")):
    devs = "4" if "--dp" in extra else "2"
    p = run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", devs, "--pp", "2", "--micro-batches", "4",
            "--virtual-stages", "2", *extra, "-o", "/dev/null")
    check(f"--virtual-stages 2 with {' '.join(extra)}: exit 2", p.returncode == 2 and want in p.stderr, p)
# Interleaving with pp > 2 sends only between consecutive chunks: gpt-tiny's embedding gradient sent
# from chunk 3 (the first layer) to chunk 0 (the token embedding) is refused, naming both.
p = run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "4", "--pp", "4", "--micro-batches", "4",
        "--virtual-stages", "2", "-o", "/dev/null")
check("--pp 4 --virtual-stages 2 on gpt-tiny: exit 2, a message that skips a chunk", p.returncode == 2
      and 'chunk 0 receives "d:h_in@layer.bwd" from chunk 3' in p.stderr and "between consecutive chunks" in p.stderr
      and len(p.stderr.splitlines()) == 1, p)
# A block that reads a parameter from outside in every copy (gpt-tiny with 6 layers whose first
# layernorm's gain is one top-level parameter), its copies on 2 stages: refused, naming both; on
# one stage it plans.
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(root, "models", "gpt-tiny.json"), encoding="utf-8") as f:
        m = json.load(f)
    m["tensors"]["g_shared"] = {"kind": "param", "shape": ["H"], "init": {"kind": "ones"}}
    blk = next(o for o in m["ops"] if "block" in o)
    blk["repeat"], blk["in"]["gs"] = 6, "g_shared"
    del blk["tensors"]["ln1_g"]
    blk["ops"][0]["in"][1] = "gs"
    path = os.path.join(tmp, "shared-gain.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(m, f)
    p = run(path, *CPU, "--devices", "2", "--pp", "2", "-o", "/dev/null")
    check("a block reading a top-level parameter, copies on 2 stages: exit 2, names the block and the parameter",
          p.returncode == 2 and 'block "layer" reads parameter "g_shared" in every copy' in p.stderr and len(p.stderr.splitlines()) == 1, p)
    p = run(path, *CPU, "--devices", "2", "--dp", "2", "-o", "/dev/null")
    check("... on one stage (--dp 2): a plan", p.returncode == 0, p)
p = run("--help")
check("--help documents --bucket-mb", p.returncode == 0 and "--bucket-mb X" in p.stdout, p)
p = run("--check", "-q", "models/mlp.json", "--cluster", "models/clusters/dgx-a100.json", "--devices", "4", "-d", "ts")
check("-d ts prints candidates and the schedule", p.returncode == 0 and "transform: 4 devices" in p.stdout
      and "schedule: 4 devices" in p.stdout and "optimal" in p.stdout, p)
p = run("--check", "-q", "models/gpt3-175b.json", "--cluster", "models/clusters/dgx-a100.json", "--devices", "8", "-d", "s")
check("GPT-3 on 8 GPUs does not fit: exit 3 with what it needs", p.returncode == 3 and "does not fit" in p.stderr
      and "per device" in p.stderr, p)
# Its parameter state alone (2.54 TiB) cannot fit 8 devices even sharded over all: said before any
# search, with the device count it would take (2.54 TiB over 74.51 GiB: 35).
p = run("-q", "models/gpt3-175b.json", "--cluster", "models/clusters/dgx-a100.json", "--devices", "8", "--estimate-only")
check("GPT-3 on 8 GPUs: its state does not fit even sharded over all 8, at least 35 devices", p.returncode == 3
      and "parameters, gradients and optimizer state are 2.54 TiB" in p.stderr and "use at least 35 devices" in p.stderr
      and "phase 2" not in p.stderr, p)
p = run("-q", "models/gpt3-175b.json", "--cluster", "models/clusters/dgx-a100.json", "--devices", "64", "--dp", "8", "--tp", "8",
        "--estimate-only")
check("GPT-3 on 64 GPUs: the state fits sharded, so the search says what the plan needs", p.returncode == 3
      and "the smallest plan needs" in p.stderr and "optimizer state are" not in p.stderr, p)
# --sync: each bad value exits 2 with a message that quotes it and names what is wrong.
for bad, why in [("sometimes", "not allreduce and not background"), ("background:", "needs algo="),
                 ("background:algo=sgd", "algo wants ma, easgd or bmuf"), ("background:algo=ma,period=0", "period wants"),
                 ("background:algo=ma,period=x", "period wants"), ("background:algo=ma,colour=red", 'unknown key "colour"'),
                 ("background:algo=ma,algo=ma", "given twice"), ("background:algo=ma,alpha=0.1", "alpha is EASGD's"),
                 ("background:algo=easgd,alpha=2", "alpha wants"), ("background:algo=bmuf,eta=1", "eta wants"),
                 ("background:algo=bmuf,nesterov=2", "nesterov wants 0 or 1"), ("background:algo=ma,hogwild=1", "takes no value"),
                 ("background:algo=ma,chunk=-1", "chunk wants a whole number of bytes"),
                 ("background:algo=ma,chunk=1.5", "chunk wants"), ("background:algo=ma,chunk=4M", "chunk wants"),
                 ("background:algo=ma,chunk", '"chunk" needs a value'),
                 ("background:algo=ma,bucket=-5", "bucket wants a whole number of bytes"),
                 ("background:algo=ma,bucket=1e99", "bucket wants"), ("background:algo=ma,bucket=1,bucket=2", "given twice")]:
    p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--sync", bad, "-o", "/dev/null")
    check(f"--sync {bad}: exit 2, {why}", p.returncode == 2 and f'--sync "{bad}"' in p.stderr and why in p.stderr and p.stdout == "", p)
p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "--dp", "2", "--zero", "1",
        "--sync", "background:algo=ma", "-o", "/dev/null")
check("--sync background with --zero: exit 2", p.returncode == 2 and "--zero" in p.stderr, p)
# --tp-batch: the template's ILP may split the batch over tp; each misuse exits 2 and says why.
for args, why in [(["--tp-batch"], "it needs --dp, --tp or --pp"), (["--devices", "2", "--dp", "2", "--tp-batch"], "--tp 2 or more"),
                  (["--devices", "6", "--dp", "2", "--tp", "3", "--tp-batch"], "/dims/B: --tp-batch: --dp x --tp = 6 does not divide")]:
    p = run("models/mlp.json", "--cluster", "models/clusters/cpu.json", *args, "-o", "/dev/null")
    check(f"{' '.join(args)}: exit 2, {why}", p.returncode == 2 and why in p.stderr and len(p.stderr.splitlines()) == 1, p)
# --sequence-parallel (Megatron-LM's sequence parallelism over tp): each misuse exits 2 and says why.
for model, args, why in [("gpt-tiny", ["--devices", "2", "--sequence-parallel"], "it needs --tp 2 or more"),
                         ("gpt-tiny", ["--devices", "2", "--dp", "2", "--sequence-parallel"], "it needs --tp 2 or more"),
                         ("gpt-tiny", ["--devices", "2", "--tp", "1", "--dp", "2", "--sequence-parallel"], "it needs --tp 2 or more"),
                         ("mlp", ["--devices", "2", "--tp", "2", "--sequence-parallel"], "no attention operator"),
                         ("gpt-tiny", ["--devices", "3", "--tp", "3", "--sequence-parallel"],
                          "/dims/S: --sequence-parallel: --tp 3 does not divide the sequence dimension S = 32")]:
    p = run(f"models/{model}.json", "--cluster", "models/clusters/cpu.json", *args, "-o", "/dev/null")
    check(f"{model} {' '.join(args)}: exit 2, {why}", p.returncode == 2 and why in p.stderr and len(p.stderr.splitlines()) == 1, p)
# --cp (context parallelism, DeepSpeed-Ulysses' form): each misuse exits 2 and says why.
for model, args, why in [("mlp", ["--devices", "2", "--cp", "2"], "no attention operator"),
                         ("gpt-tiny", ["--devices", "3", "--cp", "3"], "/dims/S: --cp 3 does not divide the sequence dimension S = 32"),
                         ("gpt-tiny", ["--devices", "4", "--cp", "2"], "--dp 1 x --cp 2 x --tp 1 x --pp 1 is 2 devices, but the cluster has 4"),
                         ("gpt-tiny", ["--devices", "8", "--cp", "8"], "--tp x --cp = 8 (DeepSpeed-Ulysses' all-to-all), which does not "
                          "divide the heads dimension N = 4"),
                         ("gpt-tiny", ["--devices", "8", "--cp", "4", "--tp", "2"], "does not divide the heads dimension N = 4"),
                         ("gpt-tiny", ["--devices", "2", "--cp", "2", "--auto"], "it does not go with --dp, --tp, --pp or --cp"),
                         ("gpt-tiny", ["--devices", "2", "--cp", "2", "--burst"], "does not go with --burst"),
                         ("gpt-tiny", ["--devices", "2", "--cp", "2", "--sync", "background:algo=ma"], "does not go with --sync background")]:
    p = run(f"models/{model}.json", "--cluster", "models/clusters/cpu.json", *args, "-o", "/dev/null")
    check(f"{model} {' '.join(args)}: exit 2, {why}", p.returncode == 2 and why in p.stderr and len(p.stderr.splitlines()) == 1, p)
# --tp2 (a 2-D tp group): each misuse exits 2 and says why; a good one plans a mesh with a tp2 axis.
for args, why in [(["--devices", "4", "--tp2", "2"], "it wants --tp a multiple of 2, at least 4"),
                  (["--devices", "2", "--tp", "2", "--tp2", "2"], "it wants --tp a multiple of 2, at least 4"),
                  (["--devices", "6", "--tp", "6", "--tp2", "4"], "it wants --tp a multiple of 4, at least 8"),
                  (["--devices", "4", "--tp", "4", "--tp2", "1"], "--tp2 wants"),
                  (["--devices", "8", "--tp", "4", "--tp2", "2", "--cp", "2"], "--tp2 does not go with --cp"),
                  (["--devices", "4", "--tp", "4", "--tp2", "2", "--sequence-parallel"], "--tp2 does not go with --sequence-parallel"),
                  (["--devices", "4", "--tp", "4", "--tp2", "2", "--tp-batch"], "--tp2 does not go with --tp-batch"),
                  (["--devices", "4", "--auto", "--tp2", "2"], "it wants --tp a multiple of 2")]:
    p = run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", *args, "-o", "/dev/null")
    check(f"gpt-tiny {' '.join(args)}: exit 2, {why}", p.returncode == 2 and why in p.stderr and len(p.stderr.splitlines()) == 1, p)
with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "tp2.plan")
    p = run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "8", "--tp", "8", "--tp2", "2", "-q", "-o", out)
    q = subprocess.run([os.path.join(os.path.dirname(plancc), "plandump"), out], capture_output=True, text=True) if p.returncode == 0 else p
    check("gpt-tiny --tp 8 --tp2 2: the mesh is tp 4 x tp2 2, and the summary says so",
          p.returncode == 0 and "mesh            pp 1 x dp 1 x tp 4 x tp2 2 = 8 ranks" in q.stdout, q)
    p = run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "8", "--tp", "8", "--tp2", "2", "--json",
            "--estimate-only")
    check("gpt-tiny --tp 8 --tp2 2 --estimate-only --json: tp 8, tp2 2", p.returncode == 0 and '"tp": 8, "tp2": 2,' in p.stdout, p)
p = run("--help")
check("--help documents --tp2", "--tp2 N" in p.stdout and "two letters" in p.stdout, p)
check("--help documents --cp", "--cp N" in p.stdout and "all-to-all" in p.stdout and "--context-parallel-size (--cp)" in p.stdout, p)
check("--help documents --cp-form zigzag", "--cp-form ulysses|ring|zigzag" in p.stdout and "2 cp - 1 - c" in p.stdout, p)
# --cp-form zigzag (ring attention over the sequence in zigzag order): its misuses exit 2 and say
# why; a model whose position table is a parameter added element-wise (no position ids) gets the
# natural ring's plan and not zigzag's.
with tempfile.TemporaryDirectory() as ztmp:
    with open(os.path.join(root, "models", "gpt-tiny.json"), encoding="utf-8") as f:
        m = json.load(f)
    del m["tensors"]["positions"], m["tensors"]["pos_emb"]
    m["ops"] = [o for o in m["ops"] if o.get("out") != ["pos_emb"]]
    for o in m["ops"]:
        if o.get("out") == ["h_in"]:
            o["in"] = ["tok_emb", "wpe"]
    posadd = os.path.join(ztmp, "gpt-posadd.json")
    with open(posadd, "w", encoding="utf-8") as f:
        json.dump(m, f)
    # gpt-tiny with an input [B, S, S] dropped out and mixed into the embeddings by bmm: dropout
    # over a tensor that carries the sequence twice (its attrs name one dimension of zigzag order)
    with open(os.path.join(root, "models", "gpt-tiny.json"), encoding="utf-8") as f:
        m = json.load(f)
    m["tensors"].update(pair={"kind": "input", "shape": ["B", "S", "S"], "data": {"kind": "normal"}}, paird={"shape": ["B", "S", "S"]},
                        mixed={"shape": ["B", "S", "H"]}, h_sum={"shape": ["B", "S", "H"]})
    at = next(k for k, o in enumerate(m["ops"]) if o.get("out") == ["h_in"])
    m["ops"][at]["out"] = ["h_sum"]
    m["ops"][at + 1:at + 1] = [{"type": "bmm", "in": ["paird", "tok_emb"], "out": ["mixed"]},
                               {"type": "add", "in": ["h_sum", "mixed"], "out": ["h_in"]}]
    m["ops"].insert(0, {"type": "dropout", "in": ["pair"], "out": ["paird"], "attrs": {"p": 0.1}})
    pair = os.path.join(ztmp, "gpt-pair-dropout.json")
    with open(pair, "w", encoding="utf-8") as f:
        json.dump(m, f)
    for model, args, why in [("models/gpt-tiny.json", ["--devices", "32", "--cp", "32"],
                              "/dims/S: --cp 32 --cp-form zigzag cuts the sequence into 2 x 32 chunks, which do not divide the sequence "
                              "dimension S = 32"),
                             (posadd, ["--devices", "2", "--cp", "2"], ":/ops/1: --cp 2 --cp-form zigzag stores the sequence in zigzag "
                              "order, but parameter \"wpe\" runs along it here"),
                             (pair, ["--devices", "2", "--cp", "2"], ":/ops/0: --cp 2 --cp-form zigzag stores the sequence in zigzag "
                              "order, but the operator of \"paird\" is dropout over a tensor that carries it twice")]:
        p = run(model, "--cluster", "models/clusters/cpu.json", *args, "--cp-form", "zigzag", "-o", "/dev/null")
        check(f"{os.path.basename(model)} {' '.join(args)} --cp-form zigzag: exit 2, {why}",
              p.returncode == 2 and why in p.stderr and len(p.stderr.splitlines()) == 1, p)
    p = run(posadd, "--cluster", "models/clusters/cpu.json", "--devices", "2", "--cp", "2", "--cp-form", "ring", "-q", "-o", "/dev/null")
    check("gpt-posadd --cp 2 --cp-form ring (the natural order) compiles", p.returncode == 0, p)
    # dropout along the sequence is no longer in zigzag's way: its mask is drawn by logical positions
    p = run("tests/models/gpt-tiny-dropout.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "--cp", "2", "--cp-form",
            "zigzag", "-q", "-o", "/dev/null")
    check("gpt-tiny-dropout --cp 2 --cp-form zigzag (hidden dropout along the sequence) compiles", p.returncode == 0, p)
p = run("--help")
check("--help documents --sequence-parallel", "--sequence-parallel" in p.stdout and "reduce-scatter" in p.stdout, p)
p = run("models/dlrm-small.json", "--cluster", "models/clusters/cpu.json", "--devices", "4", "--tp", "4", "--tp-batch", "-q",
        "-o", "/dev/null")
check("--tp 4 --tp-batch on dlrm-small compiles", p.returncode == 0, p)
p = run("--help")
check("--help documents --sync", "--sync S" in p.stdout and "background:algo=ma|easgd|bmuf" in p.stdout, p)
p = run("--check", "-q", "models/mlp.json", "--cluster", "models/clusters/dgx-a100.json", "--dump-ilp", "/nonexistent/dir/x.lp")
check("--dump-ilp to an unwritable path: exit 2", p.returncode == 2 and "cannot write" in p.stderr, p)

# --auto with --global-batch searches the micro-batch count: the one it keeps is a divisor of the
# global batch, planned exactly as when given, and no slower than the most micro-batches (the
# first count it plans); an explicit --micro-batches turns the search off.
tiny = ["models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "4", "--global-batch", "64",
        "--estimate-only", "--json"]
p = run(*tiny)
s = json.loads(p.stdout) if p.returncode == 0 else {}
check("--auto --global-batch searches micro-batch counts", s.get("micro_batch_counts_searched", 0) > 1
      and 64 % s.get("micro_batches", 0) == 0, p)
if s:
    q = run(*tiny, "--micro-batches", str(s["micro_batches"]))
    t = json.loads(q.stdout) if q.returncode == 0 else {}
    check("the searched count plans as when given, and --micro-batches stops the search",
          t.get("micro_batch_counts_searched") == 0 and t.get("estimate", {}).get("step_s") == s["estimate"]["step_s"], q)
    q = run(*tiny, "--micro-batches", "64")
    t = json.loads(q.stdout) if q.returncode == 0 else {}
    check("the searched count is no slower than 64 micro-batches",
          q.returncode == 0 and s["estimate"]["step_s"] <= t["estimate"]["step_s"], q)

# --tf32 costs f32 matrix products at the TF32 tensor-core peak and is recorded in the plan's options.
vgg = ["models/vgg16.json", "--cluster", "models/clusters/dgx-a100.json", "--devices", "1", "--global-batch", "8",
       "--estimate-only", "--json"]
p, q = run(*vgg), run(*vgg, "--tf32")
a = json.loads(p.stdout)["estimate"]["step_s"] if p.returncode == 0 else 0
b = json.loads(q.stdout)["estimate"]["step_s"] if q.returncode == 0 else 0
check("--tf32: an f32 CNN's estimate drops (156 vs 19.5 TFLOP/s peaks)", 0 < b < 0.5 * a, q)

# The summary says where the cost model's device calibration came from: the cluster file's figure
# with its source (dgx-a100.json's measured fractions), or the ideal-roofline default (cpu.json
# gives none); the text summary says the same in a line.
cal = lambda p: json.loads(p.stdout).get("calibration", {}) if p.returncode == 0 else {}
c = cal(run("models/gpt-tiny.json", "--cluster", "models/clusters/dgx-a100.json", "--devices", "2", "--estimate-only",
            "--json"))
g = c.get("gemm_efficiency", {})
check("--json calibration: dgx-a100's gemm_efficiency is the cluster file's, with its measured source",
      g.get("from") == "cluster" and g.get("value") == 0.83 and "measured" in (g.get("source") or "")
      and c.get("profile_entries") == 0, None)
c = cal(run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "--estimate-only", "--json"))
check("--json calibration: a cluster without the figures uses the documented default 1",
      c.get("memory_efficiency", {}).get("from") == "default" and c["memory_efficiency"]["value"] == 1
      and c["memory_efficiency"]["source"] is None, None)
p = run("models/gpt-tiny.json", "--cluster", "models/clusters/dgx-h100.json", "--devices", "2", "--estimate-only")
check("the text summary has the calibration line", p.returncode == 0 and
      "calibration (plancc --json for the sources): gemm_efficiency 0.8 (cluster file: First principles, measured)"
      in p.stdout, p)

# ... and where the GEMM and attention rates come from: the tile/wave model over the cluster's
# SMs, flash attention from the cluster's FA2 benchmark table (dgx-h100.json), with its source.
c = cal(run("models/gpt-tiny.json", "--cluster", "models/clusters/dgx-h100.json", "--devices", "2", "--estimate-only",
            "--attention", "flash", "--json"))
a = c.get("attention", {})
check("--json calibration: GEMM shape model over dgx-h100's 132 SMs; flash attention from FA2's published benchmark",
      "132 SMs" in (c.get("gemm_shape") or "") and a.get("form") == "flash" and a.get("from") == "benchmark"
      and "FlashAttention-2" in (a.get("source") or ""), None)
c = cal(run("models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", "2", "--estimate-only", "--json"))
check("--json calibration: no sm_count, no GEMM shape model; unfused attention has no flash source",
      "gemm_shape" in c and c["gemm_shape"] is None and c.get("attention") == {"form": "unfused", "from": None, "source": None}, None)
p = run("models/gpt-tiny.json", "--cluster", "models/clusters/dgx-a100.json", "--devices", "2", "--estimate-only", "--attention", "flash")
check("the text summary says where the GEMM and attention rates come from", p.returncode == 0 and
      "cost model: GEMM efficiency from first principles (tile/wave quantization over 108 SMs, dgx-a100); "
      "flash attention from FA2's published benchmark (dgx-a100)" in p.stdout, p)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
