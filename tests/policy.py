#!/usr/bin/env python3
"""User policies (plancc --policy FILE): what a policy does to the plan, read from the plan.

usage: policy.py PLANCC PLANDUMP SOURCE_ROOT

  - every example in models/policies/ compiles with `plancc MODEL --policy FILE` (MODEL from the
    file's name: X-gpt-tiny.json goes with models/gpt-tiny.json on 8 CPU ranks; the others with
    their model on 16 nodes of dgx-a100, --estimate-only), the plan passes plan_check, and its
    estimate (--json) is a finite step;
  - Megatron's policy for gpt-tiny compiles to the template's plan (--dp 2 --tp 2 --pp 2): the
    same text form (plandump --text) but for the recorded options and hashes (the plan records
    the policy) and the notes (which name the rule that pinned a split);
  - every pin reaches the plan: each operator a rule holds shows its split (or replicate) in the
    notes with that rule's pointer, recompute pins show "recompute", /stages shows in the stage of
    each top-level operator;
  - the command line and the policy: a mesh key given both ways and differently is refused at the
    policy's pointer (exit 2); the same value is fine; `"policy"` works as a --config key;
    --policy with --check or --burst, a policy that is a directory, are refused (exit 2);
  - a policy that leaves nothing feasible exits 3 naming the policy: a mesh no factorization
    keeps (tp 3 of 8), a mesh that does not fit the device's memory.
The bad-policy corpus (tests/bad_policy/, run by run_reject.py --policy) holds the malformed and
inconsistent ones; the numerics of the examples are the equivalence suite's (equiv.py --policies).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from common import check, summary


def run(*args, cwd=None):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd)


def text_without(plandump, plan, drop):
    p = run(plandump, "--text", plan)
    return [l for l in p.stdout.splitlines() if not l.startswith(drop)]


def notes(plandump, plan):
    p = run(plandump, "--text", plan)
    for l in p.stdout.splitlines():
        if l.startswith("notes "):
            return json.loads(l[len("notes "):]).split("\n")
    return []


def examples(plancc, plandump, root, tmp):
    d = os.path.join(root, "models", "policies")
    names = sorted(f for f in os.listdir(d) if f.endswith(".json"))
    check("models/policies/ holds a README and at least four examples",
          os.path.exists(os.path.join(d, "README.md")) and len(names) >= 4, str(names))
    for name in names:
        m = re.match(r"(.+)-(gpt-tiny|llama-tiny|gpt3-175b|megatron-[0-9.]+b|llama2-7b|t5-small|mt5-large)\.json$", name)
        if not check(f"{name} names its model", m is not None):
            continue
        model, path = m.group(2), os.path.join(d, name)
        if model.endswith("-tiny"):
            mpath = os.path.join(root, "models" if model == "gpt-tiny" else "tests/models", model + ".json")
            mesh = json.load(open(path, encoding="utf-8")).get("mesh", {})
            n = mesh["dp"] * mesh["tp"] * mesh["pp"] if all(k in mesh for k in ("dp", "tp", "pp")) else 8
            p = run(plancc, mpath, "--cluster", "cpu", "--devices", n, "--policy", path, "-o", os.path.join(tmp, name + ".plan"), "--json")
        else:  # on the DGX A100 nodes its mesh fills (16 where it leaves one open)
            mesh = json.load(open(path, encoding="utf-8")).get("mesh", {})
            nodes = mesh["dp"] * mesh["tp"] * mesh["pp"] // 8 if all(k in mesh for k in ("dp", "tp", "pp")) else 16
            extra = {"mt5-large": ["--global-batch", 1024, "--bf16"]}.get(model, [])  # as pre-trained (its file's batch is 2)
            p = run(plancc, os.path.join(root, "models", model + ".json"), "--cluster", "dgx-a100", "--nodes", nodes, "--policy", path,
                    *extra, "--estimate-only", "--json")
        if not check(f"plancc {model} --policy {name}", p.returncode == 0, p.stderr[-800:]):
            continue
        try:  # a finite estimate, as valid JSON (an infinite cost once printed "inf" here)
            step = json.loads(p.stdout)["estimate"]["step_s"]
        except (ValueError, KeyError) as e:
            step = f"{e}: {p.stdout[:300]}"
        check(f"... its estimate is a finite step", isinstance(step, float) and 0 < step < float("inf"), str(step))


def megatron_equals_template(plancc, plandump, root, tmp):
    model = os.path.join(root, "models", "gpt-tiny.json")
    pol = os.path.join(root, "models", "policies", "megatron-gpt-tiny.json")
    a, b = os.path.join(tmp, "template.plan"), os.path.join(tmp, "policy.plan")
    p = run(plancc, model, "--cluster", "cpu", "--devices", 8, "--dp", 2, "--tp", 2, "--pp", 2, "-o", a, "-q")
    q = run(plancc, model, "--cluster", "cpu", "--devices", 8, "--policy", pol, "-o", b, "-q")
    if not check("the template and Megatron's policy compile", p.returncode == 0 and q.returncode == 0, p.stderr + q.stderr):
        return
    drop = ("options ", "hashes ", "notes ")
    ta, tb = text_without(plandump, a, drop), text_without(plandump, b, drop)
    check("Megatron's policy gives the template's plan (plandump --text but options, hashes, notes)",
          ta == tb and len(ta) > 50, f"{len(ta)} vs {len(tb)} lines")
    opts = [l for l in run(plandump, "--text", b).stdout.splitlines() if l.startswith("options ")]
    check("the plan records the policy in its options", opts and "--policy " in opts[0], str(opts))
    # the notes differ only in their causes: the rules' pointers where the policy pinned
    na, nb = notes(plandump, a), notes(plandump, b)
    strip = [re.sub(r" \([^()]*\)$", "", l) for l in na] == [re.sub(r" \([^()]*\)$", "", l) for l in nb]
    check("the notes differ only in their causes", strip and len(na) == len(nb), "")


def pins_reach_the_plan(plancc, plandump, root, tmp):
    model = os.path.join(root, "models", "gpt-tiny.json")
    d = os.path.join(root, "models", "policies")
    out = os.path.join(tmp, "pins.plan")
    want = {"mixed-gpt-tiny.json": {"linear q": "tp=b.0(B)", "attention o4": "tp=b(B)", "linear f": "tp=n(F)", "linear z": "tp=k(F)"},
            "vocab-gpt-tiny.json": {"embedding tok_emb": "tp=v(V)", "linear logits": "tp=n(V)", "attention o4": "tp=n(N)"}}
    for name, ops in want.items():
        p = run(plancc, model, "--cluster", "cpu", "--devices", 8, "--policy", os.path.join(d, name), "-o", out, "-q")
        n = notes(plandump, out)
        for op, split in ops.items():
            line = next((l for l in n if f" {op}:" in l), "")
            check(f"{name}: {op} has {split}, pinned by a rule", p.returncode == 0 and split in line and "(/rules/" in line, line)
    p = run(plancc, model, "--cluster", "cpu", "--devices", 8, "--policy", os.path.join(d, "unequal-gpt-tiny.json"), "-o", out, "-q")
    n = notes(plandump, out)
    rc = [l for l in n if " linear f:" in l or " linear z:" in l]
    check("unequal-gpt-tiny.json: the MLP's products are recomputed", p.returncode == 0 and len(rc) == 2 and
          all(" recompute" in l for l in rc), str(rc))
    st = {l.split(":")[0].split()[-1]: l for l in n if " stage " in l}
    check("unequal-gpt-tiny.json: /stages [3, 5]: the embeddings on stage 0, the head on stage 1",
          all("stage 0" in st.get(t, "") for t in ("tok_emb", "pos_emb", "h_in")) and
          all("stage 1" in st.get(t, "") for t in ("xf", "logits", "loss")), str(st))


def pinned_stage(plancc, plandump, root, tmp):
    out = os.path.join(tmp, "pinned.plan")
    p = run(plancc, os.path.join(root, "models", "gpt-tiny.json"), "--cluster", "cpu", "--devices", 8, "--policy",
            os.path.join(root, "models", "policies", "pinned-gpt-tiny.json"), "-o", out, "-q")
    st = {l.split(":")[0].split()[-1]: l for l in notes(plandump, out) if " stage " in l}
    check("pinned-gpt-tiny.json: the lookups on stage 0, h_in pinned to stage 1 and the head after it",
          p.returncode == 0 and all("stage 0" in st.get(t, "") for t in ("tok_emb", "pos_emb")) and
          all("stage 1" in st.get(t, "") for t in ("h_in", "xf", "logits", "loss")), str(st))
    pol = os.path.join(tmp, "auto-pins.json")
    with open(pol, "w", encoding="utf-8") as f:  # --auto: only configurations whose cut keeps the pins (pp 2 here)
        json.dump({"version": 1, "mesh": {"tp": 2}, "rules": [{"ops": "h_in", "stage": 1}, {"ops": "logits", "stage": 1}]}, f)
    p = run(plancc, os.path.join(root, "models", "gpt-tiny.json"), "--cluster", "cpu", "--devices", 8, "--policy", pol, "-o", out)
    st = {l.split(":")[0].split()[-1]: l for l in notes(plandump, out) if " stage " in l}
    check("--auto under stage pins: a mesh whose stages keep them", p.returncode == 0 and "pp 2 x dp 2 x tp 2" in p.stdout and
          "stage 1" in st.get("h_in", "") and "stage 0" in st.get("pos_emb", ""), p.stdout[:300] + str(st))


def interlaced(plancc, plandump, root, tmp):
    """interlaced-gpt-tiny.json: the embedding, the LM head and the loss on every stage, split over
    pp x tp (the notes say so, every program runs them); under --auto too, where tp may be 1 and the
    pinned letter still splits over pp."""
    model, out = os.path.join(root, "models", "gpt-tiny.json"), os.path.join(tmp, "interlaced.plan")
    p = run(plancc, model, "--cluster", "cpu", "--devices", 8, "--policy",
            os.path.join(root, "models", "policies", "interlaced-gpt-tiny.json"), "-o", out, "-q")
    n = {l.split(":")[0].split()[-1]: l for l in notes(plandump, out)}
    want = {"tok_emb": "pp=v", "logits": "pp=n", "loss": "pp=v"}
    check("interlaced-gpt-tiny.json: the embedding, head and loss on every stage, split over pp",
          p.returncode == 0 and all("every stage (interlaced), " + v in n.get(t, "") for t, v in want.items()), str(n)[:600])
    text = run(plandump, "--text", out).stdout.split("\nprogram ")[1:]
    check("interlaced-gpt-tiny.json: both programs run the token embedding, the LM head and the loss on its vocabulary pieces",
          len(text) == 2 and all(" compute embedding " in t and t.count(" compute linear ") > 0 and " compute vocab_ce " in t
                                 for t in text), str(len(text)))
    pol = os.path.join(tmp, "auto-interlaced.json")
    with open(pol, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "mesh": {"pp": 2, "schedule": "gpipe"}, "rules": [
            {"ops": "tok_emb", "split": "v", "stage": "all"}, {"ops": "logits", "split": "n", "stage": "all"},
            {"ops": "loss", "stage": "all"}]}, f)
    p = run(plancc, model, "--cluster", "cpu", "--devices", 8, "--policy", pol, "-o", out, "-q")
    n = {l.split(":")[0].split()[-1]: l for l in notes(plandump, out)}
    check("--auto under an interlaced policy: the pinned letters split over pp",
          p.returncode == 0 and "pp=v" in n.get("tok_emb", "") and "pp=n" in n.get("logits", ""), p.stderr[-300:] + str(n)[:300])


def command_line(plancc, root, tmp):
    model = os.path.join(root, "models", "gpt-tiny.json")
    pol = os.path.join(root, "models", "policies", "megatron-gpt-tiny.json")
    base = [plancc, model, "--cluster", "cpu", "--devices", 8, "--estimate-only"]
    p = run(*base, "--policy", pol, "--tp", 4)
    check("a mesh key the command line gives otherwise: exit 2 at the policy's pointer",
          p.returncode == 2 and f"plancc: {pol}:/mesh/tp: " in p.stderr, p.stderr)
    p = run(*base, "--policy", pol, "--tp", 2)
    check("the same value both ways is fine", p.returncode == 0, p.stderr)
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w", encoding="utf-8") as f:
        json.dump({"cluster": "cpu", "devices": 8, "policy": pol}, f)
    p = run(plancc, "--config", cfg, model, "--estimate-only")
    check("\"policy\" as a --config key", p.returncode == 0 and "pp 2 x dp 2 x tp 2" in p.stdout, p.stderr)
    for extra, what in ((["--check"], "--check"), (["--burst"], "--burst")):
        p = run(plancc, model, "--cluster", "cpu", "--devices", 8, *extra, "--policy", pol)
        check(f"--policy with {what}: exit 2", p.returncode == 2 and "--policy" in p.stderr, p.stderr)
    p = run(*base, "--policy", os.path.join(root, "tests"))
    check("a policy that is a directory: exit 2", p.returncode == 2, p.stderr)
    # --sequence-parallel wants a template's tp of 2 or more: the policy's mesh counts
    p = run(*base, "--policy", pol, "--sequence-parallel")
    check("--sequence-parallel with the policy's tp 2", p.returncode == 0 and "sequence parallel" in p.stdout, p.stderr + p.stdout[:300])
    for mesh in ({"dp": 8, "tp": 1, "pp": 1}, {"tp": 2}):
        bad = os.path.join(tmp, "sp.json")
        with open(bad, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "mesh": mesh}, f)
        p = run(*base, "--policy", bad, "--sequence-parallel")
        check(f"--sequence-parallel with a policy's mesh {mesh}: exit 2 at /mesh",
              p.returncode == 2 and f"plancc: {bad}:/mesh: " in p.stderr, p.stderr)


def infeasible(plancc, root, tmp):
    tp3 = os.path.join(tmp, "tp3.json")
    with open(tp3, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "mesh": {"tp": 3}}, f)
    p = run(plancc, os.path.join(root, "models", "gpt-tiny.json"), "--cluster", "cpu", "--devices", 8, "--policy", tp3,
            "--estimate-only")
    check("a mesh no factorization keeps: exit 3 naming the policy",
          p.returncode == 3 and f"plancc: {tp3}: nothing feasible under this policy" in p.stderr, p.stderr)
    one = os.path.join(tmp, "one.json")
    with open(one, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "mesh": {"dp": 1, "tp": 1, "pp": 1}}, f)
    p = run(plancc, os.path.join(root, "models", "gpt3-175b.json"), "--cluster", "dgx-a100", "--devices", 1, "--policy", one,
            "--estimate-only")
    check("a mesh that does not fit memory: exit 3 naming the policy",
          p.returncode == 3 and f"plancc: {one}: nothing feasible under this policy" in p.stderr, p.stderr[-600:])


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    plancc, plandump, root = (os.path.abspath(a) for a in sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        examples(plancc, plandump, root, tmp)
        megatron_equals_template(plancc, plandump, root, tmp)
        pins_reach_the_plan(plancc, plandump, root, tmp)
        pinned_stage(plancc, plandump, root, tmp)
        interlaced(plancc, plandump, root, tmp)
        command_line(plancc, root, tmp)
        infeasible(plancc, root, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
