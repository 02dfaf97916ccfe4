#!/usr/bin/env python3
"""Random user policies on gpt-tiny: every pin is kept, and every plan trains like one device.

usage: policy_random.py [--seed S] [--count N] PLANCC PLANDUMP PLANRUN SOURCE_ROOT

Draws N policies (default 12, seed 1): a mesh of 8 CPU ranks (some with keys left open for
--auto), and rules that pin 1 to 8 operators of gpt-tiny to a random letter of theirs (or
replicate), some block operators' recompute on or off, sets of top-level operators interlaced
("stage": "all": INTERLACE, under GPipe or 1F1B). The operators' names come from the model,
their letters from plancc itself (the diagnostic of a probe policy lists them). For each:
  - plancc exits 0, 2 (a split that does not divide over the mesh, a recompute pin on an
    operator phase 1 offers no recompute of, recompute false under recompute full: the
    diagnostic at the rule) or 3; nothing else (no crash, no internal error: seed 7 once found
    two plans that failed plan_check - the block's last residual add recomputed alone, and an
    MLP product kept out of full recompute - whose recomputed operators read what nothing kept);
  - a plan's notes show every split pin on its operator (tp=LETTER, the rule's pointer) and every
    recompute pin;
  - the plan trains 3 steps in f64 like the one-device plan (planrun --compare, 1e-10).
At least half the policies must compile, so that the check is not vacuous.
What it catches: a pin the search drops or overrides (the ILP's merging of element-wise
operators, the recompute modes), a combination of pins phase 3 turns into wrong arithmetic, a
crash on a legal but odd policy.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

# Sets of gpt-tiny's top-level operators to interlace: the tied embedding and LM head with the loss,
# the position embedding (alone, with those, and with the sum of the two), the final norm with the head.
INTERLACE = [["tok_emb", "logits", "loss"], ["pos_emb"], ["tok_emb", "logits", "loss", "pos_emb"],
             ["tok_emb", "logits", "loss", "pos_emb", "h_in"], ["tok_emb", "logits", "loss", "xf"]]
IL_SPLIT = {"tok_emb": "v", "logits": "n", "loss": "v", "pos_emb": "b.0", "h_in": "x1", "xf": "b.1"}  # along V (the loss: vocabulary-parallel) or S
MESHES = [{"dp": 2, "tp": 2, "pp": 2}, {"dp": 1, "tp": 2, "pp": 4}, {"dp": 2, "tp": 2, "pp": 2, "recompute": "full"}, {"dp": 1, "tp": 4, "pp": 2}, {"dp": 2, "tp": 4, "pp": 1}, {"tp": 2}, {"dp": 1, "tp": 8, "pp": 1}]


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def op_names(model):
    m = json.load(open(model, encoding="utf-8"))
    names = []
    for op in m["ops"]:
        if "block" in op:
            names += [(op["block"] + "." + o["out"][0], True) for o in op["ops"]]
        else:
            names.append((op["out"][0], False))
    return names


def letters(plancc, model, tmp, name):
    probe = os.path.join(tmp, "probe.json")
    with open(probe, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "rules": [{"ops": name, "split": "?!"}]}, f)
    p = run(plancc, model, "--cluster", "cpu", "--devices", 8, "--estimate-only", "--policy", probe)
    m = re.search(r"its letters: (.*)$", p.stderr.strip())
    if not m:
        return []
    return [l for l in m.group(1).split(", ") if "(unsplittable)" not in l]


def main():
    args = sys.argv[1:]
    seed, count = 1, 12
    while args[:1] in (["--seed"], ["--count"]):
        if args[0] == "--seed":
            seed = int(args[1])
        else:
            count = int(args[1])
        args = args[2:]
    if len(args) != 4:
        print(__doc__)
        return 2
    plancc, plandump, planrun, root = (os.path.abspath(a) for a in args)
    model = os.path.join(root, "models", "gpt-tiny.json")
    rng = random.Random(seed)
    passed = failed = compiled = 0
    with tempfile.TemporaryDirectory() as tmp:
        ops = {n: (b, letters(plancc, model, tmp, n)) for n, b in op_names(model)}
        if not all(ls for _, ls in ops.values()):
            print(f"FAIL the probe found no letters for {[n for n, (_, ls) in ops.items() if not ls]}")
            return 1
        ref = os.path.join(tmp, "ref")
        p = run(plancc, model, "--cluster", "cpu", "--devices", 1, "--micro-batches", 2, "-o", ref + ".plan", "-q")
        q = run(planrun, ref + ".plan", "--steps", 3, "--quiet", "--save", ref + ".st", "--precision", "f64", "--seed", 3)
        if p.returncode or q.returncode:
            print(f"FAIL the one-device reference: {p.stderr}{q.stderr}")
            return 1
        irng = random.Random(seed + 1000)  # interlacing's draws, apart from the rest's
        for i in range(count):
            rules = []
            for name in rng.sample(sorted(ops), rng.randint(1, 8)):
                block, ls = ops[name]
                r = {"ops": name, "split": rng.choice(ls + ["replicate"])}
                if block and rng.random() < 0.3:
                    r["recompute"] = rng.random() < 0.5
                rules.append(r)
            if irng.random() < 0.4:  # interlace a set of top-level operators that phase 3 can order
                for name in irng.choice(INTERLACE):
                    r = next((r for r in rules if r["ops"] == name), None)
                    if r is None:
                        r = {"ops": name, "split": IL_SPLIT[name]}
                        rules.append(r)
                    r["stage"] = "all"
            pol = {"version": 1, "mesh": rng.choice(MESHES), "rules": rules}
            if any(r.get("stage") == "all" for r in rules) and irng.random() < 0.5:
                pol["mesh"] = dict(pol["mesh"], schedule="gpipe")
            path, plan = os.path.join(tmp, f"p{i}.json"), os.path.join(tmp, f"p{i}.plan")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(pol, f)
            p = run(plancc, model, "--cluster", "cpu", "--devices", 8, "--micro-batches", 2, "--policy", path, "-o", plan, "-q")
            what = f"policy {i} {json.dumps(pol)}"
            if p.returncode == 2 and re.search(r":/rules/\d+/(split: .* does not divide|recompute: .* (no recompute candidate|recomputes every block operator)"
                                               r"|stage: interlaces .*(interlace both, or neither|interlace that one too"
                                               r"|every stage needs one|reads what it makes))", p.stderr):
                passed += 1
                print(f"ok   {what}: refused: {p.stderr.strip().splitlines()[-1]}")
                continue
            if p.returncode == 3:
                passed += 1
                print(f"ok   {what}: infeasible (exit 3)")
                continue
            if p.returncode != 0:
                failed += 1
                print(f"FAIL {what}: plancc exits {p.returncode}: {p.stderr[-800:]}")
                continue
            compiled += 1
            notes = []
            for line in run(plandump, "--text", plan).stdout.splitlines():
                if line.startswith("notes "):
                    notes = json.loads(line[len("notes "):]).split("\n")
            lost = []
            for k, r in enumerate(rules):
                out = r["ops"].split(".")[-1]
                line = next((l for l in notes if re.search(rf" {re.escape(out)}: ", l)), "")  # gpt-tiny's names are unique
                want = "tp=replicate" if r["split"] == "replicate" else f"tp={r['split']}("
                if want not in line or f"(/rules/{k})" not in line:
                    lost.append(f"{r['ops']} wants {want} by /rules/{k}: {line!r}")
                if r.get("stage") == "all" and "pp" in line.split(":")[1] and "every stage (interlaced)" not in line:
                    lost.append(f"{r['ops']} wants every stage by /rules/{k}: {line!r}")
                if "recompute" in r and (" recompute " in line) != r["recompute"]:
                    lost.append(f"{r['ops']} wants recompute {r['recompute']}: {line!r}")
            q = run(planrun, plan, "--steps", 3, "--quiet", "--compare", ref + ".st", "--rtol", "1e-10", "--atol", "1e-12",
                    "--precision", "f64", "--seed", 3)
            if lost or q.returncode != 0:
                failed += 1
                print(f"FAIL {what}: {'; '.join(lost)} {('planrun exits %d: %s' % (q.returncode, q.stderr[-600:])) if q.returncode else ''}")
            else:
                passed += 1
                print(f"ok   {what}: pins kept, trains like one device")
    if compiled * 2 < count:
        failed += 1
        print(f"FAIL only {compiled} of {count} policies compiled: the check is nearly vacuous")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
