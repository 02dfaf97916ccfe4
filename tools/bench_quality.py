#!/usr/bin/env python3
"""Plan quality: plancc --auto against the best Megatron-style template, pure data parallelism,
ZeRO-3 data parallelism and the compute lower bound, per model (issue 5, item 5).

For each row (a model, a cluster, a GPU count N and a global batch G, the samples of one
training step), every strategy trains on the same G samples per step:

  --auto      plancc's own search (pp x dp x tp, ZeRO, recompute, the ILP's per-operator splits,
              co-shard where the plan would recompute or use ZeRO-3) with --global-batch G: one
              call per row, which also searches the micro-batch count M (G = B x M; dimensions
              made of the batch, as Swin's windows, follow it). The plan's notes (the summary's
              co-shard line) are printed under its configuration.
  template    the best of a grid search, Megatron-LM style: tp in {1, 2, 4, 8} inside a node,
              pp a power of two or the paper's (every divisor with --full-grid) up to the
              number of layers, dp = N / (tp pp) dividing G, micro-batch per replica a power of
              two (or G / dp), 1F1B when pp > 1, recompute none or full (and on rows with
              causal self-attention, and on the rows marked "selective" (mT5, the MoE, the Evoformer),
              Megatron-LM's selective, plancc's auto), ZeRO 0, 1 or 3, and
              with tp > 1 on a model with attention with and without Megatron-LM's
              --sequence-parallel (as its users run tensor parallelism since Korthikanti et al.
              2022; the paper's configuration below stays without it, as published); on the
              long-context rows also cp a power of two in ring (natural or zigzag order) or
              Ulysses form (Megatron-Core's --context-parallel-size, whose ring is zigzag's load
              balanced one; DeepSpeed-Ulysses), and on the other rows with causal self-attention
              cp 2 in zigzag order, the rest of the grid over N / cp.
              Configurations that do not fit exit 3 and are skipped; so are those plancc
              refuses as not supported yet (exit 2, "plancc cannot yet ...": T5's stacks, whose
              relative position bias sums its gradient over a block's copies, on two pipeline
              stages), which the table counts per row and --auto's search skips alike.
  DP          dp = N (tp = pp = 1), the best micro-batch and recompute, ZeRO 0.
  ZeRO-3      the same with --zero 3.
  bound       the model's FLOPs per step / (N x peak FLOP/s of its dtype) (plancc --check).

Step times are the plan's own estimate (plandump --json: estimate.step_s), read in one place,
plan_time(), which is where a simulator's time (plandump --sim) plugs in. TFLOP/s per GPU
counts the model's FLOPs (forward + backward as plancc --check counts them, no recompute) over
the step. For the GPT rows of ../shared/data/megatron_sc21_a100.csv the published throughput
is turned into a step time with the paper's own FLOP formula ("paper" column) and the paper's
configuration is compiled as a template too ("paper cfg"). The Llama-3-8B-128k row's "paper"
column is nnScaler's published step (examples/llama/README.rst), its plan not published; a row's
"extra" options (there: --attention flash) go to every configuration of the row.

The search is cheap first: plancc --estimate-only --json gives every configuration's estimate
without building a plan; then configurations are compiled in the order of their estimates
until one fits (a template's plan has exactly its estimate; --auto's is never below it), so a
row costs one estimate per configuration and a few compiles. pp runs over powers of two and the
paper's value (--full-grid: every divisor). With a simulated time in plan_time, --top K keeps
compiling until K plans fit.

Exit status: 0 when every compile that should succeed did and every plan passed plan_check
(plandump); 1 on a crash, an unexpected exit code, a failed plan_check, or (with --strict)
--auto losing to the template on a row.

usage: bench_quality.py [--plancc P] [--plandump P] [--root DIR] [--rows SUBSTR,...] [--jobs N]
                        [--full-grid] [--top K] [--strict] [--json OUT]
"""
import argparse
import concurrent.futures as cf
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

MEGATRON_CSV = "megatron_sc21_a100.csv"
EXIT_OK, EXIT_INFEASIBLE, EXIT_INPUT = 0, 3, 2
# What plancc says (exit 2) of a configuration it cannot plan yet: skipped and counted, not an error.
UNSUPPORTED = "plancc cannot yet"
# The option plancc would take for the global batch (None while it has none; see the docstring).
GLOBAL_BATCH_OPTION = "--global-batch"
# Variants of one template configuration, fastest first (recompute adds compute, ZeRO adds
# communication; neither saves time): (recompute, zero).
VARIANTS = [("none", 0), ("none", 1), ("none", 3), ("full", 0), ("full", 1), ("full", 3)]
# Megatron-LM's selective recompute (--recompute-granularity selective, which plancc reads as
# --recompute auto: the ILP picks what to recompute where memory binds), on the GPT-style rows and
# the rows marked "selective": Megatron-Core offers it for any transformer layer, and the
# Evoformer's blocks are attention and transitions as well.
SELECTIVE = [("auto", 0), ("auto", 1), ("auto", 3)]


def has_op(ops, kind):
    """Whether a model file's op list (blocks' ops included) has an operator of this type."""
    return any(o.get("type") == kind or has_op(o.get("ops", []), kind) for o in ops)


def zigzag_ring(ops):
    """Whether every attention of a model file is causal self-attention without a bias (ring
    attention in zigzag order can take it: plancc's cp_check and auto_zigzag)."""
    def walk(ops):
        for o in ops:
            yield o
            yield from walk(o.get("ops", []))
    attn = [o for o in walk(ops) if o.get("type") == "attention"]
    return bool(attn) and all(o.get("attrs", {}).get("causal") and len(o["in"]) <= 3 for o in attn)


def sequence_size(m):
    """The size of the dimension Megatron's sequence parallelism splits (axis 1 of the first
    attention's queries, as plancc reads it), or None without attention."""
    def first(ops, tensors):
        for o in ops:
            if o.get("type") == "attention":
                return tensors.get(o["in"][0], {}).get("shape")
            got = first(o.get("ops", []), {**tensors, **o.get("tensors", {})})
            if got:
                return got
        return None
    shape = first(m["ops"], m.get("tensors", {}))
    return m["dims"].get(shape[1]) if shape and len(shape) > 1 else None


class Bench:
    def __init__(self, args):
        self.a = args
        self.tmp = tempfile.mkdtemp(prefix="bench_quality.")
        self.lock = threading.Lock()
        self.errors = []        # (what, detail): crashes, bad exit codes, failed checks
        self.unsupported = {}   # row name -> [count, first message]: configurations plancc cannot plan yet
        self.compiles = 0
        self.estimates = 0
        self.models = {}        # (model file, B) -> rewritten path
        self.n = 0

    # ---- running plancc ----

    def snapshot(self, path):
        """A copy of an input file in the run's folder, so that every compile of the run reads
        the same bytes even if the file changes meanwhile."""
        dst = os.path.join(self.tmp, "in." + os.path.basename(path))
        with self.lock:
            if not os.path.exists(dst):
                with open(path, "rb") as f, open(dst + ".part", "wb") as o:
                    o.write(f.read())
                os.replace(dst + ".part", dst)
        return dst

    def model_with_batch(self, model, batch):
        """The model file with its batch dimension B set to `batch`, and the dimensions made of B
        (Swin's windows, the Evoformer's rows of the MSA) as plancc scales them (--global-batch)."""
        key = (model, batch)
        with self.lock:     # held while writing: another thread may want the same file
            if key not in self.models:
                self.models[key] = self._write_model(model, batch)
            return self.models[key]

    def _write_model(self, model, batch):
        with open(model, encoding="utf-8") as f:
            m = json.load(f)
        if m["dims"]["B"] != batch:
            p = subprocess.run([self.a.plancc, "--check", "--json", model, "--global-batch", str(batch)],
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise ValueError(f"{model}: plancc cannot scale the batch to {batch}: {p.stderr.strip()}")
            m["dims"] = json.loads(p.stdout)["dims"]
        path = os.path.join(self.tmp, f"{os.path.basename(model)[:-5]}.B{batch}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(m, f)
        return path

    def refused(self, row, p):
        """Whether plancc refused the configuration as not supported yet (recorded for the row)."""
        if p.returncode != EXIT_INPUT or UNSUPPORTED not in p.stderr:
            return False
        with self.lock:
            u = self.unsupported.setdefault(row["name"], [0, p.stderr.strip().split(": ", 2)[-1]])
            u[0] += 1
        return True

    def error(self, what, detail):
        with self.lock:
            self.errors.append((what, detail))
        print(f"FAIL {what}: {detail}", file=sys.stderr, flush=True)

    def compile(self, row, batch, micro, args):
        """Compiles; returns a result dict (step_s, peak, strategy) or None when it does not fit.
        Records an error for anything but success or "does not fit"."""
        with self.lock:
            self.n += 1
            plan = os.path.join(self.tmp, f"p{self.n}.plan")
        model = self.model_with_batch(row["model"], batch)
        cmd = [self.a.plancc, model, "--cluster", row["cluster"], "--devices", str(row["gpus"]), "-o", plan] + args + row.get("extra", [])
        if micro:  # None: --auto searches the count (--global-batch)
            cmd += ["--micro-batches", str(micro)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        with self.lock:
            self.compiles += 1
        what = f"{row['name']}: B={batch} M={micro} {' '.join(args)}"
        if p.returncode == EXIT_INFEASIBLE or self.refused(row, p):
            return None
        if p.returncode != EXIT_OK:
            self.error(what, f"plancc exit {p.returncode}: {p.stderr.strip()[-600:]}")
            return None
        if "plan_check passed" not in p.stdout:
            self.error(what, "plancc did not report plan_check passed")
        step, peak = plan_time(self, plan, what)
        os.unlink(plan)
        if step is None:
            return None
        first = p.stdout.splitlines()[0]
        strat = first.split("): ", 1)[1] if "): " in first else first
        # the plan's notes: the summary's line of a plan kind beyond the mesh (co-shard's)
        notes = [ln.strip() for ln in p.stdout.splitlines() if ln.startswith("  co-shard:")]
        return {"step_s": step, "peak": peak, "strategy": strat.replace(" (--auto)", ""), "B": batch, "M": micro,
                "args": " ".join(args), "notes": notes}

    # ---- one row ----

    def facts(self, row):
        """FLOPs of one step at the global batch, peak FLOP/s, layers, optimizer-state bytes."""
        model = self.model_with_batch(row["model"], row["G"])
        p = subprocess.run([self.a.plancc, "--check", "--json", model, "--cluster", row["cluster"],
                            "--devices", str(row["gpus"])], capture_output=True, text=True)
        if p.returncode != 0:
            self.error(row["name"], f"plancc --check exit {p.returncode}: {p.stderr.strip()[-400:]}")
            return None
        d = json.loads(p.stdout)
        t = d["totals"]
        with open(row["model"], encoding="utf-8") as f:
            m = json.load(f)
        layers = sum(o.get("repeat", 1) if "type" not in o else 1 for o in m["ops"])
        attention = has_op(m["ops"], "attention")
        seq = sequence_size(m)
        mem = t["memory_bytes"]
        return {"flops": t["flops"]["forward"] + t["flops"]["backward"], "peak": d["cluster"]["peak_flops"],
                "layers": layers, "state": mem["weights"] + mem["grads"] + mem["optimizer"],
                "memory": d["cluster"]["device"]["memory_bytes"], "per_node": d["cluster"]["devices_per_node"],
                "attention": attention, "seq": seq, "zigzag": zigzag_ring(m["ops"])}

    def micro_sizes(self, G, dp):
        """Micro-batch sizes per replica: powers of two dividing G / dp, and G / dp itself, with at
        most --max-micro-batches micro-batches per step."""
        if G % dp:
            return []
        top = G // dp
        s = [m for m in (2 ** k for k in range(0, 20)) if m <= top and top % m == 0]
        return [m for m in sorted(set(s + [top])) if top // m <= self.a.max_micro_batches]

    def estimate(self, row, c):
        """plancc --estimate-only for configuration c: the step time it would plan, or None when
        the configuration cannot be planned (exit 3)."""
        model = self.model_with_batch(row["model"], c["B"])
        cmd = [self.a.plancc, model, "--cluster", row["cluster"], "--devices", str(row["gpus"]),
               "--estimate-only", "--json"] + c["args"] + row.get("extra", []) + (["--micro-batches", str(c["M"])] if c["M"] else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        with self.lock:
            self.estimates += 1
        if p.returncode == EXIT_INFEASIBLE or self.refused(row, p):
            return None
        if p.returncode != EXIT_OK:
            self.error(f"{row['name']}: B={c['B']} M={c['M']} {' '.join(c['args'])} --estimate-only",
                       f"plancc exit {p.returncode}: {p.stderr.strip()[-400:]}")
            return None
        return json.loads(p.stdout)["estimate"]["step_s"]

    def best_of(self, row, configs, pool):
        """The fastest configuration that fits. Every configuration's estimate first (cheap: no
        plan), then compiles in the estimates' order, --jobs at a time, until the next estimate is
        no better than the best plan found and --top plans fit. A plan's step is never below its
        configuration's estimate (a template's is that estimate; --auto may fall back to a
        slower candidate when its best does not fit), so nothing skipped could win."""
        ests = list(pool.map(lambda c: self.estimate(row, c), configs))
        order = sorted((e, i) for i, e in enumerate(ests) if e is not None)
        best, fits, k = None, 0, 0
        while k < len(order):
            if best and fits >= self.a.top and order[k][0] >= best["step_s"] * (1 - 1e-12):
                break
            chunk = [configs[i] for _, i in order[k:k + self.a.jobs]]
            k += len(chunk)
            for c, r in zip(chunk, pool.map(lambda c: self.compile(row, c["B"], c["M"], c["args"]), chunk)):
                if r:
                    r.update({x: c[x] for x in c if x not in ("args", "B", "M")})
                    fits += 1
                    if best is None or r["step_s"] < best["step_s"]:
                        best = r
        return best, len(configs)

    def configs(self, row, f, tps=(1, 2, 4, 8), pps=None, variants=VARIANTS, mbs=None, sequence_parallel=True):
        """The template grid: (tp, pp, dp, micro-batch per replica, recompute, ZeRO), and on the
        long-context rows context parallelism too (Megatron-Core's --context-parallel-size, ring
        attention in zigzag order or the natural one; DeepSpeed-Ulysses' all-to-alls): cp a power
        of two, every form; on the other rows whose attention is causal self-attention, cp 2 in
        zigzag order (Megatron-Core's load-balanced ring), where the ring skips the blocks above
        the diagonal."""
        out = []
        if variants is VARIANTS and (f["zigzag"] or row.get("selective")):
            variants = VARIANTS + SELECTIVE
        cps = [1 << k for k in range(row["gpus"].bit_length()) if row["gpus"] % (1 << k) == 0] if row.get("cp") else \
            [1, 2] if f["zigzag"] and f["seq"] and f["seq"] % 4 == 0 else [1]
        for cp in cps:
            forms = ("zigzag", "ring", "ulysses") if row.get("cp") else ("zigzag",)
            for form in forms if cp > 1 else ("",):
                extra = ["--cp", str(cp), "--cp-form", form] if cp > 1 else []
                out += [dict(c, cp=cp, args=c["args"] + extra) for c in self.mesh_configs(row, f, row["gpus"] // cp, tps, pps, variants, mbs,
                                                                                           sequence_parallel, cp)]
        return out

    def mesh_configs(self, row, f, N, tps, pps, variants, mbs, sequence_parallel, cp=1):
        """The grid over N devices (those of one cp rank's share). ZeRO where dp x cp > 1: it
        shards over both, as Megatron-Core's distributed optimizer does."""
        G = row["G"]
        out = []
        for tp in tps:
            if N % tp or tp > f["per_node"]:
                continue
            for pp in range(1, N // tp + 1):
                dp = N // tp // pp
                if (N // tp) % pp or pp > f["layers"] or G % dp:
                    continue
                if pps is not None and pp not in pps:
                    continue
                if pps is None and not self.a.full_grid and pp & (pp - 1) and (pp, dp, tp) != row.get("paper_mesh"):
                    continue            # pp a power of two, or the paper's
                if f["state"] / row["gpus"] > f["memory"]:
                    continue            # not even ZeRO-3 over all devices holds the optimizer state
                # with and without sequence parallelism: it costs where the model's norms and
                # element-wise work are small beside its all-gathers (the Evoformer); only where
                # tp divides the sequence, as Megatron-LM requires (not Swin's 49-token windows)
                sp_ok = tp > 1 and f["attention"] and sequence_parallel and (f["seq"] or 0) % tp == 0
                sps = [[], ["--sequence-parallel"]] if sp_ok else [[]]
                for mb in mbs or self.micro_sizes(G, dp):
                    for rc, z in variants:
                        if z and dp * cp == 1:
                            continue
                        for sp in sps:
                            out.append({"B": mb * dp, "M": G // (mb * dp), "mb": mb, "mesh": (pp, dp, tp), "rc": rc,
                                        "zero": z, "sp": bool(sp), "args": ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp),
                                                                            "--recompute", rc, "--zero", str(z)] + sp})
        return out

    def row(self, row, pool):
        t0 = time.perf_counter()
        f = self.facts(row)
        if f is None:
            return None
        N, G = row["gpus"], row["G"]
        out = {"row": row, "facts": f}
        out["bound"] = f["flops"] / (N * f["peak"])
        grid = self.configs(row, f)
        out["template"], out["configs"] = self.best_of(row, grid, pool)
        dp_only = [c for c in grid if c["mesh"] == (1, N, 1)]
        out["dp"], _ = self.best_of(row, [c for c in dp_only if c["zero"] == 0], pool)
        out["zero3"], _ = self.best_of(row, [c for c in dp_only if c["zero"] == 3], pool)
        if row.get("paper_mesh"):   # the paper's own configuration: full recompute, no ZeRO
            pp, dp, tp = row["paper_mesh"]
            paper = self.configs(row, f, (tp,), (pp,), [("full", 0)], [row["paper_mb"]], sequence_parallel=False)
            out["paper_cfg"], _ = self.best_of(row, [c for c in paper if c["mesh"] == (pp, dp, tp)], pool)
        # --auto on every whole-model micro-batch B that the template grid uses.
        batches = sorted({c["B"] for c in grid})
        if GLOBAL_BATCH_OPTION:
            auto = [{"B": row["B0"], "M": None, "args": ["--auto", GLOBAL_BATCH_OPTION, str(G)]}]
        else:
            auto = [{"B": B, "M": G // B, "args": ["--auto"]} for B in batches]
        out["auto"], _ = self.best_of(row, auto, pool)
        out["seconds"] = time.perf_counter() - t0
        return out


def plan_time(bench, plan, what):
    """The step time and peak memory of a plan: THE ONE PLACE that says where step times come
    from. Today the plan's estimate (the cost model's, written by plancc); to use the simulator,
    run plandump --sim here instead and read its step time. Also checks the plan (plandump runs
    plan_check on load: exit 5 on failure)."""
    p = subprocess.run([bench.a.plandump, "--json", plan], capture_output=True, text=True)
    if p.returncode != 0:
        bench.error(what, f"plandump exit {p.returncode} (5: plan_check failed): {p.stderr.strip()[-400:]}")
        return None, None
    d = json.loads(p.stdout)
    return d["estimate"]["step_s"], d["estimate"]["peak_bytes"]


def megatron_flops(r, G):
    s, l, h, V = 2048, int(r["layers"]), int(r["hidden"]), 51200
    return 96 * G * s * l * h * h * (1 + s / (6 * h)) + 6 * G * s * h * V


def rows(root, data):
    out = []
    with open(os.path.join(data, MEGATRON_CSV), encoding="utf-8") as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    a100 = os.path.join(root, "models", "clusters", "dgx-a100.json")
    h100 = os.path.join(root, "models", "clusters", "dgx-h100.json")
    for r in csv.DictReader(lines):
        G, N = int(r["global_batch"]), int(r["gpus"])
        out.append({"name": f"GPT {r['model']}", "model": os.path.join(root, "models", f"megatron-{r['model'].lower()}.json"),
                    "cluster": a100, "gpus": N, "G": G,
                    "paper_mesh": (int(r["pp"]), int(r["dp"]), int(r["tp"])), "paper_mb": int(r["micro_batch"]),
                    "paper_step_s": megatron_flops(r, G) / (N * float(r["tflops_per_gpu"]) * 1e12)})
    gpt3 = os.path.join(root, "models", "gpt3-175b.json")
    # GPT-3's batch of 3.2 M tokens = 1536 sequences of 2048 (Brown et al., Table 2.1).
    out.append({"name": "GPT-3 175B A100", "model": gpt3, "cluster": a100, "gpus": 1024, "G": 1536,
                "paper_mesh": (16, 8, 8), "paper_mb": 1})
    out.append({"name": "GPT-3 175B H100", "model": gpt3, "cluster": h100, "gpus": 1024, "G": 1536,
                "paper_mesh": (16, 8, 8), "paper_mb": 1})
    # Strong scaling, where DeepPool and nnScaler find templates fit badly: a small global batch
    # over many GPUs (VGG-16 and Swin: 4 and 8 images per GPU on 64 GPUs; DLRM: 1024 samples).
    out.append({"name": "VGG-16", "model": os.path.join(root, "models", "vgg16.json"), "cluster": a100,
                "gpus": 64, "G": 256})
    out.append({"name": "DLRM", "model": os.path.join(root, "models", "dlrm.json"), "cluster": a100,
                "gpus": 64, "G": 65536})
    out.append({"name": "Swin-T", "model": os.path.join(root, "models", "swin-tiny.json"), "cluster": a100,
                "gpus": 64, "G": 512})
    # The two real models of issue 22: LLaMA-2-7B's sizes on 64 GPUs at 1024 sequences (4 M tokens)
    # and AlphaFold2's Evoformer on 64 GPUs at 128 samples.
    # models/llama2-7b.json is plancc-import's, in PyTorch's default f32; Llama 2 trains in bf16.
    out.append({"name": "LLaMA-2-7B", "model": os.path.join(root, "models", "llama2-7b.json"), "cluster": a100,
                "gpus": 64, "G": 1024, "dtype": "bf16"})
    out.append({"name": "Evoformer", "model": os.path.join(root, "models", "evoformer.json"), "cluster": a100,
                "gpus": 64, "G": 128, "selective": True})
    # Long context (issue 27): a 7B-class GPT on one sequence of 32k tokens on two DGX A100 nodes
    # and of 128k on four, where --auto may split the sequence; the template grid has context
    # parallelism on these rows, as Megatron-Core and DeepSpeed do.
    out.append({"name": "GPT-32k", "model": os.path.join(root, "models", "gpt-32k.json"), "cluster": a100,
                "gpus": 16, "G": 1, "cp": True})
    out.append({"name": "GPT-128k", "model": os.path.join(root, "models", "gpt-128k.json"), "cluster": a100,
                "gpus": 32, "G": 1, "cp": True})
    # Co-shard (issue 27): the same GPT at 64k tokens with a 256,000-token vocabulary on one DGX A100
    # node, one sequence per step: the LM head's logits and their gradient are the largest transients
    # (31 GiB per sequence in bf16), where --auto may co-shard them (the template grid has no co-shard,
    # as no template does; it has context parallelism, as on the long-context rows).
    out.append({"name": "GPT-64k-V256k", "model": os.path.join(root, "models", "gpt-64k-v256k.json"), "cluster": a100,
                "gpus": 8, "G": 1, "cp": True})
    # mT5-Large's 250,112-token vocabulary (issue 27; nnScaler's interlaced pipeline is for mT5):
    # 1024 sequences per step as mT5 pre-trained (Xue et al. 2021), on four DGX A100 nodes (the
    # largest of nnScaler's T5 runs, 4 to 32 GPUs), in bf16.
    out.append({"name": "mT5-Large", "model": os.path.join(root, "models", "mt5-large.json"), "cluster": a100,
                "gpus": 32, "G": 1024, "dtype": "bf16", "selective": True})
    # The mixture of experts: Mixtral 8x7B routed (each expert computes on its slots only; 46.7 B
    # parameters, 747 GB of bf16 weights, f32 gradients and Adam state: more than nine A100s
    # hold) on eight DGX A100 nodes, 512 sequences of 4096 tokens (2 M tokens) per step, in bf16.
    out.append({"name": "Mixtral-8x7B", "model": os.path.join(root, "models", "mixtral-8x7b-routed.json"),
                "cluster": a100, "gpus": 64, "G": 512, "dtype": "bf16", "selective": True})
    # Llama 3 8B at 131,072 tokens on one DGX H100 node, four sequences per step in bf16 with
    # FlashAttention-2, as nnScaler's example trained it (its examples/llama/README.rst: 41.12 s a
    # step, with recompute per decoder layer and a plan of its own search, not given): the
    # published column is that measurement, beside the plans of plancc's grid and --auto.
    out.append({"name": "Llama-3-8B-128k", "model": os.path.join(root, "models", "llama3-8b-128k.json"), "cluster": h100,
                "gpus": 8, "G": 4, "dtype": "bf16", "cp": True, "extra": ["--attention", "flash"], "paper_step_s": 41.12})
    return out


def fmt_step(r, flops, N):
    if not r:
        return f"{'no fit':>9} {'':>6}"
    return f"{r['step_s']:>9.4g} {flops / (r['step_s'] * N) / 1e12:>6.1f}"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plancc", default=os.path.join(here, "..", "build", "plancc"))
    ap.add_argument("--plandump", default=None)
    ap.add_argument("--root", default=os.path.join(here, ".."))
    ap.add_argument("--data", default=None, help="folder of megatron_sc21_a100.csv (default ROOT/data)")
    ap.add_argument("--rows", default="", help="comma-separated substrings of row names to run (default all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--full-grid", action="store_true", help="every divisor for pp (default: powers of two and the paper's)")
    ap.add_argument("--top", type=int, default=1, help="plans that must fit before the search stops (more when a "
                    "simulated time may rank plans differently from the estimate)")
    ap.add_argument("--max-micro-batches", type=int, default=4096, help="most micro-batches per step tried (default 4096)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when --auto loses to the template")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    a.plancc = os.path.abspath(a.plancc)
    a.plandump = os.path.abspath(a.plandump or os.path.join(os.path.dirname(a.plancc), "plandump"))
    a.root = os.path.abspath(a.root)
    a.data = a.data or os.path.join(a.root, "data")
    if not os.path.exists(os.path.join(a.data, MEGATRON_CSV)):
        sys.exit(f"bench_quality: no {MEGATRON_CSV} in {a.data} (give --data DIR)")
    b = Bench(a)
    try:
        return run(a, b)
    finally:
        shutil.rmtree(b.tmp, ignore_errors=True)


def run(a, b):
    want = [w.strip().lower() for w in a.rows.split(",") if w.strip()]
    todo = [r for r in rows(a.root, a.data) if not want or any(w in r["name"].lower() for w in want)]
    for r in todo:
        r["model"], r["cluster"] = b.snapshot(r["model"]), b.snapshot(r["cluster"])
        with open(r["model"], encoding="utf-8") as f:
            m = json.load(f)
        r["B0"] = m["dims"]["B"]
        if r.get("dtype"):  # the row's training dtype for the model's float tensors (the file's default)
            m["dtype"] = r["dtype"]
            r["model"] = os.path.join(b.tmp, "%s.%s.json" % (os.path.basename(r["model"])[:-5], r["dtype"]))
            with open(r["model"], "w", encoding="utf-8") as f:
                json.dump(m, f)
    t0 = time.perf_counter()
    results = []
    print("plan quality: step time (s) and TFLOP/s per GPU (model FLOPs, no recompute) from the plan's estimate")
    hdr = (f"{'row':<16} {'GPUs':>5} {'batch':>6} | {'--auto':>9} {'TF/s':>6} | {'template':>9} {'TF/s':>6} | "
           f"{'DP':>9} {'TF/s':>6} | {'ZeRO-3':>9} {'TF/s':>6} | {'bound':>8} | {'paper cfg':>9} {'paper':>8} | auto/tmpl")
    print(hdr)
    print("-" * len(hdr), flush=True)
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for row in todo:
            res = b.row(row, pool)
            if res is None:
                continue
            results.append(res)
            N, fl = row["gpus"], res["facts"]["flops"]
            au, tm = res["auto"], res["template"]
            ratio = f"{tm['step_s'] / au['step_s']:.3f}" if au and tm else "-"
            pc = res.get("paper_cfg")
            pcs = "%.4g" % pc["step_s"] if pc else "-"
            pub = "%.4g" % row["paper_step_s"] if row.get("paper_step_s") else "-"
            print(f"{row['name']:<16} {N:>5} {row['G']:>6} | {fmt_step(au, fl, N)} | {fmt_step(tm, fl, N)} | "
                  f"{fmt_step(res['dp'], fl, N)} | {fmt_step(res['zero3'], fl, N)} | {res['bound']:>8.4g} | "
                  f"{pcs:>9} {pub:>8} | {ratio}", flush=True)
    print()
    print("chosen configurations (pp x dp x tp; B = micro-batch of all replicas, M = micro-batches):")
    for res in results:
        for k in ("auto", "template"):
            r = res[k]
            if r:
                extra = f"; recompute {r['rc']}, zero {r['zero']}" if k == "template" else ""
                if k == "template" and r.get("cp", 1) > 1:
                    extra += f", cp {r['cp']}"
                print(f"  {res['row']['name']:<16} {k:<8} B={r['B']:<5} M={r['M'] or '-':<5} {r['strategy']}{extra}")
                for n in r.get("notes", []):
                    print(f"  {'':<16} {'':<8} {n}")
    if b.unsupported:
        print()
        print("configurations plancc cannot plan yet (exit 2; skipped):")
        for name, (n, msg) in b.unsupported.items():
            print(f"  {name:<16} {n}, e.g.: {msg}")
    wall = time.perf_counter() - t0
    lose = [res["row"]["name"] for res in results
            if res["template"] and (not res["auto"] or res["auto"]["step_s"] > res["template"]["step_s"] * (1 + 1e-9))]
    print()
    print(f"{len(results)} rows, {b.estimates} estimates and {b.compiles} compiles in {wall:.1f} s ({a.jobs} jobs); "
          f"--auto at least as fast as the best template on {len(results) - len(lose)} of {len(results)} rows"
          + (f"; behind on: {', '.join(lose)}" if lose else ""))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump([{k: v for k, v in r.items()} for r in results], f, indent=1, default=str)
    if b.errors:
        print(f"FAILED: {len(b.errors)} compiles or checks went wrong:")
        for what, detail in b.errors[:20]:
            print(f"  {what}: {detail}")
        return 1
    if a.strict and lose:
        print("FAILED (--strict): --auto loses to the template on " + ", ".join(lose))
        return 1
    print("ok: no crash, every plan passed plan_check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
