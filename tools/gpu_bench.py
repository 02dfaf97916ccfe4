#!/usr/bin/python3
"""gpu_bench.py: planrun's cuda backend on a GPU, as a table: one-rank training step time against
PyTorch eager on the same GPU (same model, batch and dtype), the achieved TFLOP/s of the
matmul-heavy operators against the GPU's peak, and a profile of operator times by shape in the
format the cost model reads.

  /usr/bin/python3 tools/gpu_bench.py                         gpt2-small, f32, 20 steps
  /usr/bin/python3 tools/gpu_bench.py --tf32                  TF32 products (planrun --tf32, torch allow_tf32)
  /usr/bin/python3 tools/gpu_bench.py --dtype bf16            the model compiled in bf16 (torch: bf16 weights
                                                             and activations, f32 master weights in AdamW)
  /usr/bin/python3 tools/gpu_bench.py --attention flash      the plan's attention in the FlashAttention
                                                             form (plancc --attention flash)
  /usr/bin/python3 tools/gpu_bench.py --model models/gpt-tiny.json --steps 50
  /usr/bin/python3 tools/gpu_bench.py --profile-out models/clusters/profiles/dgx-h100-gpt2.json \\
      --cluster models/clusters/dgx-h100.json

What it does:
  1. compiles a one-device plan of the model (plancc, the --cluster file, --devices 1);
  2. runs planrun --backend cuda for --steps steps with PLANRUN_CUDA_PROFILE set, and takes the
     median of the step times it prints after --warmup steps;
  3. builds the same GPT-2 in PyTorch (tools/torch_ref.py's reading of the model file) on the GPU,
     trains --steps steps with torch.optim.AdamW on random tokens, and takes the median step time
     after the same warm-up (torch.cuda.synchronize around each step);
  4. prints both and their ratio (planrun / torch: below 1 is faster);
  5. reads planrun's profile: per matmul-type operator (linear, matmul, bmm, attention and their
     gradients) its FLOPs from its shapes over its median time, against the GPU's dense peak for
     the dtype (a table by GPU name, or --peak TFLOPS);
  6. writes the profile (--profile-out) with its "device" set to the --cluster file's device name,
     so the cluster can name it in "profile".
Exits 77 where there is no GPU or no cuda backend (skipped, not failed).
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

# Dense peak TFLOP/s by GPU (datasheets: A100 SXM, H100 SXM5; H200 as H100), per dtype.
PEAKS = {
    "A100": {"f32": 19.5, "tf32": 156.0, "bf16": 312.0, "f16": 312.0},
    "H100": {"f32": 67.0, "tf32": 494.7, "bf16": 989.4, "f16": 989.4},
    "H200": {"f32": 67.0, "tf32": 494.7, "bf16": 989.4, "f16": 989.4},
}


def parse_args(argv):
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--model", default=os.path.join(ROOT, "models", "gpt2-small.json"))
    a.add_argument("--cluster", default=os.path.join(ROOT, "models", "clusters", "dgx-h100.json"))
    a.add_argument("--plancc", default=os.path.join(ROOT, "build", "plancc"))
    a.add_argument("--planrun", default=os.path.join(ROOT, "build", "planrun"))
    a.add_argument("--steps", type=int, default=20)
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    a.add_argument("--tf32", action="store_true")
    a.add_argument("--attention", choices=["unfused", "flash"], default="unfused", help="plancc --attention (default unfused)")
    a.add_argument("--peak", type=float, help="the GPU's dense peak in TFLOP/s for the dtype (default: a table by name)")
    a.add_argument("--profile-out", help="write planrun's measured profile here (cost-model format)")
    a.add_argument("--skip-torch", action="store_true")
    return a.parse_args(argv)


def sh(*args, env=None):
    return subprocess.run([str(x) for x in args], capture_output=True, text=True, env=env)


def compile_plan(a, tmp):
    model = a.model
    if a.dtype != "f32":  # the same model with another default dtype
        with open(model) as f:
            m = json.load(f)
        m["dtype"] = a.dtype
        model = os.path.join(tmp, "model.json")
        with open(model, "w") as f:
            json.dump(m, f)
    plan = os.path.join(tmp, "bench.plan")
    p = sh(a.plancc, model, "--cluster", a.cluster, "--devices", 1, "--attention", a.attention, "-o", plan)
    if p.returncode:
        sys.exit(f"plancc failed ({p.returncode}): {p.stderr[-2000:]}")
    return plan


def run_planrun(a, plan, tmp):
    prof = os.path.join(tmp, "profile.json")
    env = dict(os.environ, PLANRUN_CUDA_PROFILE=prof)
    args = [a.planrun, plan, "--backend", "cuda", "--steps", a.steps, "--timeout", 600] + (["--tf32"] if a.tf32 else [])
    p = sh(*args, env=env)
    if p.returncode == 9:
        print("SKIP: no GPU: " + p.stderr.strip())
        sys.exit(77)
    if p.returncode:
        sys.exit(f"planrun failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    times = [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+\s+loss \S+\s+([0-9.]+) ms", p.stdout, re.M)]
    gpu = re.search(r"GPU \d+ of \d+ \(([^,]+),", p.stdout)
    with open(prof) as f:
        profile = json.load(f)
    return times, (gpu.group(1) if gpu else profile.get("device", "?")), profile, p.stdout


def torch_step_times(a, cfg):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    dev = torch.device("cuda")
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            H, Fd = cfg["H"], cfg["F"]
            self.ln1 = nn.LayerNorm(H, eps=cfg["eps"][0])
            self.q, self.k, self.v, self.proj = (nn.Linear(H, H) for _ in range(4))
            self.ln2 = nn.LayerNorm(H, eps=cfg["eps"][1])
            self.fc1, self.fc2 = nn.Linear(H, Fd), nn.Linear(Fd, H)

        def forward(self, x, mask):
            B, S, H = x.shape
            N, D = cfg["N"], cfg["D"]
            a = self.ln1(x)
            q, k, v = (m(a).view(B, S, N, D).transpose(1, 2) for m in (self.q, self.k, self.v))
            att = F.softmax(((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))).masked_fill(mask, float("-inf")), dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(B, S, H))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(torch.randn(cfg["V"], cfg["H"]) * 0.02)
            self.wpe = nn.Parameter(torch.randn(cfg["S"], cfg["H"]) * 0.01)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["L"]))
            self.lnf = nn.LayerNorm(cfg["H"], eps=cfg["eps"][2])

        def forward(self, tokens, targets, mask):
            x = F.embedding(tokens, self.wte) + self.wpe[: tokens.shape[1]]
            for b in self.blocks:
                x = b(x, mask)
            logits = F.linear(self.lnf(x), self.wte)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    model = GPT().to(dev, dtype=dt)
    master = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()] if dt != torch.float32 else None
    o = cfg["opt"]
    opt = torch.optim.AdamW(master or model.parameters(), lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                            weight_decay=o["weight_decay"], foreach=False)
    B, S = cfg["B"], cfg["S"]
    mask = torch.ones(S, S, dtype=torch.bool, device=dev).triu(1)
    times = []
    for _ in range(a.steps):
        tokens = torch.randint(0, cfg["V"], (B, S), device=dev)
        targets = torch.randint(0, cfg["V"], (B, S), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(tokens, targets, mask)
        loss.backward()
        if master:
            for m, p in zip(master, model.parameters()):
                m.grad = p.grad.float()
        opt.step()
        if master:
            with torch.no_grad():
                for m, p in zip(master, model.parameters()):
                    p.copy_(m)
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
    return times


def op_flops(op, shapes):
    """FLOPs of one matmul-type operator at its input shapes (2 per multiply-add); None for others."""
    def prod(s):
        n = 1
        for d in s:
            n *= d
        return n
    try:
        if op == "linear":  # x [*, k], w [n, k]
            return 2 * prod(shapes[0][:-1]) * shapes[1][0] * shapes[1][1]
        if op in ("linear_grad_x", "linear_grad_w"):  # dy [*, n] with w [n, k] or x [*, k]
            k = shapes[1][-1]
            return 2 * prod(shapes[0][:-1]) * shapes[0][-1] * k
        if op == "matmul":  # a [*, m, k], b [k, n]
            return 2 * prod(shapes[0]) * shapes[1][1]
        if op == "matmul_grad_a":  # dy [*, m, n], b [k, n]
            return 2 * prod(shapes[0]) * shapes[1][0]
        if op == "matmul_grad_b":  # a [*, m, k], dy [*, m, n]
            return 2 * prod(shapes[0]) * shapes[1][-1]
        if op in ("bmm", "bmm_grad_a", "bmm_grad_b"):
            a, b = shapes[0], shapes[1]
            return 2 * prod(a) * (b[-1] if op != "bmm_grad_a" else b[-2])
        if op == "attention":  # q [b, s, n, d]: q k^T and p v
            b, s, n, d = shapes[0]
            return 4 * b * n * s * s * d
        if op == "attention_grad":  # recompute q k^T, then dV, dP, dQ, dK
            b, s, n, d = shapes[1]
            return 10 * b * n * s * s * d
    except (IndexError, TypeError):
        return None
    return None


def peak_for(a, gpu):
    if a.peak:
        return a.peak
    key = "tf32" if a.dtype == "f32" and a.tf32 else a.dtype
    for name, peaks in PEAKS.items():
        if name in gpu:
            return peaks[key]
    return None


def main(argv):
    a = parse_args(argv)
    v = sh(a.planrun, "--version")
    if "cuda" not in v.stdout:
        print("SKIP: this planrun has no cuda backend")
        return 77
    from torch_ref import load_model  # the GPT-2 reading of the model file
    cfg = load_model(a.model)
    with tempfile.TemporaryDirectory() as tmp:
        plan = compile_plan(a, tmp)
        ptimes, gpu, profile, out = run_planrun(a, plan, tmp)
    dtype = a.dtype + (" (TF32)" if a.tf32 and a.dtype == "f32" else "")
    ps = statistics.median(ptimes[a.warmup:] or ptimes)
    print(f"GPU: {gpu}; model {cfg['name']}: B {cfg['B']}, S {cfg['S']}, H {cfg['H']}, L {cfg['L']}, V {cfg['V']}; {dtype}; "
          f"{a.steps} steps, median after {a.warmup} warm-up steps")
    print(f"{'':24} {'ms/step':>10}")
    print(f"{'planrun --backend cuda':24} {ps:10.2f}")
    if not a.skip_torch:
        try:
            ttimes = torch_step_times(a, cfg)
            ts = statistics.median(ttimes[a.warmup:] or ttimes)
            print(f"{'PyTorch eager':24} {ts:10.2f}")
            print(f"{'ratio planrun / torch':24} {ps / ts:10.2f}")
        except Exception as e:  # torch missing or no CUDA in it: the planrun figures still stand
            print(f"PyTorch eager: not measured ({type(e).__name__}: {e})")
    peak = peak_for(a, gpu)
    print(f"\nmatmul-type operators (planrun's profile; peak {peak if peak else '?'} TFLOP/s for {dtype}):")
    print(f"{'operator':16} {'input shapes':44} {'ms':>9} {'TFLOP/s':>9} {'of peak':>8}")
    total_f = total_t = 0.0
    for e in sorted(profile["entries"], key=lambda e: -e["seconds"]):
        f = op_flops(e["op"], e["shapes"])
        if f is None:
            continue
        tf = f / e["seconds"] / 1e12
        total_f += f
        total_t += e["seconds"]
        share = f"{100 * tf / peak:7.1f}%" if peak else "      ?"
        print(f"{e['op']:16} {str(e['shapes']):44.44} {1e3 * e['seconds']:9.3f} {tf:9.1f} {share}")
    if total_t:
        tf = total_f / total_t / 1e12
        print(f"{'all of them':16} {'':44} {1e3 * total_t:9.3f} {tf:9.1f} " + (f"{100 * tf / peak:7.1f}%" if peak else ""))
    if a.profile_out:
        with open(a.cluster) as f:
            dev = json.load(f)["device"]["name"]
        profile["description"] = f"{profile.get('description', '')} GPU: {gpu}; model {cfg['name']}, {dtype}."
        profile["device"] = dev
        with open(a.profile_out, "w") as f:
            json.dump(profile, f, indent=1)
            f.write("\n")
        print(f"\nwrote {a.profile_out} ({len(profile['entries'])} entries; device \"{dev}\" as {a.cluster} names it)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
