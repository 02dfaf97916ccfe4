#!/usr/bin/env python3
"""ShadowSync against synchronous all-reduce on the simulator, 8 to 128 GPUs, weak scaling.

usage: bench_shadowsync_sim.py PLANCC PLANDUMP [SOURCE_ROOT] [--model models/dlrm.json]
                               [--cluster models/clusters/dgx-a100.json] [--gpus 8,16,32,64,128]
                               [--per-gpu-batch 256]

For each GPU count N, compiles the model with --global-batch N x per-GPU batch (weak scaling:
every trainer keeps its batch, as ShadowSync's trainers do) four ways and reads plandump --sim:

  dp/s        --dp N, synchronous: every table replicated, its gradient all-reduced every step
  sync/s      --dp 1 --tp N --tp-batch, synchronous: ShadowSync's layout (the ILP shards the tables
              over all N with all-to-all exchanges and runs the dense layers data-parallel), the
              dense gradients all-reduced in the step
  p1/s, cont/s  the same layout with --sync background:algo=ma,period=1 and period=continuous,
              bucket=4194304 (the dense params share one all-reduce: one latency, not one per
              param; default 4 MiB chunks): global batch / the foreground's step (the round runs beside
              it and is not in it; runtime/sim.h). The ILP plans the layout itself each time: with
              background sync the dense all-reduce costs the step nothing, which can change its
              choices
  ratio       p1/s over sync/s (the same layout family, synchronous)
  round       one MA round alone on its stream and links
  shared      the round beside the steps (its collectives get the links the foreground's leave)
  stale       the steps one round spans (period 1: at least 1)
  cont r/s    continuous rounds per step
  fg wait     the most the foreground's collectives may wait behind background chunks (a bound,
              not in the step)

Exit 1 when a compile or a simulation fails or prints no background figures. Times are the cost
model's (the compiler writes them into the plan); nothing runs on a GPU.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
SYNCS = [("dp", ["--dp"], "allreduce"), ("sync", ["--tp-batch", "--tp"], "allreduce"),
         ("p1", ["--tp"], "background:algo=ma,period=1,bucket=4194304"),
         ("cont", ["--tp"], "background:algo=ma,period=continuous,bucket=4194304")]


def secs(v, u):
    return float(v) * UNIT[u]


def simulate(a, tmp, n, mesh, sync):
    """plandump --sim's figures for one compile, or exit 1 with what failed."""
    path = os.path.join(tmp, "x.plan")
    cmd = [a.plancc, a.model, "--cluster", a.cluster, "--devices", str(n), *mesh, str(n),
           "--global-batch", str(n * a.per_gpu_batch), "--sync", sync, "-q", "-o", path]
    c = subprocess.run(cmd, capture_output=True, text=True, cwd=a.root)
    p = subprocess.run([a.plandump, "--sim", path], capture_output=True, text=True, cwd=a.root) if c.returncode == 0 else c
    out = p.stdout
    st = re.search(r"simulated step +([0-9.]+) (s|ms|us)", out)
    if c.returncode or p.returncode or not st:
        sys.exit(f"bench_shadowsync_sim: {' '.join(cmd)}: failed:\n{c.stderr}{p.stderr}{out}")
    r = {"step": secs(st.group(1), st.group(2))}
    if sync != "allreduce":
        rd = re.search(r"background +round ([0-9.]+) (s|ms|us) alone", out)
        sh = re.search(r"beside the steps: round ([0-9.]+) (s|ms|us) .*?staleness (\d+) steps?, ([0-9.e+-]+) rounds per step", out)
        wt = re.search(r"at most \+([0-9.]+) (s|ms|us) per step", out)
        if not rd or not sh:
            sys.exit(f"bench_shadowsync_sim: {sync} on {n} GPUs: no background figures:\n{out}")
        r.update(round=secs(rd.group(1), rd.group(2)), shared=secs(sh.group(1), sh.group(2)), stale=int(sh.group(3)),
                 per_step=float(sh.group(4)), wait=secs(wt.group(1), wt.group(2)) if wt else 0.0)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plancc")
    ap.add_argument("plandump")
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--model", default="models/dlrm.json")
    ap.add_argument("--cluster", default="models/clusters/dgx-a100.json")
    ap.add_argument("--gpus", default="8,16,32,64,128")
    ap.add_argument("--per-gpu-batch", type=int, default=256)
    a = ap.parse_args()
    a.plancc, a.plandump, a.root = os.path.abspath(a.plancc), os.path.abspath(a.plandump), os.path.abspath(a.root)
    gpus = [int(x) for x in a.gpus.split(",")]
    print(f"{a.model} on {a.cluster}, weak scaling: {a.per_gpu_batch} samples per GPU per step, MA rounds in one 4 MiB bucket (bucket=4194304)")
    print(f"{'GPUs':>5} {'dp/s':>10} {'sync/s':>10} {'p1/s':>10} {'ratio':>6} {'cont/s':>10} {'step':>9} {'round':>9} "
          f"{'shared':>9} {'stale':>5} {'cont r/s':>8} {'fg wait':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in gpus:
            r = {k: simulate(a, tmp, n, mesh, s) for k, mesh, s in SYNCS}
            b = n * a.per_gpu_batch
            dp, sync, p1, cont = (b / r[k]["step"] for k in ("dp", "sync", "p1", "cont"))
            print(f"{n:>5} {dp:>10.0f} {sync:>10.0f} {p1:>10.0f} {p1 / sync:>6.3f} {cont:>10.0f} {r['p1']['step'] * 1e3:>7.3f}ms "
                  f"{r['p1']['round'] * 1e3:>7.3f}ms {r['p1']['shared'] * 1e3:>7.3f}ms {r['p1']['stale']:>5} "
                  f"{r['cont']['per_step']:>8.3g} {r['p1']['wait'] * 1e3:>7.3f}ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
