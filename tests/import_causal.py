#!/usr/bin/python3
"""tools/plancc-import on causal masks (tools/plancc_import/fuse.py): a mask that attention's
causal attribute computes comes in as that attribute, with no mask left in the model, and
anything else stays what it was.

  * nanoGPT's attention (tests/import_ok/nanogpt.py:make): the scores' masked_fill(tril(ones) ==
    0, -inf) becomes one causal attention per layer, no masked_fill left; --verify 3 agrees with
    PyTorch (f64, one device and four).
  * the same with a band mask (make_window: each query sees 4 keys): not causal, so the
    masked_fill stays and attention stays in its parts; --verify 3 agrees.
  * LLaMA (models/torch/llama.py:make): the additive mask full(-1e9).triu(1) built in forward,
    known by its values: causal attention, no s x s constant; --verify 3 agrees.
  * LLaMA-2 7B on the meta device (make_7b), where the mask has no values: known by how forward
    builds it; every attention causal with three operands, no constant of 4096 x 4096.
  * the tiny LLaMA with its weights (--weights) under ring attention in zigzag order (--cp 2
    --cp-form zigzag, f64): its rotary tables (constants along the sequence) are in zigzag order in
    the plan, planrun --load fills them by logical position (losses equal to one device's), and
    --save writes them back in the logical order (--compare against one device's).
Exit 77 (skip) without python3-torch.

usage: import_causal.py PLANCC PLANRUN SOURCE_ROOT
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, lacks, plancc_import, summary, walk_ops as walk  # noqa: E402


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def square_consts(m, at_least):
    return [t for t, v in m["tensors"].items() if v.get("kind") == "const" and len(v["shape"]) >= 2
            and v["shape"][-1] == v["shape"][-2] and m["dims"][v["shape"][-1]] >= at_least]


def run(*cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True)


def zigzag_load(plancc, planrun, root, tmp):
    model, weights = os.path.join(tmp, "lw.json"), os.path.join(tmp, "lw.st")
    p = run("/usr/bin/python3", os.path.join(root, "tools", "plancc-import"), "torch",
            os.path.join(root, "models", "torch", "llama.py:make"), "-o", model, "--weights", weights)
    if not check("llama.py:make --weights: plancc-import exits 0", p.returncode == 0, p.stderr[-1500:]):
        return
    cpu = os.path.join(root, "models", "clusters", "cpu.json")
    plans = {"one": ["--devices", "1"], "zigzag": ["--devices", "2", "--cp", "2", "--cp-form", "zigzag"]}
    losses = {}
    for name, opts in plans.items():
        plan, lf = os.path.join(tmp, name + ".plan"), os.path.join(tmp, name + ".loss")
        p = run(plancc, model, "--cluster", cpu, *opts, "-q", "-o", plan)
        if not check(f"llama (weights): plancc {' '.join(opts)} exits 0", p.returncode == 0, p.stderr[-1500:]):
            return
        p = run(planrun, plan, "--steps", "3", "--load", weights, "--precision", "f64", "--quiet", "--losses", lf,
                *(["--save", os.path.join(tmp, "zigzag.st")] if name == "zigzag" else []))
        if not check(f"llama (weights): planrun --load ({name}) exits 0", p.returncode == 0, p.stderr[-1500:]):
            return
        with open(lf, encoding="utf-8") as f:
            losses[name] = [float(x) for x in f.read().split()]
    text = run(os.path.join(os.path.dirname(plancc), "plandump"), "--text", os.path.join(tmp, "zigzag.plan")).stdout
    marked = [ln.split('"')[1] for ln in text.splitlines() if ln.startswith("tensor ") and " param " in ln and " zigzag " in ln]
    check(f"llama (weights) --cp 2 --cp-form zigzag: the rotary tables are in zigzag order ({marked})",
          sorted(marked) == ["cos", "sin"], text[:0])
    check(f"llama (weights) --cp 2 --cp-form zigzag: losses equal to one device's ({losses['zigzag']} against {losses['one']})",
          len(losses["one"]) == 3 and all(abs(a - b) <= 1e-12 * abs(b) for a, b in zip(losses["zigzag"], losses["one"])))
    p = run(planrun, os.path.join(tmp, "one.plan"), "--steps", "3", "--load", weights, "--precision", "f64", "--quiet",
            "--compare", os.path.join(tmp, "zigzag.st"), "--rtol", "1e-12", "--atol", "1e-14")
    check("llama (weights): --save of the zigzag plan holds the parameters and tables in logical order (--compare with one device)",
          p.returncode == 0, p.stdout[-800:] + p.stderr[-800:])


def main():
    plancc, planrun, root = sys.argv[1:4]
    if lacks("torch"):
        return 77
    ok_dir = os.path.join(root, "tests", "import_ok")
    with tempfile.TemporaryDirectory() as tmp:
        for factory, causal in (("nanogpt.py:make", True), ("nanogpt.py:make_window", False)):
            out = os.path.join(tmp, factory.replace(":", "-") + ".json")
            p = plancc_import(root, ["torch", os.path.join(ok_dir, factory)], out, plancc, planrun)
            if not check(f"{factory}: plancc-import --verify 3 exits 0", p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]):
                continue
            ops = list(walk(load(out)["ops"]))
            attn = [o for o in ops if o.get("type") == "attention"]
            fills = [o for o in ops if o.get("type") == "masked_fill"]
            if causal:
                check(f"{factory}: the masked scores are one causal attention a layer, no masked_fill left",
                      len(attn) == 1 and attn[0]["attrs"].get("causal") is True and len(attn[0]["in"]) == 3 and not fills,
                      str([(o.get("attrs"), len(o["in"])) for o in attn]) + f", {len(fills)} masked_fill")
            else:
                check(f"{factory}: a band mask is not causal: the masked_fill stays, no attention fused",
                      not attn and len(fills) >= 1, f"{len(attn)} attention, {len(fills)} masked_fill")
        out = os.path.join(tmp, "llama.json")
        p = plancc_import(root, ["torch", os.path.join(root, "models", "torch", "llama.py:make")], out, plancc, planrun)
        if check("llama.py:make: plancc-import --verify 3 exits 0", p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]):
            m = load(out)
            attn = [o for o in walk(m["ops"]) if o.get("type") == "attention"]
            check("llama.py:make: the additive mask built in forward is attention's causal attribute, no s x s constant",
                  attn and all(o["attrs"].get("causal") is True and len(o["in"]) == 3 for o in attn) and not square_consts(m, 2),
                  str([(o.get("attrs"), len(o["in"])) for o in attn]) + str(square_consts(m, 2)))
        zigzag_load(plancc, planrun, root, tmp)
        out = os.path.join(tmp, "llama-7b.json")
        p = subprocess.run(["/usr/bin/python3", os.path.join(root, "tools", "plancc-import"), "torch",
                            os.path.join(root, "models", "torch", "llama.py:make_7b"), "-o", out], capture_output=True, text=True)
        if check("llama.py:make_7b (meta device): plancc-import exits 0", p.returncode == 0, p.stderr[-1500:]):
            m = load(out)
            attn = [o for o in walk(m["ops"]) if o.get("type") == "attention"]
            check("llama.py:make_7b: every attention causal with three operands, no 4096 x 4096 constant",
                  attn and all(o["attrs"].get("causal") is True and len(o["in"]) == 3 for o in attn) and not square_consts(m, 4096),
                  str([(o.get("attrs"), len(o["in"])) for o in attn]) + str(square_consts(m, 4096)))
    return summary()


if __name__ == "__main__":
    sys.exit(main())
