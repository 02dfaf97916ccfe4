#!/usr/bin/env python3
"""DeepPool's headline on plancc's simulator: burst parallelism against data parallelism.

usage: bench_burst.py PLANCC [SOURCE_ROOT] [--models vgg16,wrn-50-2] [--devices 8,16,...] [--batches 16,32,...]
                      [--plandump PLANDUMP] [--background vgg16] [--bg-batch 8]

The models are DeepPool's two: VGG-16 (models/vgg16.json) and Wide-ResNet-50-2
(models/wrn-50-2.json), whose batch norms are ghost batch norms of one sample (per-sample
statistics), so every layer may take any width the batch allows and a plan's numerics do not
depend on it (DeepPool's PyTorch uses per-GPU batch statistics instead, which do).

Under strong scaling (a fixed global batch), for each model, device count G (DGX A100 nodes,
models/clusters/dgx-a100.json) and global batch B, compiles data parallelism (--dp G, where G
divides B) and burst parallelism (--burst) and prints each plan's simulated step (plancc's
"simulated step" line: runtime/sim.c over the plan's own instructions), samples/s and the ratio
burst/DP, then the per-layer GPU counts burst picked. Every plan is costed with --tf32 (f32
convolutions and products on TF32 tensor cores, PyTorch's default for convolutions, as DeepPool's
A100 measurements ran).

Then GPU multiplexing (plandump --sim --background, runtime/sim_mux.c): a one-GPU plan of the
background model (VGG-16, batch 8, as DeepPool's README runs it) is packed into every rank's idle
time, for DP and for burst alike, in pieces of at most 0.5 ms and never during a collective. Each
job's samples/s is normalized by its own throughput alone on the whole cluster (the foreground:
DP's samples/s on these GPUs; the background: its one-GPU samples/s times the GPUs) and the two
are summed, as DeepPool defines total cluster throughput; "total/DP" is burst + background over
DP + background. DeepPool (arXiv 2112.10065, MLSys'22)
reports 1.2-2.3x total cluster throughput over DP at large scale (its multiplexed background job
included; burst alone is the foreground part). Figures only: it never fails on time.
"""
import os
import re
import subprocess
import sys
import tempfile


def compile_plan(plancc, root, model, g, b, opts, out):
    p = subprocess.run([plancc, os.path.join(root, "models", model + ".json"), "--cluster",
                        os.path.join(root, "models", "clusters", "dgx-a100.json"), "--devices", str(g),
                        "--global-batch", str(b), "--tf32", *opts, "-o", out], capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["?"])[-1]
    m = re.search(r"simulated step ([0-9.e+-]+) s", p.stdout)
    return (float(m.group(1)) if m else None), p.stdout


def multiplexed(plandump, plan, bg):
    """plandump --sim --background: (foreground samples/s, background samples/s, bg normalized)."""
    p = subprocess.run([plandump, "--sim", plan, "--background", bg], capture_output=True, text=True)
    fg = re.search(r"foreground\s+\S+ ms per step, ([0-9.e+-]+) samples/s", p.stdout)
    pk = re.search(r"packed\s+([0-9.e+-]+) samples/s", p.stdout)
    nb = re.search(r"\+ background ([0-9.e+-]+)", p.stdout)
    if p.returncode != 0 or not (fg and pk and nb):
        return None
    return float(fg.group(1)), float(pk.group(1)), float(nb.group(1))


def widths(stdout):
    """The per-layer GPU counts of plancc's burst table, as runs: 'conv1_1..pool2 x8'."""
    rows = re.findall(r"^\s+\d+\s+(\S+)\s+\S+\s+(\d+)\s+\d+\s", stdout, re.M)
    runs = []
    for name, n in rows:
        if runs and runs[-1][2] == n:
            runs[-1][1] = name
        else:
            runs.append([name, name, n])
    return ", ".join(f"{a}{'..' + b if a != b else ''}:{n}" for a, b, n in runs)


def main():
    args = sys.argv[1:]
    opts = {"--models": "vgg16,wrn-50-2", "--devices": "8,16,32,64,128", "--batches": "16,32,64,128,256", "--plandump": "",
            "--background": "vgg16", "--bg-batch": "8"}
    pos = []
    while args:
        if args[0] in opts and len(args) > 1:
            opts[args[0]] = args[1]
            args = args[2:]
        else:
            pos.append(args.pop(0))
    if not pos:
        print(__doc__)
        return 2
    plancc, root = pos[0], (pos[1] if len(pos) > 1 else ".")
    plandump = opts["--plandump"] or os.path.join(os.path.dirname(os.path.abspath(plancc)), "plandump")
    print(f"{'model':8} {'GPUs':>5} {'batch':>6} {'DP step ms':>11} {'DP samp/s':>10} {'burst ms':>10} {'burst samp/s':>12} "
          f"{'burst/DP':>9} {'GPUs used':>9} {'DP+bg bg/s':>11} {'burst+bg bg/s':>13} {'DP+bg tot':>9} {'burst+bg tot':>12} "
          f"{'total/DP':>9}")
    layers = []
    with tempfile.TemporaryDirectory() as tmp:
        bg = os.path.join(tmp, "bg.plan")
        if compile_plan(plancc, root, opts["--background"], 1, int(opts["--bg-batch"]), [], bg)[0] is None:
            print(f"cannot compile the background {opts['--background']} on one GPU")
            return 1
        for model in opts["--models"].split(","):
            for g in (int(x) for x in opts["--devices"].split(",")):
                for b in (int(x) for x in opts["--batches"].split(",")):
                    dp, _ = compile_plan(plancc, root, model, g, b, ["--dp", str(g)], os.path.join(tmp, "dp.plan")) \
                        if b % g == 0 else (None, "")
                    bu, out = compile_plan(plancc, root, model, g, b, ["--burst"], os.path.join(tmp, "b.plan"))
                    if bu is None:
                        print(f"{model:8} {g:5} {b:6}  burst: {out}")
                        continue
                    used = max((int(n) for n in re.findall(r"^\s+\d+\s+\S+\s+\S+\s+(\d+)\s+\d+\s", out, re.M)), default=0)
                    dps = f"{1e3 * dp:11.3f} {b / dp:10.1f}" if dp else f"{'-':>11} {'-':>10}"
                    ratio = f"{dp / bu:9.3f}" if dp else f"{'-':>9}"
                    mux = "".join(f"{'-':>{w + 1}}" for w in (11, 13, 9, 12, 9))
                    md = multiplexed(plandump, os.path.join(tmp, "dp.plan"), bg) if dp else None
                    mb = multiplexed(plandump, os.path.join(tmp, "b.plan"), bg)
                    if md and mb:
                        tot_dp = 1 + md[2]                 # DP's foreground over itself
                        tot_b = mb[0] / md[0] + mb[2]      # burst's over DP's: the same reference
                        mux = f" {md[1]:11.1f} {mb[1]:13.1f} {tot_dp:9.3f} {tot_b:12.3f} {tot_b / tot_dp:9.3f}"
                    elif mb:                               # no DP to normalize by: burst's background alone
                        mux = f" {'-':>11} {mb[1]:13.1f}" + "".join(f"{'-':>{w + 1}}" for w in (9, 12, 9))
                    print(f"{model:8} {g:5} {b:6} {dps} {1e3 * bu:10.3f} {b / bu:12.1f} {ratio} {used:9}{mux}")
                    layers.append((model, g, b, widths(out)))
    print("\nper-layer GPU counts burst picked (layer..layer:GPUs)")
    for model, g, b, w in layers:
        print(f"{model} G={g} B={b}: {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
