#!/usr/bin/env python3
"""Equivalence: every parallel plan trains exactly like the one-device plan.

usage: equiv.py [--backend B] [--precision f64] [--seed S] [--quick] PLANCC PLANRUN SOURCE_ROOT [MODEL...]
       equiv.py [--precision f64] --policies PLANCC PLANRUN SOURCE_ROOT
       equiv.py [--precision f64] --flash PLANCC PLANRUN SOURCE_ROOT [MODEL...]
       equiv.py [--precision f64] --coshard PLANCC PLANRUN SOURCE_ROOT
       equiv.py [--precision f64] --t5 PLANCC PLANRUN SOURCE_ROOT
       equiv.py [--precision f64] --folded PLANCC PLANRUN SOURCE_ROOT
       equiv.py [--precision f64] --interlaced PLANCC PLANRUN SOURCE_ROOT
       equiv.py [--precision f64] --vocab PLANCC PLANRUN SOURCE_ROOT

--flash: attention in the FlashAttention form (plancc --attention flash) under dp, tp, pp, cp and
sequence parallelism (FLASH below). With --precision f64 against the one-device plan in the
unfused form (the default): the two forms compute the same function, so the parallel flash plans
must reproduce the unfused arithmetic to near double precision. In float32, whose rounding noise
AdamW amplifies seed by seed (below), against the one-device flash plan, as every other plan is
checked against its own form. For gpt-tiny (the default model) also a copy with attention
dropout 0.1 (the mask drawn per global element in both forms).

--policies: every example policy of models/policies/ written for gpt-tiny (*-gpt-tiny.json) or
the imported llama-tiny (*-llama-tiny.json, tests/models/),
compiled with `--policy FILE` on the devices its mesh names (8 where it leaves one open; the
micro-batch count given where the policy leaves it open, so that the reference matches).

--coshard: gpt-tiny's MLP, attention and LM head with its loss co-sharded (--coshard, COSHARD
below), alone and with dp, tp, pp, recompute and --auto; and the co-shard --auto chooses itself
on a memory-tight variant (auto_coshard); a co-shard plancc refuses is a failure.

--interlaced: operators on every pipeline stage (a policy's "stage": "all"), split over pp x tp
while the blocks pipeline with GPipe or 1F1B (INTERLACED below): gpt-tiny's tied embedding and LM head
with its loss, the imported llama-tiny's untied embedding and head, together and apart, and
t5-tiny's shared embedding (read by the encoder and the decoder) with its head: mT5's interlaced
pipeline in miniature.

--vocab: vocabulary-parallel cross-entropy (compiler/vocab.c): the LM head's logits split along
the vocabulary over tp and the loss computed on the pieces (a policy's "split": "v" on the loss),
under tp, dp x tp, pp with GPipe and 1F1B, ZeRO 1 and 3 and sequence parallelism, over pp x tp for
an interlaced head (GPipe and 1F1B), for the imported llama-tiny (its loss sums with an
ignore_index) and t5-tiny (VOCAB below).

--t5: T5 pipelines whose repeated blocks sum a gradient over their copies (the relative position
bias and the encoder's output, which every copy reads) with the copies on several stages, so that
the partial sums travel between stages with the backward pass (T5 below): tests/models/t5-tiny.json
and a copy with 1 encoder and 6 decoder layers, under pp 2 and 4 with 1F1B and GPipe, with dp and
tp beside it and several micro-batches. Each case must hold the decoder's layers on two stages or
more (else it checks nothing new); interleaving such a pipeline must be refused (exit 2).

--folded: models/evoformer.json shrunk to a few elements per dimension (evoformer-micro, 2
blocks, f32), whose MSA rows and columns and pair rows are the batch folded into another dimension
(B x Ns, B x Nr, B x Ri: reshapes merge the batch as their major axis), and models/swin-tiny.json
at window 2 (swin-micro, its windows B x Hn x Wn), under dp, dp x tp, dp x pp, ZeRO and --auto
(FOLDED below): data parallelism cuts those dimensions as it cuts the batch,
so every replica runs its own samples' rows (search.c's batch_dims), and the plans must still train
like one device.

--quick: one plan of each strategy family (QUICK below) on 1, 2 and 4 ranks, for the tiny
variants of imported models (tests/models/); --few: five plans (FEW below).

A MODEL ending in .json is a model file (relative to SOURCE_ROOT unless absolute), e.g.
tests/models/ops-mix.json; any other is models/MODEL.json.

For mlp, gpt-tiny, cnn-small, dlrm-small (dlrm.json with small tables) and resnet-small (ghost
batch norm; or the models named), on 1, 2, 4 and 8 CPU ranks
(models/clusters/cpu.json), for every strategy family plancc offers (DP, TP, PP with 1F1B and
GPipe, interleaved 1F1B, DP x TP x PP, ZeRO 1/2/3, full recompute, --auto, Megatron-LM's sequence
parallelism and context parallelism (--cp in both forms, with dp, tp, pp and ZeRO over dp x cp; --auto's choice of it on a
512-token gpt-tiny) for models with attention, the batch split over the tp group too (--tp N --tp-batch,
DLRM's layout over every rank), DeepPool's --burst with the cost model's widths
and with widths given per layer): compile the plan, run 10 steps with planrun's cpu backend, and
check that
  - the loss of every step equals the one-device plan's (same micro-batch count) within 1e-5
    relative, and
  - every parameter after the 10 steps equals the one-device plan's element by element within
    2e-5 + 1e-5 |reference| (planrun --compare, torch.testing.assert_close's rule; it names the
    first tensor and element that differ). The absolute term is needed: a parameter with an
    exactly zero or near-zero gradient (gpt-tiny's key biases: softmax ignores a constant added
    to every key) trains on fp32 rounding noise, which AdamW normalizes into updates of up to
    its learning rate, and that noise differs under every split and every BLAS kernel. It is
    twice torch's float32 atol: on an AVX-512 machine gpt-tiny-dropout under --dp 2 --tp 2
    ends 1.06e-5 from the one-device plan in one element of wo.1 (its f64 run agrees within
    2e-14, so the plan is exact and the gap is rounding). Each line shows the largest
    difference measured.
The initialization and data are identical by construction (keyed by tensor name and global
element index). A strategy plancc refuses for a model (exit 2: dp does not divide the batch,
more stages than layers) is reported as skipped, with plancc's reason.
With --backend B the parallel plans run on planrun's backend B (cpu-serial: one thread per
rank issues every stream, the cuda backend's walker path); the reference always runs on cpu.

With --precision f64 every run computes in double (planrun --precision f64) and the tolerances
are 1e-10 relative for the losses and 1e-12 + 1e-10 |reference| for the parameters: without
float32's rounding noise a parallel plan must reproduce the one-device plan's arithmetic to
near double precision, for any seed (in float32, AdamW turns the rounding noise in a
near-zero gradient into updates of up to ~1e-5, so the float32 check passes or fails by the
seed; the f64 one does not).
"""
import math
import os
import re
import subprocess
import sys
import tempfile

STEPS = 10
RTOL = 1e-5   # losses: relative; parameters: |x - ref| <= ATOL + RTOL |ref| (planrun --compare)
ATOL = 2e-5   # twice PyTorch's float32 atol (torch.testing.assert_close): see above
PRECISION = "f32"
SEED = "1"    # planrun --seed: initialization, data, dropout
MODELS = ["mlp", "gpt-tiny", "cnn-small", "dlrm-small", "resnet-small"]

passed = failed = skipped = 0


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


# --quick: one plan of each strategy family on 1, 2 and 4 ranks (the imported models' tiny variants:
# a few seconds each instead of the full list's minutes).
QUICK = {1: ["--auto", "--micro-batches 2"],
         2: ["--auto", "--dp 2", "--tp 2", "--pp 2 --micro-batches 2", "--dp 2 --zero 3", "--dp 2 --recompute full"],
         4: ["--auto", "--dp 2 --tp 2", "--dp 2 --pp 2 --micro-batches 2", "--tp 2 --pp 2 --micro-batches 2", "--tp 4"]}
# --few: fewer still (dp, pp with micro-batches, dp x tp, tp x pp and --auto), for a list of models.
FEW = {1: [], 2: ["--dp 2", "--pp 2 --micro-batches 2"], 4: ["--auto", "--dp 2 --tp 2", "--tp 2 --pp 2 --micro-batches 2"]}
quick = False
few = False


def strategies(n):
    if few:
        return FEW.get(n, [])
    if quick:
        return QUICK.get(n, [])
    if n == 1:
        return ["--auto", "--micro-batches 4", "--recompute full", "--zero 3"]
    s = ["--auto", f"--dp {n}", f"--tp {n}", f"--pp {n} --micro-batches 4", f"--pp {n} --micro-batches 4 --schedule gpipe",
         f"--dp {n} --zero 1", f"--dp {n} --zero 2", f"--dp {n} --zero 3", f"--dp {n} --recompute full"]
    if n == 2:  # interleaved 1F1B (Megatron-LM's virtual stages)
        s += ["--pp 2 --micro-batches 4 --virtual-stages 2", "--pp 2 --micro-batches 8 --virtual-stages 2",
              "--pp 2 --micro-batches 2 --virtual-stages 2"]
    if n == 4:
        s += ["--dp 2 --pp 2 --micro-batches 4 --virtual-stages 2", "--tp 2 --pp 2 --micro-batches 4 --virtual-stages 2",
              "--tp 2 --pp 2 --micro-batches 4 --virtual-stages 2 --zero 1", "--pp 4 --micro-batches 8 --virtual-stages 2"]
    if n == 2:  # gradient buckets: the default (25 MB) above, one per parameter, several per layer
        s += [f"--dp {n} --bucket-mb 0", f"--dp {n} --bucket-mb 0.02", f"--dp {n} --zero 1 --bucket-mb 0.02",
              f"--dp {n} --zero 2 --micro-batches 4"]  # ZeRO-2: a reduce-scatter per micro-batch
    if n == 4:
        s += ["--dp 2 --tp 2 --bucket-mb 0.02", "--dp 4 --zero 2 --micro-batches 2", "--dp 2 --tp 2 --zero 2 --micro-batches 2",
              "--dp 2 --pp 2 --micro-batches 4 --zero 2", "--tp 2 --pp 2 --micro-batches 4", "--dp 2 --pp 2 --micro-batches 2"]
    if n >= 4:  # the batch over the tp group too (DLRM's layout over every device, which --auto tries)
        s += [f"--tp {n} --tp-batch"]
    if n == 8:
        s += ["--dp 2 --pp 4 --micro-batches 4 --virtual-stages 2",
              "--dp 2 --tp 2 --pp 2 --micro-batches 4", "--dp 2 --tp 2 --pp 2 --micro-batches 4 --zero 3 --recompute full",
              "--dp 2 --tp 4 --zero 2"]
    return s


# Megatron-LM's sequence parallelism (--sequence-parallel, models with attention): layernorm, the
# residual adds and dropout split along the sequence over tp, reduce-scatter and all-gather in
# place of tp's all-reduce.
SEQ = {2: ["--tp 2 --sequence-parallel"],
       4: ["--dp 2 --tp 2 --sequence-parallel", "--tp 4 --sequence-parallel", "--tp 2 --pp 2 --micro-batches 4 --sequence-parallel",
           "--dp 2 --tp 2 --sequence-parallel --zero 1", "--dp 2 --tp 2 --sequence-parallel --zero 3"],
       8: ["--dp 2 --tp 2 --pp 2 --micro-batches 4 --sequence-parallel --zero 1"]}
SEQ_QUICK = {2: ["--tp 2 --sequence-parallel"], 4: ["--dp 2 --tp 2 --sequence-parallel"]}
# Context parallelism (--cp, DeepSpeed-Ulysses' form): the sequence split over cp, attention's heads
# there instead, all-to-alls between; alone, with dp, tp, pp, sequence parallelism and ZeRO (which
# shards over dp x cp, or cp alone: one reduce-scatter over both axes onto each rank's piece).
SEQ[2] += ["--cp 2", "--cp 2 --zero 1"]
SEQ[4] += ["--cp 4", "--dp 2 --cp 2", "--cp 2 --tp 2", "--cp 2 --pp 2 --micro-batches 4", "--cp 2 --tp 2 --sequence-parallel",
           "--dp 2 --cp 2 --zero 1", "--dp 2 --cp 2 --zero 3", "--cp 4 --zero 3"]
SEQ[8] += ["--dp 2 --cp 2 --tp 2"]
SEQ_QUICK[2] += ["--cp 2"]
SEQ_QUICK[4] += ["--cp 2 --tp 2"]
# A 2-D tp group (--tp2): the ILP splits each operator along one letter over both axes or two,
# one over each (at tp 8 the token embedding takes the sequence over tp and the hidden dimension
# over tp2); models/policies/grid2d-gpt-tiny.json pins such splits (--policies).
SEQ[4] += ["--tp 4 --tp2 2"]
SEQ[8] += ["--tp 8 --tp2 2", "--tp 8 --tp2 4", "--dp 2 --tp 4 --tp2 2 --zero 3", "--tp 4 --tp2 2 --pp 2 --micro-batches 4"]
SEQ_QUICK[4] += ["--tp 4 --tp2 2"]
# ... and in ring attention's form (--cp-form ring): attention keeps its sequence split too, its k/v
# blocks passed around the cp ranks (gpt-tiny: causal, so later ranks' blocks are skipped).
RING = {2: ["--cp 2 --cp-form ring"],
        4: ["--cp 4 --cp-form ring", "--dp 2 --cp 2 --cp-form ring", "--cp 2 --tp 2 --cp-form ring",
            "--cp 2 --pp 2 --micro-batches 4 --cp-form ring", "--cp 2 --tp 2 --sequence-parallel --cp-form ring",
            "--dp 2 --cp 2 --zero 1 --cp-form ring", "--cp 4 --cp-form ring --recompute full --micro-batches 2"],
        8: ["--dp 2 --cp 2 --tp 2 --cp-form ring", "--cp 8 --cp-form ring"]}
for n, opts in RING.items():
    SEQ[n] += opts
SEQ_QUICK[2] += ["--cp 2 --cp-form ring"]
SEQ_QUICK[4] += ["--cp 4 --cp-form ring"]
# ... and the ring over the sequence in zigzag order (--cp-form zigzag: cp rank c holds chunks c and
# 2 cp - 1 - c of 2 cp, causally load balanced; planrun feeds each rank its two chunks).
ZIGZAG = {2: ["--cp 2 --cp-form zigzag"],
          4: ["--cp 4 --cp-form zigzag", "--dp 2 --cp 2 --cp-form zigzag", "--cp 2 --tp 2 --cp-form zigzag",
              "--cp 2 --pp 2 --micro-batches 4 --cp-form zigzag", "--cp 2 --tp 2 --sequence-parallel --cp-form zigzag",
              "--cp 4 --cp-form zigzag --recompute full --micro-batches 2", "--dp 2 --cp 2 --zero 2 --micro-batches 2 --cp-form zigzag"],
          8: ["--dp 2 --cp 4 --cp-form zigzag", "--cp 8 --cp-form zigzag"]}
for n, opts in ZIGZAG.items():
    SEQ[n] += opts
SEQ_QUICK[2] += ["--cp 2 --cp-form zigzag"]
SEQ_QUICK[4] += ["--cp 4 --cp-form zigzag", "--dp 2 --cp 2 --cp-form zigzag"]
# A model with a dropout operator (tests/models/gpt-tiny-dropout.json: hidden dropout along the
# sequence): its masks are drawn by logical positions in zigzag order (attrs i[1], i[3]), so its
# zigzag plans must compile (a refusal fails, not skips) and train like one device; with --quick
# also these, the sequence split over cp x tp and the forward's masks drawn again in recompute.
ZIGZAG_DROPOUT_QUICK = {4: ["--cp 2 --tp 2 --sequence-parallel --cp-form zigzag", "--cp 4 --cp-form zigzag --recompute full --micro-batches 2"]}


def has_dropout(c, model):
    path = c.paths.get(model) or os.path.join(c.root, "models", model + ".json")
    with open(path, encoding="utf-8") as f:
        return '"type": "dropout"' in f.read()


# --flash: the FlashAttention form under every kind of split attention sees.
FLASH = {1: ["--attention flash", "--attention flash --micro-batches 2 --recompute full"],
         2: ["--dp 2 --attention flash", "--tp 2 --attention flash", "--pp 2 --micro-batches 4 --attention flash",
             "--cp 2 --attention flash", "--tp 2 --sequence-parallel --attention flash", "--dp 2 --zero 3 --attention flash",
             "--cp 2 --cp-form ring --attention flash", "--cp 2 --cp-form zigzag --attention flash"],
         4: ["--dp 2 --tp 2 --attention flash", "--cp 2 --tp 2 --attention flash", "--dp 2 --cp 2 --attention flash",
             "--tp 2 --pp 2 --micro-batches 4 --sequence-parallel --attention flash", "--cp 4 --cp-form ring --attention flash",
             "--cp 4 --cp-form zigzag --attention flash"],
         8: ["--dp 2 --cp 2 --tp 2 --attention flash"]}
flash = False


def with_attention_dropout(c):
    """gpt-tiny with attention dropout 0.1 (its attention's "dropout" attr), as gpt-tiny-drop."""
    return c.variant("gpt-tiny", "gpt-tiny-drop", '"attrs": {"causal": true}}', '"attrs": {"causal": true, "dropout": 0.1}}')


def seq_strategies(c, model, n):
    path = c.paths.get(model) or os.path.join(c.root, "models", model + ".json")
    with open(path, encoding="utf-8") as f:
        if '"attention"' not in f.read():
            return []
    return (SEQ_QUICK if quick else SEQ).get(n, [])


# Burst parallelism (--burst): the cost model's choice, and widths given per layer that change at
# every layer (narrowing and widening by several steps, batch norm on one device).
BURST_WIDTHS = {
    "mlp": lambda n: [n, max(n // 2, 1), 1, n],
    "cnn-small": lambda n: [n, 1, max(n // 2, 1), n, 1, max(n // 4, 1), n, min(n, 2), 1, n],
    # ghost batch norm of 2 in a batch of 8: its layers (1, 3, 5) on at most 4 devices
    "resnet-small": lambda n: [n, min(n, 4), 1, max(n // 2, 1), n, min(n, 4), 1, n, max(n // 4, 1), n, min(n, 2)],
}


def burst_strategies(model, n):
    if n == 1:
        return []
    s = ["--burst"]
    if model in BURST_WIDTHS:
        s.append("--burst --burst-widths " + ",".join(str(w) for w in BURST_WIDTHS[model](n)))
    return s


# Pipelines whose middle stages hold copies strictly inside a repeated block (gpt-tiny with 6
# layers): such a stage receives the block's carry and sends it on, across loop iterations within
# one group of sends and receives (the carry register needs two slots).
DEEP = ["--pp 3 --micro-batches 6", "--pp 4 --micro-batches 8",
        "--pp 2 --micro-batches 6 --virtual-stages 3", "--pp 3 --micro-batches 6 --virtual-stages 2"]
# ZeRO over more than two copies: a copy gathers the next one's parameters into the slot of
# two that the copy before it read (preserve.c's prefetch), forward and backward; or, with
# --prefetch none, its own at its start. A copy's gradients are reduce-scattered together at its
# end (ZeRO-3: on stream 1 while the next copy computes into the other of two slots).
DEEP_ZERO = ["--dp 2 --zero 3", "--dp 4 --zero 3 --micro-batches 2", "--dp 2 --zero 3 --recompute full",
             "--dp 2 --pp 2 --micro-batches 2 --zero 3", "--dp 2 --tp 2 --zero 3 --sequence-parallel",
             "--dp 2 --zero 3 --prefetch none", "--dp 4 --zero 3 --micro-batches 2 --recompute full --prefetch none",
             "--dp 2 --zero 2 --micro-batches 2", "--dp 2 --pp 2 --zero 2 --micro-batches 2"]
# In float32, gpt-tiny-6 under tp ends up to 2.6e-5 from one device at the suite's seed, past
# ATOL (AdamW's updates of near-zero gradients, above); its f64 runs agree within 1e-13. Those
# cases are checked in f64 only.
F64_ONLY = ("--tp",)
# So do ZeRO-3 on two ranks with OpenBLAS's Haswell and Zen kernels (an AMD EPYC picks Zen):
# w2.5 ends 6.2e-5 from one device, where its SkylakeX and Sandybridge kernels stay within 1e-5
# (OPENBLAS_CORETYPE, the same plans). Checked in f64 only too.
F64_ONLY_OPTS = ("--dp 2 --zero 3", "--dp 2 --zero 3 --recompute full", "--dp 2 --zero 3 --prefetch none")


def deep_pipelines(c):
    global skipped
    c.variant("gpt-tiny", "gpt-tiny-6", '"repeat": 2', '"repeat": 6')
    for opts in DEEP + DEEP_ZERO:
        w = opts.split()
        if PRECISION != "f64" and (any(a in w for a in F64_ONLY) or opts in F64_ONLY_OPTS):
            print(f"skip gpt-tiny-6: {opts}: float32 rounding past the tolerance at 6 layers; checked in f64")
            skipped += 1
            continue
        c.check("gpt-tiny-6", math.prod(int(w[w.index(a) + 1]) for a in ("--dp", "--pp", "--tp") if a in w), opts)
    # Rotary embeddings' cos and sin tables (frozen parameters, "kind": "const") read by every
    # copy, the copies on several stages: each stage holds its own, never updated (llama-tiny with
    # 4 layers).
    with open(os.path.join(c.root, "tests", "models", "llama-tiny.json"), encoding="utf-8") as f:
        text = f.read()
    c.paths["llama-tiny-4"] = os.path.join(c.tmp, "llama-tiny-4.json")
    with open(c.paths["llama-tiny-4"], "w", encoding="utf-8") as f:
        f.write(text.replace('"repeat": 2,', '"repeat": 4,'))
    for n, opts in ((2, "--pp 2 --micro-batches 2"), (4, "--pp 4 --micro-batches 4"), (4, "--pp 2 --dp 2 --micro-batches 2")):
        c.check("llama-tiny-4", n, opts)


# --auto's context parallelism: gpt-tiny on one sequence of 512 tokens (dims B 1, S 512), where
# --auto picks cp on 2 and 4 ranks (tests/context_parallel.py asserts that choice). In float32 at
# seed 2: at seed 1 the choice on 4 ranks (cp 2 in zigzag order x tp 2, sequence parallel) ends
# 2.54e-5 from one device in one element of w2.0 (at seeds 2 and 3 its largest difference is
# 2.7e-6 and 6.2e-6), while its f64 run agrees within 4.5e-14: rounding noise, as above.
def long_context(c):
    c.variant("gpt-tiny", "gpt-tiny-long", '"B": 4, "S": 32,', '"B": 1, "S": 512,')
    for n in (2, 4):
        c.check("gpt-tiny-long", n, "--auto", seed="2" if PRECISION == "f32" else None)


# ... and on a model with dropout (gpt-tiny-dropout at one sequence of 512 tokens), where --auto
# picks the zigzag ring (cp 2 on 2 ranks; cp 2 x tp 2, sequence parallel, on 4): its hidden
# dropout draws its masks by logical positions. Run with --quick on a dropout model.
def long_context_dropout(c, model):
    with open(c.paths[model], encoding="utf-8") as f:
        text = f.read()
    assert '"B": 4, "S": 32,' in text, f"{model} has no B 4, S 32"
    name = model + "-long"
    c.paths[name] = os.path.join(c.tmp, name + ".json")
    with open(c.paths[name], "w", encoding="utf-8") as f:
        f.write(text.replace('"B": 4, "S": 32,', '"B": 1, "S": 512,', 1))
    for n in (2, 4):
        c.check(name, n, "--auto", refuse_fails=True)


def hetero_strategies(model, n):
    """Node groups of different speeds (models/clusters/cpu-hetero.json: 2 fast ranks, 2 slow): a
    stage on each group, the layers cut by each group's speed, and --auto."""
    if model != "gpt-tiny" or n != 4:
        return []
    hc = "--cluster models/clusters/cpu-hetero.json"
    return [f"{hc} --pp 2 --dp 2", f"{hc} --pp 2 --dp 2 --micro-batches 2", f"{hc} --auto"]


# Co-shard (--coshard GLOB:K[:LETTER]): the MLP as a chain along the tokens (s) and along its
# hidden dimension (fc1's n, fc2's reduction k: partial sums added), attention along its heads,
# the LM head and the loss along the tokens (the loss's mean scaled by 1/k).
CS_MLP_S = "--coshard layer.f:2,layer.g:2,layer.z:2"
CS_MLP_F = "--coshard layer.f:2:n,layer.g:2,layer.z:2"
CS_ATTN = "--coshard layer.o4:2"
CS_HEAD = "--coshard logits:4,loss:4"
COSHARD = [(1, CS_MLP_S), (1, CS_MLP_F), (1, CS_ATTN), (1, CS_HEAD), (1, f"{CS_MLP_F} --recompute full"),
           (2, f"{CS_MLP_S} --dp 2"), (2, f"{CS_ATTN} --tp 2"), (2, f"{CS_HEAD} --tp 2"), (2, f"{CS_MLP_F} --tp 2"),
           (4, f"{CS_MLP_F} --dp 2 --tp 2"), (4, f"{CS_ATTN} --dp 2 --tp 2"), (4, f"{CS_HEAD} --dp 2 --tp 2"),
           (4, f"{CS_HEAD},layer.o4:2 --pp 2 --dp 2 --micro-batches 2"), (2, f"{CS_MLP_S} --dp 2 --recompute full --zero 3"),
           (2, f"{CS_MLP_F} --pp 2 --micro-batches 2"), (2, f"{CS_MLP_S} --dp 2 --zero 2 --micro-batches 2"),
           (4, f"{CS_HEAD} --auto")]


# --interlaced: operators on every pipeline stage, split over pp x tp, while the blocks pipeline
# with GPipe (a policy's "stage": "all"; layout.c's interlace, preserve.c's interlaced phases):
# gpt-tiny's token embedding and the LM head that shares its table, with the loss (IL_ALL); the
# imported llama-tiny's untied embedding (LL_EMB), LM head and its loss's four operators (LL_HEAD),
# together and apart; with ZeRO 1, 2 and 3; with sequence parallelism; GPipe, and 1F1B (the head's phase per micro-batch
# in the steady state, on 2 stages with one micro-batch and more, on 4 with fewer micro-batches than stages and more,
# where the stages between receive their inputs a pass early; on 4 the embedding alone too, whose phases stay outside
# the schedule); t5-tiny's position biases replicated on every stage (T5_BIAS). (model, devices, dp, tp, pp,
# micro-batches, rules[, more mesh keys[, more options]]).
IL_EMB = {"ops": "tok_emb", "split": "v", "stage": "all"}
IL_ALL = [IL_EMB, {"ops": "logits", "split": "n", "stage": "all"}, {"ops": "loss", "split": "b.1", "stage": "all"}]
LL_EMB = {"ops": "embedding", "split": "v", "stage": "all"}
LL_HEAD = [{"ops": "linear_14", "split": "n", "stage": "all"}, {"ops": "cross_entropy*", "stage": "all"}]
F1B = {"schedule": "1f1b"}
SP = "--sequence-parallel"
IL_SP = IL_ALL[:2] + [{"ops": "loss", "stage": "all"}]  # the loss's split the ILP's (b.1 is not among its candidates with SP)
# T5's shared token embedding (read by the encoder and the decoder), its LM head and its loss.
T5_ALL = [{"ops": "embedding_[13]", "split": "v", "stage": "all"}, {"ops": "linear_32", "split": "n", "stage": "all"},
          {"ops": "cross_entropy*", "stage": "all"}]
# T5's relative position biases (the encoder's with the attention mask, the decoder's with its
# causal mask), computed on every stage, replicated, where the blocks that read them are: no
# stage sends them, and the gradient the blocks sum over their copies meets their backward there.
T5_BIAS = [{"ops": o, "stage": "all"} for o in ("getitem", "sub", "sub_2", "mul", "embedding", "permute", "add", "add_2", "add_3",
                                                  "embedding_2", "permute_1", "getitem_2", "add_12")]
INTERLACED = [("gpt-tiny", 8, 1, 2, 4, 4, IL_ALL), ("gpt-tiny", 8, 4, 1, 2, 2, IL_ALL), ("gpt-tiny", 4, 1, 1, 4, 1, IL_ALL),
              ("gpt-tiny", 4, 1, 2, 2, 4, [dict(r, split="replicate") if r["ops"] == "loss" else r for r in IL_ALL]),
              ("llama-tiny", 8, 2, 2, 2, 4, [LL_EMB] + LL_HEAD), ("llama-tiny", 4, 1, 2, 2, 3, LL_HEAD),
              ("llama-tiny", 4, 2, 1, 2, 2, [LL_EMB]), ("gpt-tiny", 8, 2, 2, 2, 4, IL_ALL, {"zero": 1}),
              ("gpt-tiny", 8, 2, 2, 2, 4, IL_ALL, {"zero": 2}), ("gpt-tiny", 8, 4, 1, 2, 2, IL_ALL, {"zero": 3}),
              ("llama-tiny", 8, 2, 2, 2, 4, [LL_EMB] + LL_HEAD, {"zero": 3}),
              ("gpt-tiny", 8, 2, 2, 2, 4, IL_ALL, F1B), ("gpt-tiny", 4, 2, 1, 2, 1, IL_ALL, F1B), ("gpt-tiny", 4, 1, 2, 2, 2, IL_ALL, F1B),
              ("gpt-tiny", 8, 4, 1, 2, 3, IL_ALL, dict(F1B, zero=1)), ("llama-tiny", 8, 2, 2, 2, 4, [LL_EMB] + LL_HEAD, F1B),
              ("llama-tiny", 4, 2, 1, 2, 3, LL_HEAD, F1B), ("llama-tiny", 8, 2, 1, 4, 4, [LL_EMB], F1B),
              ("t5-tiny", 4, 2, 1, 2, 2, T5_ALL), ("t5-tiny", 4, 1, 2, 2, 4, T5_ALL, F1B), ("t5-tiny", 8, 2, 1, 4, 4, T5_ALL),
              ("gpt-tiny", 8, 2, 2, 2, 4, IL_SP, {}, SP), ("gpt-tiny", 4, 1, 2, 2, 2, IL_SP, F1B, SP),
              ("llama-tiny", 8, 2, 2, 2, 4, [LL_EMB] + LL_HEAD, {}, SP),
              ("gpt-tiny", 8, 1, 2, 4, 8, IL_ALL, F1B), ("gpt-tiny", 4, 1, 1, 4, 3, IL_ALL, F1B),
              ("gpt-tiny", 8, 2, 1, 4, 5, IL_ALL, dict(F1B, zero=1)), ("llama-tiny", 6, 2, 1, 3, 4, [{"ops": "linear_14", "stage": "all"}, LL_HEAD[1]], F1B),
              ("t5-tiny", 8, 2, 1, 4, 4, T5_ALL, F1B), ("t5-tiny", 4, 1, 1, 4, 4, T5_BIAS), ("t5-tiny", 8, 2, 1, 4, 4, T5_BIAS, F1B)]

# --vocab: the loss split along the vocabulary (its letter v), the LM head's logits split so over
# tp (V_TP: gpt-tiny's; LL_V: llama-tiny's; T5_V: t5-tiny's), or over pp x tp for an interlaced
# head (IL_V). As INTERLACED.
V_TP = [{"ops": "logits", "split": "n"}, {"ops": "loss", "split": "v"}]
IL_V = IL_ALL[:2] + [{"ops": "loss", "split": "v", "stage": "all"}]
LL_V = [{"ops": "linear_14", "split": "n"}, {"ops": "cross_entropy", "split": "v"}]
T5_V = [{"ops": "linear_32", "split": "n"}, {"ops": "cross_entropy", "split": "v"}]
VOCAB = [("gpt-tiny", 2, 1, 2, 1, 1, V_TP), ("gpt-tiny", 4, 2, 2, 1, 2, V_TP), ("gpt-tiny", 4, 1, 4, 1, 1, V_TP),
         ("gpt-tiny", 4, 1, 2, 2, 2, V_TP), ("gpt-tiny", 4, 1, 2, 2, 4, V_TP, F1B), ("gpt-tiny", 8, 2, 2, 2, 2, V_TP, {"zero": 1}),
         ("gpt-tiny", 4, 2, 2, 1, 1, V_TP, {"zero": 3}), ("gpt-tiny", 4, 2, 2, 1, 2, V_TP, {}, SP),
         ("gpt-tiny", 8, 1, 2, 4, 4, IL_V), ("gpt-tiny", 4, 2, 1, 2, 2, IL_V, F1B), ("gpt-tiny", 8, 2, 2, 2, 4, IL_V, F1B),
         ("gpt-tiny", 8, 1, 2, 4, 8, IL_V, F1B),
         ("llama-tiny", 4, 2, 2, 1, 1, LL_V), ("llama-tiny", 4, 1, 2, 2, 2, LL_V, F1B), ("t5-tiny", 4, 2, 2, 1, 1, T5_V)]


def interlaced(c, cases=None, prefix="interlaced"):
    """Writes the policies of INTERLACED (or cases) to the run's folder: (model, devices, options) of each."""
    import json
    for m in ("llama-tiny", "t5-tiny"):
        c.paths[m] = os.path.join(c.root, "tests", "models", m + ".json")
    out = []
    for i, (model, n, dp, tp, pp, mb, rules, *more) in enumerate(INTERLACED if cases is None else cases):
        path = os.path.join(c.tmp, f"{prefix}-{i}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "mesh": {"dp": dp, "tp": tp, "pp": pp, "micro_batches": mb, "schedule": "gpipe",
                                              **(more[0] if more else {})}, "rules": rules}, f)
        out.append((model, n, f"--policy {path} --micro-batches {mb}" + (" " + more[1] if len(more) > 1 else "")))
    return out


# --t5: (model, devices, options); t5-tiny-deep is tests/models/t5-tiny.json with 1 encoder and 6
# decoder layers, whose decoder the pipelines cut.
T5 = [("t5-tiny-deep", 2, "--pp 2 --micro-batches 4"), ("t5-tiny-deep", 2, "--pp 2 --micro-batches 1"),
      ("t5-tiny-deep", 2, "--pp 2 --micro-batches 4 --schedule gpipe"), ("t5-tiny-deep", 4, "--pp 2 --dp 2 --micro-batches 4"),
      ("t5-tiny-deep", 4, "--pp 2 --tp 2 --micro-batches 2"), ("t5-tiny-deep", 4, "--pp 4 --micro-batches 8"),
      ("t5-tiny-deep", 4, "--pp 4 --micro-batches 4 --schedule gpipe"), ("t5-tiny-deep", 8, "--pp 4 --dp 2 --micro-batches 4"),
      ("t5-tiny", 4, "--pp 4 --micro-batches 4")]


# --folded: (model, devices, options). evoformer-micro-b2 has 2 samples, so that under dp 2 x tp 2
# tp cannot nest in dp's cut of a folded dimension whose reshape runs it into the batch's 2
# (search.c's letter_cuts); {policy} pins every attention's rows to tp too, inside dp's cut of
# them (FOLDED_POLICY: the folded dimension cut dp x tp ways); co-shard of row attention along a
# letter of its own choice (the heads, not the folded rows) and along the rows asked for;
# swin-micro's windows (the batch folded with the window grid after a transpose).
FOLDED = [("evoformer-micro", 1, "--micro-batches 2"), ("evoformer-micro", 2, "--dp 2"), ("evoformer-micro", 2, "--dp 2 --zero 3"),
          ("evoformer-micro", 2, "--dp 2 --recompute full"), ("evoformer-micro", 2, "--auto"), ("evoformer-micro", 4, "--dp 4"),
          ("evoformer-micro", 4, "--dp 2 --tp 2"), ("evoformer-micro", 4, "--dp 2 --pp 2 --micro-batches 2"),
          ("evoformer-micro", 4, "--dp 2 --tp 2 --zero 1"), ("evoformer-micro", 4, "--auto"),
          ("evoformer-micro", 4, "--policy {policy}"), ("evoformer-micro", 4, "--policy {policy} --micro-batches 2"),
          ("evoformer-micro-b2", 4, "--dp 2 --tp 2"), ("evoformer-micro-b2", 4, "--policy {policy}"),
          ("evoformer-micro", 2, "--dp 2 --coshard evoformer.row_o4:2"), ("evoformer-micro", 2, "--dp 2 --coshard evoformer.row_o4:2:b"),
          ("swin-micro", 2, "--dp 2"), ("swin-micro", 4, "--dp 4"), ("swin-micro", 4, "--dp 2 --tp 2"),
          ("swin-micro", 4, "--dp 2 --pp 2 --micro-batches 2"), ("swin-micro", 2, "--dp 2 --zero 3"), ("swin-micro", 4, "--auto")]
FOLDED_POLICY = {"version": 1, "description": "evoformer-micro: every attention's rows over tp, inside dp's cut of them",
                 "mesh": {"dp": 2, "tp": 2}, "rules": [{"type": "attention", "split": "b"}]}
EVO_MICRO = {"B": 4, "Ns": 4, "Nr": 8, "Cm": 8, "Ri": 8, "Rj": 8, "Cz": 8, "Hm": 2, "Hz": 2, "Dh": 4, "Fm": 16, "Fz": 16,
             "Co": 2, "Ct": 4, "Co2": 2}


def evoformer_micro(c):
    """models/evoformer.json with EVO_MICRO's sizes (the folded dimensions their products), 2
    blocks, f32, as evoformer-micro, and with 2 samples as evoformer-micro-b2; FOLDED_POLICY as
    folded-policy; False unless dp cuts a folded dimension in evoformer-micro's --dp 2 plan."""
    import json
    with open(os.path.join(c.root, "models", "evoformer.json"), encoding="utf-8") as f:
        m = json.load(f)
    for op in m["ops"]:
        if "block" in op:
            op["repeat"] = 2
    for name, batch in (("evoformer-micro", 4), ("evoformer-micro-b2", 2)):
        d = dict(EVO_MICRO, B=batch)
        d.update({"BNs": d["B"] * d["Ns"], "BNr": d["B"] * d["Nr"], "BRi": d["B"] * d["Ri"], "BRj": d["B"] * d["Rj"],
                  "RC": d["Ri"] * d["Co"], "RC2": d["Rj"] * d["Co"], "CC": d["Co"] * d["Co2"], "RR": d["Ri"] * d["Rj"]})
        assert set(d) == set(m["dims"]), sorted(set(m["dims"]) ^ set(d))
        m["name"], m["dims"], m["dtype"] = name, d, "f32"
        c.paths[name] = os.path.join(c.tmp, name + ".json")
        with open(c.paths[name], "w", encoding="utf-8") as f:
            json.dump(m, f)
    c.paths["folded-policy"] = os.path.join(c.tmp, "folded-policy.json")
    with open(c.paths["folded-policy"], "w", encoding="utf-8") as f:
        json.dump(FOLDED_POLICY, f)
    plandump = os.path.join(os.path.dirname(os.path.abspath(c.plancc)), "plandump")
    out = os.path.join(c.tmp, "folded.plan")
    p = c.compile("evoformer-micro", 2, "--dp 2", out)
    notes = run(plandump, out).stdout if p.returncode == 0 else ""
    if "dp=b(BNs)" not in notes:
        print(f"FAIL evoformer-micro on 2: --dp 2: row attention is not cut along BNs over dp (plancc exits {p.returncode})")
        return False
    print("ok   evoformer-micro on 2: --dp 2 cuts row attention along BNs (the batch folded into the MSA rows)")
    # co-shard's own choice of letter leaves the folded rows to dp (the pieces keep a dp letter)
    p = c.compile("evoformer-micro", 2, "--dp 2 --coshard evoformer.row_o4:2", out)
    notes = run(plandump, out).stdout if p.returncode == 0 else ""
    piece = re.search(r"attention row_o4\.cs0: (dp=\S+)", notes)
    if not piece or piece.group(1) == "dp=replicate":
        print(f"FAIL evoformer-micro on 2: --dp 2 --coshard evoformer.row_o4:2: the pieces run whole on both replicas "
              f"({piece.group(1) if piece else f'plancc exits {p.returncode}'})")
        return False
    print(f"ok   evoformer-micro on 2: --dp 2 --coshard evoformer.row_o4:2 keeps the rows dp's ({piece.group(1)})")
    return True


SWIN_MICRO_WINDOW, SWIN_MICRO_B = 2, 4

def swin_micro(c):
    """models/swin-tiny.json at window 2 and shift 1 (64x64 images, widths 8-64, 10 classes,
    4 images) as swin-micro: its windows BW1..BW3 are the batch folded with the window grid."""
    import json
    with open(os.path.join(c.root, "models", "swin-tiny.json"), encoding="utf-8") as f:
        m = json.load(f)
    old = m["dims"]
    w, B = SWIN_MICRO_WINDOW, SWIN_MICRO_B
    d = {"B": B, "C0": 3, "IH": 32 * w, "IW": 32 * w, "PH": 4, "PW": 4, "K": 10, "P2h": 2, "P2w": 2, "Gh": 1, "Gw": 1}
    for s, (ch, n, r) in enumerate(((8, 2, 8 * w), (16, 2, 4 * w), (32, 4, 2 * w), (64, 4, w)), 1):
        d.update({f"C{s}": ch, f"N{s}": n, f"D{s}": ch // n, f"F{s}": 4 * ch, f"H{s}": r, f"W{s}": r, f"T{s}": w * w})
        if r > w:
            d.update({f"Hn{s}": r // w, f"Wn{s}": r // w, f"Hw{s}": w, f"Ww{s}": w, f"BW{s}": B * (r // w) ** 2,
                      f"Hr{s}": r - 1, f"Hs{s}": 1, f"Wr{s}": r - 1, f"Ws{s}": 1})
        if s < 4:
            d[f"M{s}"] = 4 * ch
    assert set(d) == set(old), sorted(set(d) ^ set(old))
    shift = old["Hs1"]

    def fix(ops, tensors):
        for o in ops:
            if "ops" in o:
                fix(o["ops"], {**tensors, **o.get("tensors", {})})
                continue
            a = o.get("attrs", {})
            if o["type"] == "slice":
                R = old[tensors[o["in"][0]]["shape"][a["axis"]]]
                r = d[tensors[o["in"][0]]["shape"][a["axis"]]]
                for k in ("start", "end"):
                    a[k] = {0: 0, shift: 1, R: r, R - shift: r - 1}[a[k]]
            elif o["type"] == "avgpool":
                a["kernel"] = w
    fix(m["ops"], m["tensors"])
    m["name"], m["dims"] = "swin-micro", d
    c.paths["swin-micro"] = os.path.join(c.tmp, "swin-micro.json")
    with open(c.paths["swin-micro"], "w", encoding="utf-8") as f:
        json.dump(m, f)


def decoder_stages(plandump, path):
    """How many programs of the plan hold a buffer of a decoder layer's parameter."""
    text = run(plandump, "--text", path).stdout
    ids = set(re.findall(r'^tensor (\d+) "decoder\.[^"]*" \w+ param ', text, re.M))
    return sum(any(t in ids for t in re.findall(r"^\s*buffer \d+ tensor (\d+) ", prog, re.M)) for prog in text.split("\nprogram ")[1:])


def t5_pipelines(c):
    """The T5 cases; False if one does not spread the decoder over several stages or interleaving
    is not refused."""
    src = os.path.join(c.root, "tests", "models", "t5-tiny.json")
    with open(src, encoding="utf-8") as f:
        text = f.read()
    first = text.index('"repeat": 2')
    second = text.index('"repeat": 2', first + 1)
    c.paths["t5-tiny"], c.paths["t5-tiny-deep"] = src, os.path.join(c.tmp, "t5-tiny-deep.json")
    with open(c.paths["t5-tiny-deep"], "w", encoding="utf-8") as f:
        f.write(text[:first] + '"repeat": 1' + text[first + 11:second] + '"repeat": 6' + text[second + 11:])
    plandump = os.path.join(os.path.dirname(os.path.abspath(c.plancc)), "plandump")
    ok = True
    for model, n, opts in T5:
        out = os.path.join(c.tmp, "t5.plan")
        if c.compile(model, n, opts, out).returncode == 0 and decoder_stages(plandump, out) < 2:
            ok = False
            print(f"FAIL {model} on {n}: {opts}: the decoder's layers are on one stage; the case checks nothing new")
        c.check(model, n, opts, refuse_fails=True)
    p = c.compile("t5-tiny-deep", 2, "--pp 2 --virtual-stages 2 --micro-batches 4", os.path.join(c.tmp, "t5v.plan"))
    if p.returncode != 2 or "only in plain pipelines" not in p.stderr:
        ok = False
        print(f"FAIL t5-tiny-deep on 2: --pp 2 --virtual-stages 2: plancc exits {p.returncode}, not 2 with its refusal\n{p.stderr[-800:]}")
    else:
        print("ok   t5-tiny-deep on 2: --pp 2 --virtual-stages 2 --micro-batches 4 is refused (exit 2)")
    return ok


# --auto's co-shard case passes or fails float32's tolerance by the seed: its tp plan (the heads
# and the MLP split, the layernorms along the sequence) ends 2.2e-5, 5.3e-5, 8.9e-5, 9.5e-6,
# 5.4e-5 and 2.2e-5 from one device at seeds 1 to 6, its batch-split plan before the ILP priced the
# tied weight's readers 1.7e-5, 2.4e-5, 6.1e-5, 1.5e-5, 3.2e-5, 2.2e-5 (AdamW's updates of
# near-zero gradients, above). Both agree within 1.2e-13 in f64 (seed 3), where it is checked.
def auto_coshard(c):
    """--auto's own co-shard (tests/coshard.py asserts that it chooses one here): gpt-tiny with an
    8,192-token vocabulary at 256 tokens, batch 2, on two ranks of 24 MiB, where the plan without
    co-shard recomputes; --auto co-shards the LM head and the loss instead. (model, devices, options)."""
    import json
    with open(os.path.join(c.root, "models", "gpt-tiny.json"), encoding="utf-8") as f:
        m = json.load(f)
    m["dims"].update(V=8192, S=256, B=2, F=1024)
    c.paths["gpt-tiny-v8k"] = os.path.join(c.tmp, "gpt-tiny-v8k.json")
    with open(c.paths["gpt-tiny-v8k"], "w", encoding="utf-8") as f:
        json.dump(m, f)
    with open(os.path.join(c.root, "models", "clusters", "cpu.json"), encoding="utf-8") as f:
        cl = json.load(f)
    cl["device"]["memory_bytes"] = 24 * 2**20
    path = os.path.join(c.tmp, "cpu-24m.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cl, f)
    return "gpt-tiny-v8k", 2, f"--cluster {path} --devices 2 --auto"


def micro_batches(opts):
    w = opts.split()
    if "--policy" in w:  # a policy may pin the count itself
        import json
        with open(w[w.index("--policy") + 1], encoding="utf-8") as f:
            mb = json.load(f).get("mesh", {}).get("micro_batches")
        if mb:
            return mb
    return int(w[w.index("--micro-batches") + 1]) if "--micro-batches" in w else 1


def policies(c):
    """The example policies for gpt-tiny and the tiny imported models: (model, devices, options) of each."""
    import json
    d = os.path.join(c.root, "models", "policies")
    out = []
    for name in sorted(os.listdir(d)):
        model = next((m for m in ("gpt-tiny", "llama-tiny") if name.endswith(f"-{m}.json")), None)
        if model is None:
            continue
        if model != "gpt-tiny":  # the imported models' tiny variants live in tests/models/
            c.paths[model] = os.path.join(c.root, "tests", "models", model + ".json")
        path = os.path.join(d, name)
        with open(path, encoding="utf-8") as f:
            mesh = json.load(f).get("mesh", {})
        n = mesh["dp"] * mesh["tp"] * mesh["pp"] if all(k in mesh for k in ("dp", "tp", "pp")) else 8
        out.append((model, n, f"--policy {path}" + ("" if "micro_batches" in mesh else " --micro-batches 1")))
    return out


def losses(path):
    with open(path, encoding="utf-8") as f:
        return [float(x) for x in f.read().split()]


class Case:
    def __init__(self, plancc, planrun, root, tmp, backend):
        self.plancc, self.planrun, self.root, self.tmp = plancc, planrun, root, tmp
        self.backend = backend  # the parallel plans' backend; the one-device reference runs on cpu
        self.refs = {}
        self.ref_opts = ""  # options of the one-device reference besides its micro-batches
        self.paths = {}  # models that are not in models/: their files

    def variant(self, model, name, old, new):
        """models/MODEL.json with its first `old` replaced by `new`, written to the run's folder
        and known as NAME; returns NAME."""
        with open(os.path.join(self.root, "models", model + ".json"), encoding="utf-8") as f:
            text = f.read()
        assert old in text, f"{model}.json has no {old}"
        path = os.path.join(self.tmp, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
        self.paths[name] = path
        return name

    def compile(self, model, n, opts, out):
        path = self.paths.get(model) or os.path.join(self.root, "models", model + ".json")
        args = opts.split()
        if "--cluster" in args:  # a cluster of its own (node groups): its devices are the file's
            i = args.index("--cluster")
            args[i + 1] = os.path.join(self.root, args[i + 1])
            return run(self.plancc, path, *args, "-o", out)
        return run(self.plancc, path, "--cluster",
                   os.path.join(self.root, "models", "clusters", "cpu.json"), "--devices", n, *opts.split(), "-o", out)

    def reference(self, model, mb, seed=None):
        """The one-device plan with mb micro-batches: its losses and parameter file."""
        seed = seed or SEED
        key = (model, mb, seed)
        if key in self.refs:
            return self.refs[key]
        base = os.path.join(self.tmp, f"{model}-ref-{mb}-{seed}")
        p = self.compile(model, 1, f"--micro-batches {mb} {self.ref_opts}", base + ".plan")
        ref = None
        if p.returncode == 0:
            p = run(self.planrun, base + ".plan", "--steps", STEPS, "--quiet", "--save", base + ".st", "--losses", base + ".loss",
                    "--precision", PRECISION, "--seed", seed)
            if p.returncode == 0:
                ref = (losses(base + ".loss"), base + ".st")
        if ref is None:
            print(f"FAIL {model}: the one-device reference with {mb} micro-batch(es) does not run:\n{p.stdout[-800:]}{p.stderr[-1500:]}")
        self.refs[key] = ref
        return ref

    def check(self, model, n, opts, refuse_fails=False, seed=None, must_run=None):
        """must_run: an operator the plan must run (plandump's text form names it), else a failure."""
        global passed, failed, skipped
        seed = seed or SEED
        name = f"{model} on {n}: {opts}"
        base = os.path.join(self.tmp, "case")
        p = self.compile(model, n, opts, base + ".plan")
        if p.returncode == 2 and not refuse_fails:
            skipped += 1
            reason = (p.stderr.strip().splitlines() or ["?"])[-1]
            print(f"skip {name}: plancc refuses it: {reason}")
            return
        if p.returncode != 0:
            failed += 1
            print(f"FAIL {name}: plancc exits {p.returncode}\n{p.stderr[-1500:]}")
            return
        if must_run:
            d = run(os.path.join(os.path.dirname(self.plancc), "plandump"), base + ".plan", "--text")
            if f"compute {must_run} " not in d.stdout:
                failed += 1
                print(f"FAIL {name}: the plan runs no {must_run} (plandump --text exits {d.returncode})")
                return
        ref = self.reference(model, micro_batches(opts), seed)
        if ref is None:
            failed += 1
            return
        p = run(self.planrun, base + ".plan", "--steps", STEPS, "--quiet", "--losses", base + ".loss",
                "--compare", ref[1], "--rtol", RTOL, "--atol", ATOL, "--backend", self.backend, "--precision", PRECISION, "--seed", seed)
        if p.returncode not in (0, 7):
            failed += 1
            print(f"FAIL {name}: planrun exits {p.returncode}\n{p.stderr[-2000:]}")
            return
        got = losses(base + ".loss")
        for step, (a, b) in enumerate(zip(got, ref[0]), 1):
            if not abs(a - b) <= RTOL * max(abs(b), 1e-30):
                failed += 1
                print(f"FAIL {name}: step {step} loss {a:.9g}, one device {b:.9g} (relative {abs(a - b) / abs(b):.3g})")
                return
        if p.returncode == 7:
            failed += 1
            print(f"FAIL {name}: {p.stderr.strip()}")
            return
        passed += 1
        worst_loss = max(abs(a - b) / abs(b) for a, b in zip(got, ref[0]))
        diff = p.stdout.strip().splitlines()[-1].split("largest difference ")[-1] if p.stdout.strip() else "?"
        print(f"ok   {name}  (losses within {worst_loss:.2g} relative; parameters: largest difference {diff})")


def main():
    global PRECISION, RTOL, ATOL, SEED, failed, skipped
    args = sys.argv[1:]
    backend = "cpu"
    global quick, few
    pol = cs = t5 = folded = il = vocab = False
    global flash
    while args[:1] in (["--backend"], ["--precision"], ["--seed"], ["--quick"], ["--few"], ["--policies"], ["--coshard"],
                       ["--flash"], ["--t5"], ["--folded"], ["--interlaced"], ["--vocab"]) and len(args) > 1:
        if args[0] in ("--t5", "--folded", "--interlaced", "--vocab"):
            t5, folded, il = t5 or args[0] == "--t5", folded or args[0] == "--folded", il or args[0] == "--interlaced"
            vocab = vocab or args[0] == "--vocab"
            args = args[1:]
            continue
        if args[0] == "--flash":
            flash = True
            args = args[1:]
            continue
        if args[0] in ("--policies", "--coshard"):
            pol, cs = pol or args[0] == "--policies", cs or args[0] == "--coshard"
            args = args[1:]
            continue
        if args[0] in ("--quick", "--few"):
            quick = True
            few = args[0] == "--few"
            args = args[1:]
            continue
        if args[0] == "--backend":
            backend = args[1]
        elif args[0] == "--seed":
            SEED = args[1]
        elif args[1] == "f64":
            PRECISION, RTOL, ATOL = "f64", 1e-10, 1e-12
        args = args[2:]
    if len(args) < 3:
        print(__doc__)
        return 2
    plancc, planrun, root = args[:3]
    models = args[3:] or MODELS
    with tempfile.TemporaryDirectory() as tmp:
        c = Case(plancc, planrun, root, tmp, backend)
        for model, n, opts in policies(c) if pol else []:
            c.check(model, n, opts)
        if flash:
            c.ref_opts = "" if PRECISION == "f64" else "--attention flash"
            fm = args[3:] or ["gpt-tiny"]
            for i, model in enumerate(fm):
                if model.endswith(".json"):  # a model file outside models/ (tests/models/...)
                    fm[i] = os.path.splitext(os.path.basename(model))[0]
                    c.paths[fm[i]] = model if os.path.isabs(model) else os.path.join(root, model)
            for model in fm + ([with_attention_dropout(c)] if "gpt-tiny" in fm else []):
                for n in (1, 2, 4, 8):
                    for opts in FLASH[n]:
                        c.check(model, n, opts)
            print(f"{passed} passed, {failed} failed, {skipped} skipped")
            return 1 if failed or not passed else 0
        for model, n, opts in interlaced(c) if il else []:
            c.check(model, n, opts, refuse_fails=True)
        for model, n, opts in interlaced(c, VOCAB, "vocab") if vocab else []:
            c.check(model, n, opts, refuse_fails=True, must_run="vocab_ce_grad")
        for n, opts in COSHARD if cs else []:
            c.check("gpt-tiny", n, opts, refuse_fails=True)
        if t5 and not t5_pipelines(c):
            failed += 1
        if folded:
            if not evoformer_micro(c):
                failed += 1
            swin_micro(c)
            for model, n, opts in FOLDED:
                c.check(model, n, opts.format(policy=c.paths["folded-policy"]), refuse_fails=True)
        if cs and PRECISION != "f64":
            skipped += 1
            print("skip gpt-tiny-v8k on 2: --auto: float32 rounding past the tolerance at seeds 2, 3, 5 and 6 "
                  "(the plan before --auto's tp layouts too); checked in f64")
        elif cs:
            c.check(*auto_coshard(c), refuse_fails=True)
        for model in [] if pol or cs or t5 or folded or il or vocab else models:
            if model.endswith(".json"):  # a model file outside models/ (tests/models/...)
                name = os.path.splitext(os.path.basename(model))[0]
                c.paths[name] = model if os.path.isabs(model) else os.path.join(root, model)
                model = name
            drop = has_dropout(c, model)
            for n in (1, 2, 4) if quick else (1, 2, 4, 8):
                extra = ZIGZAG_DROPOUT_QUICK.get(n, []) if drop and quick and not few and seq_strategies(c, model, n) else []
                for opts in strategies(n) + ([] if quick else burst_strategies(model, n)) + ([] if few else seq_strategies(c, model, n)) \
                        + hetero_strategies(model, n) + extra:
                    c.check(model, n, opts, refuse_fails=drop and "--cp-form zigzag" in opts)
            if model == "gpt-tiny" and not quick:
                deep_pipelines(c)
            if model == "gpt-tiny" and not few:
                long_context(c)
            if drop and quick and not few and model in c.paths and seq_strategies(c, model, 2):
                long_context_dropout(c, model)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
