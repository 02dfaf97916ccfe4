#!/usr/bin/env python3
"""Command-line behaviour of plancc: --help/--version, usage errors, exit codes, --json.

usage: cli.py PLANCC SOURCE_ROOT
"""
import json
import os
import subprocess
import sys

plancc, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
passed = failed = 0


def run(*args):
    return subprocess.run([plancc, *args], cwd=root, capture_output=True, text=True)


def check(name, cond, p=None):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}")
        if p is not None:
            print(f"     exit {p.returncode}\n     stdout: {p.stdout[:500]!r}\n     stderr: {p.stderr[:500]!r}")


p = run("--help")
check("--help: usage on stdout, exit 0", p.returncode == 0 and "usage: plancc" in p.stdout and p.stderr == "", p)
check("--help documents the exit codes", "Exit codes" in p.stdout, p)
p = run("--version")
check("--version: version on stdout, exit 0", p.returncode == 0 and p.stdout.startswith("plancc "), p)
p = run()
check("no model: exit 2 with a message", p.returncode == 2 and "no model" in p.stderr and p.stdout == "", p)
p = run("--check", "models/mlp.json", "models/gpt-tiny.json")
check("two models: exit 2", p.returncode == 2 and "more than one model" in p.stderr, p)
p = run("--bogus", "models/mlp.json")
check("unknown option: exit 2, named", p.returncode == 2 and "--bogus" in p.stderr, p)
p = run("--check", "--micro-batches", "0", "models/mlp.json")
check("--micro-batches 0: exit 2", p.returncode == 2 and "micro-batches" in p.stderr, p)
p = run("--check", "--micro-batches")
check("option without value: exit 2", p.returncode == 2 and "needs a value" in p.stderr, p)
p = run("--check", "models/does-not-exist.json")
check("missing file: exit 2, FILE named", p.returncode == 2 and p.stderr.startswith("plancc: models/does-not-exist.json:") and "cannot open" in p.stderr, p)
p = run("--check", "models")
check("a directory: exit 2", p.returncode == 2, p)
p = run("models/mlp.json")
check("compile without --check says what this build does", p.returncode == 2 and "--check" in p.stderr, p)

p = run("--check", "models/gpt-tiny.json")
check("text report: totals", p.returncode == 0 and "parameters" in p.stdout and "FLOPs per step" in p.stdout
      and "memory" in p.stdout and "block layer" in p.stdout, p)
p = run("--check", "--json", "models/gpt-tiny.json")
try:
    r = json.loads(p.stdout)
    ok = (p.returncode == 0 and r["model"] == "gpt-tiny" and r["totals"]["params"] > 0
          and len(r["blocks"]) == 1 and r["blocks"][0]["repeat"] >= 1
          and sum(o["params"] for o in r["ops"] if o["block"] is None)
          + sum(b["params_per_copy"] * b["repeat"] for b in r["blocks"]) == r["totals"]["params"]
          and abs(sum(o["flops_forward"] for o in r["ops"] if o["block"] is None)
                  + sum(b["flops_forward_per_copy"] * b["repeat"] for b in r["blocks"])
                  - r["totals"]["flops"]["forward"]) <= 1e-9 * r["totals"]["flops"]["forward"])
except (ValueError, KeyError) as e:
    ok = False
    print("     ", e)
check("--json report parses; per-op and per-block figures add up to the totals", ok, p)
p = run("--check", "--micro-batches", "4", "--json", "models/mlp.json")
check("--micro-batches accepted", p.returncode == 0 and json.loads(p.stdout)["totals"]["params"] > 0, p)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
