#!/usr/bin/env python3
"""The compiler end to end: plancc writes plans that plan_check accepts, plandump shows, and whose
text form assembles back to the same bytes; the same input gives the same bytes.

usage: compile_plans.py PLANCC PLANDUMP SOURCE_ROOT

For mlp, gpt-tiny, cnn-small and dlrm on 1, 2, 4 and 8 CPU ranks (models/clusters/cpu.json), under
--auto, DP, TP, PP (1F1B and GPipe), DP x TP x PP, ZeRO-3 and full recompute:
  - plancc exits 0 and says "plan_check passed" (plancc runs plan_check on what it emits);
  - plandump PLAN (summary) and plandump --check-only exit 0;
  - (under --auto) every param carries its initializer and every input its data source, as the
    model file gives them (plandump --json), and no other tensor has either;
  - plandump --text PLAN | plandump --assemble gives the same bytes;
  - a second compile of the same input gives the same bytes (determinism).
A strategy the model cannot take (dp not dividing the batch, more stages than layers) must be
refused with exit 2 and a message that says why. Also: a plan that does not fit exits 3 with the
smallest change that would fit, and plandump refuses a stale plan against another model.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

passed = failed = 0


def check(name, ok, p=None, detail=""):
    global passed, failed
    if ok:
        passed += 1
        return True
    failed += 1
    print(f"FAIL {name}{': ' + detail if detail else ''}")
    if p is not None:
        print(f"     exit {p.returncode}\n     stdout: {p.stdout[-1500:]}\n     stderr: {p.stderr[-1500:]}")
    return False


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def same(a, b):
    with open(a, "rb") as x, open(b, "rb") as y:
        return x.read() == y.read()


def model_facts(root, name):
    with open(os.path.join(root, "models", name + ".json"), encoding="utf-8") as f:
        m = json.load(f)
    layers = sum(o.get("repeat", 1) if "type" not in o else 1 for o in m["ops"])
    return m["dims"]["B"], layers


def strategies(n):
    s = ["--auto", f"--dp {n}", f"--tp {n}", f"--pp {n} --micro-batches 4",
         f"--pp {n} --micro-batches 4 --schedule gpipe", f"--dp {n} --zero 3", f"--dp {n} --recompute full"]
    if n == 4:
        s += ["--dp 2 --tp 2 --pp 1 --micro-batches 2", "--dp 1 --tp 2 --pp 2 --micro-batches 4"]
    if n == 8:
        s += ["--dp 2 --tp 2 --pp 2 --micro-batches 4", "--dp 2 --tp 2 --pp 2 --micro-batches 4 --zero 3 --recompute full",
              "--dp 2 --tp 4 --zero 3"]
    return s


def model_sources(root, name):
    """Each param's init and each input's data, by tensor name, as plandump --json writes them
    (defaults filled in, a dimension name as "high" resolved to its size)."""
    with open(os.path.join(root, "models", name + ".json"), encoding="utf-8") as f:
        m = json.load(f)
    found = {}

    def walk(o):
        if isinstance(o, list):
            for x in o:
                walk(x)
        elif isinstance(o, dict):
            for tname, t in (o.get("tensors") or {}).items():
                if isinstance(t, dict) and t.get("kind") == "param":
                    init = dict(t["init"])
                    if init["kind"] == "normal":
                        init = {"kind": "normal", "mean": init.get("mean", 0), "std": init["std"]}
                    found.setdefault(tname, []).append(("init", init))
                elif isinstance(t, dict) and t.get("kind") == "input":
                    data = dict(t["data"])
                    if isinstance(data.get("high"), str):
                        data["high"] = m["dims"][data["high"]]
                    found.setdefault(tname, []).append(("data", data))
            for v in o.values():
                walk(v)

    walk(m)
    return found


def check_sources(name, plandump, plan, want):
    """The plan carries every param's initializer and every input's data source, as the model says."""
    d = run(plandump, "--json", plan)
    tensors = json.loads(d.stdout)["tensors"] if d.returncode == 0 else []
    bad = []
    for t in tensors:
        if t["kind"] not in ("param", "input"):
            if "init" in t or "data" in t:
                bad.append(f"{t['name']} ({t['kind']}) has a source")
            continue
        key = "init" if t["kind"] == "param" else "data"
        if (key, t.get(key)) not in want.get(t["name"], []):
            bad.append(f"{t['name']}: {key} {t.get(key)}, the model says {want.get(t['name'])}")
    named = {t["name"] for t in tensors if t["kind"] in ("param", "input")}
    bad += [f"{n}: not in the plan" for n in want if n not in named]
    check(name + ": params' inits and inputs' data as the model says", d.returncode == 0 and tensors and not bad,
          d if d.returncode else None, "; ".join(bad[:3]))


def valid(strategy, batch, layers):
    w = strategy.split()
    get = lambda k: int(w[w.index(k) + 1]) if k in w else 1
    return batch % get("--dp") == 0 and get("--pp") <= layers


def main():
    plancc, plandump, root = (os.path.abspath(a) for a in sys.argv[1:4])
    cluster = os.path.join(root, "models", "clusters", "cpu.json")
    tmp = tempfile.mkdtemp(prefix="plancc-compile-")
    refused = 0
    try:
        for model in ["mlp", "gpt-tiny", "cnn-small", "dlrm"]:
            batch, layers = model_facts(root, model)
            sources = model_sources(root, model)
            path = os.path.join(root, "models", model + ".json")
            for n in [1, 2, 4, 8]:
                for strat in strategies(n):
                    name = f"{model} on {n}: {strat}"
                    plan = os.path.join(tmp, "a.plan")
                    args = [plancc, path, "--cluster", cluster, "--devices", n, *strat.split(), "-o", plan]
                    p = run(*args)
                    if not valid(strat, batch, layers):
                        refused += 1
                        check(name + " (refused)", p.returncode == 2 and ("does not divide" in p.stderr or "layers" in p.stderr), p)
                        continue
                    if not check(name, p.returncode == 0 and "plan_check passed" in p.stdout, p):
                        continue
                    d = run(plandump, plan)
                    check(name + ": plandump", d.returncode == 0 and "program" in d.stdout, d)
                    if strat == "--auto":
                        check_sources(name, plandump, plan, sources)
                    d = run(plandump, "--check-only", plan)
                    check(name + ": plandump --check-only", d.returncode == 0, d)
                    text = os.path.join(tmp, "a.txt")
                    d = run(plandump, "--text", plan)
                    with open(text, "w", encoding="utf-8") as f:
                        f.write(d.stdout)
                    back = os.path.join(tmp, "b.plan")
                    a = run(plandump, "--assemble", text, "-o", back)
                    check(name + ": text round trip", d.returncode == 0 and a.returncode == 0 and same(plan, back), a)
                    again = os.path.join(tmp, "c.plan")
                    p2 = run(*args[:-1], again)
                    check(name + ": deterministic", p2.returncode == 0 and same(plan, again), p2)
        # Does not fit: exit 3, by how much, and what would fit.
        gpt3 = os.path.join(root, "models", "gpt3-175b.json")
        a100 = os.path.join(root, "models", "clusters", "dgx-a100.json")
        p = run(plancc, gpt3, "--cluster", a100, "--devices", 8, "--dp", 1, "--tp", 8, "--pp", 1, "-o", os.path.join(tmp, "x.plan"))
        check("gpt3-175b on 8 GPUs: infeasible", p.returncode == 3 and "does not fit" in p.stderr, p)
        # Stale: the plan records its model's hash.
        plan = os.path.join(tmp, "s.plan")
        p = run(plancc, os.path.join(root, "models", "mlp.json"), "--cluster", cluster, "--devices", 2, "-o", plan)
        d = run(plandump, "--model", os.path.join(root, "models", "mlp.json"), "--cluster", cluster, plan)
        check("plandump --model/--cluster: current plan", p.returncode == 0 and d.returncode == 0, d)
        d = run(plandump, "--model", os.path.join(root, "models", "gpt-tiny.json"), "--cluster", cluster, plan)
        check("plandump --model: stale plan refused", d.returncode == 6 and "stale" in d.stderr, d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"({refused} strategies refused as the model requires)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
