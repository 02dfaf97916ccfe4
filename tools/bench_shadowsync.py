#!/usr/bin/env python3
"""ShadowSync's quality and throughput on click-through data with a known generating model.

usage: bench_shadowsync.py PLANCC PLANRUN [SOURCE_ROOT] [--ranks 1,2,4,8] [--steps 2000]
                           [--model dlrm-ctr] [--lr 0.4] [--seeds 1,2,3] [--scaling strong|weak|both]
                           [--tables quality,network] [--network CLUSTER] [--net-steps 300]
                           [--repeats 3] [--net-mesh dp|tp] [--net-rows 1,100]

Trains models/dlrm-ctr.json (teacher labels: runtime/data.c; plain SGD at --lr, default 0.4, the
rate at which synchronous training does best on it: at 4 ranks strong its NE is 0.670 at the
model's own 0.1, 0.596 at 0.4, 0.596 at 0.8) with planrun's CPU backend on each
rank count N (--dp N) with synchronous all-reduce and with --sync background:algo=ma,period=1 /
ma,period=2 / easgd,period=2 / bmuf,period=4 (BMUF's defaults: eta 1 - 1/N, Nesterov), plus
"ma p1 ser": MA every step on the cpu-serial backend, where the round runs after the step's
optimizer instead of beside the step (the control that isolates what the overlap costs), "ma p3
ser": every 3 steps on cpu-serial (a forward pass sees a replica 0, 1 or 2 local steps away from
the average, 1 on the mean, as an overlapped round every step leaves it, but no average lands a
step late: the control that tells the cost of the delayed average from that of the replicas'
spread), and
"ma p1 bkt": MA every step with bucket=4194304 (one all-reduce a round, the round the network
table finds fastest).

Two comparisons, each at equal samples for sync and background at the same N:
  strong  the model's batch B is the global batch (B/N per trainer), as DeepPool's scaling;
  weak    every trainer keeps the model's batch B (global B x N, a copy of the model with
          dims.B scaled), so N trainers see N times the data in the same steps: ShadowSync's
          setting (each trainer has a fixed batch; more trainers, more examples per unit time).

Per run:
  NE          normalized entropy (ShadowSync's figure): the mean log loss over the last 20% of
              the steps over the entropy of the empirical CTR (the mean of the labels drawn);
              below 1 is better than predicting the CTR alone. It is the training loss of each
              trainer's own replica (the loss of the step's forward pass), not of an average
  vs sync     NE / the synchronous run's NE at the same N and scaling (1.000 = as good;
              ShadowSync's target is within 1%)
  eval NE     NE of the trained model on --eval-steps fresh batches (steps after the last trained,
              never seen), each a batch of the model's B, measured by a one-device plan with
              learning rate 1e-30 that --loads what the run --saved: for a background run the mean
              of the dense replicas (runtime/st.c), the model its rounds converge to; every run
              at one N is measured on the same samples
  samples/s   steps x global batch / planrun's wall time (all ranks are threads of one process
              on this machine's cores: it measures overhead, not a cluster's scaling)

and the teacher's NE (its mean Bernoulli entropy over the same CTR entropy: the best any model
can reach). Every run at one seed shares it. With several --seeds (default 1,2,3: a seed draws
the teacher, the data and the initial weights, and one run's NE moves by several percent from
seed to seed, more than the algorithms differ) every run is repeated at each seed, and each cell
is the mean over the seeds: NE and eval NE the means, each "vs sync" the mean of the per-seed
ratios (each against sync at the same seed) with their range beside it, samples/s likewise; the
teacher's NE is the seeds' mean. The network table runs at the first seed.

The network table: here a collective is a few memory copies, so the quality table's samples/s
cannot show what taking synchronization out of the step is worth. This one compiles the same
runs for a cluster with a network (--network, default models/clusters/cpu-ethernet.json: one
rank per server on 10 GbE) and runs them with planrun --emulate-network, which holds every
collective for the time the plan gives it on that network (one link per rank, first come first
served; runtime/comm.c). The layout (--net-mesh): ShadowSync's by default, --tp N --tp-batch,
where the ILP may shard the embedding tables over the ranks (all-to-all of the looked-up rows)
or replicate them, as the cost model finds faster, and runs the dense layers data-parallel;
or --dp N (every table replicated, its gradient all-reduced in the step). --net-rows K,...
prints a table for each K, every embedding table K times taller (default 1,100) (ShadowSync's tables are far larger than dlrm-ctr's 227 KB; the
rows' count does not change the compute). Per run, --net-steps steps, the median of --repeats
runs interleaved with the other runs at the same N:
  samples/s   steps x global batch / wall time
  vs sync     over the synchronous run's at the same N and scaling
and per N the synchronous plan's simulated step and its exposed communication (plancc's
figures for that cluster). The ranks share this machine's cores, so each computes slower than on
a core of its own; to keep the cluster's ratio of compute to communication the network is slowed
by as much (planrun --dilation, time dilation): the synchronous plan's step without the network
over the step one of its ranks would take on a core of its own, which is the 1-rank plan's step
(measured) times the cost model's ratio of the two plans' compute per rank (plandump --sim,
from the plancc directory; the rank's share of the batch where plandump is not there). That
ratio follows what shrinks as ranks are added: the batch per rank, and with sharded tables
each rank's rows to update. Then
  cluster/s   samples/s x the dilation: the throughput on the cluster this emulates
  scaling     cluster/s over the synchronous run's at 1 rank: N would be linear
"ma p1 bkt" is MA every step with bucket=4194304 (one all-reduce a round).

It fails (exit 1) when a run fails or a synchronous run does not learn (NE >= 0.95), never on
time or on a background run's quality: those are the figures.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

ALGOS = [("sync", [], "cpu"),
         ("ma p1", ["--sync", "background:algo=ma,period=1"], "cpu"),
         ("ma p1 ser", ["--sync", "background:algo=ma,period=1"], "cpu-serial"),
         ("ma p3 ser", ["--sync", "background:algo=ma,period=3"], "cpu-serial"),
         ("ma p1 bkt", ["--sync", "background:algo=ma,period=1,bucket=4194304"], "cpu"),
         ("ma p2", ["--sync", "background:algo=ma,period=2"], "cpu"),
         ("easgd p2", ["--sync", "background:algo=easgd,period=2"], "cpu"),
         ("bmuf p4", ["--sync", "background:algo=bmuf,period=4"], "cpu")]


NET_ALGOS = [("sync", []), ("ma p1", ["--sync", "background:algo=ma,period=1"]),
             ("ma p1 bkt", ["--sync", "background:algo=ma,period=1,bucket=4194304"]),
             ("ma p2", ["--sync", "background:algo=ma,period=2"]), ("easgd p2", ["--sync", "background:algo=easgd,period=2"]),
             ("bmuf p4", ["--sync", "background:algo=bmuf,period=4"])]


def entropy(p):
    return -(p * math.log(p) + (1 - p) * math.log(1 - p)) if 0 < p < 1 else 0.0


def model_for(a, tmp, n, weak, rows=1):
    """The model file and global batch of one comparison: the model at learning rate a.lr, with
    B x n where weak; with rows > 1, every embedding table's row count (the dims named R<k>) times
    rows."""
    m = json.load(open(a.model_path))
    batch = a.batch * n if weak and n > 1 else a.batch
    m["dims"]["B"] = batch
    m.setdefault("optimizer", {"type": "adamw"})["lr"] = a.lr
    for d in m["dims"]:
        if re.fullmatch(r"R\d+", d):
            m["dims"][d] *= rows
    path = os.path.join(tmp, f"{a.model}-{'weak' if weak else 'strong'}{n}-rows{rows}.json")
    json.dump(m, open(path, "w"))
    return path, batch


def mesh_opts(a, n):
    """The network table's layout on n ranks: --dp n, or ShadowSync's (--tp n --tp-batch: the
    ILP may shard the tables over the ranks, the rest data-parallel beside them)."""
    if n == 1:
        return []
    return ["--dp", str(n)] if a.net_mesh == "dp" else ["--tp", str(n), "--tp-batch"]


def eval_plan(a, tmp):
    """A one-device plan of the model that leaves it as it is, to measure a trained model on fresh
    samples: learning rate 1e-30 (the schema wants one above 0; an update of 1e-30 times a
    gradient is below the last bit of every weight not exactly 0, and moves a zero bias by 1e-30:
    nothing a loss sees). planrun --load resumes at the file's step, so its data are steps never
    trained on."""
    m = json.load(open(a.model_path))
    m["optimizer"]["lr"] = 1e-30
    path, plan = os.path.join(tmp, "eval.json"), os.path.join(tmp, "eval.plan")
    json.dump(m, open(path, "w"))
    p = subprocess.run([a.plancc, path, "--cluster", os.path.join(a.root, "models", "clusters", "cpu.json"), "--devices", "1",
                        "-o", plan], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("plancc (the evaluation plan): " + p.stderr.strip())
    return plan


def eval_ne(a, tmp, saved, seed):
    """The eval NE of the model in `saved` (the replicas' mean, st.c) on a.eval_steps fresh
    batches, or an error line."""
    losses = os.path.join(tmp, "eval-losses.txt")
    p = subprocess.run([a.planrun, a.eval_plan, "--load", saved, "--steps", str(a.eval_steps), "--seed", str(seed),
                        "--log-every", "0", "--losses", losses], capture_output=True, text=True)
    t = re.search(r"teacher labels: \d+ drawn, mean label ([0-9.]+)", p.stdout)
    if p.returncode != 0 or not t:
        return "planrun (eval): " + ((p.stderr.strip().splitlines() or ["no teacher line"])[-1])
    ls = [float(x) for x in open(losses)]
    return sum(ls) / len(ls) / entropy(float(t.group(1)))


def run_one(a, tmp, n, name, opts, backend, model, batch, seed):
    """(NE, eval NE, samples/s, mean label, best loss) of one run, or an error line."""
    plan = os.path.join(tmp, f"{n}-{name.replace(' ', '-')}.plan")
    cmd = [a.plancc, model, "--cluster", os.path.join(a.root, "models", "clusters", "cpu.json"),
           "--devices", str(n), "--dp", str(n), *opts, "-o", plan]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return "plancc: " + ((p.stderr.strip().splitlines() or ["?"])[-1])
    losses, saved = os.path.join(tmp, "losses.txt"), os.path.join(tmp, "final.st")
    p = subprocess.run([a.planrun, plan, "--backend", backend, "--steps", str(a.steps), "--seed", str(seed), "--log-every", "0",
                        "--losses", losses, "--save", saved], capture_output=True, text=True)
    if p.returncode != 0:
        return "planrun: " + ((p.stderr.strip().splitlines() or ["?"])[-1])
    m = re.search(r"(\d+) steps in ([0-9.]+) s", p.stdout)
    t = re.search(r"teacher labels: \d+ drawn, mean label ([0-9.]+), mean probability [0-9.]+, best loss ([0-9.]+)", p.stdout)
    if not m or not t:
        return "planrun printed no summary or no teacher line"
    ls = [float(x) for x in open(losses)]
    tail = ls[len(ls) - max(1, len(ls) // 5):]
    ctr, best = float(t.group(1)), float(t.group(2))
    if not all(math.isfinite(x) for x in tail):
        return "the loss is not finite"
    ev = eval_ne(a, tmp, saved, seed)
    if isinstance(ev, str):
        return ev
    return sum(tail) / len(tail) / entropy(ctr), ev, a.steps * batch / float(m.group(2)), ctr, best


def timed(a, plan, *extra):
    """Seconds per step of one planrun, or an error line."""
    p = subprocess.run([a.planrun, plan, *extra, "--steps", str(a.net_steps), "--seed", str(a.seeds[0]), "--log-every", "0"],
                       capture_output=True, text=True)
    m = re.search(r"(\d+) steps in ([0-9.]+) s", p.stdout)
    if p.returncode != 0 or not m:
        return "planrun: " + ((p.stderr.strip().splitlines() or ["no summary"])[-1])
    return float(m.group(2)) / a.net_steps


def sim_compute(a, plan):
    """The simulated compute per rank of plan (plandump --sim's mean), in seconds; None without it."""
    if not a.plandump:
        return None
    p = subprocess.run([a.plandump, "--sim", plan], capture_output=True, text=True)
    m = re.search(r"^  compute +([0-9.]+) (s|ms|us) per rank", p.stdout, re.M)
    return float(m.group(1)) * {"s": 1, "ms": 1e-3, "us": 1e-6}[m.group(2)] if p.returncode == 0 and m else None


def median(xs):
    return sorted(xs)[len(xs) // 2]


def mean_range(xs, with_range):
    """The mean of ratios xs to 3 places, and with with_range their range: "1.004 (0.998-1.012)"."""
    text = f"{sum(xs) / len(xs):.3f}"
    return text + (f" ({min(xs):.3f}-{max(xs):.3f})" if with_range else "")


def network_table(a, tmp, weak, rows):
    """The samples/s table with the network emulated (see the docstring); the count of failures."""
    bad = 0
    print(f"\n{'weak' if weak else 'strong'} scaling, network emulated ({os.path.relpath(a.network, a.root)}; "
          f"{a.net_steps} steps, median of {a.repeats}; {'--dp N' if a.net_mesh == 'dp' else '--tp N --tp-batch'}"
          f"{'; tables x%d rows' % rows if rows != 1 else ''})")
    print(f"{'ranks':>5}  {'run':<10} {'samples/s':>10} {'vs sync':>8} {'cluster/s':>10} {'scaling':>8}")
    one = os.path.join(tmp, "net-one.plan")
    p = subprocess.run([a.plancc, model_for(a, tmp, 1, weak, rows)[0], "--cluster", a.network, "--devices", "1", "-o", one],
                       capture_output=True, text=True)
    t1 = [timed(a, one) for _ in range(a.repeats)] if p.returncode == 0 else ["plancc: " + p.stderr.strip()]
    if any(isinstance(t, str) for t in t1):
        print(f"    1  FAILED (the reference step): {[t for t in t1 if isinstance(t, str)][0]}")
        return 1
    t1, base, c1 = median(t1), None, sim_compute(a, one)
    for n in [int(x) for x in a.ranks.split(",")]:
        model, batch = model_for(a, tmp, n, weak, rows)
        plans, runs = {}, {}
        for name, opts in NET_ALGOS:
            plan = os.path.join(tmp, f"net-{n}-{name.replace(' ', '-')}.plan")
            p = subprocess.run([a.plancc, model, "--cluster", a.network, "--devices", str(n), *mesh_opts(a, n), *opts, "-o", plan],
                               capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{n:>5}  {name:<10} FAILED: plancc: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
                bad += 1
                continue
            plans[name], runs[name] = plan, []
            m = re.search(r"simulated step ([0-9.e+-]+) s .*exposed communication ([0-9.e+-]+) s per rank", p.stdout)
            if name == "sync" and m:
                sim = f"simulated step {1e3 * float(m.group(1)):.3f} ms, {1e3 * float(m.group(2)):.3f} ms of it exposed communication"
        if "sync" not in plans:
            continue
        # Time dilation: this step without the network, over the step a rank on a core of its own
        # would take (the reference's, times the cost model's ratio of compute per rank; without
        # plandump, the ratio of the batch per rank).
        plain = [timed(a, plans["sync"]) for _ in range(a.repeats)]
        if any(isinstance(t, str) for t in plain):
            print(f"{n:>5}  sync       FAILED: {[t for t in plain if isinstance(t, str)][0]}")
            bad += 1
            continue
        cn = sim_compute(a, plans["sync"])
        share = cn / c1 if cn and c1 else batch / n / a.batch
        dil = max(1.0, median(plain) / (t1 * share))
        print(f"{n:>5}  (sync: {sim}; a rank's compute {share:.3f}x the 1-rank plan's; dilation {dil:.2f})")
        for _ in range(a.repeats):
            for name in list(plans):
                t = timed(a, plans[name], "--emulate-network", "--dilation", f"{dil:.4f}")
                if isinstance(t, str):
                    runs[name], plans[name] = t, None
                    continue
                runs[name].append(batch / t)
            plans = {k: v for k, v in plans.items() if v}
        ref = None
        for name, _ in NET_ALGOS:
            r = runs.get(name)
            if r is None:
                continue
            if isinstance(r, str):
                print(f"{n:>5}  {name:<10} FAILED: {r}")
                bad += 1
                continue
            sps = median(r)
            if name == "sync":
                ref = sps
                base = base or (sps * dil if n == 1 else None)
            rel = f"{sps / ref:7.3f}x" if ref else f"{'-':>8}"
            sc = f"{sps * dil / base:7.2f}x" if base else f"{'-':>8}"
            print(f"{n:>5}  {name:<10} {sps:10.0f} {rel} {sps * dil:10.0f} {sc}", flush=True)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plancc")
    ap.add_argument("planrun")
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--model", default="dlrm-ctr")
    ap.add_argument("--lr", type=float, default=0.4, help="the learning rate of every run (default 0.4)")
    ap.add_argument("--seeds", default="1,2,3", help="the quality table's seeds, each run repeated at each (default 1,2,3)")
    ap.add_argument("--scaling", choices=["strong", "weak", "both"], default="both")
    ap.add_argument("--eval-steps", type=int, default=200, help="fresh batches of the model's batch for eval NE")
    ap.add_argument("--tables", default="quality,network", help="which tables: quality, network or both")
    ap.add_argument("--network", help="the cluster of the network table (default models/clusters/cpu-ethernet.json)")
    ap.add_argument("--net-steps", type=int, default=300, help="steps of each network-table run")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each network-table cell (the median is printed)")
    ap.add_argument("--net-mesh", choices=["dp", "tp"], default="tp",
                    help="the network table's layout: --dp N, or ShadowSync's --tp N --tp-batch (the default)")
    ap.add_argument("--net-rows", default="1,100",
                    help="the network tables' models: every table's rows times each of these (one table each)")
    a = ap.parse_args()
    tables = set(a.tables.split(","))
    if not tables or tables - {"quality", "network"}:
        ap.error(f"--tables wants quality, network or both, not {a.tables!r}")
    try:
        net_rows = [int(x) for x in a.net_rows.split(",")]
    except ValueError:
        net_rows = []
    if not net_rows or min(net_rows) < 1:
        ap.error(f"--net-rows wants positive whole numbers separated by commas, not {a.net_rows!r}")
    try:
        seeds = [int(x) for x in a.seeds.split(",")]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        ap.error(f"--seeds wants distinct whole numbers of 0 or more separated by commas, not {a.seeds!r}")
    a.seeds = seeds
    if not a.lr > 0:
        ap.error(f"--lr wants a learning rate above 0, not {a.lr}")
    a.network = os.path.abspath(a.network) if a.network else os.path.join(a.root, "models", "clusters", "cpu-ethernet.json")
    a.plandump = os.path.join(os.path.dirname(os.path.abspath(a.plancc)), "plandump")
    a.plandump = a.plandump if os.access(a.plandump, os.X_OK) else None
    a.model_path = os.path.join(a.root, "models", a.model + ".json")
    a.batch = json.load(open(a.model_path))["dims"]["B"]
    t0, bad, best_ne = time.time(), 0, {}
    print(f"{a.model}: batch {a.batch}, learning rate {a.lr:g}, {a.steps} steps, seed{'s' if len(a.seeds) > 1 else ''} "
          f"{','.join(map(str, a.seeds))}; planrun's cpu backend, {os.cpu_count()} cores; NE over the last 20% of the steps"
          f"{'; each cell the mean over the seeds, the ratios with their range' if len(a.seeds) > 1 else ''}")
    scalings = [s == "weak" for s in (["strong", "weak"] if a.scaling == "both" else [a.scaling])]
    with tempfile.TemporaryDirectory() as tmp:
        a.eval_plan = eval_plan(a, tmp) if "quality" in tables else None
        for weak in scalings if "quality" in tables else []:
            print(f"\n{'weak' if weak else 'strong'} scaling: {'batch %d per trainer' % a.batch if weak else 'global batch %d' % a.batch}")
            rng = len(a.seeds) > 1
            w = 22 if rng else 8
            print(f"{'ranks':>5}  {'run':<10} {'NE':>7} {'vs sync':>{w}} {'eval NE':>8} {'vs sync':>{w}} {'samples/s':>10} {'vs sync':>8}")
            for n in [int(x) for x in a.ranks.split(",")]:
                model, batch = model_for(a, tmp, n, weak)
                cells = {name: [] for name, _, _ in ALGOS}  # per seed: (NE, eval NE, samples/s, its 3 ratios to sync)
                for seed in a.seeds:
                    ref = None
                    for name, opts, backend in ALGOS:
                        r = run_one(a, tmp, n, name, opts, backend, model, batch, seed)
                        if isinstance(r, str):
                            print(f"{n:>5}  {name:<10} FAILED (seed {seed}): {r}")
                            bad += 1
                            continue
                        ne, ev, sps, ctr, best = r
                        best_ne[seed] = best / entropy(ctr)
                        if name == "sync":
                            ref = (ne, ev, sps)
                            if ne >= 0.95:
                                print(f"  synchronous training did not learn (seed {seed}): NE {ne:.4f}")
                                bad += 1
                        if ref:
                            cells[name].append((ne, ev, sps, ne / ref[0], ev / ref[1], sps / ref[2]))
                for name, _, _ in ALGOS:
                    c = cells[name]
                    if not c:
                        continue
                    mean = [sum(x[k] for x in c) / len(c) for k in range(3)]
                    print(f"{n:>5}  {name:<10} {mean[0]:7.4f} {mean_range([x[3] for x in c], rng):>{w}} {mean[1]:8.4f} "
                          f"{mean_range([x[4] for x in c], rng):>{w}} {mean[2]:10.0f} {sum(x[5] for x in c) / len(c):7.2f}x", flush=True)
        if best_ne:
            print(f"teacher (best achievable) NE {sum(best_ne.values()) / len(best_ne):.4f}"
                  f"{' (the mean over the seeds)' if len(best_ne) > 1 else ''}; a constant prediction of the CTR: NE 1")
        for weak in scalings if "network" in tables else []:
            for rows in net_rows:
                bad += network_table(a, tmp, weak, rows)
    print(f"{time.time() - t0:.1f} s in all; {'FAILED' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
