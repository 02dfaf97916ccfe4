#!/usr/bin/env python3
"""check_models.py: plancc's model figures against published numbers.

Usage: /usr/bin/python3 tests/check_models.py PLANCC REPO_ROOT

For every models/*.json it runs `PLANCC --check --json MODEL` and checks:
  * plancc accepts the model (exit 0) and prints the report of the --check --json contract:
    {"model", "totals": {"params", "flops": {"forward", "backward", "optimizer", "forward_matmul",
    "backward_matmul"}, "memory_bytes": {...}}, "blocks", "ops"};
  * its parameter count equals a recount made here from the JSON alone (a param's elements, times
    its block's repeat), and its forward matmul FLOPs equal a recount made here from the JSON
    (2 per multiply-add: linear, matmul, bmm and conv2d as 2 * output elements * reduced size,
    attention as 4*b*s*t*n*d with s queries and t keys (t = s but in cross-attention): q k^T and
    p v, with no discount for the causal mask, as Megatron counts it; a bias add is an
    element-wise epilogue, not a matmul FLOP, as in Megatron's formula);
  * published figures:
      gpt2-small   124,439,808 parameters (Hugging Face 'gpt2', tied LM head)
      vgg16        138,357,544 parameters (torchvision vgg16); 15.47 G multiply-adds per image
                   (torchvision's "GFLOPS" column, which counts multiply-adds)
      wrn-50-2     68,883,240 parameters (torchvision wide_resnet50_2); 11.40 G multiply-adds per
                   image (torchvision's "GFLOPS" column)
      swin-tiny    28,288,354 (torchvision swin_t) less its 23,322 relative-position-bias entries,
                   which the format cannot express; 4.49 G multiply-adds per image (torchvision)
      gpt3-175b    within 0.1% of 174.6 B (Brown et al. 2020)
      gpt-32k, gpt-128k  GPT-2's formula l(12h^2+13h) + (V+s)h + 2h at 32,768 and 131,072 tokens
      gpt-64k-v256k  the same formula at 65,536 tokens and a vocabulary of 256,000
      the imports of models/torch/ (IMPORTED below): exactly the published count, e.g.
      llama2-7b    6,738,415,616 (Llama-2-7b); llama3-8b-128k 8,030,261,248 (Llama 3 8B); both
                   with their causal masks imported as attention's causal attribute
      megatron-*   the row of data/megatron_sc21_a100.csv (a copy of the published table) (Narayanan et al., SC'21):
                   dimensions as the row says, parameters within 2% of params_b (or within the
                   rounding of its last published digit: the paper prints 1.7 for a model of
                   1.652 B), and exactly the paper's formula 12lh^2(1 + 13/(12h) + (V+s)/(12lh))
                   plus the final layernorm's 2h, which that formula leaves out;
  * for every GPT-family model (gpt*, megatron-*), with B the model's (micro-)batch:
      forward matmul FLOPs            == 24*B*s*l*h^2 + 4*B*s^2*l*h + 2*B*s*h*V
      forward + backward matmul FLOPs == 3 x that
      and the SC'21 formula F = 96*B*s*l*h^2*(1 + s/(6h)) + 6*B*s*h*V equals plancc's figures
      combined as Megatron runs the step with full activation recompute: forward + backward
      + one more forward of the transformer layers (not of the LM head), i.e.
      F == fwd + bwd + (fwd - 2*B*s*h*V). (4 x forward alone would count the LM head's 2BshV
      once more than the paper does: the head is not recomputed.)
Finally it runs `/usr/bin/python3 tools/gen_models.py --check` (committed files up to date).
Prints one line per check and "N passed, M failed"; exits 1 on any failure.
"""

import csv
import glob
import json
import math
import os
import subprocess
import sys

PASSED = 0
FAILED = 0


def check(name, ok, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print("ok   " + name)
    else:
        FAILED += 1
        print("FAIL " + name + (": " + detail if detail else ""))
    return ok


def rel_eq(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


# ------------------------------------------------------------------------------- JSON recounts


def numel(model, shape):
    n = 1
    for d in shape:
        n *= model["dims"][d]
    return n


def scopes(model):
    """(tensors, ops, copies) of the top level and of each block."""
    out = [(model["tensors"], [o for o in model["ops"] if "block" not in o], 1)]
    for o in model["ops"]:
        if "block" in o:
            ts = dict(o["tensors"])
            for inner, outer in o["in"].items():  # inner inputs take the outer tensor's shape
                ts[inner] = model["tensors"][outer]
            out.append((ts, o["ops"], o["repeat"]))
    return out


def count_params(model):
    """Block params once per copy; block inputs (outer tensors) are not counted again."""
    total = sum(numel(model, t["shape"]) for t in model["tensors"].values()
                if t.get("kind") == "param")
    for o in model["ops"]:
        if "block" in o:
            total += o["repeat"] * sum(numel(model, t["shape"]) for t in o["tensors"].values()
                                       if t.get("kind") == "param")
    return total


def matmul_flops(model):
    """Forward FLOPs of the matmul-class ops (2 per multiply-add), from the JSON alone."""
    dims = model["dims"]
    total = 0
    for ts, ops, copies in scopes(model):
        shape = lambda t: [dims[d] for d in ts[t]["shape"]]
        for o in ops:
            t = o["type"]
            out = math.prod(shape(o["out"][0])) if o["out"] else 0
            if t in ("linear", "matmul", "bmm"):
                f = 2 * out * shape(o["in"][0])[-1]
            elif t == "conv2d":
                w = shape(o["in"][1])
                f = 2 * out * w[1] * w[2] * w[3]
            elif t == "attention":   # q [b, s, n, d], k [b, t, n, d]: t differs from s in cross-attention
                b, s, n, d = shape(o["in"][0])
                f = 4 * b * s * shape(o["in"][1])[1] * n * d
            else:
                continue
            total += copies * f
    return total


# ------------------------------------------------------------------------------- plancc


def run_plancc(plancc, path):
    try:
        p = subprocess.run([plancc, "--check", "--json", path], capture_output=True, text=True,
                           timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if p.returncode != 0:
        return None, "exit %d: %s" % (p.returncode, p.stderr.strip()[-800:])
    try:
        return json.loads(p.stdout), ""
    except ValueError as e:
        return None, "stdout is not JSON (%s): %s" % (e, p.stdout[:300])


def check_contract(name, rep):
    try:
        t = rep["totals"]
        fields = [t["params"]] + [t["flops"][k] for k in
                                  ("forward", "backward", "optimizer", "forward_matmul",
                                   "backward_matmul")]
        fields += [t["memory_bytes"][k] for k in
                   ("weights", "grads", "optimizer", "activations", "total")]
        ok = (rep["model"] == name and isinstance(rep["blocks"], list) and
              isinstance(rep["ops"], list) and
              all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0
                  for x in fields))
        return check("%s: report has the --check --json fields" % name, ok,
                     "model %r, totals %s" % (rep.get("model"), json.dumps(t)[:300]))
    except (KeyError, TypeError) as e:
        return check("%s: report has the --check --json fields" % name, False,
                     "missing %s in %s" % (e, json.dumps(rep)[:300]))


# ------------------------------------------------------------------------------- published


def megatron_rows(root):
    path = os.path.join(root, "data", "megatron_sc21_a100.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(ln for ln in f if not ln.startswith("#")))


def gpt_dims(model):
    d = model["dims"]
    layers = sum(o["repeat"] for o in model["ops"] if "block" in o)
    return d["B"], d["S"], layers, d["H"], d["V"]


def check_gpt(name, model, rep):
    B, s, l, h, V = gpt_dims(model)
    fl = rep["totals"]["flops"]
    fwd, bwd = fl["forward_matmul"], fl["backward_matmul"]
    want = 24 * B * s * l * h * h + 4 * B * s * s * l * h + 2 * B * s * h * V
    check("%s: forward matmul FLOPs = 24Bslh^2 + 4Bs^2lh + 2BshV" % name, rel_eq(fwd, want),
          "plancc %.6e, formula %.6e" % (fwd, want))
    check("%s: forward + backward matmul FLOPs = 3 x forward" % name, rel_eq(fwd + bwd, 3 * want),
          "plancc %.6e + %.6e, want %.6e" % (fwd, bwd, 3 * want))
    paper = 96 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V
    head = 2 * B * s * h * V
    check("%s: SC'21 formula = fwd + bwd + recompute of the layers" % name,
          rel_eq(fwd + bwd + (fwd - head), paper),
          "plancc %.6e, paper %.6e" % (fwd + bwd + fwd - head, paper))


# Models imported from models/torch/ by tools/plancc-import at their published sizes: the
# parameter count (PyTorch's parameters(), buffers not counted) and where it is published.
IMPORTED = {
    "llama2-7b": (6738415616, "Llama-2-7b (Touvron et al. 2023; Hugging Face meta-llama/Llama-2-7b-hf: 6,738,415,616)"),
    "llama3-8b-128k": (8030261248, "Llama 3 8B (Meta 2024; Hugging Face meta-llama/Meta-Llama-3-8B: 8,030,261,248)"),
    "mixtral-8x7b": (46702792704, "Mixtral 8x7B (Jiang et al. 2024; Hugging Face mistralai/Mixtral-8x7B-v0.1: 46,702,792,704)"),
    "mixtral-8x7b-routed": (46702792704, "Mixtral 8x7B, routed with a capacity: the same parameters"),
    "t5-small": (60506624, "t5-small (Raffel et al. 2020; Hugging Face t5-small, LM head tied: 60,506,624)"),
    "mt5-large": (1229581312, "mT5-Large (Xue et al. 2021; Hugging Face google/mt5-large, gated-GELU, LM head untied: "
                  "1,229,581,312)"),
    "evoformer-af2": (87838082, "AlphaFold2's Evoformer stack: 48 x 1,829,952 by the supplement's Algorithms 6-14 "
                      "(a recount; no exact published figure for the stack alone) + 386 read-out"),
    "vit-b16": (86567656, "ViT-B/16 (torchvision vit_b_16: 86,567,656)"),
    "bert-large": (336226108, "BERT-large pre-training: BertModel 335,141,888 (Hugging Face bert-large-uncased) + MLM and NSP heads"),
}


# Imports whose PyTorch code adds a causal mask to the scores (llama.py builds it in forward, as
# Hugging Face's LlamaModel does): plancc-import makes it attention's causal attribute (fuse.py),
# so that no s x s constant is left (at 131,072 tokens it would be 64 GiB) and attention is costed
# and run causal.
CAUSAL = ("llama2-7b", "llama3-8b-128k")


def attention_ops(ops):
    for o in ops:
        if o.get("type") == "attention":
            yield o
        yield from attention_ops(o.get("ops", []))


def check_published(name, model, rep, rows):
    p = rep["totals"]["params"]
    fwd_mm = rep["totals"]["flops"]["forward_matmul"]
    if name in IMPORTED:
        want, src = IMPORTED[name]
        check(f"{name}: {want:,} parameters ({src})", p == want, "plancc %d" % p)
    if name in CAUSAL:
        att = list(attention_ops(model["ops"]))
        square = [t for t, v in model["tensors"].items() if v.get("kind") == "const" and len(v["shape"]) == 2
                  and v["shape"][0] == v["shape"][1] and model["dims"][v["shape"][0]] > 1024]
        check(f"{name}: its causal mask imported as attention's causal attribute (no s x s constant)",
              att and all(o.get("attrs", {}).get("causal") and len(o["in"]) == 3 for o in att) and not square,
              "attention %s, square constants %s" % ([(o.get("attrs"), len(o["in"])) for o in att], square))
    elif name == "gpt2-small":
        check("gpt2-small: 124,439,808 parameters", p == 124439808, "plancc %d" % p)
    elif name == "vgg16":
        check("vgg16: 138,357,544 parameters", p == 138357544, "plancc %d" % p)
        macs = fwd_mm / 2 / model["dims"]["B"]
        check("vgg16: 15.47 G multiply-adds per image", round(macs / 1e9, 2) == 15.47,
              "plancc %.4f G" % (macs / 1e9))
    elif name == "swin-tiny":
        check("swin-tiny: 28,288,354 - 23,322 parameters", p == 28288354 - 23322, "plancc %d" % p)
        macs = fwd_mm / 2 / model["dims"]["B"]
        check("swin-tiny: 4.49 G multiply-adds per image", round(macs / 1e9, 2) == 4.49,
              "plancc %.4f G" % (macs / 1e9))
    elif name == "wrn-50-2":
        check("wrn-50-2: 68,883,240 parameters", p == 68883240, "plancc %d" % p)
        macs = fwd_mm / 2 / model["dims"]["B"]
        check("wrn-50-2: 11.40 G multiply-adds per image", round(macs / 1e9, 2) == 11.40,
              "plancc %.4f G" % (macs / 1e9))
    elif name == "gpt3-175b":
        check("gpt3-175b: 174.6 B parameters within 0.1%", abs(p - 174.6e9) <= 0.001 * 174.6e9,
              "plancc %d" % p)
    elif name in ("gpt-32k", "gpt-128k", "gpt-64k-v256k"):
        B, s, l, h, V = gpt_dims(model)
        want = l * (12 * h * h + 13 * h) + (V + s) * h + 2 * h
        check(f"{name}: l(12h^2+13h) + (V+s)h + 2h = {want:,} parameters at s = {s:,}, one sequence",
              p == want and s == {"gpt-32k": 32768, "gpt-128k": 131072, "gpt-64k-v256k": 65536}[name] and B == 1 and
              V == (256000 if name == "gpt-64k-v256k" else 50257), "plancc %d, s %d, B %d" % (p, s, B))
    elif name.startswith("megatron-"):
        row = [r for r in rows if "megatron-" + r["model"].lower() == name]
        if not check("%s: a row of megatron_sc21_a100.csv" % name, len(row) == 1):
            return
        r = row[0]
        B, s, l, h, V = gpt_dims(model)
        d = model["dims"]
        got = (l, h, d["N"], s, V, B)
        want = (int(r["layers"]), int(r["hidden"]), int(r["heads"]), 2048, 51200,
                int(r["micro_batch"]))
        check("%s: layers, hidden, heads, seq, vocab, micro-batch as published" % name,
              got == want, "model %s, row %s" % (got, want))
        pub = float(r["params_b"]) * 1e9
        digits = len(r["params_b"].split(".")[1]) if "." in r["params_b"] else 0
        tol = max(0.02 * pub, 0.5 * 10 ** -digits * 1e9)
        check("%s: parameters within 2%% (or the rounding) of %s B" % (name, r["params_b"]),
              abs(p - pub) <= tol, "plancc %.4f B" % (p / 1e9))
        formula = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
        check("%s: parameters = the paper's formula + 2h" % name,
              rel_eq(p, formula + 2 * h), "plancc %d, formula + 2h %.1f" % (p, formula + 2 * h))


# ------------------------------------------------------------------------------- main


def main():
    if len(sys.argv) != 3:
        print("usage: check_models.py PLANCC REPO_ROOT", file=sys.stderr)
        return 2
    plancc, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    rows = megatron_rows(root)
    paths = sorted(glob.glob(os.path.join(root, "models", "*.json")))
    check("models/ holds model files", len(paths) > 0)
    names = set()
    for path in paths:
        with open(path) as f:
            model = json.load(f)
        name = model["name"]
        names.add(name)
        check("%s: file name matches the model name" % name,
              os.path.basename(path) == name + ".json", path)
        rep, err = run_plancc(plancc, path)
        if not check("%s: plancc --check --json accepts it" % name, rep is not None, err):
            continue
        if not check_contract(name, rep):
            continue
        t = rep["totals"]
        mine = count_params(model)
        check("%s: parameters = recount from the JSON (%d)" % (name, mine), t["params"] == mine,
              "plancc %s" % t["params"])
        mm = matmul_flops(model)
        check("%s: forward matmul FLOPs = recount from the JSON (%.4g)" % (name, mm),
              rel_eq(t["flops"]["forward_matmul"], mm),
              "plancc %.6e" % t["flops"]["forward_matmul"])
        check("%s: forward FLOPs >= forward matmul FLOPs" % name,
              t["flops"]["forward"] >= t["flops"]["forward_matmul"] > 0,
              "forward %s, matmul %s" % (t["flops"]["forward"], t["flops"]["forward_matmul"]))
        check("%s: backward FLOPs >= backward matmul FLOPs" % name,
              t["flops"]["backward"] >= t["flops"]["backward_matmul"] > 0,
              "backward %s, matmul %s" % (t["flops"]["backward"], t["flops"]["backward_matmul"]))
        if name.startswith("gpt") or name.startswith("megatron-"):
            check_gpt(name, model, rep)
        check_published(name, model, rep, rows)
    for must in ["mlp", "cnn-small", "resnet-small", "vgg16", "wrn-50-2", "dlrm", "swin-tiny", "gpt-tiny", "gpt2-small",
                 "gpt3-175b", "evoformer"] + ["megatron-" + r["model"].lower() for r in rows] + sorted(IMPORTED):
        check("models/%s.json exists" % must, must in names)
    gen = os.path.join(root, "tools", "gen_models.py")
    p = subprocess.run(["/usr/bin/python3", gen, "--check"], capture_output=True, text=True,
                       cwd=root)
    check("tools/gen_models.py --check: committed models are up to date", p.returncode == 0,
          p.stderr.strip())
    print("%d passed, %d failed" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
