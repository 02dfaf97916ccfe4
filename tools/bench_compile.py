#!/usr/bin/env python3
"""Compile speed at scale (issue 22): plancc --auto's CPU seconds, peak memory and ILP work per case.

A benchmark, not a timed test: it prints, for each case, the exit code, the CPU seconds (user +
system of the plancc process, from wait4), the wall seconds, the peak RSS, the candidates the
search looked at of all it had, the ILPs GLPK solved, the answers the memo reused and those the
program without its memory row gave, the seconds inside GLPK, the estimated step and the strategy.
Every plan written is checked again by plandump --check-only.

The cases:
  targets   GPT-3 175B on 1024 A100s, --global-batch 1536 (<= 10 s and <= 1 GiB); the 1T GPT of
            Megatron-LM's SC'21 paper on 3072 A100s, --global-batch 3072 (<= 30 s, with a plan);
  real      LLaMA-2-7B-sized on 64 A100s, --global-batch 1024; the 48-block Evoformer on 64 A100s,
            --global-batch 128;
  devices   GPT-3 175B, --global-batch 1536, on 64 ... 4096 A100s (bounded as devices grow);
  layers    GPT-3 175B's layer, 12 ... 192 layers, 1024 A100s, --global-batch 1536 (at most linear);
  models    every model in models/ at 8 and 64 A100s, its own batch (<= 10 s each; exit 3, nothing
            fits, is an answer too).

Exit status 1 on a crash, an unexpected exit code, a plan that fails plan_check or output that
does not parse; a missed target only with --strict.

usage: bench_compile.py [--plancc P] [--plandump P] [--root DIR] [--only GROUP,...] [--strict]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30
SEARCH_RE = re.compile(r"searched (\d+) of (\d+) candidates .*?; ILPs: (\d+) solved in (\S+) s, (\d+) reused, "
                       r"(\d+) answered without their memory row")
EST_RE = re.compile(r"estimated step (\S+) s")


def cases(root):
    a100 = os.path.join(root, "models", "clusters", "dgx-a100.json")
    m = lambda name: os.path.join(root, "models", name + ".json")
    out = [("targets", "GPT-3 175B", m("gpt3-175b"), 1024, 1536, None, (10.0, GIB)),
           ("targets", "GPT 1T", m("megatron-1t"), 3072, 3072, None, (30.0, None)),
           ("real", "LLaMA-2-7B", m("llama2-7b"), 64, 1024, None, (10.0, None)),
           ("real", "Evoformer-48", m("evoformer"), 64, 128, None, (10.0, None))]
    out += [("devices", "GPT-3 175B", m("gpt3-175b"), n, 1536, None, None) for n in (64, 128, 256, 512, 1024, 2048, 4096)]
    out += [("layers", f"GPT-3 x{l} layers", m("gpt3-175b"), 1024, 1536, l, None) for l in (12, 24, 48, 96, 192)]
    names = sorted(f[:-5] for f in os.listdir(os.path.join(root, "models")) if f.endswith(".json"))
    out += [("models", n, m(n), g, None, None, (10.0, None)) for n in names for g in (8, 64)]
    return [(grp, name, model, a100, n, gb, layers, target) for grp, name, model, n, gb, layers, target in out]


def with_layers(tmp, model, layers):
    with open(model, encoding="utf-8") as f:
        d = json.load(f)
    for o in d["ops"]:
        if "repeat" in o:
            o["repeat"] = layers
    path = os.path.join(tmp, f"{os.path.basename(model)[:-5]}.L{layers}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f)
    return path


def run_measured(cmd, tmp):
    """(exit code, stdout, stderr, wall s, CPU s, peak RSS bytes) of one plancc run."""
    out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
    with open(out, "w") as fo, open(err, "w") as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        _, status, ru = os.wait4(p.pid, 0)   # this child's own rusage (ru_maxrss in KiB on Linux)
        wall = time.perf_counter() - t0
    with open(out) as fo, open(err) as fe:
        return (os.waitstatus_to_exitcode(status), fo.read(), fe.read(), wall, ru.ru_utime + ru.ru_stime,
                ru.ru_maxrss * 1024)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plancc", default=os.path.join(here, "..", "build", "plancc"))
    ap.add_argument("--plandump", default=None)
    ap.add_argument("--root", default=os.path.join(here, ".."))
    ap.add_argument("--only", default="", help="comma-separated groups: targets, real, devices, layers, models")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    a = ap.parse_args()
    plancc = os.path.abspath(a.plancc)
    plandump = os.path.abspath(a.plandump or os.path.join(os.path.dirname(plancc), "plandump"))
    root = os.path.abspath(a.root)
    only = {g.strip() for g in a.only.split(",") if g.strip()}
    failures, missed = [], []
    print("plancc --auto (A100 cluster): CPU s = user + system of the plancc process; RSS its peak; cands: looked at "
          "of all; ILPs: GLPK solves, memo reuses, answers without the memory row, seconds in GLPK")
    hdr = (f"{'group':<8} {'case':<20} {'GPUs':>5} {'batch':>6} {'exit':>4} | {'CPU s':>7} {'wall s':>7} {'RSS MiB':>8} | "
           f"{'cands':>11} {'solved':>6} {'reused':>6} {'relaxed':>7} {'ILP s':>6} | {'est step s':>10} | strategy")
    print(hdr)
    print("-" * len(hdr), flush=True)
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_compile.") as tmp:
        for grp, name, model, cluster, n, gb, layers, target in cases(root):
            if only and grp not in only:
                continue
            path = with_layers(tmp, model, layers) if layers else model
            plan = os.path.join(tmp, "out.plan")
            if os.path.exists(plan):
                os.unlink(plan)
            cmd = [plancc, path, "--cluster", cluster, "--devices", str(n), "-o", plan]
            if gb:
                cmd += ["--global-batch", str(gb)]
            rc, out, err, wall, cpu, rss = run_measured(cmd, tmp)
            what = f"{grp} {name} on {n} GPUs"
            if rc not in (0, 3) or (rc == 3 and grp in ("targets",)):
                failures.append(f"{what}: exit {rc}: {err.strip()[-400:]}")
            if rc == 0:
                chk = subprocess.run([plandump, "--check-only", plan], capture_output=True, text=True)
                if chk.returncode != 0:
                    failures.append(f"{what}: plandump --check-only exit {chk.returncode}: {chk.stderr.strip()[-300:]}")
            s = SEARCH_RE.search(out + err)
            e = EST_RE.search(out)
            strat = out.splitlines()[0].split("): ", 1)[1].replace(" (--auto)", "") if rc == 0 and "): " in out else (
                "nothing fits" if rc == 3 else "-")
            cands = f"{s[1]}/{s[2]}" if s else "-"
            ilp = (s[3], s[5], s[6], float(s[4])) if s else ("-", "-", "-", float("nan"))
            mark = ""
            if target:
                ok = cpu <= target[0] and (target[1] is None or rss <= target[1]) and (rc == 0 or grp == "models")
                mark = " [target met]" if ok else " [TARGET MISSED]"
                if not ok:
                    missed.append(f"{what}: {cpu:.2f} s CPU, {rss / GIB:.2f} GiB, exit {rc} (target {target[0]} s"
                                  + (f", {target[1] / GIB:.0f} GiB)" if target[1] else ")"))
            batch = str(gb) if gb else "model"
            print(f"{grp:<8} {name:<20} {n:>5} {batch:>6} {rc:>4} | {cpu:>7.2f} {wall:>7.2f} {rss / (1 << 20):>8.1f} | "
                  f"{cands:>11} {ilp[0]:>6} {ilp[1]:>6} {ilp[2]:>7} {ilp[3]:>6.2f} | "
                  f"{(float(e[1]) if e else float('nan')):>10.4g} | {strat}{mark}", flush=True)
    print(f"\ncases in {time.perf_counter() - t_all:.1f} s")
    for m in missed:
        print(f"target missed: {m}")
    if failures:
        print(f"FAILED: {len(failures)}")
        for f in failures:
            print(f"  {f}")
        return 1
    if a.strict and missed:
        return 1
    print("ok: every compile ended as it should and every plan passed plan_check" + ("" if missed else "; every target met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
