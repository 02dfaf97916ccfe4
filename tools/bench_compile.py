#!/usr/bin/env python3
"""Compile speed and scale (issue 5, item 6): plancc --auto on GPT-3 175B for 64, 256, 1024 and
4096 GPUs (DGX A100; 1024 also on DGX H100) and on the 1T GPT of Megatron-LM's SC'21 paper for
3072 A100s, with the wall time, peak memory (RSS) of the plancc process, the ILP's size,
objective, bound and gap, the plan's size and the strategy --auto chose.

Each model trains on its real global batch: GPT-3's 1536 sequences (3.2 M tokens, Brown et al.)
and the 1T model's 3072 (the paper's). plancc's batch dimension B is one micro-batch of all
data-parallel replicas and --micro-batches M the accumulation, so B x M is the global batch:
B = 8 up to 1024 GPUs (Megatron-LM's dp 8 x micro-batch 1), 32 on 4096 (so dp can reach 32),
and 6 for the 1T model (the paper's dp 6). The model file is copied with B set.

plancc -v prints one line per factorization it searched ("candidate K: ...; key=value ...");
the ILP figures here are the chosen one's and, over all candidates, the largest ILP and the
total solve time. Every plan is checked again by plandump --check-only (plan_check on load).

Targets (the issue's): 175B on 1024 GPUs in <= 10 s and <= 1 GiB; 1T on 3072 GPUs in <= 30 s.
Exit status 1 on a crash, an unexpected exit code, a plan that fails plan_check or output that
does not parse; a missed target only with --strict (a benchmark fails on wrong results, not time).

usage: bench_compile.py [--plancc P] [--plandump P] [--root DIR] [--strict] [--repeat N]
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
ILP_RE = re.compile(r"ILP \(tp group of (\d+)\): (\d+) rows x (\d+) columns, ([^,]+(?:, [^,]+)?), objective (\S+) s, "
                    r"bound (\S+) s, gap (\S+)%, (\S+) s")
CAND_RE = re.compile(r"^  candidate (\d+): (.*); (est_step_s=.*)$")


def cases(root):
    a100 = os.path.join(root, "models", "clusters", "dgx-a100.json")
    h100 = os.path.join(root, "models", "clusters", "dgx-h100.json")
    gpt3 = os.path.join(root, "models", "gpt3-175b.json")
    t1 = os.path.join(root, "models", "megatron-1t.json")
    c = [("GPT-3 175B", gpt3, a100, n, 8, 192, None) for n in (64, 256, 1024)]
    c.append(("GPT-3 175B", gpt3, h100, 1024, 8, 192, None))
    c.append(("GPT-3 175B", gpt3, a100, 4096, 32, 48, None))
    c.append(("GPT 1T", t1, a100, 3072, 6, 512, None))
    # (name, model, cluster, GPUs, B, M, target (seconds, bytes) or None)
    c[2] = c[2][:6] + ((10.0, GIB),)
    c[5] = c[5][:6] + ((30.0, None),)
    return c


def with_batch(tmp, model, batch):
    with open(model, encoding="utf-8") as f:
        m = json.load(f)
    m["dims"]["B"] = batch
    path = os.path.join(tmp, f"{os.path.basename(model)[:-5]}.B{batch}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(m, f)
    return path


def run_measured(cmd, tmp):
    """Runs cmd; returns (exit code, stdout, stderr, wall seconds, peak RSS bytes of that child)."""
    out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
    with open(out, "w") as fo, open(err, "w") as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        _, status, ru = os.wait4(p.pid, 0)   # this child's own rusage (ru_maxrss in KiB on Linux)
        dt = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    with open(out) as fo, open(err) as fe:
        return p.returncode, fo.read(), fe.read(), dt, ru.ru_maxrss * 1024


def parse(stdout):
    lines = stdout.splitlines()
    r = {"strategy": lines[0].split("): ", 1)[1].replace(" (--auto)", "") if lines and "): " in lines[0] else "?"}
    m = ILP_RE.search(stdout)
    if not m:
        return None
    r.update(tp=int(m[1]), rows=int(m[2]), cols=int(m[3]), status=m[4], objective=float(m[5]), bound=float(m[6]),
             gap=float(m[7]), ilp_s=float(m[8]))
    cands = []
    for ln in lines:
        c = CAND_RE.match(ln)
        if c:
            kv = dict(x.split("=", 1) for x in c[3].split())
            cands.append({"strategy": c[2], **kv})
    r["candidates"] = cands
    r["max_rows"] = max([int(c["ilp_rows"]) for c in cands] + [r["rows"]])
    r["max_cols"] = max([int(c["ilp_cols"]) for c in cands] + [r["cols"]])
    r["ilp_total_s"] = sum(float(c["ilp_s"]) for c in cands)
    est = re.search(r"estimated step (\S+) s", stdout)
    r["est_step_s"] = float(est[1]) if est else float("nan")
    return r


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plancc", default=os.path.join(here, "..", "build", "plancc"))
    ap.add_argument("--plandump", default=None)
    ap.add_argument("--root", default=os.path.join(here, ".."))
    ap.add_argument("--repeat", type=int, default=3, help="compiles per case; the best wall time is reported")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    a = ap.parse_args()
    plancc = os.path.abspath(a.plancc)
    plandump = os.path.abspath(a.plandump or os.path.join(os.path.dirname(plancc), "plandump"))
    root = os.path.abspath(a.root)
    failures, missed = [], []
    print(f"plancc --auto -v at scale (best wall time of {a.repeat}; RSS: the plancc process's peak; "
          f"ILP: the chosen factorization's tp-group program; cands: factorizations that fit the ILP)")
    hdr = (f"{'model':<11} {'cluster':<9} {'GPUs':>5} {'B x M':>8} | {'wall s':>7} {'RSS MiB':>8} | {'ILP rows':>8} "
           f"{'cols':>5} {'gap %':>6} {'objective':>10} {'bound':>10} | {'cands':>5} {'max cols':>8} {'ILP s':>6} | "
           f"{'plan':>9} | {'est step s':>10} | strategy")
    print(hdr)
    print("-" * len(hdr), flush=True)
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_compile.") as tmp:
        for name, model, cluster, n, B, M, target in cases(root):
            path = with_batch(tmp, model, B)
            snap = os.path.join(tmp, os.path.basename(cluster))   # the same bytes for every repeat
            with open(cluster, "rb") as f, open(snap, "wb") as o:
                o.write(f.read())
            plan = os.path.join(tmp, "out.plan")
            cmd = [plancc, path, "--cluster", snap, "--devices", str(n), "--micro-batches", str(M), "-v", "-o", plan]
            what = f"{name} on {n} x {os.path.basename(cluster)[:-5]}"
            best = None
            for _ in range(max(1, a.repeat)):
                rc, out, err, dt, rss = run_measured(cmd, tmp)
                if rc != 0:
                    failures.append(f"{what}: plancc exit {rc}: {err.strip()[-500:]}")
                    break
                if best is None or dt < best[0]:
                    best = (dt, rss, out)
            if rc != 0:
                print(f"{name:<11} {os.path.basename(cluster)[:-5]:<9} {n:>5} {f'{B}x{M}':>8} | FAILED (exit {rc})", flush=True)
                continue
            dt, rss, out = best
            r = parse(out)
            chk = subprocess.run([plandump, "--check-only", plan], capture_output=True, text=True)
            if chk.returncode != 0:
                failures.append(f"{what}: plandump --check-only exit {chk.returncode}: {chk.stderr.strip()[-300:]}")
            if r is None or "plan_check passed" not in out:
                failures.append(f"{what}: plancc's output did not parse (no ILP line or no 'plan_check passed')")
                continue
            size = os.path.getsize(plan)
            mark = ""
            if target:
                ok = dt <= target[0] and (target[1] is None or rss <= target[1])
                mark = " [target met]" if ok else " [TARGET MISSED]"
                if not ok:
                    missed.append(f"{what}: {dt:.2f} s, {rss / GIB:.2f} GiB (target {target[0]} s"
                                  + (f", {target[1] / GIB:.0f} GiB)" if target[1] else ")"))
            print(f"{name:<11} {os.path.basename(cluster)[:-5]:<9} {n:>5} {f'{B}x{M}':>8} | {dt:>7.3f} {rss / (1 << 20):>8.1f} | "
                  f"{r['rows']:>8} {r['cols']:>5} {r['gap']:>6.2f} {r['objective']:>10.5g} {r['bound']:>10.5g} | "
                  f"{len(r['candidates']):>5} {r['max_cols']:>8} {r['ilp_total_s']:>6.3f} | {size / 1024:>7.0f} K | "
                  f"{r['est_step_s']:>10.4g} | {r['strategy']}{mark}", flush=True)
    print(f"\n{len(cases(root))} cases in {time.perf_counter() - t_all:.1f} s")
    for m in missed:
        print(f"target missed: {m}")
    if failures:
        print(f"FAILED: {len(failures)}")
        for f in failures:
            print(f"  {f}")
        return 1
    if a.strict and missed:
        return 1
    print("ok: every compile succeeded and every plan passed plan_check" + ("" if missed else "; every target met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
