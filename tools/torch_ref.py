#!/usr/bin/python3
"""torch_ref.py: trains gpt-tiny in PyTorch and in planrun from the same weights on the same
data, and compares every step's loss and every parameter at the end.

  /usr/bin/python3 tools/torch_ref.py                                 1 rank, 10 steps, data/kjv.bin
  /usr/bin/python3 tools/torch_ref.py --devices 4 -- --dp 2 --tp 2    a 4-rank plan (plancc options after --)
  /usr/bin/python3 tools/torch_ref.py --micro-batches 2 --steps 20 --seed 7

What it does:
  1. checks that the model file (default models/gpt-tiny.json) is GPT-2 as this script builds it:
     the model's ops are matched one by one against the layout below, and every parameter gets
     its PyTorch module from that match (so the names in the file do not matter, the wiring does);
  2. compiles a one-device plan and runs `planrun --steps 0 --save init.st`: the initial weights;
  3. compiles the plan under test (--devices, --micro-batches and the plancc options after --) and
     runs it for --steps steps with --losses and --save, from its own initializers (so a plan that
     initializes differently shows up too: the script also checks its step-0 weights bit for bit);
  4. loads init.st into the PyTorch model and trains the same steps on the same samples: it
     reimplements planrun's counter-based sampler (runtime/rt.h: rt_mix, rt_key;
     runtime/data.c: rt_sample_offset) in Python integers masked to 64 bits;
  5. prints the losses side by side and one line per parameter tensor, then "N passed, M failed".

The model, GPT-2's layout (nanoGPT's model.py, without dropout):
  x = wte[tokens] + wpe[0..S)                  learned position embeddings
  per block:  x = x + proj(attn(ln1(x)))       pre-LN; q, k, v, proj: nn.Linear(H, H) with bias
              x = x + fc2(gelu(fc1(ln2(x))))   fc1 H -> F, fc2 F -> H, GELU's tanh approximation
  logits = lnf(x) @ wte^T                      final layernorm, LM head tied to the embedding
  loss = cross_entropy(logits, targets)        the mean over all B*S positions
attn is causal softmax(q k^T / sqrt(D)) v per head, and with the attention's "dropout" attr
(tests/models/gpt-tiny-attn-dropout.json) softmax(...) x M v, M planrun's own mask: PyTorch's
generator cannot draw it, so attn_mask draws it here as runtime/cpu/attention.c does (rt.h's
counter-based generator keyed by --seed, the attrs' seed, the step, micro-batch and block copy,
at the global (batch, head, query, key) index); the heads being H's consecutive D-column
slices (plancc's reshape [B,S,H] -> [B,S,N,D] is row-major, as torch's view). plancc's linear is
y = x W^T + b with W [n, k]: nn.Linear's own layout, so every weight is copied as it is, no
transposes. Layernorm eps comes from the op's attrs (default 1e-5).

Optimizer: torch.optim.AdamW (foreach=False) with the model's lr, betas, eps and weight decay on
every parameter (plancc decays all of them, biases and norms included). runtime/cpu/optim.c's
adamw computes torch 1.13's _single_tensor_adamw formula (decoupled decay first, bias corrections
by the 1-based step, eps added to sqrt(v)/sqrt(1 - b2^t)), with one difference in float32: it
forms 1 - beta2 from beta2 rounded to float (0.999f = 0.99900001), giving 0.00099998713, where
torch passes 1 - beta2 computed in double (0.001f); planrun's v is 1.3e-5 relative too small and
its updates about 6e-6 relative too large. With M micro-batches the step's gradient is the mean
of the micro-batches' gradients (plancc seeds the backward with 1/M) and the step's loss the mean
of their losses.

Tolerances. A loss passes within 1e-5 relative (--loss-tol). A parameter tensor passes within
1e-5 of its largest magnitude in torch's float32 result (--param-tol, what planrun --compare
measures), or else by the float64 rule: torch also trains the same steps in float64, and in
float32 a second time with each micro-batch's rows in two halves (the same mathematics, other
sums), and the tensor passes if planrun's largest difference from the float64 result is at most
--noise-factor (10) times the larger of the two float32 runs' differences, plus --param-tol (all
as fractions of the tensor's largest magnitude). The second rule exists because float32 is not
reproducible to 1e-5 here, whoever computes it: AdamW divides each gradient element by its
running magnitude, so an element whose gradient is near eps (1e-8) moves by a fraction of lr on
a rounding error of that gradient. After 10 steps torch's float32 and float64 results differ by
up to 3e-3 of max |w2|, and the key biases bk are pure rounding noise (their exact gradient is 0:
softmax ignores a shift shared by every key) that differs by 100% of its (1e-6) size between any
two float32 runs. --strict applies the first rule only.

Measured (seeds 1 to 10; one rank, dp 4, dp 2 x tp 2; 10 steps): losses agree within 1.1e-6
relative; with the adamw kernel's 1 - beta2 formed in double (see above) within 3.6e-7, every
tensor passes, and planrun's distance from float64 is at most 4.7 times float32's (the 10 leaves
a margin); with the kernel as it is, seed 7 fails (bq.1: 5.4e-5 of its max from float64, where
torch's float32 runs are within 4.3e-6). Mutating the reference shows what the rules catch: weight
decay off, AdamW eps 1e-7, beta2 0.99, layernorm eps 1e-6, lr 1% off, or exact GELU for tanh GELU
each fail 9 to 43 of the 46 checks; weight decay 0.011 for 0.01 (1e-6 of a weight in 10 steps)
passes.

Run with Debian's /usr/bin/python3 and its python3-torch (tools/setup.sh installs it); numpy is
not needed. Exit codes: 0 every check passed; 1 a mismatch; 2 usage, a model this script does not
build, or plancc/planrun failing; 77 PyTorch is not installed (meson's skip code).
"""
import argparse
import json
import math
import os
import sys
import struct
import subprocess
import tempfile
import time
from array import array

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MASK = (1 << 64) - 1
EXIT_MISMATCH, EXIT_ERROR, EXIT_SKIP = 1, 2, 77


class Fail(Exception):
    """A reason this script cannot run the comparison (exit 2)."""


# ---- planrun's random numbers and sampler (runtime/rt.h, runtime/data.c) ----

DOMAIN_SAMPLE = 0x73616D70  # "samp"
DOMAIN_CORPUS = 0x636F7270  # "corp"
SYNTHETIC_CORPUS = 1 << 40


def rt_mix(x):
    """splitmix64's finalizer, as rt.h's rt_mix."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def rt_key(key, word):
    return rt_mix(key ^ rt_mix(word & MASK))


def rt_uniform(key):
    return (rt_mix(key) >> 11) * 2.0 ** -53


def rt_sample_offset(seed, step, mb, row, rng):
    k = rt_key(rt_key(rt_key(rt_key(seed, DOMAIN_SAMPLE), step), mb), row)
    return rt_mix(k) % rng if rng else 0


class Corpus:
    """A token file (little-endian uint16, nanoGPT's train.bin), or planrun's synthetic corpus
    of 2^40 tokens uniform in [0, high) when path is None."""

    def __init__(self, path, seed, high):
        self.seed, self.high = seed, high
        if path is None:
            self.tok, self.n = None, SYNTHETIC_CORPUS
            return
        with open(path, "rb") as f:
            raw = f.read()
        if len(raw) < 4 or len(raw) % 2:
            raise Fail("%s: a token file holds uint16 tokens (an even number of bytes, at least 2 tokens)" % path)
        self.tok = array("H")
        self.tok.frombytes(raw)
        if sys.byteorder != "little":
            self.tok.byteswap()
        self.n = len(self.tok)
        if max(self.tok) >= high:
            raise Fail("%s holds token %d, outside the vocabulary of %d" % (path, max(self.tok), high))

    def window(self, start, length):
        if self.tok is not None:
            return list(self.tok[start:start + length])
        base = rt_key(self.seed, DOMAIN_CORPUS)
        return [int(rt_uniform(rt_key(base, p)) * self.high) for p in range(start, start + length)]

    def batch(self, step, mb, rows, length):
        """tokens and targets [rows][length] of micro-batch mb of step `step` (0-based)."""
        if length + 2 > self.n:
            raise Fail("the token file has %d tokens, fewer than a row of %d plus 2" % (self.n, length))
        tok, tgt = [], []
        for r in range(rows):
            o = rt_sample_offset(self.seed, step, mb, r, self.n - length - 1)
            w = self.window(o, length + 1)
            tok.append(w[:length])
            tgt.append(w[1:])
        return tok, tgt


# ---- the model file, matched against GPT-2's layout ----

# (op type, inputs, outputs) in program order. Names with a dot are parameters and name the
# PyTorch module's parameter they load into; the others are tensors, matched to the model's by
# position (one consistent renaming). "*block" stands for the repeated block.
GPT2_TOP = [
    ("embedding", ["tokens", "wte"], ["tok_emb"]),
    ("embedding", ["positions", "wpe"], ["pos_emb"]),
    ("add", ["tok_emb", "pos_emb"], ["h_in"]),
    ("*block", [], []),
    ("layernorm", ["h_out", "lnf.weight", "lnf.bias"], ["xf"]),
    ("linear", ["xf", "wte"], ["logits"]),
    ("cross_entropy", ["logits", "targets"], ["loss"]),
]
GPT2_BLOCK = [
    ("layernorm", ["x", "ln1.weight", "ln1.bias"], ["a"]),
    ("linear", ["a", "q.weight", "q.bias"], ["q"]),
    ("reshape", ["q"], ["q4"]),
    ("linear", ["a", "k.weight", "k.bias"], ["k"]),
    ("reshape", ["k"], ["k4"]),
    ("linear", ["a", "v.weight", "v.bias"], ["v"]),
    ("reshape", ["v"], ["v4"]),
    ("attention", ["q4", "k4", "v4"], ["o4"]),
    ("reshape", ["o4"], ["o"]),
    ("linear", ["o", "proj.weight", "proj.bias"], ["p"]),
    ("add", ["x", "p"], ["r"]),
    ("layernorm", ["r", "ln2.weight", "ln2.bias"], ["c"]),
    ("linear", ["c", "fc1.weight", "fc1.bias"], ["f"]),
    ("gelu", ["f"], ["g"]),
    ("linear", ["g", "fc2.weight", "fc2.bias"], ["z"]),
    ("add", ["r", "z"], ["y"]),
]
# Top-level parameters whose template name is not already a module path.
TOP_PARAMS = {"wte": "wte", "wpe": "wpe"}
OPT_DEFAULTS = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}


def match_ops(path, where, template, ops, tensors, names, params, attrs):
    """Matches `ops` (the model's, at JSON pointer `where`) against `template`, extending the
    renaming `names` (template tensor -> model tensor) and `params` (module path -> model
    parameter), and collecting per template op its attrs. Raises Fail naming the first op that
    differs."""
    if len(ops) != len(template):
        raise Fail("%s:%s: %d ops, GPT-2's layout has %d here" % (path, where, len(ops), len(template)))
    for i, ((typ, tin, tout), op) in enumerate(zip(template, ops)):
        at = "%s:%s/%d" % (path, where, i)
        if typ == "*block":
            if "block" not in op:
                raise Fail("%s: a repeated block of layers, not a %s op" % (at, op.get("type")))
            continue
        if op.get("type") != typ or len(op.get("in", [])) != len(tin) or len(op.get("out", [])) != len(tout):
            raise Fail("%s: %s %s -> %s, but GPT-2's layout has %s %s -> %s here" % (
                at, op.get("type"), op.get("in"), op.get("out"), typ, tin, tout))
        for t, m in zip(tin + tout, op["in"] + op["out"]):
            if "." in t:
                if tensors.get(m, {}).get("kind") != "param":
                    raise Fail("%s: \"%s\" should be a parameter (%s)" % (at, m, t))
                if params.setdefault(t, m) != m:
                    raise Fail("%s: \"%s\" where GPT-2's layout has \"%s\" again" % (at, m, params[t]))
            elif names.setdefault(t, m) != m:
                raise Fail("%s: \"%s\" where GPT-2's layout reads \"%s\" (its %s)" % (at, m, names[t], t))
        attrs[typ + ":" + tin[0]] = op.get("attrs", {})


def load_model(path):
    """The GPT-2 configuration of a model file: dims, repeat, eps, the parameter name map
    (module path -> (model name, copies)) and the optimizer. Raises Fail where the file is not
    GPT-2 as this script builds it."""
    with open(path) as f:
        m = json.load(f)
    top = m["tensors"]
    blocks = [op for op in m["ops"] if "block" in op]
    if len(blocks) != 1:
        raise Fail("%s: GPT-2's layout has one repeated block, this model has %d" % (path, len(blocks)))
    blk = blocks[0]
    names, params, attrs = {}, {}, {}
    match_ops(path, "/ops", GPT2_TOP, m["ops"], top, names, params, attrs)
    bnames, bparams = {}, {}
    inner = dict(top)
    inner.update(blk.get("tensors", {}))
    bi = m["ops"].index(blk)
    match_ops(path, "/ops/%d/ops" % bi, GPT2_BLOCK, blk["ops"], inner, bnames, bparams, attrs)
    # The block's bindings: x <- h_in, carry x <- y, h_out <- y.
    want = ({bnames["x"]: names["h_in"]}, {bnames["x"]: bnames["y"]}, {names["h_out"]: bnames["y"]})
    got = (blk.get("in"), blk.get("carry"), blk.get("out"))
    if got != want:
        raise Fail("%s:/ops/%d: in/carry/out are %s, GPT-2's layout wants %s" % (path, bi, got, want))
    if m["loss"] != names["loss"]:
        raise Fail("%s: the loss is \"%s\", not the cross entropy's output" % (path, m["loss"]))
    for t, kind in (("tokens", "tokens"), ("targets", "targets"), ("positions", "arange")):
        d = top.get(names[t], {})
        if d.get("kind") != "input" or d.get("data", {}).get("kind") != kind:
            raise Fail("%s:/tensors/%s: GPT-2's layout wants an input with data kind %s" % (path, names[t], kind))
    dims = m["dims"]

    def shape(tensor_map, name):
        return [dims[d] if isinstance(d, str) else d for d in tensor_map[name]["shape"]]

    B, S = shape(top, names["tokens"])
    for t in ("wte", "wpe"):
        if top.get(names[t], {}).get("kind") != "param":
            raise Fail("%s:/tensors/%s: GPT-2's layout wants a parameter here (%s)" % (path, names[t], t))
    V, H = shape(top, names["wte"])
    F_ = shape(inner, bparams["fc1.weight"])[0]
    _, _, N, D = shape(inner, bnames["q4"])
    if N * D != H or shape(top, names["wpe"])[0] < S:
        raise Fail("%s: heads %d x %d do not make H = %d, or wpe is shorter than S = %d" % (path, N, D, H, S))
    for key in ("layernorm:x", "layernorm:r", "layernorm:h_out"):
        if set(attrs.get(key, {})) - {"eps"}:
            raise Fail("%s: a layernorm with attrs %s" % (path, attrs[key]))
    eps = [attrs[k].get("eps", 1e-5) for k in ("layernorm:x", "layernorm:r", "layernorm:h_out")]
    at = attrs["attention:q4"]
    if at.get("causal", True) is not True or set(at) - {"causal", "dropout", "seed"}:
        raise Fail("%s: this reference builds causal attention only (with dropout and its seed)" % path)
    # Attention dropout: planrun's mask, drawn here as the kernels draw it (attn_mask); without a
    # seed, plancc's: FNV-1a of the attrs' JSON pointer.
    attn_p = float(at.get("dropout", 0))
    ai = [op[0] for op in GPT2_BLOCK].index("attention")
    attn_seed = at.get("seed", fnv1a64(("/ops/%d/ops/%d/attrs" % (bi, ai)).encode()) % ((2 ** 63 - 1) // 2))
    opt = dict(OPT_DEFAULTS)
    opt.update(m.get("optimizer", {}))
    if opt.pop("type", "adamw") != "adamw":
        raise Fail("%s: this reference builds the AdamW optimizer only" % path)
    pmap = {TOP_PARAMS.get(k, k): (names[k], 1) for k in ("wte", "wpe")}
    pmap.update({k: (v, 1) for k, v in params.items()})
    for k, v in bparams.items():
        pmap["blocks.*." + k] = (v, blk["repeat"])
    return {"B": B, "S": S, "V": V, "H": H, "N": N, "D": D, "F": F_, "L": blk["repeat"], "eps": eps,
            "opt": opt, "params": pmap, "name": m["name"], "high": V, "attn_p": attn_p, "attn_seed": attn_seed}


def fnv1a64(data):
    """runtime/plan/hash.c's plan_fnv1a64."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def attn_mask(cfg, seed, step, mb, layer, b0, nb):
    """Attention dropout's factors [nb, N, S, S] (numpy float64: 0 or 1/(1-p)) for rows b0..b0+nb
    of micro-batch mb at 1-based step `step`, block copy `layer`: cpu/attention.c's attn_mask_row,
    rt_key(seed, attrs seed, step, mb, layer) and the global index ((b N + h) S + i) S + j, in
    numpy's wrapping uint64 arithmetic."""
    import numpy as np
    N, S, p = cfg["N"], cfg["S"], cfg["attn_p"]
    key = rt_key(rt_key(rt_key(rt_key(seed, cfg["attn_seed"]), step), mb), layer)
    u = np.uint64
    b = np.arange(b0, b0 + nb, dtype=u)[:, None, None, None]
    h = np.arange(N, dtype=u)[None, :, None, None]
    i = np.arange(S, dtype=u)[None, None, :, None]
    j = np.arange(S, dtype=u)[None, None, None, :]

    def mix(x):
        x = x + u(0x9E3779B97F4A7C15)
        x = (x ^ (x >> u(30))) * u(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> u(27))) * u(0x94D049BB133111EB)
        return x ^ (x >> u(31))

    with np.errstate(over="ignore"):
        idx = ((b * u(N) + h) * u(S) + i) * u(S) + j
        draw = mix(mix(u(key) ^ mix(idx)))  # rt_uniform(rt_key(key, idx)): rt_uniform mixes once more
    uniform = (draw >> u(11)).astype(np.float64) * 2.0 ** -53
    return np.where(uniform >= p, 1 / (1 - p), 0.0)


# ---- the PyTorch model ----

def build_torch(cfg):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            H, Fd = cfg["H"], cfg["F"]
            self.ln1 = nn.LayerNorm(H, eps=cfg["eps"][0])
            self.q, self.k, self.v, self.proj = (nn.Linear(H, H) for _ in range(4))
            self.ln2 = nn.LayerNorm(H, eps=cfg["eps"][1])
            self.fc1, self.fc2 = nn.Linear(H, Fd), nn.Linear(Fd, H)

        def attn(self, a, drop):
            B, S, H = a.shape
            N, D = cfg["N"], cfg["D"]
            q, k, v = (m(a).view(B, S, N, D).transpose(1, 2) for m in (self.q, self.k, self.v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            causal = torch.ones(S, S, dtype=torch.bool).triu(1)
            att = F.softmax(att.masked_fill(causal, float("-inf")), dim=-1)
            if drop is not None:  # planrun's mask (attn_mask), its factor rounded to the dtype
                att = att * drop.to(att.dtype)
            return (att @ v).transpose(1, 2).reshape(B, S, H)

        def forward(self, x, drop=None):
            x = x + self.proj(self.attn(self.ln1(x), drop))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(torch.zeros(cfg["V"], cfg["H"]))
            self.wpe = nn.Parameter(torch.zeros(cfg["S"], cfg["H"]))
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["L"]))
            self.lnf = nn.LayerNorm(cfg["H"], eps=cfg["eps"][2])

        def forward(self, tokens, targets, where=None):
            """where: (seed, step, mb, b0) for attention dropout's masks, rows b0.. of the micro-batch."""
            S = tokens.shape[1]
            x = F.embedding(tokens, self.wte) + self.wpe[:S]
            for layer, b in enumerate(self.blocks):
                drop = None
                if cfg["attn_p"] > 0:
                    seed, step, mb, b0 = where
                    drop = torch.from_numpy(attn_mask(cfg, seed, step, mb, layer, b0, tokens.shape[0]))
                x = b(x, drop)
            logits = F.linear(self.lnf(x), self.wte)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return GPT()


def st_names(cfg):
    """torch parameter name -> the safetensors name planrun saves it under (rt.h, st.c: a block
    tensor's copy K is NAME.K when the block has more than one copy)."""
    out = {}
    for path, (name, copies) in cfg["params"].items():
        if "*" not in path:
            out[path] = name
            continue
        for c in range(copies):
            out[path.replace("*", str(c))] = "%s.%d" % (name, c) if copies > 1 else name
    return out


def read_safetensors(path):
    """{name: (shape, list of floats as array('f'))} of an F32 safetensors file, plain Python."""
    with open(path, "rb") as f:
        raw = f.read()
    (hl,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hl])
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        if d["dtype"] != "F32":
            raise Fail("%s: /%s is %s; this script reads F32" % (path, name, d["dtype"]))
        b, e = d["data_offsets"]
        a = array("f")
        a.frombytes(raw[8 + hl + b:8 + hl + e])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = (d["shape"], a)
    return out


# ---- running plancc and planrun ----

def run(cmd, what):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise Fail("%s: cannot run %s: %s (build it: ninja -C build)" % (what, cmd[0], e.strerror))
    if p.returncode != 0:
        raise Fail("%s failed (exit %d): %s\n%s%s" % (what, p.returncode, " ".join(cmd), p.stdout, p.stderr))
    return p


def planrun_side(a, tmp):
    """Runs plancc and planrun; returns (init, init of the plan under test or None, final, losses,
    seconds, the plan's summary line)."""
    base = [a.plancc, a.model, "--cluster", a.cluster, "-q"]
    data = [] if a.synthetic else ["--data", a.data]
    pr = [a.planrun, "--seed", str(a.seed), "--quiet"] + data
    one = os.path.join(tmp, "one.plan")
    run(base + ["--devices", "1", "-o", one], "plancc (the one-device plan)")
    run(pr + [one, "--steps", "0", "--save", os.path.join(tmp, "init.st")], "planrun --steps 0 (initial weights)")
    opts = ["--devices", str(a.devices)] + (["--micro-batches", str(a.micro_batches)] if a.micro_batches > 1 else [])
    opts += a.plancc_args
    test = os.path.join(tmp, "test.plan")
    p = run([a.plancc, a.model, "--cluster", a.cluster, "-o", test] + opts, "plancc (the plan under test)")
    summary = p.stderr.strip().splitlines()[0] if p.stderr.strip() else p.stdout.strip().splitlines()[0]
    tinit = None
    if opts != ["--devices", "1"]:
        run(pr + [test, "--steps", "0", "--save", os.path.join(tmp, "test_init.st")], "planrun --steps 0 (plan under test)")
        tinit = read_safetensors(os.path.join(tmp, "test_init.st"))
    t0 = time.time()
    losses_path, final = os.path.join(tmp, "losses.txt"), os.path.join(tmp, "final.st")
    run(pr + [test, "--steps", str(a.steps), "--losses", losses_path, "--save", final], "planrun (the plan under test)")
    el = time.time() - t0
    with open(losses_path) as f:
        losses = [float(x) for x in f.read().split()]
    return read_safetensors(os.path.join(tmp, "init.st")), tinit, read_safetensors(final), losses, el, summary


# ---- the PyTorch side ----

def torch_side(a, cfg, init, dtype, halves=False):
    """Trains the PyTorch model in dtype (torch.float32, or float64 for the exact reference) from
    the initial weights; returns ({safetensors name: tensor}, losses, seconds). With halves, each
    micro-batch's rows go through as two parts whose gradients add up (the same mathematics,
    other float32 sums: a second sample of float32's rounding)."""
    import torch
    torch.set_num_threads(1)  # gpt-tiny is small: a second thread only spins (3x slower beside a busy core)
    torch.use_deterministic_algorithms(True)
    model = build_torch(cfg).to(dtype)
    names = st_names(cfg)
    state = dict(model.named_parameters())
    if set(names) != set(state):
        raise Fail("internal: the name map covers %s, the model has %s" % (sorted(names), sorted(state)))
    with torch.no_grad():
        for pname, sname in names.items():
            if sname not in init:
                raise Fail("the initial weights have no tensor \"%s\"" % sname)
            shape, data = init[sname]
            if list(state[pname].shape) != shape:
                raise Fail("\"%s\" is %s in planrun's file, %s in PyTorch's %s" % (sname, shape, list(state[pname].shape), pname))
            state[pname].copy_(torch.tensor(data, dtype=torch.float32).view(shape).to(dtype))
    o = cfg["opt"]
    opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                            weight_decay=o["weight_decay"], foreach=False)
    corpus = Corpus(None if a.synthetic else a.data, a.seed, cfg["high"])
    M, B, losses = a.micro_batches, cfg["B"], []
    parts = [slice(0, B // 2), slice(B // 2, B)] if halves and B > 1 else [slice(0, B)]
    t0 = time.time()
    for s in range(a.steps):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for mb in range(M):
            tok, tgt = corpus.batch(s, mb, B, cfg["S"])
            tok, tgt = torch.tensor(tok, dtype=torch.long), torch.tensor(tgt, dtype=torch.long)
            for part in parts:
                w = (part.stop - part.start) / B  # the part's share of the micro-batch's mean
                loss = model(tok[part], tgt[part], (a.seed, s + 1, mb, part.start))
                (loss * (w / M)).backward()
                total += w * loss.item()
        losses.append(total / M)
        opt.step()
    el = time.time() - t0
    return {names[p]: t.detach() for p, t in state.items()}, losses, el


# ---- comparing ----

def compare_losses(a, tlosses, plosses):
    """Prints the losses side by side; returns (passed, failed, worst relative difference)."""
    passed = failed = 0
    print("\n%5s  %14s  %14s  %10s" % ("step", "torch", "planrun", "rel diff"))
    if len(plosses) != len(tlosses):
        print("planrun wrote %d losses for %d steps  MISMATCH" % (len(plosses), len(tlosses)))
        failed += 1
    worst = 0.0
    for s, (t, p) in enumerate(zip(tlosses, plosses)):
        rel = abs(t - p) / max(abs(t), 1e-30)
        ok = rel <= a.loss_tol
        worst = max(worst, rel)
        passed, failed = passed + ok, failed + (not ok)
        print("%5d  %14.9f  %14.9f  %10.2e%s" % (s + 1, t, p, rel, "" if ok else "  MISMATCH"))
    return passed, failed, worst


def compare_params(a, t32, t32h, t64, final):
    """One line per parameter tensor; returns (passed, failed, passed only by the float64 rule,
    (worst tensor, its difference from torch's float32 as a fraction of its largest magnitude)).
    The float64 rule: the tensor's largest difference from torch's float64 result is within
    --noise-factor times that of torch's float32 runs (the larger of two that sum in different
    orders), plus --param-tol (fractions of max |torch|)."""
    import torch
    passed = failed = noise = 0
    worst, ratio = ("", -1.0), 0.0
    print("\n%-9s %-8s %10s %11s %11s %11s  %s" % ("parameter", "shape", "max |torch|", "planrun-t32",
                                                  "t32-t64", "planrun-t64", "(fractions of max |torch|; t32-t64: the "
                                                  "larger of torch's two float32 runs)"))
    for name in sorted(t32):
        if name not in final:
            print("%-9s planrun's final file has no such tensor  MISMATCH" % name)
            failed += 1
            continue
        shape, data = final[name]
        p = torch.tensor(data, dtype=torch.float64).view(shape)
        x32, x64 = t32[name].double(), t64[name]
        scale = x32.abs().max().item() or 1.0
        direct = (p - x32).abs().max().item() / scale
        e32 = max((x - x64).abs().max().item() for x in (x32, t32h[name].double())) / scale
        epr = (p - x64).abs().max().item() / scale
        if direct <= a.param_tol:
            verdict = "ok"
        elif not a.strict and epr <= a.noise_factor * e32 + a.param_tol:
            verdict, noise = "ok: as near float64 as torch's float32", noise + 1
            ratio = max(ratio, (epr - a.param_tol) / e32 if e32 > 0 else 0.0)
        else:
            verdict = "MISMATCH"
        passed, failed = passed + (verdict != "MISMATCH"), failed + (verdict == "MISMATCH")
        if direct > worst[1]:
            worst = (name, direct)
        print("%-9s %-8s %10.4g %11.2e %11.2e %11.2e  %s" % (name, "x".join(map(str, shape)), scale, direct, e32, epr,
                                                           verdict))
    return passed, failed, (noise, ratio), worst


def parse_args(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description="Train a GPT-2 model file in PyTorch and in planrun from the same "
                                             "weights on the same data; compare losses and parameters.",
                                 epilog="Options after -- go to plancc for the plan under test "
                                        "(e.g. -- --dp 2 --tp 2). Exit: 0 ok, 1 mismatch, 2 error, 77 no torch.")
    ap.add_argument("--plancc", default=os.path.join(ROOT, "build", "plancc"))
    ap.add_argument("--planrun", default=os.path.join(ROOT, "build", "planrun"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gpt-tiny.json"))
    ap.add_argument("--cluster", default=os.path.join(ROOT, "models", "clusters", "cpu.json"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "kjv.bin"), help="token file (default data/kjv.bin)")
    ap.add_argument("--synthetic", action="store_true", help="planrun's synthetic tokens instead of --data")
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--loss-tol", type=float, default=1e-5, help="relative tolerance of each step's loss")
    ap.add_argument("--param-tol", type=float, default=1e-5,
                    help="tolerance of each parameter, relative to the tensor's largest magnitude")
    ap.add_argument("--noise-factor", type=float, default=10.0,
                    help="a tensor outside --param-tol still passes if planrun is within this many times torch's "
                         "float32 distance of the float64 result, plus --param-tol (default 10)")
    ap.add_argument("--strict", action="store_true", help="only --param-tol against torch's float32 result")
    ap.add_argument("--keep", metavar="DIR", help="keep the plans, losses and safetensors files in DIR")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.micro_batches < 1 or a.devices < 1 or a.seed < 0:
        ap.error("--steps, --micro-batches and --devices want a positive integer, --seed a non-negative one")
    a.plancc_args = extra
    return a


def main(argv):
    a = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch_ref: PyTorch is not installed for %s; tools/setup.sh installs python3-torch" % sys.executable)
        return EXIT_SKIP
    try:
        try:
            cfg = load_model(a.model)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            raise Fail("%s: not a model this script reads (%s: %s)" % (a.model, type(e).__name__, e))
        print("torch_ref: %s (%s): L %d, H %d, heads %d x %d, F %d, V %d, S %d, B %d; AdamW lr %g betas %s eps %g "
              "wd %g; torch %s" % (cfg["name"], a.model, cfg["L"], cfg["H"], cfg["N"], cfg["D"], cfg["F"], cfg["V"],
                                   cfg["S"], cfg["B"], cfg["opt"]["lr"], cfg["opt"]["betas"], cfg["opt"]["eps"],
                                   cfg["opt"]["weight_decay"], torch.__version__))
        print("torch_ref: %d steps, seed %d, %s, %d micro-batch%s, plancc options: --devices %d %s" % (
            a.steps, a.seed, "synthetic tokens" if a.synthetic else "data " + a.data, a.micro_batches,
            "" if a.micro_batches == 1 else "es", a.devices, " ".join(a.plancc_args)))
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            init, tinit, final, plosses, pt, summary = planrun_side(a, a.keep or tmp)
        print("torch_ref: %s" % summary.replace("plancc: ", "plan: "))
        t32, tlosses, tt = torch_side(a, cfg, init, torch.float32)
        t32h, _, _ = torch_side(a, cfg, init, torch.float32, halves=True)
        t64, _, tt64 = torch_side(a, cfg, init, torch.float64)
        print("torch_ref: planrun %.2f s; PyTorch %.2f s in float32 (run twice), %.2f s in float64, %d steps each"
              % (pt, tt, tt64, a.steps))
        passed, failed, worst_loss = compare_losses(a, tlosses, plosses)
        if tinit is not None:
            same = set(tinit) == set(init) and all(tinit[k] == init[k] for k in init)
            print("\nthe plan under test starts from the one-device plan's weights: %s" % (
                "yes, bit for bit" if same else "NO (tensors differ: %s)" % ", ".join(
                    k for k in sorted(init) if tinit.get(k) != init[k])))
            passed, failed = passed + same, failed + (not same)
        p2, f2, (noise, ratio), worst = compare_params(a, t32, t32h, t64, final)
        passed, failed = passed + p2, failed + f2
        print("\nlosses: worst %.2e relative (tolerance %g)" % (worst_loss, a.loss_tol))
        print("parameters: worst %s, %.2e of its largest magnitude from torch's float32 (tolerance %g)"
              % (worst[0], worst[1], a.param_tol))
        if noise:
            print("  %d of %d tensors pass only by the float64 rule: planrun is within %g x torch's own float32 distance "
                  "from the float64 result, plus %g (the largest (planrun-t64 - %g) / t32-t64 among them: %.2f)"
                  % (noise, p2 + f2, a.noise_factor, a.param_tol, a.param_tol, ratio))
    except Fail as e:
        print("torch_ref: %s" % e, file=sys.stderr)
        return EXIT_ERROR
    print("%d passed, %d failed" % (passed, failed))
    return EXIT_MISMATCH if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
