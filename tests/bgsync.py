#!/usr/bin/env python3
"""Background synchronization (plancc --sync background:..., ShadowSync): plans and runs.

usage: bgsync.py PLANCC PLANRUN PLANDUMP SOURCE_ROOT

- one trainer, MA every step: the same losses and parameters, bit for bit, as the plain plan
  (the average of one replica is itself, and the round adds exactly 0), on cpu and cpu-serial;
- dlrm-small on 4 ranks (--dp 4) with MA, EASGD and BMUF every 2 steps and MA continuous: the
  round count planrun reports (period 2: ceil(steps / 2) on every rank; continuous: at least one
  per step), a loss that falls, and the plan's shape: the dense all-reduce gone from the
  foreground, the embedding tables' still there, the round on a stream and group of its own;
  the dense gradients' local scale on the compute stream on a cpu cluster, on the sync stream
  on a GPU cluster;
- a round's all-reduces: one per dense param by default, one for all of them with bucket=BYTES;
  chunk=BYTES: more background collectives; the same parameters bit for bit every way;
- BMUF with its default block momentum and Nesterov every step on 4 ranks learns (no divergence);
- --save of a background plan keeps the dense replicas' mean: one step before any round equals
  the synchronous plan's step (plain SGD);
- ShadowSync's own layout, dlrm-small on --tp 4 and --dp 2 --tp 2: the ILP shards tables over
  the tp group (all-to-all) and runs every linear data-parallel beside them; the dense replicas
  along tp (and dp) are averaged over a group of those axes, the foreground all-reduces only
  tables; MA every step after the optimizer (cpu-serial, f64) equals the synchronous plan of the
  same layout (--tp-batch) to rounding, and EASGD/BMUF/continuous rounds run and learn.
"""
import os
import re
import subprocess
import sys
import tempfile

plancc, planrun, plandump, root = (os.path.abspath(a) for a in sys.argv[1:5])
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    passed += bool(ok)
    failed += not ok
    print(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else "\n     " + detail[-1500:]))


def run(*args):
    return subprocess.run(list(args), cwd=root, capture_output=True, text=True)


def compile_plan(tmp, name, model, devices, *extra):
    out = os.path.join(tmp, name + ".plan")
    p = run(plancc, "-q", f"models/{model}.json", "--cluster", "models/clusters/cpu.json", "--devices", str(devices), *extra, "-o", out)
    check(f"compile {name}", p.returncode == 0, p.stderr)
    return out


def one_trainer(tmp, backend):
    ref = compile_plan(tmp, "mlp-1", "mlp", 1)
    bg = compile_plan(tmp, "mlp-1-ma", "mlp", 1, "--sync", "background:algo=ma,period=1")
    st, la, lb = (os.path.join(tmp, n) for n in ("ref.st", "a.txt", "b.txt"))
    p = run(planrun, ref, "--backend", backend, "--steps", "10", "--save", st, "--losses", la, "--log-every", "0")
    check(f"{backend}: the plain plan runs", p.returncode == 0, p.stderr)
    p = run(planrun, bg, "--backend", backend, "--steps", "10", "--compare", st, "--rtol", "0", "--atol", "0",
            "--losses", lb, "--log-every", "0")
    check(f"{backend}: MA every step with one trainer: parameters equal bit for bit", p.returncode == 0, p.stdout + p.stderr)
    check(f"{backend}: ... and 10 background rounds ran", "background rounds: 10 to 10 per rank" in p.stdout, p.stdout)
    same = os.path.exists(la) and os.path.exists(lb) and open(la).read() == open(lb).read()
    check(f"{backend}: ... and the same losses", same)


def plan_text(path):
    return run(plandump, "--text", path).stdout


def four_ranks(tmp):
    sync = compile_plan(tmp, "dlrm-sync", "dlrm-small", 4, "--dp", "4")
    steps = 10
    for algo, period in [("ma", "2"), ("easgd", "2"), ("bmuf", "2"), ("ma", "continuous")]:
        name = f"dlrm-{algo}-{period}"
        path = compile_plan(tmp, name, "dlrm-small", 4, "--dp", "4", "--sync", f"background:algo={algo},period={period}")
        text = plan_text(path)
        fg_colls = [l for l in text.splitlines() if " coll " in l and " s2 " not in l]
        bg_colls = [l for l in text.splitlines() if " coll " in l and " s2 " in l]
        check(f"{name}: a background loop on stream 2", re.search(r"loop background %s body" % ("0" if period == "continuous" else period), text)
              and "streams 3 priority 0,-1,1" in text)
        fg_groups = {re.search(r"group (\d+)", l).group(1) for l in fg_colls}
        bg_groups = {re.search(r"group (\d+)", l).group(1) for l in bg_colls}
        # A collective carries one buffer pair per gradient (several: a bucket, --bucket-mb).
        fg_pairs = sum(len(re.search(r" args ([\d,]+) ->", l).group(1).split(",")) for l in fg_colls)
        check(f"{name}: foreground all-reduces only the 8 embedding tables; the round has its own group",
              fg_pairs == 8 and bg_groups and not (fg_groups & bg_groups), f"{fg_pairs} {fg_groups} {bg_groups}")
        p = run(planrun, path, "--steps", str(steps), "--log-every", "0")
        m = re.search(r"background rounds: (\d+) to (\d+) per rank", p.stdout)
        lo = hi = -1
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
        want = f"= {steps // 2}" if period == "2" else f">= {steps}"
        ok = (lo == hi == steps // 2) if period == "2" else lo >= steps
        check(f"{name}: runs; rounds {want} on every rank (got {lo}..{hi})", p.returncode == 0 and ok, p.stdout + p.stderr)
        m = re.search(r"loss ([-0-9.naif]+) -> ([-0-9.naif]+)", p.stdout)
        falls = m and float(m.group(2)) < float(m.group(1))
        check(f"{name}: the loss falls ({m.group(1) if m else '?'} -> {m.group(2) if m else '?'})", falls, p.stdout)
    p = run(planrun, sync, "--steps", str(steps), "--log-every", "0")
    check("dlrm --dp 4 with the all-reduce: no background rounds", p.returncode == 0 and "background rounds" not in p.stdout, p.stdout)
    # The dense gradients' local scale: on the compute stream on a cpu cluster (a record and a
    # wait cost more there), on the sync stream on a GPU cluster (a launch would delay the backward).
    for cluster, want in (("cpu.json", "s0"), ("dgx-a100.json", "s1")):
        out = os.path.join(tmp, f"dlrm-scale-{cluster}.plan")
        p = run(plancc, "-q", "models/dlrm-small.json", "--cluster", f"models/clusters/{cluster}", "--devices", "4", "--dp", "4",
                "--sync", "background:algo=ma,period=1", "-o", out)
        streams = {l.split()[3] for l in plan_text(out).splitlines() if " compute scale " in l and "phase=bwd" in l}
        check(f"{cluster}: the dense gradients' scale runs on stream {want[1]} ({sorted(streams)})",
              p.returncode == 0 and streams == {want}, p.stderr)


def chunks(tmp):
    """chunk=BYTES: a parameter's all-reduce in pieces. More background collectives, each a range
    of its buffer, and bit for bit the same parameters as whole all-reduces (cpu-serial: the
    rounds in program order, so the two runs are deterministic)."""
    whole = compile_plan(tmp, "dlrm-ma-whole", "dlrm-small", 4, "--dp", "4", "--sync", "background:algo=ma,period=1,chunk=0")
    cut = compile_plan(tmp, "dlrm-ma-chunk", "dlrm-small", 4, "--dp", "4", "--sync", "background:algo=ma,period=1,chunk=256")
    n_whole = len([l for l in plan_text(whole).splitlines() if " coll " in l and " s2 " in l])
    bucket = compile_plan(tmp, "dlrm-ma-bucket", "dlrm-small", 4, "--dp", "4", "--sync", "background:algo=ma,period=1,bucket=4194304")
    b_colls = [l for l in plan_text(bucket).splitlines() if " coll " in l and " s2 " in l]
    pairs = b_colls[0].split(" args ")[1].split(" -> ")[0].count(",") + 1 if b_colls else 0
    check(f"chunk=0: one all-reduce per dense param ({n_whole}); bucket=4 MiB: one bucket of all {pairs}",
          n_whole >= 6 and len(b_colls) == 1 and pairs == n_whole, "\n".join(b_colls))
    cut_colls = [l for l in plan_text(cut).splitlines() if " coll " in l and " s2 " in l]
    n_chunks = sum(" attrs " in l for l in cut_colls)  # a parameter of 256 bytes or less stays whole
    check(f"chunk=256: more background collectives ({n_whole} -> {len(cut_colls)}, {n_chunks} of them chunks)",
          len(cut_colls) > 10 * n_whole and n_chunks > 10 * n_whole)
    st = os.path.join(tmp, "whole.st")
    p = run(planrun, whole, "--backend", "cpu-serial", "--steps", "6", "--save", st, "--log-every", "0")
    check("MA with whole all-reduces runs", p.returncode == 0, p.stderr)
    p = run(planrun, cut, "--backend", "cpu-serial", "--steps", "6", "--compare", st, "--rtol", "0", "--atol", "0", "--log-every", "0")
    check("MA in 256-byte chunks: the same parameters bit for bit", p.returncode == 0, p.stdout + p.stderr)
    p = run(planrun, bucket, "--backend", "cpu-serial", "--steps", "6", "--compare", st, "--rtol", "0", "--atol", "0", "--log-every", "0")
    check("MA with the params in one bucket: the same parameters bit for bit", p.returncode == 0, p.stdout + p.stderr)
    one = compile_plan(tmp, "mlp-1-ma-chunk", "mlp", 1, "--sync", "background:algo=ma,period=1,chunk=64")
    ref = compile_plan(tmp, "mlp-1-ref", "mlp", 1)
    st = os.path.join(tmp, "mlp.st")
    p = run(planrun, ref, "--steps", "5", "--save", st, "--log-every", "0")
    p = run(planrun, one, "--steps", "5", "--compare", st, "--rtol", "0", "--atol", "0", "--log-every", "0")
    check("one trainer, MA every step in 64-byte chunks (threads): the plain plan's parameters bit for bit",
          p.returncode == 0, p.stdout + p.stderr)


def saved_mean(tmp):
    """--save of a background plan holds the mean of the dense replicas (runtime/st.c): two steps
    of dlrm-ctr on 4 ranks with MA every 2 steps (cpu-serial: a round after step 1's optimizer,
    none after step 2's, so four replicas each one local SGD step from the average) save what
    the synchronous plan's two steps give, since with plain SGD the mean of the local steps is
    the global step (f64). Saving any one replica instead would differ by lr times that
    replica's gradient noise."""
    sync = compile_plan(tmp, "ctr-sync", "dlrm-ctr", 4, "--dp", "4")
    bg = compile_plan(tmp, "ctr-ma2", "dlrm-ctr", 4, "--dp", "4", "--sync", "background:algo=ma,period=2")
    st = os.path.join(tmp, "ctr-sync.st")
    p = run(planrun, sync, "--backend", "cpu-serial", "--precision", "f64", "--steps", "2", "--save", st, "--log-every", "0")
    check("dlrm-ctr --dp 4, two synchronous steps, saved", p.returncode == 0, p.stderr)
    p = run(planrun, bg, "--backend", "cpu-serial", "--precision", "f64", "--steps", "2", "--compare", st, "--rtol", "1e-9",
            "--atol", "1e-12", "--log-every", "0")
    check("... 4 dense replicas a local step past their round: their mean (what --save keeps) is the synchronous step",
          p.returncode == 0 and "background rounds: 1 to 1 per rank" in p.stdout, p.stdout + p.stderr)


def bmuf_defaults(tmp):
    """BMUF with its defaults (eta 1 - 1/4, Nesterov) every step: the block's progress is measured
    from the look-ahead w + eta m; measured from w (the earlier algebra) the momentum grew by
    2 eta per round and the loss was NaN within 300 steps."""
    path = compile_plan(tmp, "ctr-bmuf-1", "dlrm-ctr", 4, "--dp", "4", "--sync", "background:algo=bmuf,period=1")
    for backend in ("cpu-serial", "cpu"):
        p = run(planrun, path, "--backend", backend, "--steps", "300", "--log-every", "0")
        m = re.search(r"loss ([-0-9.naif]+) -> ([-0-9.naif]+)", p.stdout)
        ok = p.returncode == 0 and m and float(m.group(2)) < float(m.group(1)) - 0.03
        check(f"{backend}: BMUF with the default eta and Nesterov every step on 4 ranks learns "
              f"({m.group(1) if m else '?'} -> {m.group(2) if m else '?'})", ok, p.stdout + p.stderr)


def buffer_names(text):
    """Per buffer index: the name of its tensor, from plandump --text."""
    tensors = dict(re.findall(r'^tensor (\d+) "([^"]*)"', text, re.M))
    return {b: tensors.get(t, "") for b, t in re.findall(r"^  buffer (\d+) tensor (\d+) ", text, re.M)}


def sharded_tables(tmp):
    """ShadowSync's layout: tables sharded over the tp group, dense layers replicated beside them."""
    for mesh in (["--tp", "4"], ["--dp", "2", "--tp", "2"]):
        tag = "x".join(mesh[1::2]) + ("tp" if len(mesh) == 2 else "")
        want_axes = "tp" if len(mesh) == 2 else "dp+tp"
        sync = compile_plan(tmp, f"hy-sync-{tag}", "dlrm-small", 4, *mesh, "--tp-batch")
        ma = compile_plan(tmp, f"hy-ma-{tag}", "dlrm-small", 4, *mesh, "--sync", "background:algo=ma,period=1")
        notes = run(plandump, ma).stdout
        linears = re.findall(r"linear \S+: (?:dp=\S+ )?tp=(\S+)", notes)
        bags = re.findall(r"embedding_bag \S+: (?:dp=\S+ )?tp=(\S+)", notes)
        check(f"{tag}: every linear batch-split over tp, some tables sharded ({len(linears)} linears, tables {' '.join(bags)})",
              len(linears) == 6 and all(l.startswith("b") for l in linears) and any(b[0] in "er" for b in bags), notes)
        text = plan_text(ma)
        groups = dict(re.findall(r"^group (\d+) axes (\S+)", text, re.M))
        names = buffer_names(text)
        colls = [l for l in text.splitlines() if " coll " in l]
        bg_axes = {groups.get(g) for g in re.findall(r" s2 group (\d+)", "\n".join(colls))}
        check(f"{tag}: the round averages over a group of {want_axes}", bg_axes == {want_axes}, f"{bg_axes} {groups}")
        fg_reduced = {names.get(b) for l in colls if " s2 " not in l and " all_reduce " in l
                      for b in re.search(r" args ([\d,]+) ->", l).group(1).split(",")}
        check(f"{tag}: the foreground all-reduces only embedding tables' gradients ({len(fg_reduced)})",
              all(n.startswith("d:emb") for n in fg_reduced), str(sorted(fg_reduced)))
        st = os.path.join(tmp, f"hy-{tag}.st")
        p = run(planrun, sync, "--backend", "cpu-serial", "--precision", "f64", "--steps", "8", "--save", st, "--log-every", "0")
        check(f"{tag}: the synchronous plan of the layout runs", p.returncode == 0, p.stdout + p.stderr)
        p = run(planrun, ma, "--backend", "cpu-serial", "--precision", "f64", "--steps", "8", "--compare", st,
                "--rtol", "1e-10", "--atol", "1e-12", "--log-every", "0")
        check(f"{tag}: MA every step after the optimizer equals it (f64, rtol 1e-10)", p.returncode == 0, p.stdout + p.stderr)
        for algo in ("easgd,period=2", "bmuf,period=2", "ma,period=continuous"):
            path = compile_plan(tmp, f"hy-{algo.split(',')[0]}-{tag}", "dlrm-small", 4, *mesh, "--sync", f"background:algo={algo}")
            p = run(planrun, path, "--steps", "10", "--log-every", "0")
            m = re.search(r"loss ([-0-9.naif]+) -> ([-0-9.naif]+)", p.stdout)
            ok = p.returncode == 0 and m and float(m.group(2)) < float(m.group(1)) and "background rounds" in p.stdout
            check(f"{tag}: {algo} runs with rounds and the loss falls ({m.group(1) if m else '?'} -> {m.group(2) if m else '?'})",
                  ok, p.stdout + p.stderr)


with tempfile.TemporaryDirectory() as tmp:
    sharded_tables(tmp)
    for backend in ("cpu", "cpu-serial"):
        one_trainer(tmp, backend)
    four_ranks(tmp)
    chunks(tmp)
    saved_mean(tmp)
    bmuf_defaults(tmp)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
