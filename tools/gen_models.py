#!/usr/bin/env python3
"""gen_models.py: writes the example model files in models/ (the format: schemas/README.md).

Every top-level model file in models/ comes from this script, so that a published configuration
is written down once (the tables below) and a change to the format is one edit here, not twenty
hand edits:

  mlp              the two-layer MLP of schemas/README.md
  cnn-small        2 x (conv3x3 + relu + maxpool) with a batchnorm, flatten, linear (CIFAR-sized)
  resnet-small     a small ResNet (two basic blocks) with ghost batch norm, for burst equivalence
  vgg16            ImageNet VGG-16, configuration D (Simonyan & Zisserman), 138,357,544 parameters
  wrn-50-2         Wide-ResNet-50-2 (torchvision's wide_resnet50_2), 68,883,240 parameters, ghost BN
  dlrm             DLRM-style recommendation model: bottom MLP, 8 embedding bags, dot interaction
  dlrm-ctr         dlrm, small, on teacher labels (click-through data with a known generating model)
  swin-tiny        Swin-T-like: 4 stages of window attention at different resolutions and widths
  gpt-tiny         2-layer GPT for fast numeric tests on a CPU
  gpt2-small       GPT-2 124M (124,439,808 parameters as Hugging Face counts, tied embeddings)
  gpt3-175b        GPT-3 175B (Brown et al. 2020, Table 2.1)
  gpt-32k, -128k   a 7B-class GPT at 32,768 and 131,072 tokens of context (context parallelism)
  gpt-64k-v256k    the same at 65,536 tokens with a 256,000-token vocabulary (co-shard's LM head)
  megatron-*       one per row of ../shared/data/megatron_sc21_a100.csv (Narayanan et al., SC'21)
                   (data/megatron_sc21_a100.csv, the repository's copy, where ../shared is absent)
  evoformer        AlphaFold2's Evoformer stack, 48 blocks (no pair bias, gates or dropout)

Usage:
  /usr/bin/python3 tools/gen_models.py            (re)write models/*.json
  /usr/bin/python3 tools/gen_models.py --check    exit 1 if a committed file differs from what
                                                  this script writes (nothing is written)

Only the standard library is used. Output is deterministic: keys in a fixed (insertion) order,
2-space indentation, short arrays and objects on one line, a trailing newline. Before writing, a
small shape checker here applies the operator rules of schemas/README.md to every op, so a model
this script writes is shape-correct by construction (plancc checks it again, independently).

Conventions the models share:
  * Every dimension that is a different axis gets its own name, even where sizes agree (a conv's
    input and output channels, a window's rows and columns), except where an operator's rule
    needs the same name on both sides (a residual add, an H->H projection's weight [H, H]).
  * linear weights are [out, in] as in PyTorch; biases start at zero, norm gains at one.
  * GPT models follow GPT-2's layout (pre-layernorm blocks, learned positions, tied LM head).
"""

import argparse
import csv
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEGATRON_CSV = os.path.join(os.path.dirname(ROOT), "shared", "data", "megatron_sc21_a100.csv")
if not os.path.exists(MEGATRON_CSV):  # a checkout without ../shared: the repository's copy
    MEGATRON_CSV = os.path.join(ROOT, "data", "megatron_sc21_a100.csv")

# ---------------------------------------------------------------------------------------------
# Deterministic JSON text: 2-space indent, containers that fit on one line stay on one line.

WIDTH = 100


def _inline(v):
    return json.dumps(v, separators=(", ", ": "), ensure_ascii=True)


def dump(v, indent=0, lead=0):
    """v as JSON text at `indent`; `lead` characters (a key) precede it on its first line."""
    one = _inline(v)
    if not isinstance(v, (dict, list)) or not v or indent + lead + len(one) <= WIDTH:
        return one
    pad = " " * (indent + 2)
    if isinstance(v, list):
        items = [pad + dump(x, indent + 2) for x in v]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    items = []
    for k, x in v.items():
        key = json.dumps(k) + ": "
        items.append(pad + key + dump(x, indent + 2, len(key)))
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


# ---------------------------------------------------------------------------------------------
# Model builder.


class Scope:
    """Tensors and ops of the top level or of one block."""

    def __init__(self, parent=None):
        self.tensors = {}
        self.ops = []
        self.inner_inputs = {}  # block: inner name -> shape (declared by binding, not in tensors)
        self.parent = parent


class Model:
    def __init__(self, name, description, dtype="f32"):
        self.name = name
        self.description = description
        self.dtype = dtype
        self.dims = {}
        self.top = Scope()
        self.cur = self.top
        self.block = None
        self.loss = None
        self.optimizer = None

    # dimensions -------------------------------------------------------------------------------
    def dim(self, name, size):
        assert isinstance(size, int) and size >= 1, (name, size)
        old = self.dims.setdefault(name, size)
        assert old == size, "dimension %s: %d vs %d" % (name, old, size)
        return name

    def size(self, d):
        return self.dims[d]

    # tensors ----------------------------------------------------------------------------------
    def _decl(self, name, entry):
        sc = self.cur
        assert name not in sc.tensors and name not in sc.inner_inputs, "duplicate " + name
        for d in entry["shape"]:
            assert d in self.dims, "unknown dimension %s in %s" % (d, name)
        sc.tensors[name] = entry
        return name

    def act(self, name, shape, dtype=None):
        e = {"shape": list(shape)}
        if dtype:
            e["dtype"] = dtype
        return self._decl(name, e)

    def param(self, name, shape, init):
        return self._decl(name, {"kind": "param", "shape": list(shape), "init": init})

    def input(self, name, shape, data, dtype=None):
        e = {"kind": "input", "shape": list(shape)}
        if dtype:
            e["dtype"] = dtype
        e["data"] = data
        return self._decl(name, e)

    def shape(self, t):
        sc = self.cur
        if t in sc.inner_inputs:
            return sc.inner_inputs[t][0]
        if t in sc.tensors:
            return sc.tensors[t]["shape"]
        raise AssertionError("unknown tensor %s" % t)

    def tdtype(self, t):
        sc = self.cur
        if t in sc.inner_inputs:
            return sc.inner_inputs[t][1]
        return sc.tensors[t].get("dtype", self.dtype)

    # ops --------------------------------------------------------------------------------------
    def op(self, type_, ins, outs, attrs=None, name=None):
        o = {"type": type_, "in": list(ins), "out": list(outs)}
        if attrs:
            o["attrs"] = attrs
        if name:
            o["name"] = name
        check_op(self, o)
        self.cur.ops.append(o)
        return outs[0] if len(outs) == 1 else outs

    # blocks -----------------------------------------------------------------------------------
    def begin_block(self, name, repeat, inputs):
        """inputs: inner name -> outer tensor."""
        assert self.block is None, "blocks do not nest"
        sc = Scope(self.top)
        for inner, outer in inputs.items():
            sc.inner_inputs[inner] = (self.top.tensors[outer]["shape"], self.tdtype(outer))
        self.block = {"block": name, "repeat": repeat, "in": dict(inputs), "carry": {}, "out": {},
                      "scope": sc}
        self.cur = sc

    def end_block(self, carry, out):
        b, sc = self.block, self.cur
        for inner_in, inner_t in carry.items():
            assert inner_in in sc.inner_inputs
            assert sc.tensors[inner_t]["shape"] == sc.inner_inputs[inner_in][0], inner_t
        for outer, inner in out.items():
            assert self.top.tensors[outer]["shape"] == sc.tensors[inner]["shape"], outer
        entry = {"block": b["block"], "repeat": b["repeat"], "in": b["in"]}
        if carry:
            entry["carry"] = dict(carry)
        entry["out"] = dict(out)
        entry["tensors"] = sc.tensors
        entry["ops"] = sc.ops
        self.top.ops.append(entry)
        self.block = None
        self.cur = self.top

    # output -----------------------------------------------------------------------------------
    def to_json(self):
        assert self.loss and self.shape(self.loss) == []
        m = {"version": 1, "name": self.name, "description": self.description,
             "dtype": self.dtype, "dims": self.dims, "tensors": self.top.tensors,
             "ops": self.top.ops, "loss": self.loss}
        if self.optimizer:
            m["optimizer"] = self.optimizer
        check_produced(m)
        return m


def normal(std, mean=None):
    d = {"kind": "normal"}
    if mean is not None:
        d["mean"] = mean
    d["std"] = std
    return d


def uniform(low, high):
    return {"kind": "uniform", "low": low, "high": high}


ZEROS = {"kind": "zeros"}
ONES = {"kind": "ones"}


def adamw(lr, betas, eps, wd):
    return {"type": "adamw", "lr": lr, "betas": list(betas), "eps": eps, "weight_decay": wd}


def sgd(lr, momentum, wd):
    return {"type": "sgd", "lr": lr, "momentum": momentum, "weight_decay": wd}


# ---------------------------------------------------------------------------------------------
# Shape checker: the operator rules of schemas/README.md, applied to dimension names and sizes.

FLOAT = ("f32", "f16", "bf16")


def _fail(m, o, msg):
    raise AssertionError("%s: op %s %s -> %s: %s" % (m.name, o["type"], o["in"], o["out"], msg))


def _reshape_ok(sin, sout):
    """Each output dim a product of adjacent input dims, or a factor of one input dim."""
    i = j = 0
    while i < len(sin) or j < len(sout):
        if i < len(sin) and sin[i] == 1 and (j >= len(sout) or sout[j] != 1):
            i += 1
            continue
        if j < len(sout) and sout[j] == 1 and (i >= len(sin) or sin[i] != 1):
            j += 1
            continue
        if i >= len(sin) or j >= len(sout):
            return False
        a, b = sin[i], sout[j]
        i += 1
        j += 1
        if a == b:
            continue
        if a < b:  # several inputs make one output
            while a < b and i < len(sin):
                a *= sin[i]
                i += 1
        else:  # one input splits into several outputs
            while b < a and j < len(sout):
                b *= sout[j]
                j += 1
        if a != b:
            return False
    return True


def check_op(m, o):
    t, ins, outs, at = o["type"], o["in"], o["out"], o.get("attrs", {})
    S = [m.shape(x) for x in ins]
    O = [m.shape(x) for x in outs]
    sz = m.size

    def want(cond, msg):
        if not cond:
            _fail(m, o, msg + " (in %s, out %s)" % (S, O))

    def prod(shape):
        p = 1
        for d in shape:
            p *= sz(d)
        return p

    for x in outs:
        want(m.cur.tensors.get(x, {}).get("kind", "activation") == "activation",
             "output %s is not an activation" % x)
    if t in ("matmul", "bmm"):
        a, b = S
        want(len(a) >= 2 and a[-1] == b[-2], "inner dimension")
        if t == "matmul":
            want(len(b) == 2 and O[0] == a[:-1] + [b[1]], "output")
        else:
            want(a[:-2] == b[:-2] and O[0] == a[:-1] + [b[-1]], "output")
    elif t == "linear":
        x, w = S[0], S[1]
        want(len(w) == 2 and x[-1] == w[1], "x[..., k] w[n, k]")
        if len(S) == 3:
            want(S[2] == [w[0]], "bias [n]")
        want(O[0] == x[:-1] + [w[0]], "output [*b, n]")
    elif t in ("add", "mul"):
        a, b = S
        want(len(b) <= len(a) and a[len(a) - len(b):] == b, "b must be a suffix of a")
        want(O[0] == a, "output like a")
    elif t in ("scale", "relu", "gelu", "silu", "softmax", "dropout"):
        want(O[0] == S[0], "same shape")
        if t == "scale":
            want("scale" in at, "scale attr")
        if t == "dropout":
            want("p" in at, "p attr")
    elif t in ("layernorm", "rmsnorm"):
        want(all(g == [S[0][-1]] for g in S[1:]) and O[0] == S[0], "norm over last dim")
    elif t == "attention":
        want(len(S[0]) == 4 and S[0] == S[1] == S[2] == O[0], "q, k, v [b, s, n, d]")
    elif t == "embedding":
        ids, tab = S
        want(m.tdtype(ins[0]) == "i32" and len(tab) == 2 and O[0] == ids + [tab[1]], "embedding")
    elif t == "embedding_bag":
        ids, tab = S
        want(m.tdtype(ins[0]) == "i32" and len(ids) == 2 and len(tab) == 2 and
             O[0] == [ids[0], tab[1]], "embedding_bag")
    elif t in ("concat", "split"):
        many = S if t == "concat" else O
        one = O[0] if t == "concat" else S[0]
        ax = at["axis"] % len(one)
        for s in many:
            want(len(s) == len(one) and all(s[k] == one[k] for k in range(len(s)) if k != ax),
                 "non-axis dimensions agree")
        want(sum(sz(s[ax]) for s in many) == sz(one[ax]), "sizes along axis add up")
    elif t == "slice":
        x, y = S[0], O[0]
        ax = at["axis"] % len(x)
        want(0 <= at["start"] < at["end"] <= sz(x[ax]), "slice range")
        want(len(y) == len(x) and all(y[k] == x[k] for k in range(len(x)) if k != ax), "dims")
        want(sz(y[ax]) == at["end"] - at["start"], "slice size")
    elif t == "reshape":
        want(prod(S[0]) == prod(O[0]), "element count")
        want(_reshape_ok([sz(d) for d in S[0]], [sz(d) for d in O[0]]), "adjacent grouping")
    elif t == "transpose":
        p = at["perm"]
        want(sorted(p) == list(range(len(S[0]))), "perm")
        want(O[0] == [S[0][k] for k in p], "permuted dims")
    elif t in ("conv2d", "maxpool", "avgpool"):
        x = S[0]
        def two(key, dflt):
            v = at.get(key, dflt)
            return (v, v) if isinstance(v, int) else tuple(v)

        if t == "conv2d":
            w = S[1]
            want(len(w) == 4 and w[1] == x[1], "w [o, c, kh, kw]")
            if len(S) == 3:
                want(S[2] == [w[0]], "bias [o]")
            k = (sz(w[2]), sz(w[3]))
            st, pd = two("stride", 1), two("padding", 0)
            och = w[0]
        else:
            k = two("kernel", None)
            st, pd = two("stride", at["kernel"]), two("padding", 0)
            och = x[1]
        y = O[0]
        want(len(x) == 4 and len(y) == 4 and y[0] == x[0] and y[1] == och, "[n, c, h, w]")
        for a in range(2):
            num = sz(x[2 + a]) + 2 * pd[a] - k[a]
            want(num >= 0 and num // st[a] + 1 == sz(y[2 + a]), "output size (floor, as plancc and PyTorch)")
    elif t == "batchnorm":
        want(len(S[0]) == 4 and S[1] == S[2] == [S[0][1]] and O[0] == S[0], "batchnorm")
    elif t == "cross_entropy":
        lg, tg = S
        want(m.tdtype(ins[1]) == "i32" and tg == lg[:-1] and O[0] == [], "cross_entropy")
    elif t in ("mse_loss", "bce_logits"):
        want(S[0] == S[1] and O[0] == [], t)
    else:
        _fail(m, o, "unknown op type")
    for x in ins:
        if t in ("embedding", "embedding_bag") and x == ins[0]:
            continue
        if t == "cross_entropy" and x == ins[1]:
            continue
        want(m.tdtype(x) in FLOAT, "float input " + x)


def check_produced(m):
    """Every activation is produced by exactly one op, before it is read."""
    def walk(tensors, ops, known):
        made = set()
        for o in ops:
            if "block" in o:
                inner = set(o["in"])
                inner |= {k for k, v in o["tensors"].items() if v.get("kind") in ("param", "input")}
                made_in = walk(o["tensors"], o["ops"], inner)
                for outer, t in o["out"].items():
                    assert t in made_in and outer not in made, outer
                    made.add(outer)
                    known.add(outer)
                continue
            for x in o["in"]:
                assert x in known, "%s read before it is made" % x
            for x in o["out"]:
                assert x not in made and tensors[x].get("kind", "activation") == "activation", x
                made.add(x)
                known.add(x)
        acts = {k for k, v in tensors.items() if v.get("kind", "activation") == "activation"}
        assert acts == made, "unproduced or extra: %s" % sorted(acts ^ made)
        return made

    top_known = {k for k, v in m["tensors"].items() if v.get("kind") in ("param", "input")}
    walk(m["tensors"], m["ops"], top_known)


# ---------------------------------------------------------------------------------------------
# GPT family.


def gpt(name, description, layers, hidden, heads, seq, vocab, batch, dtype, optimizer,
        ffn=None, dropout=None, attn_dropout=None):
    """GPT-2 layout: learned positions, pre-LN blocks, tanh GELU MLP of 4H, tied LM head.

    dropout: the hidden dropout probability, as Megatron-LM applies it (on the embeddings' sum
    and on each residual branch before its add); None for none. attn_dropout: the attention
    probabilities' dropout (Megatron-LM's attention_dropout; attention's "dropout" attr)."""
    m = Model(name, description, dtype)
    B, S, H, V = m.dim("B", batch), m.dim("S", seq), m.dim("H", hidden), m.dim("V", vocab)
    assert hidden % heads == 0
    N, D = m.dim("N", heads), m.dim("D", hidden // heads)
    F = m.dim("F", ffn or 4 * hidden)
    std = 0.02
    proj_std = 0.02 / math.sqrt(2 * layers)  # GPT-2's scaled init of residual projections

    m.input("tokens", [B, S], {"kind": "tokens", "high": "V"}, "i32")
    m.input("targets", [B, S], {"kind": "targets", "high": "V"}, "i32")
    m.input("positions", [S], {"kind": "arange"}, "i32")
    m.param("wte", [V, H], normal(std))
    m.param("wpe", [S, H], normal(std))
    m.act("tok_emb", [B, S, H])
    m.act("pos_emb", [S, H])
    m.act("h_in", [B, S, H])
    m.act("h_out", [B, S, H])
    m.param("lnf_g", [H], ONES)
    m.param("lnf_b", [H], ZEROS)
    m.act("xf", [B, S, H])
    m.act("logits", [B, S, V])
    m.act("loss", [])

    m.op("embedding", ["tokens", "wte"], ["tok_emb"])
    m.op("embedding", ["positions", "wpe"], ["pos_emb"])
    if dropout:
        m.act("h_sum", [B, S, H])
        m.op("add", ["tok_emb", "pos_emb"], ["h_sum"])
        m.op("dropout", ["h_sum"], ["h_in"], {"p": dropout})
    else:
        m.op("add", ["tok_emb", "pos_emb"], ["h_in"])

    m.begin_block("layer", layers, {"x": "h_in"})
    m.param("ln1_g", [H], ONES)
    m.param("ln1_b", [H], ZEROS)
    m.act("a", [B, S, H])
    m.op("layernorm", ["x", "ln1_g", "ln1_b"], ["a"])
    for p in "qkv":
        m.param("w" + p, [H, H], normal(std))
        m.param("b" + p, [H], ZEROS)
        m.act(p, [B, S, H])
        m.act(p + "4", [B, S, N, D])
        m.op("linear", ["a", "w" + p, "b" + p], [p])
        m.op("reshape", [p], [p + "4"])
    m.act("o4", [B, S, N, D])
    m.op("attention", ["q4", "k4", "v4"], ["o4"],
         {"causal": True, "dropout": attn_dropout} if attn_dropout else {"causal": True})
    m.act("o", [B, S, H])
    m.op("reshape", ["o4"], ["o"])
    m.param("wo", [H, H], normal(proj_std))
    m.param("bo", [H], ZEROS)
    m.act("p", [B, S, H])
    m.op("linear", ["o", "wo", "bo"], ["p"])
    if dropout:
        m.act("pd", [B, S, H])
        m.op("dropout", ["p"], ["pd"], {"p": dropout})
    m.act("r", [B, S, H])
    m.op("add", ["x", "pd" if dropout else "p"], ["r"])
    m.param("ln2_g", [H], ONES)
    m.param("ln2_b", [H], ZEROS)
    m.act("c", [B, S, H])
    m.op("layernorm", ["r", "ln2_g", "ln2_b"], ["c"])
    m.param("w1", [F, H], normal(std))
    m.param("b1", [F], ZEROS)
    m.act("f", [B, S, F])
    m.op("linear", ["c", "w1", "b1"], ["f"])
    m.act("g", [B, S, F])
    m.op("gelu", ["f"], ["g"])
    m.param("w2", [H, F], normal(proj_std))
    m.param("b2", [H], ZEROS)
    m.act("z", [B, S, H])
    m.op("linear", ["g", "w2", "b2"], ["z"])
    if dropout:
        m.act("zd", [B, S, H])
        m.op("dropout", ["z"], ["zd"], {"p": dropout})
    m.act("y", [B, S, H])
    m.op("add", ["r", "zd" if dropout else "z"], ["y"])
    m.end_block({"x": "y"}, {"h_out": "y"})

    m.op("layernorm", ["h_out", "lnf_g", "lnf_b"], ["xf"])
    m.op("linear", ["xf", "wte"], ["logits"])  # tied LM head: logits = xf @ wte^T
    m.op("cross_entropy", ["logits", "targets"], ["loss"])
    m.loss = "loss"
    m.optimizer = optimizer
    return m


GPT_NOTE = ("Layout as GPT-2: learned position embeddings, pre-layernorm blocks (q, k, v and the "
            "output projection H->H with bias, MLP H->4H->H with tanh GELU), final layernorm, LM "
            "head tied to the token embedding. Parameters = l*(12h^2+13h) + (V+s)*h + 2h.")


def gpt_tiny():
    return gpt("gpt-tiny",
               "A 2-layer GPT (h=64, 4 heads, s=32, V=256, micro-batch 4, f32) for fast numeric "
               "tests on a CPU. " + GPT_NOTE,
               layers=2, hidden=64, heads=4, seq=32, vocab=256, batch=4, dtype="f32",
               optimizer=adamw(1e-3, (0.9, 0.999), 1e-8, 0.01))


def gpt2_small():
    return gpt("gpt2-small",
               "GPT-2 small (Radford et al. 2019; Hugging Face 'gpt2'): 12 layers, h=768, 12 heads, "
               "context 1024, vocabulary 50257, micro-batch 8. 124,439,808 parameters, counted as "
               "Hugging Face does (the LM head shares wte). Residual projections start with "
               "std 0.02/sqrt(2*12) as in GPT-2. " + GPT_NOTE,
               layers=12, hidden=768, heads=12, seq=1024, vocab=50257, batch=8, dtype="f32",
               optimizer=adamw(6e-4, (0.9, 0.95), 1e-8, 0.1))


def gpt3_175b():
    return gpt("gpt3-175b",
               "GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, h=12288, 96 heads of 128, "
               "context 2048, GPT-2's vocabulary of 50257, bf16. Batch 8: Megatron-LM's micro-batch "
               "of 1 on each of 8 data-parallel replicas, as in its 1024-GPU run of this model "
               "(Narayanan et al., SC'21: tp 8, pp 16, dp 8); plancc's batch dimension is the "
               "micro-batch of all replicas together, which data parallelism splits. 174.6 B "
               "parameters. Dense attention in every layer (GPT-3 alternates dense and locally "
               "banded sparse attention; this format has only dense). Adam betas (0.9, 0.95), "
               "weight decay 0.1 and lr 0.6e-4 as in the paper. " + GPT_NOTE,
               layers=96, hidden=12288, heads=96, seq=2048, vocab=50257, batch=8, dtype="bf16",
               optimizer=adamw(0.6e-4, (0.9, 0.95), 1e-8, 0.1))


def gpt_long(seq, tag):
    """A 7B-class GPT (Llama-2 7B's width and depth in GPT-2's layout) at a long context, for
    context parallelism (plancc --cp): one sequence per step, bf16."""
    return gpt("gpt-" + tag,
               "A 7B-class GPT at a context of %d tokens (%s), for context parallelism (plancc --cp; "
               "docs/plancc.md): 32 layers, h=4096, 32 heads of 128 (Llama-2 7B's width and depth), "
               "GPT-2's vocabulary of 50257, bf16, one sequence per step (batch 1: the sequence is what "
               "splits, not the batch). Causal dense attention. Learned position embeddings over the "
               "whole context, as GPT-2's layout has them (%.2f B of the parameters). Adam betas "
               "(0.9, 0.95), weight decay 0.1. " % (seq, tag, seq * 4096 / 1e9) + GPT_NOTE,
               layers=32, hidden=4096, heads=32, seq=seq, vocab=50257, batch=1, dtype="bf16",
               optimizer=adamw(3e-4, (0.9, 0.95), 1e-8, 0.1))


def gpt_vocab():
    """A 7B-class GPT at 64k tokens with a 256,000-token vocabulary: the LM head's logits and their
    gradient (65,536 x 256,000 per sequence) are the largest transients, co-shard's case."""
    return gpt("gpt-64k-v256k",
               "A 7B-class GPT at a context of 65536 tokens (64k) with a vocabulary of 256,000 tokens "
               "(Gemma's size, Gemma Team 2024; PaLM's is 256k), for co-shard (plancc --coshard, --auto's "
               "co-shard round; docs/plancc.md): 32 layers, h=4096, 32 heads of 128 (Llama-2 7B's width "
               "and depth), bf16, one sequence per step (batch 1). The LM head's logits are 65,536 x "
               "256,000 per sequence (31 GiB in bf16), the largest transient of a step. Causal dense "
               "attention. Learned position embeddings over the whole context, as GPT-2's layout has them. "
               "Adam betas (0.9, 0.95), weight decay 0.1. " + GPT_NOTE,
               layers=32, hidden=4096, heads=32, seq=65536, vocab=256000, batch=1, dtype="bf16",
               optimizer=adamw(3e-4, (0.9, 0.95), 1e-8, 0.1))


def megatron_rows(path=MEGATRON_CSV):
    with open(path, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    return list(csv.DictReader(lines))


def megatron_name(row):
    return "megatron-" + row["model"].lower()


def megatron(row):
    l, h, a = int(row["layers"]), int(row["hidden"]), int(row["heads"])
    mb = int(row["micro_batch"])
    desc = ("GPT model %s of Narayanan et al., 'Efficient Large-Scale Language Model Training on "
            "GPU Clusters Using Megatron-LM' (SC'21), Table 1: %d layers, h=%d, %d attention heads, "
            "sequence 2048, vocabulary 51200, micro-batch %d (tp %s, pp %s, global batch %s on %s "
            "GPUs in the paper). The paper trains in fp16 with loss scaling; this model uses bf16 "
            "(same 2-byte storage and tensor-core FLOP rate on A100, no loss scaling). "
            "Published size %s B; the paper's formula 12*l*h^2*(1 + 13/(12h) + (V+s)/(12*l*h)) "
            "counts every parameter here except the final layernorm's 2h. Dropout as in Megatron-LM's "
            "SC'21 runs: hidden dropout 0.1 (on the embeddings' sum and on each residual branch) and "
            "attention dropout 0.1 (on the b x heads x s x s probabilities). " % (
                row["model"], l, h, a, mb, row["tp"], row["pp"], row["global_batch"],
                row["gpus"], row["params_b"]) + GPT_NOTE)
    return gpt(megatron_name(row), desc, layers=l, hidden=h, heads=a, seq=2048, vocab=51200,
               batch=mb, dtype="bf16", optimizer=adamw(1.5e-4, (0.9, 0.95), 1e-8, 0.1), dropout=0.1,
               attn_dropout=0.1)


# ---------------------------------------------------------------------------------------------
# MLP and CNNs.


def mlp():
    m = Model("mlp", "The two-layer MLP of schemas/README.md: 64 -> 256 (relu) -> 10 classes, "
              "batch 32, f32.")
    B, I, H, O = m.dim("B", 32), m.dim("I", 64), m.dim("H", 256), m.dim("O", 10)
    m.input("x", [B, I], {"kind": "normal"})
    m.input("labels", [B], {"kind": "randint", "high": "O"}, "i32")
    m.param("w1", [H, I], normal(0.02))
    m.param("b1", [H], ZEROS)
    m.param("w2", [O, H], normal(0.02))
    m.act("h", [B, H])
    m.act("a", [B, H])
    m.act("logits", [B, O])
    m.act("loss", [])
    m.op("linear", ["x", "w1", "b1"], ["h"])
    m.op("relu", ["h"], ["a"])
    m.op("linear", ["a", "w2"], ["logits"])
    m.op("cross_entropy", ["logits", "labels"], ["loss"])
    m.loss = "loss"
    m.optimizer = adamw(0.001, (0.9, 0.999), 1e-8, 0.01)
    return m


def conv_init(cin, k):
    """Kaiming-normal (fan_in, ReLU gain) as torchvision initializes VGG's convolutions."""
    return normal(math.sqrt(2.0 / (cin * k * k)))


def cnn_small():
    m = Model("cnn-small",
              "A small CNN for CIFAR-sized images (3x32x32, batch 8, 10 classes): conv3x3(3->16, "
              "pad 1) + batchnorm + relu + maxpool 2, conv3x3(16->32, pad 1) + relu + maxpool 2, "
              "flatten (reshape) to 2048, linear 2048->10, cross entropy. Small enough for fast "
              "numerics on a CPU.")
    B, C0, C1, C2, K = m.dim("B", 8), m.dim("C0", 3), m.dim("C1", 16), m.dim("C2", 32), m.dim("K", 10)
    KH, KW = m.dim("KH", 3), m.dim("KW", 3)
    H0, W0 = m.dim("H0", 32), m.dim("W0", 32)
    H1, W1 = m.dim("H1", 16), m.dim("W1", 16)
    H2, W2 = m.dim("H2", 8), m.dim("W2", 8)
    X = m.dim("X", 32 * 8 * 8)
    m.input("img", [B, C0, H0, W0], {"kind": "normal"})
    m.input("labels", [B], {"kind": "randint", "high": "K"}, "i32")
    m.param("conv1_w", [C1, C0, KH, KW], conv_init(3, 3))
    m.param("conv1_b", [C1], ZEROS)
    m.param("bn1_g", [C1], ONES)
    m.param("bn1_b", [C1], ZEROS)
    m.param("conv2_w", [C2, C1, KH, KW], conv_init(16, 3))
    m.param("conv2_b", [C2], ZEROS)
    m.param("fc_w", [K, X], normal(0.01))
    m.param("fc_b", [K], ZEROS)
    for n, s in (("c1", [B, C1, H0, W0]), ("n1", [B, C1, H0, W0]), ("r1", [B, C1, H0, W0]),
                 ("p1", [B, C1, H1, W1]), ("c2", [B, C2, H1, W1]), ("r2", [B, C2, H1, W1]),
                 ("p2", [B, C2, H2, W2]), ("flat", [B, X]), ("logits", [B, K]), ("loss", [])):
        m.act(n, s)
    m.op("conv2d", ["img", "conv1_w", "conv1_b"], ["c1"], {"stride": 1, "padding": 1})
    m.op("batchnorm", ["c1", "bn1_g", "bn1_b"], ["n1"])
    m.op("relu", ["n1"], ["r1"])
    m.op("maxpool", ["r1"], ["p1"], {"kernel": 2})
    m.op("conv2d", ["p1", "conv2_w", "conv2_b"], ["c2"], {"stride": 1, "padding": 1})
    m.op("relu", ["c2"], ["r2"])
    m.op("maxpool", ["r2"], ["p2"], {"kernel": 2})
    m.op("reshape", ["p2"], ["flat"])
    m.op("linear", ["flat", "fc_w", "fc_b"], ["logits"])
    m.op("cross_entropy", ["logits", "labels"], ["loss"])
    m.loss = "loss"
    m.optimizer = sgd(0.01, 0.9, 5e-4)
    return m


VGG16_CFG = [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]


def vgg16():
    m = Model("vgg16",
              "VGG-16, configuration D of Simonyan & Zisserman (ICLR 2015) as torchvision builds "
              "it: 13 conv3x3 (pad 1) + ReLU in 5 groups each ending in a 2x2 max-pool, then "
              "linear 25088->4096, ReLU, dropout 0.5, linear 4096->4096, ReLU, dropout 0.5, "
              "linear 4096->1000. ImageNet input 3x224x224, batch 32. 138,357,544 parameters. "
              "torchvision's adaptive average pool to 7x7 is the identity at 224x224 and is "
              "left out. Each conv's output channels are their own dimension (C1_1 ... C5_3).")
    B = m.dim("B", 32)
    KH, KW = m.dim("KH", 3), m.dim("KW", 3)
    cin, cin_n = 3, m.dim("C0", 3)
    res = 224
    Hd, Wd = m.dim("H224", res), m.dim("W224", res)
    m.input("img", [B, cin_n, Hd, Wd], {"kind": "normal"})
    x = "img"
    for g, group in enumerate(VGG16_CFG, 1):
        for i, cout in enumerate(group, 1):
            tag = "%d_%d" % (g, i)
            cn = m.dim("C" + tag, cout)
            w = m.param("conv%s_w" % tag, [cn, cin_n, KH, KW], conv_init(cin, 3))
            b = m.param("conv%s_b" % tag, [cn], ZEROS)
            c = m.act("conv" + tag, [B, cn, Hd, Wd])
            m.op("conv2d", [x, w, b], [c], {"stride": 1, "padding": 1})
            r = m.act("relu" + tag, [B, cn, Hd, Wd])
            m.op("relu", [c], [r])
            x, cin, cin_n = r, cout, cn
        res //= 2
        Hd, Wd = m.dim("H%d" % res, res), m.dim("W%d" % res, res)
        p = m.act("pool%d" % g, [B, cin_n, Hd, Wd])
        m.op("maxpool", [x], [p], {"kernel": 2, "stride": 2})
        x = p
    X = m.dim("X", 512 * 7 * 7)
    m.act("flat", [B, X])
    m.op("reshape", [x], ["flat"])
    x, xd = "flat", X
    K = m.dim("K", 1000)
    for n, (d, size) in enumerate((("F6", 4096), ("F7", 4096), ("K", 1000)), 6):
        od = m.dim(d, size)
        w = m.param("fc%d_w" % n, [od, xd], normal(0.01))
        b = m.param("fc%d_b" % n, [od], ZEROS)
        y = m.act("fc%d" % n if n < 8 else "logits", [B, od])
        m.op("linear", [x, w, b], [y])
        x, xd = y, od
        if n < 8:
            r = m.act("relu%d" % n, [B, od])
            m.op("relu", [y], [r])
            dr = m.act("drop%d" % n, [B, od])
            m.op("dropout", [r], [dr], {"p": 0.5, "seed": n})
            x = dr
    m.input("labels", [B], {"kind": "randint", "high": "K"}, "i32")
    m.act("loss", [])
    m.op("cross_entropy", ["logits", "labels"], ["loss"])
    m.loss = "loss"
    m.optimizer = sgd(0.01, 0.9, 5e-4)  # the paper's SGD: lr 1e-2, momentum 0.9, decay 5e-4
    assert K == "K"
    return m


# ---------------------------------------------------------------------------------------------
# ResNets with ghost batch norm (bottleneck and basic blocks), written flat (no repeated blocks:
# --burst plans flat models). Channel dimensions are named by their size ("C256"), so that a
# residual add sees the same names on both sides; spatial ones likewise ("H56", "W56").


class ResNet:
    """A ResNet under construction: m, the current activation x [B, C, H, W] and a counter."""

    def __init__(self, m, ghost):
        self.m, self.ghost, self.n = m, ghost, 0

    def name(self, what):
        self.n += 1
        return "%s%d" % (what, self.n)

    def conv(self, x, cout, k, stride, pad):
        m = self.m
        b, c, h, w = m.shape(x)
        cin = m.size(c)
        on = m.dim("C%d" % cout, cout)
        kd = m.dim("K%d" % k, k)
        ho = (m.size(h) + 2 * pad - k) // stride + 1
        hd, wd = m.dim("H%d" % ho, ho), m.dim("W%d" % ho, ho)
        wt = m.param(self.name("conv") + "_w", [on, c, kd, kd], conv_init(cin, k))
        y = m.act(wt[:-2], [b, on, hd, wd])
        m.op("conv2d", [x, wt], [y], {"stride": stride, "padding": pad})  # no bias, as torchvision
        return y

    def bn(self, x, relu):
        m = self.m
        sh = m.shape(x)
        tag = self.name("bn")
        g = m.param(tag + "_g", [sh[1]], ONES)
        b = m.param(tag + "_b", [sh[1]], ZEROS)
        y = m.act(tag, sh)
        m.op("batchnorm", [x, g, b], [y], {"ghost_batch": self.ghost})
        if not relu:
            return y
        r = m.act(self.name("relu"), sh)
        m.op("relu", [y], [r])
        return r

    def add_relu(self, a, b):
        m = self.m
        s = m.act(self.name("add"), m.shape(a))
        m.op("add", [a, b], [s])
        r = m.act(self.name("relu"), m.shape(a))
        m.op("relu", [s], [r])
        return r

    def bottleneck(self, x, width, cout, stride):
        """torchvision's Bottleneck (v1.5: the stride on the 3x3): 1x1, 3x3, 1x1 and a projection
        (1x1 conv + bn) where the shape changes."""
        y = self.bn(self.conv(x, width, 1, 1, 0), True)
        y = self.bn(self.conv(y, width, 3, stride, 1), True)
        y = self.bn(self.conv(y, cout, 1, 1, 0), False)
        skip = x
        if stride != 1 or self.m.size(self.m.shape(x)[1]) != cout:
            skip = self.bn(self.conv(x, cout, 1, stride, 0), False)
        return self.add_relu(y, skip)

    def basic(self, x, cout, stride):
        """torchvision's BasicBlock: two 3x3 convs and a projection where the shape changes."""
        y = self.bn(self.conv(x, cout, 3, stride, 1), True)
        y = self.bn(self.conv(y, cout, 3, 1, 1), False)
        skip = x
        if stride != 1 or self.m.size(self.m.shape(x)[1]) != cout:
            skip = self.bn(self.conv(x, cout, 1, stride, 0), False)
        return self.add_relu(y, skip)

    def head(self, x, classes):
        """Global average pool, flatten, linear to the classes, cross entropy."""
        m = self.m
        b, c, h, w = m.shape(x)
        m.dim("H1", 1), m.dim("W1", 1)
        p = m.act("pooled", [b, c, "H1", "W1"])
        m.op("avgpool", [x], [p], {"kernel": m.size(h)})
        f = m.act("feat", [b, c])
        m.op("reshape", [p], [f])
        K = m.dim("K", classes)
        m.param("fc_w", [K, c], uniform(-1 / math.sqrt(m.size(c)), 1 / math.sqrt(m.size(c))))
        m.param("fc_b", [K], ZEROS)
        m.act("logits", [b, K])
        m.op("linear", [f, "fc_w", "fc_b"], ["logits"])
        m.input("labels", [b], {"kind": "randint", "high": "K"}, "i32")
        m.act("loss", [])
        m.op("cross_entropy", ["logits", "labels"], ["loss"])
        m.loss = "loss"


def resnet_small():
    m = Model("resnet-small",
              "A small ResNet for CIFAR-sized images (3x16x16, batch 8, 10 classes) with ghost "
              "batch norm (ghost_batch 2: statistics over each pair of samples, so a batch split "
              "in whole pairs computes the same on any number of devices): conv3x3(3->8) + bn + "
              "relu, a basic block at 8 channels, a basic block to 16 channels with stride 2 and "
              "a 1x1 projection, global average pool, linear 16->10, cross entropy. For the "
              "burst-parallel equivalence tests on a CPU.")
    B = m.dim("B", 8)
    m.dim("C3", 3), m.dim("H16", 16), m.dim("W16", 16)
    m.input("img", [B, "C3", "H16", "W16"], {"kind": "normal"})
    r = ResNet(m, 2)
    x = r.bn(r.conv("img", 8, 3, 1, 1), True)
    x = r.basic(x, 8, 1)
    x = r.basic(x, 16, 2)
    r.head(x, 10)
    m.optimizer = sgd(0.01, 0.9, 5e-4)
    return m


# torchvision's wide_resnet50_2: (blocks, bottleneck width, output channels) per stage.
WRN50_2_STAGES = [(3, 128, 256), (4, 256, 512), (6, 512, 1024), (3, 1024, 2048)]


def wrn_50_2():
    m = Model("wrn-50-2",
              "Wide-ResNet-50-2 (Zagoruyko & Komodakis 2016) as torchvision's wide_resnet50_2 "
              "builds it: ResNet-50's bottleneck blocks (3, 4, 6, 3) with the inner 3x3 widths "
              "doubled (128, 256, 512, 1024; outputs 256 ... 2048), conv7x7/2 + bn + relu + "
              "maxpool 3x3/2 stem, the stride on each stage's first 3x3 (v1.5), 1x1 conv + bn "
              "projections, global average pool, linear 2048->1000. ImageNet 3x224x224, batch 32. "
              "68,883,240 parameters (torchvision's count). Convolutions have no bias. Batch norm "
              "is ghost batch norm with ghost_batch 1 (per-sample statistics over each channel's "
              "h x w), the finest grain DeepPool's own runs reach (a global batch of 16 on 16 or "
              "more GPUs), so a burst plan may use any device count the batch allows and its "
              "numerics do not depend on it.")
    B = m.dim("B", 32)
    m.dim("C3", 3), m.dim("H224", 224), m.dim("W224", 224)
    m.input("img", [B, "C3", "H224", "W224"], {"kind": "normal"})
    r = ResNet(m, 1)
    x = r.bn(r.conv("img", 64, 7, 2, 3), True)
    m.dim("H56", 56), m.dim("W56", 56)
    p = m.act("maxpool", [B, "C64", "H56", "W56"])
    m.op("maxpool", [x], [p], {"kernel": 3, "stride": 2, "padding": 1})
    x = p
    for i, (blocks, width, cout) in enumerate(WRN50_2_STAGES):
        for j in range(blocks):
            x = r.bottleneck(x, width, cout, 2 if i > 0 and j == 0 else 1)
    r.head(x, 1000)
    m.optimizer = sgd(0.1, 0.9, 1e-4)  # torchvision's ResNet recipe: lr 0.1, momentum 0.9, decay 1e-4
    return m


# ---------------------------------------------------------------------------------------------
# DLRM.

DLRM_TABLES = [1000000, 800000, 600000, 400000, 300000, 200000, 150000, 100000]


def dlrm():
    return dlrm_build("dlrm",
              "DLRM-style recommendation model (Naumov et al. 2019): 13 dense features through a "
              "bottom MLP 13-512-256-64 (ReLU); 8 sparse features, each a bag of 4 ids summed by "
              "embedding_bag over its own table (100,000 to 1,000,000 rows of dimension 64); dot "
              "interaction: the 9 vectors of 64 (bottom-MLP output and 8 bags) stacked to "
              "[B,9,64], multiplied by their transpose to [B,9,9], flattened to 81 and "
              "concatenated after the bottom-MLP output to 145; top MLP 145-512-256-1 (ReLU, "
              "none on the last) and binary cross-entropy with logits. Unlike DLRM, which keeps "
              "only the strict upper triangle of the 9x9 matrix (36 pairs, top-MLP input 100), "
              "this model keeps the full 9x9 matrix (81), as the format has no triangle "
              "gather. Batch 2048, f32, SGD as in the DLRM reference.",
                      2048, 64, DLRM_TABLES, [512, 256], [512, 256], {"kind": "binary"}, 0.01)


def dlrm_ctr():
    """dlrm with teacher labels, small enough to train on 1 to 8 CPU ranks in seconds."""
    return dlrm_build("dlrm-ctr",
                      "A small DLRM-style model on synthetic click-through data with a known generating "
                      "model, for ShadowSync's quality bench (tools/bench_shadowsync.py): models/dlrm.json's "
                      "graph with 13 dense features through a bottom MLP 13-64-32-16 (ReLU), 8 bags of 4 ids "
                      "over tables of 100 to 1,000 rows of dimension 16, the full 9x9 dot interaction, a top "
                      "MLP 97-64-32-1 and binary cross-entropy with logits. The labels are teacher labels: "
                      "Bernoulli(sigmoid(-1 + 3 z)), z a seeded random linear function of the same sample's "
                      "dense features and a random weight per (table, id), so the best achievable loss is "
                      "known (planrun prints it). Batch 128, f32, SGD at 0.1.",
                      128, 16, [1000, 800, 600, 400, 300, 200, 150, 100], [64, 32], [64, 32],
                      {"kind": "teacher", "scale": 3.0, "bias": -1.0}, 0.1)


def dlrm_build(name, desc, batch, emb, tables, bot_sizes, top_sizes, labels, lr):
    m = Model(name, desc)
    B, L, E = m.dim("B", batch), m.dim("L", 4), m.dim("E", emb)
    U, Fd, G, FG = m.dim("U", 1), m.dim("F", 9), m.dim("G", 9), m.dim("FG", 81)
    T, Y = m.dim("T", emb + 81), m.dim("Y", 1)
    Dn = m.dim("Dn", 13)
    m.input("dense", [B, Dn], {"kind": "normal"})
    m.input("labels", [B, Y], labels)

    def mlp_stack(prefix, x, xd, sizes, last_relu):
        for i, (dname, size) in enumerate(sizes):
            od = m.dim(dname, size)
            fan_in = m.size(xd)
            w = m.param("%s%d_w" % (prefix, i), [od, xd], normal(math.sqrt(2.0 / (fan_in + size))))
            b = m.param("%s%d_b" % (prefix, i), [od], normal(math.sqrt(1.0 / size)))
            y = m.act("%s%d" % (prefix, i), [B, od])
            m.op("linear", [x, w, b], [y])
            x, xd = y, od
            if i < len(sizes) - 1 or last_relu:
                r = m.act("%s%d_relu" % (prefix, i), [B, od])
                m.op("relu", [y], [r])
                x = r
        return x

    # DLRM's own initialization: weights N(0, sqrt(2/(fan_in+fan_out))), biases N(0, sqrt(1/out)).
    bot = mlp_stack("bot", "dense", Dn, [("Hb0", bot_sizes[0]), ("Hb1", bot_sizes[1]), ("E", emb)], True)
    vecs = []
    z0 = m.act("bot_u", [B, U, E])
    m.op("reshape", [bot], [z0])
    vecs.append(z0)
    for i, rows in enumerate(tables):
        R = m.dim("R%d" % i, rows)
        ids = m.input("ids%d" % i, [B, L], {"kind": "randint", "high": R}, "i32")
        # DLRM's init of a table with n rows: uniform(-sqrt(1/n), sqrt(1/n)).
        lim = math.sqrt(1.0 / rows)
        tab = m.param("emb%d" % i, [R, E], uniform(-lim, lim))
        bag = m.act("bag%d" % i, [B, E])
        m.op("embedding_bag", [ids, tab], [bag])
        bu = m.act("bag%d_u" % i, [B, U, E])
        m.op("reshape", [bag], [bu])
        vecs.append(bu)
    m.act("z", [B, Fd, E])
    m.op("concat", vecs, ["z"], {"axis": 1})
    m.act("zt", [B, E, Fd])
    m.op("transpose", ["z"], ["zt"], {"perm": [0, 2, 1]})
    # Rename the second feature axis (F -> G, a view) so that the [9 x 9] product has two
    # distinct dimensions: rows and columns of the interaction matrix are different axes.
    m.act("zt_g", [B, E, G])
    m.op("reshape", ["zt"], ["zt_g"])
    m.act("inter", [B, Fd, G])
    m.op("bmm", ["z", "zt_g"], ["inter"])
    m.act("inter_flat", [B, FG])
    m.op("reshape", ["inter"], ["inter_flat"])
    m.act("top_in", [B, T])
    m.op("concat", [bot, "inter_flat"], ["top_in"], {"axis": 1})
    logits = mlp_stack("top", "top_in", T, [("Ht0", top_sizes[0]), ("Ht1", top_sizes[1]), ("Y", 1)], False)
    m.act("loss", [])
    m.op("bce_logits", [logits, "labels"], ["loss"])
    m.loss = "loss"
    m.optimizer = sgd(lr, 0.0, 0.0)
    return m


# ---------------------------------------------------------------------------------------------
# Swin-T-like.

SWIN_STAGES = [  # (channels, heads, depth, resolution); Swin-T: C=96, depths 2-2-6-2, window 7
    (96, 3, 2, 56),
    (192, 6, 2, 28),
    (384, 12, 6, 14),
    (768, 24, 2, 7),
]
SWIN_WINDOW = 7
SWIN_SHIFT = 3


def swin_layer(m, st, x, sfx, shift, windowed):
    """One Swin layer over x [B, H, W, C] -> returns y (same shape). Names end in sfx."""
    B = "B"
    C, N, D, Fd = "C%d" % st, "N%d" % st, "D%d" % st, "F%d" % st
    Hd, Wd = "H%d" % st, "W%d" % st
    res = m.size(Hd)
    X = [B, Hd, Wd, C]
    t = lambda n: n + sfx

    def roll(src, k, name):
        # Cyclic shift along H, then W: out = x[kk:] ++ x[:kk] with kk = k mod res, which is a
        # shift by -k (k = SWIN_SHIFT shifts the windows, k = -SWIN_SHIFT shifts them back).
        cur = src
        kk = k % res
        for axis, (big, small) in ((1, ("Hr%d" % st, "Hs%d" % st)), (2, ("Wr%d" % st, "Ws%d" % st))):
            dd = X[axis]
            lo, hi = (big, small) if m.size(big) == res - kk else (small, big)
            first = m.act(t("%s_%s_a" % (name, dd)), X[:axis] + [lo] + X[axis + 1:])
            second = m.act(t("%s_%s_b" % (name, dd)), X[:axis] + [hi] + X[axis + 1:])
            m.op("slice", [cur], [first], {"axis": axis, "start": kk, "end": res})
            m.op("slice", [cur], [second], {"axis": axis, "start": 0, "end": kk})
            out = m.act(t("%s_%s" % (name, dd)), X)
            m.op("concat", [first, second], [out], {"axis": axis})
            cur = out
        return cur

    g1, b1 = m.param(t("ln1_g"), [C], ONES), m.param(t("ln1_b"), [C], ZEROS)
    a = m.act(t("a"), X)
    m.op("layernorm", [x, g1, b1], [a])
    if shift:
        a = roll(a, SWIN_SHIFT, "shift")
    if windowed:
        Hn, Hw, Wn, Ww = "Hn%d" % st, "Hw%d" % st, "Wn%d" % st, "Ww%d" % st
        BW, T = "BW%d" % st, "T%d" % st
        w6 = m.act(t("win6"), [B, Hn, Hw, Wn, Ww, C])
        m.op("reshape", [a], [w6])
        w6t = m.act(t("win6t"), [B, Hn, Wn, Hw, Ww, C])
        m.op("transpose", [w6], [w6t], {"perm": [0, 1, 3, 2, 4, 5]})
        tok = m.act(t("win"), [BW, T, C])
        m.op("reshape", [w6t], [tok])
        TB = [BW, T]
    else:  # the window is the whole image: global attention over H*W tokens
        T = "T%d" % st
        tok = m.act(t("tok"), [B, T, C])
        m.op("reshape", [a], [tok])
        TB = [B, T]
    std = 0.02
    heads = {}
    for p in "qkv":
        w = m.param(t("w" + p), [C, C], normal(std))
        b = m.param(t("b" + p), [C], ZEROS)
        y = m.act(t(p), TB + [C])
        m.op("linear", [tok, w, b], [y])
        y4 = m.act(t(p + "4"), TB + [N, D])
        m.op("reshape", [y], [y4])
        heads[p] = y4
    o4 = m.act(t("o4"), TB + [N, D])
    m.op("attention", [heads["q"], heads["k"], heads["v"]], [o4], {"causal": False})
    o = m.act(t("o"), TB + [C])
    m.op("reshape", [o4], [o])
    wo, bo = m.param(t("wo"), [C, C], normal(std)), m.param(t("bo"), [C], ZEROS)
    pj = m.act(t("proj"), TB + [C])
    m.op("linear", [o, wo, bo], [pj])
    if windowed:
        u6t = m.act(t("unwin6t"), [B, Hn, Wn, Hw, Ww, C])
        m.op("reshape", [pj], [u6t])
        u6 = m.act(t("unwin6"), [B, Hn, Hw, Wn, Ww, C])
        m.op("transpose", [u6t], [u6], {"perm": [0, 1, 3, 2, 4, 5]})
        back = m.act(t("unwin"), X)
        m.op("reshape", [u6], [back])
    else:
        back = m.act(t("untok"), X)
        m.op("reshape", [pj], [back])
    if shift:
        back = roll(back, -SWIN_SHIFT, "unshift")
    r = m.act(t("r"), X)
    m.op("add", [x, back], [r])
    g2, b2 = m.param(t("ln2_g"), [C], ONES), m.param(t("ln2_b"), [C], ZEROS)
    c = m.act(t("c"), X)
    m.op("layernorm", [r, g2, b2], [c])
    w1, bb1 = m.param(t("w1"), [Fd, C], normal(std)), m.param(t("b1"), [Fd], ZEROS)
    f = m.act(t("f"), [B, Hd, Wd, Fd])
    m.op("linear", [c, w1, bb1], [f])
    gl = m.act(t("g"), [B, Hd, Wd, Fd])
    m.op("gelu", [f], [gl])
    w2, bb2 = m.param(t("w2"), [C, Fd], normal(std)), m.param(t("b2"), [C], ZEROS)
    z = m.act(t("z"), X)
    m.op("linear", [gl, w2, bb2], [z])
    y = m.act(t("y"), X)
    m.op("add", [r, z], [y])
    return y


def swin_tiny():
    m = Model("swin-tiny",
              "A Swin-T-like image classifier (Liu et al. 2021, Swin-T: C=96, depths 2-2-6-2, "
              "heads 3-6-12-24, window 7, MLP ratio 4) at 224x224, batch 32, 1000 classes. "
              "Window attention is written with reshape/transpose: [B,H,W,C] -> [B,Hn,Hw,Wn,Ww,C] "
              "-> [B,Hn,Wn,Hw,Ww,C] -> [B*Hn*Wn, 49, C], so windows become a batch-like dimension "
              "(BW1..BW3) whose size differs per stage, as do resolution and width: stage 1 has "
              "2048 windows of width 96, stage 3 has 128 of width 384, and stage 4 attends over "
              "the whole 7x7 image with width 768. Each stage is one block of (window layer, "
              "shifted-window layer) pairs; the cyclic shift by 3 is slice + concat along H and W. "
              "Patch embedding is a 4x4/4 convolution + layernorm; patch merging is reshape + "
              "transpose to 4C + layernorm + linear 4C->2C; the head is layernorm, 7x7 average "
              "pool and linear 768->1000. Differences from Swin-T: no attention mask for the "
              "shifted windows, no relative position bias (the format's attention has neither, "
              "so this model has 28,265,032 parameters = Swin-T's 28,288,354 less its 23,322 "
              "bias-table entries), tanh GELU, no stochastic depth.")
    B = m.dim("B", 32)
    C0, IH, IW = m.dim("C0", 3), m.dim("IH", 224), m.dim("IW", 224)
    PH, PW = m.dim("PH", 4), m.dim("PW", 4)
    K = m.dim("K", 1000)
    for st, (c, heads, depth, res) in enumerate(SWIN_STAGES, 1):
        m.dim("C%d" % st, c)
        m.dim("N%d" % st, heads)
        m.dim("D%d" % st, c // heads)
        m.dim("F%d" % st, 4 * c)
        m.dim("H%d" % st, res)
        m.dim("W%d" % st, res)
        if res > SWIN_WINDOW:
            nw = res // SWIN_WINDOW
            m.dim("Hn%d" % st, nw)
            m.dim("Wn%d" % st, nw)
            m.dim("Hw%d" % st, SWIN_WINDOW)
            m.dim("Ww%d" % st, SWIN_WINDOW)
            m.dim("BW%d" % st, m.size(B) * nw * nw)
            m.dim("Hr%d" % st, res - SWIN_SHIFT)
            m.dim("Hs%d" % st, SWIN_SHIFT)
            m.dim("Wr%d" % st, res - SWIN_SHIFT)
            m.dim("Ws%d" % st, SWIN_SHIFT)
        m.dim("T%d" % st, SWIN_WINDOW * SWIN_WINDOW)
    m.input("img", [B, C0, IH, IW], {"kind": "normal"})
    m.input("labels", [B], {"kind": "randint", "high": "K"}, "i32")
    m.param("patch_w", ["C1", C0, PH, PW], normal(0.02))
    m.param("patch_b", ["C1"], ZEROS)
    m.act("patch", [B, "C1", "H1", "W1"])
    m.op("conv2d", ["img", "patch_w", "patch_b"], ["patch"], {"stride": 4, "padding": 0})
    m.act("patch_t", [B, "H1", "W1", "C1"])
    m.op("transpose", ["patch"], ["patch_t"], {"perm": [0, 2, 3, 1]})
    m.param("patch_ln_g", ["C1"], ONES)
    m.param("patch_ln_b", ["C1"], ZEROS)
    x = m.act("stage1_in", [B, "H1", "W1", "C1"])
    m.op("layernorm", ["patch_t", "patch_ln_g", "patch_ln_b"], [x])
    for st, (c, heads, depth, res) in enumerate(SWIN_STAGES, 1):
        X = [B, "H%d" % st, "W%d" % st, "C%d" % st]
        out = m.act("stage%d_out" % st, X)
        windowed = res > SWIN_WINDOW
        if windowed:  # pairs of (window, shifted window) layers
            m.begin_block("stage%d" % st, depth // 2, {"x": x})
            y = swin_layer(m, st, "x", "", False, True)
            y = swin_layer(m, st, y, "_s", True, True)
        else:  # one window covers the image: no shift, every layer alike
            m.begin_block("stage%d" % st, depth, {"x": x})
            y = swin_layer(m, st, "x", "", False, False)
        m.end_block({"x": y}, {out: y})
        x = out
        if st == len(SWIN_STAGES):
            break
        # patch merging: 2x2 neighbours -> 4C, layernorm, linear 4C -> 2C
        n = st + 1
        Hn, Wn, Cc = "H%d" % n, "W%d" % n, "C%d" % st
        P2h, P2w = m.dim("P2h", 2), m.dim("P2w", 2)
        M = m.dim("M%d" % st, 4 * c)
        s6 = m.act("merge%d_6" % st, [B, Hn, P2h, Wn, P2w, Cc])
        m.op("reshape", [x], [s6])
        s6t = m.act("merge%d_6t" % st, [B, Hn, Wn, P2w, P2h, Cc])
        m.op("transpose", [s6], [s6t], {"perm": [0, 1, 3, 4, 2, 5]})
        s4 = m.act("merge%d_4c" % st, [B, Hn, Wn, M])
        m.op("reshape", [s6t], [s4])
        m.param("merge%d_ln_g" % st, [M], ONES)
        m.param("merge%d_ln_b" % st, [M], ZEROS)
        sn = m.act("merge%d_ln" % st, [B, Hn, Wn, M])
        m.op("layernorm", [s4, "merge%d_ln_g" % st, "merge%d_ln_b" % st], [sn])
        m.param("merge%d_w" % st, ["C%d" % n, M], normal(0.02))
        x = m.act("stage%d_in" % n, [B, Hn, Wn, "C%d" % n])
        m.op("linear", [sn, "merge%d_w" % st], [x])
    C4, H4, W4 = "C4", "H4", "W4"
    m.param("norm_g", [C4], ONES)
    m.param("norm_b", [C4], ZEROS)
    m.act("normed", [B, H4, W4, C4])
    m.op("layernorm", [x, "norm_g", "norm_b"], ["normed"])
    m.act("normed_t", [B, C4, H4, W4])
    m.op("transpose", ["normed"], ["normed_t"], {"perm": [0, 3, 1, 2]})
    Gh, Gw = m.dim("Gh", 1), m.dim("Gw", 1)
    m.act("pooled", [B, C4, Gh, Gw])
    m.op("avgpool", ["normed_t"], ["pooled"], {"kernel": 7})
    m.act("feat", [B, C4])
    m.op("reshape", ["pooled"], ["feat"])
    m.param("head_w", [K, C4], normal(0.02))
    m.param("head_b", [K], ZEROS)
    m.act("logits", [B, K])
    m.op("linear", ["feat", "head_w", "head_b"], ["logits"])
    m.act("loss", [])
    m.op("cross_entropy", ["logits", "labels"], ["loss"])
    m.loss = "loss"
    m.optimizer = adamw(1e-3, (0.9, 0.999), 1e-8, 0.05)  # Swin's AdamW, weight decay 0.05
    return m


# ---------------------------------------------------------------------------------------------


def evo_attention(m, x, sfx, Bx, L, C, N, D, pre):
    """Self-attention of x [Bx, L, C] over L (Bx: the batch times the rows it runs over), residual
    left to the caller: layernorm, q k v, attention, output projection."""
    ln = m.act(pre + "ln" + sfx, [Bx, L, C])
    m.param(pre + "g" + sfx, [C], ONES)
    m.param(pre + "b" + sfx, [C], ZEROS)
    m.op("layernorm", [x, pre + "g" + sfx, pre + "b" + sfx], [ln])
    qkv = []
    for p in "qkv":
        w = m.param(pre + "w" + p + sfx, [C, C], normal(0.02))
        t = m.act(pre + p + sfx, [Bx, L, C])
        t4 = m.act(pre + p + "4" + sfx, [Bx, L, N, D])
        m.op("linear", [ln, w], [t])
        m.op("reshape", [t], [t4])
        qkv.append(t4)
    o4 = m.act(pre + "o4" + sfx, [Bx, L, N, D])
    m.op("attention", qkv, [o4])
    o = m.act(pre + "o" + sfx, [Bx, L, C])
    m.op("reshape", [o4], [o])
    wo = m.param(pre + "wo" + sfx, [C, C], normal(0.02))
    y = m.act(pre + "y" + sfx, [Bx, L, C])
    m.op("linear", [o, wo], [y])
    return y


def evo_transition(m, x, shape, C, F, pre):
    """Layernorm, C -> F, relu, F -> C (residual left to the caller)."""
    ln = m.act(pre + "ln", shape + [C])
    m.param(pre + "g", [C], ONES)
    m.param(pre + "b", [C], ZEROS)
    m.op("layernorm", [x, pre + "g", pre + "b"], [ln])
    w1, w2 = m.param(pre + "w1", [F, C], normal(0.02)), m.param(pre + "w2", [C, F], normal(0.02))
    h, a, y = m.act(pre + "h", shape + [F]), m.act(pre + "a", shape + [F]), m.act(pre + "y", shape + [C])
    m.op("linear", [ln, w1], [h])
    m.op("relu", [h], [a])
    m.op("linear", [a, w2], [y])
    return y


def evoformer():
    """AlphaFold2's Evoformer (Jumper et al. 2021, Supplementary 1.6): 48 blocks over an MSA
    representation [B, Ns, Nr, Cm] and a pair representation [B, Ri, Rj, Cz]."""
    m = Model("evoformer",
              "AlphaFold2's Evoformer stack (Jumper et al. 2021, supplementary section 1.6) at its "
              "training sizes: 48 blocks, 128 MSA sequences x 256 residues, Cm = 256, Cz = 128, 8 "
              "MSA heads and 4 pair heads of 32, outer product mean through c = 32, triangle "
              "multiplication through c = 128, transitions of 4x, batch 2, bf16. Each block: MSA row "
              "attention, MSA column attention, MSA transition, outer product mean into the pair, "
              "triangle multiplication outgoing and incoming, triangle attention around the "
              "starting and the ending node, pair transition, each with its residual. Left out for "
              "want of operators: the pair bias of row attention and of triangle attention, the "
              "sigmoid gates, dropout. The loss: mean squared error of the final pair against a "
              "target.", "bf16")
    B, Ns, Nr, Cm = m.dim("B", 2), m.dim("Ns", 128), m.dim("Nr", 256), m.dim("Cm", 256)
    Ri, Rj, Cz = m.dim("Ri", 256), m.dim("Rj", 256), m.dim("Cz", 128)
    Hm, Hz, Dh = m.dim("Hm", 8), m.dim("Hz", 4), m.dim("Dh", 32)
    Fm, Fz, Co, Ct = m.dim("Fm", 4 * 256), m.dim("Fz", 4 * 128), m.dim("Co", 32), m.dim("Ct", 128)
    BNs, BNr, BRi, BRj = m.dim("BNs", 2 * 128), m.dim("BNr", 2 * 256), m.dim("BRi", 2 * 256), m.dim("BRj", 2 * 256)
    RC, RC2, CC = m.dim("RC", 256 * 32), m.dim("RC2", 256 * 32), m.dim("CC", 32 * 32)
    m.input("msa", [B, Ns, Nr, Cm], {"kind": "normal"})
    m.input("pair", [B, Ri, Rj, Cz], {"kind": "normal"})
    m.input("target", [B, Ri, Rj, Cz], {"kind": "normal"})
    m.act("msa_out", [B, Ns, Nr, Cm])
    m.act("pair_out", [B, Ri, Rj, Cz])
    m.act("loss", [])
    m.begin_block("evoformer", 48, {"x": "msa", "z": "pair"})
    # MSA row attention (over residues, per sequence) and column attention (over sequences).
    xr = m.act("xr", [BNs, Nr, Cm])
    m.op("reshape", ["x"], [xr])
    yr = evo_attention(m, xr, "", BNs, Nr, Cm, Hm, Dh, "row_")
    yr4 = m.act("yr4", [B, Ns, Nr, Cm])
    m.op("reshape", [yr], [yr4])
    x1 = m.act("x1", [B, Ns, Nr, Cm])
    m.op("add", ["x", yr4], [x1])
    xt = m.act("xt", [B, Nr, Ns, Cm])
    m.op("transpose", [x1], [xt], {"perm": [0, 2, 1, 3]})
    xc = m.act("xc", [BNr, Ns, Cm])
    m.op("reshape", [xt], [xc])
    yc = evo_attention(m, xc, "", BNr, Ns, Cm, Hm, Dh, "col_")
    yc4 = m.act("yc4", [B, Nr, Ns, Cm])
    m.op("reshape", [yc], [yc4])
    yct = m.act("yct", [B, Ns, Nr, Cm])
    m.op("transpose", [yc4], [yct], {"perm": [0, 2, 1, 3]})
    x2 = m.act("x2", [B, Ns, Nr, Cm])
    m.op("add", [x1, yct], [x2])
    ym = evo_transition(m, x2, [B, Ns, Nr], Cm, Fm, "msa_t_")
    x3 = m.act("x3", [B, Ns, Nr, Cm])
    m.op("add", [x2, ym], [x3])
    # Outer product mean: o[b, i, j] = sum_s a[b, s, i] (x) c[b, s, j], projected to Cz.
    lo = m.act("opm_ln", [B, Ns, Nr, Cm])
    m.param("opm_g", [Cm], ONES)
    m.param("opm_b", [Cm], ZEROS)
    m.op("layernorm", [x3, "opm_g", "opm_b"], [lo])
    for p in "ac":
        m.param("opm_w" + p, [Co, Cm], normal(0.02))
        m.act("opm_" + p, [B, Ns, Nr, Co])
        m.op("linear", [lo, "opm_w" + p], ["opm_" + p])
    at = m.act("opm_at", [B, Nr, Co, Ns])
    m.op("transpose", ["opm_a"], [at], {"perm": [0, 2, 3, 1]})
    a2 = m.act("opm_a2", [B, RC, Ns])
    m.op("reshape", [at], [a2])
    c2 = m.act("opm_c2", [B, Ns, RC2])
    m.op("reshape", ["opm_c"], [c2])
    op = m.act("opm_o", [B, RC, RC2])
    m.op("bmm", [a2, c2], [op])
    m.dim("Co2", 32)
    o5 = m.act("opm_o5", [B, Ri, Co, Rj, "Co2"])
    m.op("reshape", [op], [o5])
    o5t = m.act("opm_o5t", [B, Ri, Rj, Co, "Co2"])
    m.op("transpose", [o5], [o5t], {"perm": [0, 1, 3, 2, 4]})
    o4 = m.act("opm_o4", [B, Ri, Rj, CC])
    m.op("reshape", [o5t], [o4])
    m.param("opm_wo", [Cz, CC], normal(0.02))
    oz = m.act("opm_z", [B, Ri, Rj, Cz])
    m.op("linear", [o4, "opm_wo"], [oz])
    z1 = m.act("z1", [B, Ri, Rj, Cz])
    m.op("add", ["z", oz], [z1])
    z = z1
    # Triangle multiplication, outgoing (sum over k of a[i, k] b[j, k]) and incoming (a[k, i] b[k, j]).
    for kind in ("out", "in"):
        pre = "tm" + kind + "_"
        ln = m.act(pre + "ln", [B, Ri, Rj, Cz])
        m.param(pre + "lng", [Cz], ONES)
        m.param(pre + "lnb", [Cz], ZEROS)
        m.op("layernorm", [z, pre + "lng", pre + "lnb"], [ln])
        for p in "ab":
            m.param(pre + "w" + p, [Ct, Cz], normal(0.02))
            m.act(pre + p, [B, Ri, Rj, Ct])
            m.op("linear", [ln, pre + "w" + p], [pre + p])
        # outgoing: A [B, Ct, Ri, Rk=Rj] @ B^T [B, Ct, Rk, Rj']; incoming: A^T [B, Ct, Rj, Ri] @ B [B, Ct, Ri, Rj]
        pa = m.act(pre + "pa", [B, Ct, Ri, Rj] if kind == "out" else [B, Ct, Rj, Ri])
        m.op("transpose", [pre + "a"], [pa], {"perm": [0, 3, 1, 2] if kind == "out" else [0, 3, 2, 1]})
        pb = m.act(pre + "pb", [B, Ct, Rj, Ri] if kind == "out" else [B, Ct, Ri, Rj])
        m.op("transpose", [pre + "b"], [pb], {"perm": [0, 3, 2, 1] if kind == "out" else [0, 3, 1, 2]})
        pr = m.act(pre + "pr", [B, Ct, Ri, Ri] if kind == "out" else [B, Ct, Rj, Rj])
        m.op("bmm", [pa, pb], [pr])
        # the product's two residue axes carry one name; renamed through a reshape to [Ri, Rj]
        flat = m.act(pre + "flat", [B, Ct, m.dim("RR", 256 * 256)])
        m.op("reshape", [pr], [flat])
        pij = m.act(pre + "pij", [B, Ct, Ri, Rj])
        m.op("reshape", [flat], [pij])
        pt = m.act(pre + "pt", [B, Ri, Rj, Ct])
        m.op("transpose", [pij], [pt], {"perm": [0, 2, 3, 1]})
        m.param(pre + "wo", [Cz, Ct], normal(0.02))
        y = m.act(pre + "y", [B, Ri, Rj, Cz])
        m.op("linear", [pt, pre + "wo"], [y])
        zn = m.act(pre + "z", [B, Ri, Rj, Cz])
        m.op("add", [z, y], [zn])
        z = zn
    # Triangle attention around the starting node (over j, per i) and the ending node (over i, per j).
    zs = m.act("tas_x", [BRi, Rj, Cz])
    m.op("reshape", [z], [zs])
    ys = evo_attention(m, zs, "", BRi, Rj, Cz, Hz, Dh, "tas_")
    ys4 = m.act("tas_y4", [B, Ri, Rj, Cz])
    m.op("reshape", [ys], [ys4])
    z2 = m.act("z2", [B, Ri, Rj, Cz])
    m.op("add", [z, ys4], [z2])
    zt = m.act("tae_t", [B, Rj, Ri, Cz])
    m.op("transpose", [z2], [zt], {"perm": [0, 2, 1, 3]})
    ze = m.act("tae_x", [BRj, Ri, Cz])
    m.op("reshape", [zt], [ze])
    ye = evo_attention(m, ze, "", BRj, Ri, Cz, Hz, Dh, "tae_")
    ye4 = m.act("tae_y4", [B, Rj, Ri, Cz])
    m.op("reshape", [ye], [ye4])
    yet = m.act("tae_yt", [B, Ri, Rj, Cz])
    m.op("transpose", [ye4], [yet], {"perm": [0, 2, 1, 3]})
    z3 = m.act("z3", [B, Ri, Rj, Cz])
    m.op("add", [z2, yet], [z3])
    yz = evo_transition(m, z3, [B, Ri, Rj], Cz, Fz, "pair_t_")
    z4 = m.act("z4", [B, Ri, Rj, Cz])
    m.op("add", [z3, yz], [z4])
    m.end_block({"x": x3, "z": z4}, {"msa_out": x3, "pair_out": z4})
    m.op("mse_loss", ["pair_out", "target"], ["loss"])
    m.loss = "loss"
    m.optimizer = adamw(1e-3, (0.9, 0.999), 1e-6, 0.0)
    return m


def all_models():
    ms = [mlp(), cnn_small(), resnet_small(), vgg16(), wrn_50_2(), dlrm(), dlrm_ctr(), swin_tiny(), gpt_tiny(), gpt2_small(), gpt3_175b(),
          gpt_long(32768, "32k"), gpt_long(131072, "128k"), gpt_vocab(), evoformer()]
    ms += [megatron(r) for r in megatron_rows()]
    return ms


def count_params(model):
    """Parameter elements of a model dict: block params count once per copy."""
    dims = model["dims"]

    def numel(t):
        n = 1
        for d in t["shape"]:
            n *= dims[d]
        return n

    total = sum(numel(t) for t in model["tensors"].values() if t.get("kind") == "param")
    for o in model["ops"]:
        if "block" in o:
            total += o["repeat"] * sum(numel(t) for t in o["tensors"].values()
                                       if t.get("kind") == "param")
    return total


def main():
    ap = argparse.ArgumentParser(description="Write the example model files in models/.")
    ap.add_argument("--check", action="store_true",
                    help="compare with the files in models/ instead of writing; exit 1 on a difference")
    ap.add_argument("--out", default=os.path.join(ROOT, "models"), help="output folder")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each model's parameters")
    args = ap.parse_args()
    bad = 0
    for m in all_models():
        d = m.to_json()
        text = dump(d) + "\n"
        path = os.path.join(args.out, m.name + ".json")
        if args.verbose:
            print("%-16s %18s parameters" % (m.name, format(count_params(d), ",")))
        if args.check:
            try:
                with open(path) as f:
                    old = f.read()
            except OSError:
                old = None
            if old != text:
                print("gen_models: %s %s" % (path, "is missing" if old is None else
                                             "differs from what tools/gen_models.py writes"),
                      file=sys.stderr)
                bad += 1
            continue
        with open(path, "w") as f:
            f.write(text)
    if args.check and bad:
        print("gen_models: %d file(s) out of date; run /usr/bin/python3 tools/gen_models.py" % bad,
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
