#!/usr/bin/python3
"""plancc among the tools people know: Megatron-LM's and DeepSpeed's option names, --config, whole
option names in all three tools, one exit-code table and the plan format in every --version, every
--json output against its schema (schemas/compile.schema.json, sim.schema.json,
planrun.schema.json), planrun's --metrics and --plot, and progress on stderr.

usage: ecosystem.py PLANCC PLANDUMP PLANRUN SOURCE_ROOT

Each alias is checked by what it does, not by its parse: the plan it compiles is byte for byte the
plan of the option it stands for. Ends with "N passed, M failed"; exit 1 on a failure.
"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

try:
    from jsonschema import Draft202012Validator
except ImportError:  # pragma: no cover
    Draft202012Validator = None

plancc, plandump, planrun, root = (os.path.abspath(a) for a in sys.argv[1:5])
passed = failed = 0
tools = {"plancc": plancc, "plandump": plandump, "planrun": planrun}


def check(name, ok, p=None, why=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
        return True
    failed += 1
    print(f"FAIL {name} {why}")
    if p is not None:
        print(f"     exit {p.returncode}\n     stdout: {p.stdout[-1500:]!r}\n     stderr: {p.stderr[-1500:]!r}")
    return False


def run(tool, *args, env=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([tools[tool], *[str(a) for a in args]], cwd=root, capture_output=True, text=True, env=e, timeout=600)


def schema(name):
    with open(os.path.join(root, "schemas", name), encoding="utf-8") as f:
        s = json.load(f)
    Draft202012Validator.check_schema(s)
    return Draft202012Validator(s)


def valid(v, doc):
    errs = sorted(v.iter_errors(doc), key=str)
    return (not errs), (errs[0].message if errs else "")


def same_plan(name, a, b, tmp):
    pa, pb = os.path.join(tmp, "a.plan"), os.path.join(tmp, "b.plan")
    base = ["models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", 4, "-q"]
    p = run("plancc", *base, *a, "-o", pa)
    q = run("plancc", *base, *b, "-o", pb)
    ok = p.returncode == 0 and q.returncode == 0 and open(pa, "rb").read() == open(pb, "rb").read()
    check(f"{' '.join(map(str, b))} compiles the plan of {' '.join(map(str, a))}, byte for byte", ok, q if q.returncode else p)


def megatron_names(tmp):
    same_plan("tp", ["--tp", 2, "--dp", 2], ["--tensor-model-parallel-size", 2, "--dp", 2], tmp)
    same_plan("pp", ["--pp", 2, "--dp", 2, "--micro-batches", 2, "--zero", 1],
              ["--pipeline-model-parallel-size", 2, "--dp", 2, "--micro-batches", 2, "--use-distributed-optimizer"], tmp)
    same_plan("recompute", ["--dp", 4, "--recompute", "full"], ["--dp", 4, "--recompute-granularity", "full"], tmp)
    same_plan("selective", ["--dp", 4, "--recompute", "auto"], ["--dp", 4, "--recompute-granularity", "selective"], tmp)
    same_plan("global batch", ["--dp", 4, "--global-batch", 16, "--micro-batch-size", 2],
              ["--dp", 4, "--global-batch-size", 16, "--micro-batch-size", 2], tmp)
    same_plan("zero stage", ["--dp", 4, "--zero", 2], ["--dp", 4, "--zero-stage", 2], tmp)
    same_plan("ones", ["--dp", 4], ["--dp", 4, "--context-parallel-size", 1, "--expert-model-parallel-size", 1], tmp)
    # --num-layers-per-virtual-pipeline-stage N: virtual stages = layers / (pp x N) (gpt2-small: 12 layers)
    est = ["models/gpt2-small.json", "--cluster", "dgx-a100", "--devices", 8, "--pp", 2, "--tp", 4, "--micro-batches", 4,
           "--estimate-only", "--json"]
    p = run("plancc", *est, "--num-layers-per-virtual-pipeline-stage", 3)
    q = run("plancc", *est, "--virtual-stages", 2)
    ok = p.returncode == 0 and q.returncode == 0 and json.loads(p.stdout)["virtual_stages"] == 2 and \
        json.loads(p.stdout)["estimate"] == json.loads(q.stdout)["estimate"]
    check("--num-layers-per-virtual-pipeline-stage 3 on 12 layers and pp 2 is --virtual-stages 2", ok, p)
    p = run("plancc", *est, "--num-layers-per-virtual-pipeline-stage", 5)
    check("--num-layers-per-virtual-pipeline-stage 5: 12 layers do not divide, exit 2", p.returncode == 2 and "12 layers" in p.stderr, p)
    same_plan("cp", ["--dp", 2, "--cp", 2], ["--dp", 2, "--context-parallel-size", 2], tmp)
    for flag, words in [("--expert-model-parallel-size", "no mixture-of-experts")]:
        p = run("plancc", "models/gpt-tiny.json", "--cluster", "cpu", "--devices", 4, flag, 2)
        check(f"{flag} 2: exit 2, says {words!r}", p.returncode == 2 and words in p.stderr and p.stdout == "", p)
    # --bf16 / --fp16 override the model's float dtype (and are recorded in the plan's options)
    p = run("plancc", "--check", "models/gpt-tiny.json", "--bf16", "--json")
    check("--bf16: the model's float tensors become bf16", p.returncode == 0 and json.loads(p.stdout)["dtype"] == "bf16", p)
    p = run("plancc", "--check", "models/gpt3-175b.json", "--fp16", "--json")
    check("--fp16 on a bf16 model: f16", p.returncode == 0 and json.loads(p.stdout)["dtype"] == "f16", p)
    p = run("plancc", "--check", "models/gpt-tiny.json", "--bf16", "--fp16")
    check("--bf16 with --fp16: exit 2", p.returncode == 2 and "exclude each other" in p.stderr, p)
    pa = os.path.join(tmp, "bf.plan")
    p = run("plancc", "models/gpt-tiny.json", "--cluster", "dgx-a100", "--devices", 1, "--bf16", "-q", "-o", pa)
    d = run("plandump", pa)
    check("a --bf16 plan records --bf16 among its options and holds bf16 buffers",
          p.returncode == 0 and "--bf16" in d.stdout and "bf16" in run("plandump", "--text", pa).stdout, d)
    p = run("plancc", "models/gpt-tiny.json", "--cluster", "dgx-a10")
    check("--cluster dgx-a10: exit 2, did you mean dgx-a100", p.returncode == 2 and "did you mean dgx-a100" in p.stderr, p)


def config(tmp):
    cfg = os.path.join(tmp, "job.json")
    with open(cfg, "w") as f:
        json.dump({"model": "models/gpt-tiny.json", "cluster": "models/clusters/cpu.json", "devices": 4,
                   "tensor_model_parallel_size": 2, "--dp": 2, "quiet": True, "json": False}, f)
    pa, pb = os.path.join(tmp, "cfg.plan"), os.path.join(tmp, "flags.plan")
    p = run("plancc", "--config", cfg, "-o", pa)
    q = run("plancc", "models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", 4, "--tp", 2, "--dp", 2, "-q",
            "-o", pb)
    check("--config FILE compiles the plan of the same flags", p.returncode == 0 and q.returncode == 0 and p.stdout == "" and
          open(pa, "rb").read() == open(pb, "rb").read(), p)
    p = run("plancc", f"--config={cfg}", "--tp", 1, "--dp", 4, "-o", pa)
    q = run("plancc", "models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", 4, "--dp", 4, "-q", "-o", pb)
    check("the command line wins over the config", p.returncode == 0 and open(pa, "rb").read() == open(pb, "rb").read(), p)
    with open(cfg, "w") as f:
        json.dump({"model": "models/gpt-tiny.json", "cluster": "models/clusters/cpu.json", "devices": 4, "cp": 2, "--dp": 2,
                   "quiet": True}, f)
    p = run("plancc", "--config", cfg, "-o", pa)
    q = run("plancc", "models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", 4, "--dp", 2, "--cp", 2, "-q",
            "-o", pb)
    check("--config's \"cp\": 2 compiles the plan of --cp 2", p.returncode == 0 and q.returncode == 0 and
          open(pa, "rb").read() == open(pb, "rb").read(), p)
    p = run("plancc", "--config", cfg, "--config", cfg)
    check("two --config: exit 2", p.returncode == 2 and "given twice" in p.stderr, p)
    p = run("plancc", "--config", os.path.join(tmp, "none.json"))
    check("a missing config: exit 2, named", p.returncode == 2 and "none.json" in p.stderr and "cannot open" in p.stderr, p)


def names_and_tables(tmp, plan):
    for tool, args, bad, want in [("plancc", ["models/gpt-tiny.json"], "--clu", "--cluster"),
                                  ("plancc", ["models/gpt-tiny.json"], "--micro-batch", "--micro-batches"),
                                  ("plancc", ["models/gpt-tiny.json"], "--tesnor-model-parallel-size=2", "--tensor-model-parallel-size"),
                                  ("plandump", [plan], "--si", "--sim"), ("plandump", [plan], "--rnak=0", "--rank"),
                                  ("planrun", [plan], "--ste", "--steps"), ("planrun", [plan], "--jsno", "--json")]:
        p = run(tool, *args, bad, *([] if "=" in bad else ["3"]))
        check(f"{tool} {bad}: exit 2, did you mean {want}", p.returncode == 2 and f"did you mean {want}?" in p.stderr
              and p.stdout == "", p)
    versions = {}
    for tool in tools:
        p = run(tool, "--version")
        m = re.search(r"plan format (\d+)", p.stdout)
        versions[tool] = m.group(1) if m else None
        check(f"{tool} --version names the plan format", p.returncode == 0 and m is not None, p)
        h = run(tool, "--help")
        lines = re.findall(r"^\s+(\d+)\s{2}(\S.*)$", h.stdout, re.M)
        table = {int(c): t for c, t in lines}
        ok = h.returncode == 0 and "Exit codes (the same in plancc, plandump and planrun)" in h.stdout and \
            sorted(table) == list(range(15))
        check(f"{tool} --help prints the whole exit-code table, 0 to 14", ok, h)
        versions[tool + " table"] = json.dumps(table, sort_keys=True)
    check("the three tools read the same plan format", len({versions[t] for t in tools}) == 1, None, str(versions))
    check("the three --help tables are one table", len({versions[t + " table"] for t in tools}) == 1)


def json_outputs(tmp, plan):
    if Draft202012Validator is None:
        check("jsonschema is importable (python3-jsonschema)", False)
        return
    comp, sim, lines = schema("compile.schema.json"), schema("sim.schema.json"), schema("planrun.schema.json")
    for name, args in [("dp2 x tp2", ["--tensor-model-parallel-size", 2, "--dp", 2]), ("--auto", []),
                       ("pp2 interleaved", ["--pp", 2, "--dp", 2, "--micro-batches", 4, "--num-layers-per-virtual-pipeline-stage", 1])]:
        p = run("plancc", "models/gpt-tiny.json", "--cluster", "cpu", "--devices", 4, *args, "--json", "-o", os.path.join(tmp, "j.plan"))
        doc = json.loads(p.stdout) if p.returncode == 0 else {}
        ok, why = valid(comp, doc) if doc else (False, "no JSON")
        check(f"plancc --json ({name}): the compile summary follows schemas/compile.schema.json", ok, p, why)
    d = run("plandump", "--sim", "--json", os.path.join(tmp, "j.plan"))
    doc = json.loads(d.stdout) if d.returncode == 0 else {}
    ok, why = valid(sim, doc) if doc else (False, "no JSON")
    check("plandump --sim --json follows schemas/sim.schema.json", ok, d, why)
    if doc:  # the schemas are not vacuous: a member missing, or one too many, is refused
        short = {k: v for k, v in doc.items() if k != "step_s"}
        check("... which refuses a summary without step_s, or with a member it does not know",
              not valid(sim, short)[0] and not valid(sim, {**doc, "speed": 1})[0])
    summary = json.loads(p.stdout) if p.returncode == 0 else {}
    check("... and simulates the step the compile summary simulated", doc and summary and
          abs(doc["step_s"] - summary["simulation"]["step_s"]) <= 1e-8 * summary["simulation"]["step_s"], d)
    p = run("plancc", "models/mlp.json", "--cluster", "cpu", "--devices", 4, "--burst", "--json", "-o", os.path.join(tmp, "b.plan"))
    doc = json.loads(p.stdout) if p.returncode == 0 else {}
    ok, why = valid(comp, doc) if doc else (False, "no JSON")
    check("plancc --burst --json follows schemas/compile.schema.json", ok and doc["strategy"].get("burst") is True, p, why)
    losses = os.path.join(tmp, "l.txt")
    p = run("planrun", plan, "--steps", 6, "--log-every", 2, "--json", "--losses", losses, "--data", "data/kjv.bin")
    docs = [json.loads(l) for l in p.stdout.splitlines()] if p.returncode == 0 else []
    bad = [valid(lines, d)[1] for d in docs if not valid(lines, d)[0]]
    kinds = [d["type"] for d in docs]
    check("planrun --json: every line follows schemas/planrun.schema.json", docs and not bad, p, str(bad[:2]))
    check("... start, a step line every --log-every 2 of 6 steps, summary", kinds == ["start", "step", "step", "step", "summary"], p)
    want = [float(x) for x in open(losses).read().split()] if os.path.exists(losses) else []
    steps = [d for d in docs if d["type"] == "step"]
    check("... their losses are the run's (--losses)", [d["loss"] for d in steps] == want[1::2] and
          docs[-1]["last_loss"] == want[-1] and docs[-1]["first_loss"] == want[0], p)
    check("... a token model counts tokens per second, samples too",
          all(d["tokens_per_s"] > 0 and d["samples_per_s"] > 0 and d["arena_bytes"] > 0 for d in steps), p)
    check("... and the text goes to stderr", "planrun:" in p.stderr and "model gpt-tiny" in p.stderr, p)


def metrics(tmp, plan):
    c, j, svg = (os.path.join(tmp, n) for n in ("m.csv", "m.jsonl", "m.svg"))
    p = run("planrun", plan, "--steps", 5, "--metrics", c, "--log-every", 0, "--losses", os.path.join(tmp, "l.txt"), "--plot", svg)
    rows = list(csv.DictReader(open(c))) if p.returncode == 0 else []
    want = [float(x) for x in open(os.path.join(tmp, "l.txt")).read().split()] if p.returncode == 0 else []
    check("--metrics F.csv: a header and one row per step, with the run's losses", len(rows) == 5 and
          [float(r["loss"]) for r in rows] == want and [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5] and
          all(float(r["time_s"]) > 0 for r in rows), p)
    p = run("planrun", plan, "--steps", 4, "--metrics", j, "--quiet")
    got = [json.loads(l) for l in open(j)] if p.returncode == 0 else []
    check("--metrics F.jsonl: one step object per step", len(got) == 4 and all(g["type"] == "step" for g in got), p)
    try:
        t = ET.parse(svg).getroot()
        lines = [e for e in t.iter() if e.tag.endswith("polyline")]
        pts = [len(e.get("points").split()) for e in lines]
        ok = t.tag.endswith("svg") and pts == [5, 5]
    except (ET.ParseError, OSError) as e:
        ok, pts = False, str(e)
    check("--plot F.svg: an SVG with the loss and the step time over the 5 steps", ok, None, str(pts))
    for opt in ("--metrics", "--plot"):
        p = run("planrun", plan, "--steps", 1, opt, tmp)
        check(f"{opt} on a directory: exit 8, named", p.returncode == 8 and "not a regular file" in p.stderr, p)


def progress(tmp, plan):
    env = {"PLANCC_PROGRESS_S": "0.05"}
    p = run("planrun", plan, "--steps", 40, "--log-every", 0, "--emulate-network", "--dilation", 20, env=env)
    check("planrun: progress lines on stderr though it is a pipe", p.returncode == 0 and
          re.search(r"planrun: training .*: \d+ of 40 steps, \d+ s, loss", p.stderr), p)
    q = run("planrun", plan, "--steps", 40, "--log-every", 0, "--emulate-network", "--dilation", 20, "-q", env=env)
    check("planrun -q: no progress, nothing at all", q.returncode == 0 and q.stderr == "" and q.stdout == "", q)
    big = os.path.join(tmp, "big.plan")
    c = run("plancc", "models/gpt3-175b.json", "--cluster", "dgx-a100", "--nodes", 64, "--dp", 1, "--tp", 8, "--pp", 64,
            "--micro-batches", 64, "-q", "-o", big)
    d = run("plandump", "--sim", big, env={"PLANCC_PROGRESS_S": "0.001"})
    check("plandump --sim: progress lines on stderr", c.returncode == 0 and d.returncode == 0 and
          re.search(r"plandump: (reading|checking|simulating) ", d.stderr), d)
    d = run("plandump", "--sim", "-q", big, env={"PLANCC_PROGRESS_S": "0.001"})
    check("plandump -q: none", d.returncode == 0 and d.stderr == "", d)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "gpt4.plan")
        p = run("plancc", "models/gpt-tiny.json", "--cluster", "cpu", "--devices", 4, "-q", "-o", plan)
        check("compile gpt-tiny for 4 cpu ranks", p.returncode == 0, p)
        megatron_names(tmp)
        config(tmp)
        names_and_tables(tmp, plan)
        json_outputs(tmp, plan)
        metrics(tmp, plan)
        progress(tmp, plan)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
