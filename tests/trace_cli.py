#!/usr/bin/env python3
"""trace_cli.py: planrun --trace (the measured timeline) and tools/compare_trace.py, end to end.

  trace_cli.py PLANCC PLANDUMP PLANRUN SRC [PLANRUN_SAN]

gpt-tiny on 4 cpu ranks (pp 2 x dp 2, 4 micro-batches, so sends, receives, collectives, events and
two streams all occur) runs 3 steps with --trace, on the cpu and cpu-serial backends, and under
mpirun (one rank per process: a file per rank) where planrun has MPI. The trace
must parse; name its processes and threads as plandump --trace does; hold, for every step, every
instruction the simulation holds exactly once (same rank, stream, instruction, micro-batch and
layer), plus only record and wait; keep each track's slices in order without overlap and inside
their step's span; and record one span per step whose durations are otherData.step_s.
compare_trace.py must match every simulated instruction, print the per-step, per-kind and
per-rank tables and draw well-formed SVG; it refuses the trace of another plan (exit 2). A
--trace path that cannot be written ends planrun with exit 8 before any step runs. With
PLANRUN_SAN (the ASan+UBSan build) one traced run must be clean.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict

plancc, plandump, planrun, root = (os.path.abspath(a) for a in sys.argv[1:5])
planrun_san = os.path.abspath(sys.argv[5]) if len(sys.argv) > 5 else None
compare = os.path.join(root, "tools", "compare_trace.py")
fails = passes = 0


def check(what, ok, detail=""):
    global fails, passes
    if ok:
        passes += 1
        print("ok  ", what)
    else:
        fails += 1
        print("FAIL", what, str(detail)[:2000])


def sh(*args, cwd):
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd)


def keys(events, step=None):
    out = Counter()
    for e in events:
        a = e.get("args") or {}
        if e.get("ph") == "X" and "insn" in a and (step is None or a.get("step") == step):
            out[(e["pid"], e["tid"], a["insn"], a["mb"], a["layer"], e["name"])] += 1
    return out


def meta(events):
    return {(e["name"], e["pid"], e.get("tid")): e["args"] for e in events if e.get("ph") == "M"}


def check_trace(name, path, sim, steps):
    with open(path) as f:
        d = json.load(f)
    ev = d["traceEvents"]
    sm, mm = meta(sim["traceEvents"]), meta(ev)
    same = {k: v for k, v in mm.items() if k in sm}
    check(f"{name}: processes and threads named as plandump names them", same == sm,
          {k: (sm[k], mm.get(k)) for k in sm if sm[k] != mm.get(k)})
    spans = {e["args"]["step"]: (e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "step" and e["pid"] == 0}
    check(f"{name}: one span per step", sorted(spans) == list(range(1, steps + 1)), sorted(spans))
    step_s = d["otherData"]["step_s"]
    check(f"{name}: otherData.step_s are the spans", len(step_s) == steps and
          all(abs(step_s[s - 1] * 1e6 - (b - a)) < 1.0 for s, (a, b) in spans.items()), (step_s, spans))
    want = keys(sim["traceEvents"])
    for s in range(1, steps + 1):
        got = keys(ev, s)
        extra = {k: n for k, n in got.items() if k not in want}
        check(f"{name}: step {s} holds every simulated instruction once",
              all(got.get(k) == n for k, n in want.items()), [(k, n, got.get(k)) for k, n in want.items() if got.get(k) != n][:5])
        check(f"{name}: step {s}'s other slices are record and wait only", all(k[5] in ("record", "wait") for k in extra),
              list(extra)[:5])
    tracks = defaultdict(list)
    for e in ev:
        a = e.get("args") or {}
        if e.get("ph") == "X" and "insn" in a:
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], a["step"]))
    bad_order = bad_span = 0
    for v in tracks.values():
        v.sort()
        for (a0, b0, _), (a1, b1, _) in zip(v, v[1:]):
            # a run of sends and receives issued as one group shares one span; nothing else overlaps
            bad_order += a1 < b0 - 0.002 and (a0, b0) != (a1, b1)  # %.3f microseconds
        for a, b, s in v:
            lo, hi = spans[s]
            bad_span += a < lo - 0.002 or b > hi + 0.002 or b < a
    check(f"{name}: slices of a track in order, none overlapping", bad_order == 0, bad_order)
    check(f"{name}: every slice inside its step's span", bad_span == 0, bad_span)
    return d


def main():
    with tempfile.TemporaryDirectory() as tmp:
        models = os.path.join(root, "models")
        r = sh(plancc, "-q", os.path.join(models, "gpt-tiny.json"), "--cluster", os.path.join(models, "clusters", "cpu.json"),
               "--devices", "4", "--pp", "2", "--dp", "2", "--micro-batches", "4", "-o", "pp.plan", cwd=tmp)
        check("compile gpt-tiny pp 2 x dp 2", r.returncode == 0, r.stderr)
        r = sh(plandump, "--trace", "sim.json", "pp.plan", cwd=tmp)
        check("plandump --trace", r.returncode == 0, r.stderr)
        with open(os.path.join(tmp, "sim.json")) as f:
            sim = json.load(f)
        for backend in ("cpu", "cpu-serial"):
            out = f"run-{backend}.json"
            r = sh(planrun, "pp.plan", "--backend", backend, "--steps", "3", "--log-every", "0", "--trace", out, cwd=tmp)
            check(f"{backend}: planrun --trace", r.returncode == 0 and f"wrote the measured timeline to {out}" in r.stdout,
                  r.stdout + r.stderr)
            check_trace(backend, os.path.join(tmp, out), sim, 3)
        r = sh(sys.executable, compare, "sim.json", "run-cpu.json", "--svg", "cmp.svg", cwd=tmp)
        check("compare_trace: exit 0", r.returncode == 0, r.stdout + r.stderr)
        n_sim = sum(keys(sim["traceEvents"]).values())
        check("compare_trace: every simulated instruction matched", f"instructions matched: {n_sim};" in r.stdout, r.stdout[:600])
        for head in ("measured ms", "predicted ms", "busy predicted ms", "(warm-up)", "all_reduce", "send", "linear"):
            check(f"compare_trace prints {head!r}", head in r.stdout, r.stdout[:1500])
        try:
            root_el = ET.parse(os.path.join(tmp, "cmp.svg")).getroot()
            rects = sum(1 for _ in root_el.iter("{http://www.w3.org/2000/svg}rect"))
            check("compare_trace --svg: well-formed, both timelines drawn", rects > 2 * n_sim // 4, rects)
        except (ET.ParseError, OSError) as e:
            check("compare_trace --svg: well-formed", False, e)
        r = sh(sys.executable, compare, "sim.json", "run-cpu.json", "--json", cwd=tmp)
        ok = r.returncode == 0
        if ok:
            j = json.loads(r.stdout)
            ok = j["matched"] == n_sim and len(j["measured_step_s"]) == 3 and j["steps_compared"] == [2, 3]
        check("compare_trace --json", ok, r.stdout[:500] + r.stderr)
        # another plan's simulation has other instructions: refused
        r = sh(plancc, "-q", os.path.join(models, "mlp.json"), "--cluster", os.path.join(models, "clusters", "cpu.json"),
               "--devices", "1", "-o", "mlp.plan", cwd=tmp)
        sh(plandump, "--trace", "mlp.json", "mlp.plan", cwd=tmp)
        r = sh(sys.executable, compare, "mlp.json", "run-cpu.json", cwd=tmp)
        check("compare_trace refuses another plan's trace (exit 2)", r.returncode == 2 and "different plans" in r.stderr,
              (r.returncode, r.stderr))
        r = sh(sys.executable, compare, "sim.json", "nope.json", cwd=tmp)
        check("compare_trace: a missing file is exit 2", r.returncode == 2 and "nope.json" in r.stderr, (r.returncode, r.stderr))
        # an unwritable path: refused before the first step
        r = sh(planrun, "pp.plan", "--steps", "2", "--trace", "no/such/dir/t.json", cwd=tmp)
        check("--trace into a missing folder: exit 8 before any step", r.returncode == 8 and "step 1" not in r.stdout and
              "no/such/dir/t.json" in r.stderr, (r.returncode, r.stdout, r.stderr))
        # one rank per process under mpirun: a file per rank, together the whole run
        mpi = shutil.which("mpirun")
        r = sh(planrun, "--version", cwd=tmp)
        if mpi and "mpi" in (r.stdout + r.stderr):
            r = sh(mpi, "--allow-run-as-root", "--oversubscribe", "-np", "4", planrun, "pp.plan", "--steps", "2", "--log-every", "0",
                   "--trace", "m.json", cwd=tmp)
            files = [os.path.join(tmp, f"m.rank{q}.json") for q in range(4)]
            check("mpirun -np 4 --trace: a file per rank (m.rankN.json)", r.returncode == 0 and all(map(os.path.exists, files)),
                  r.stdout[-500:] + r.stderr[-1500:])
            if all(map(os.path.exists, files)):
                r = sh(sys.executable, compare, "sim.json", *files, cwd=tmp)
                check("compare_trace on the four files matches every simulated instruction",
                      r.returncode == 0 and f"instructions matched: {n_sim};" in r.stdout, r.stdout[:600] + r.stderr)
        else:
            print("skip mpirun --trace: no mpirun, or planrun built without MPI")
        if planrun_san:
            r = sh(planrun_san, "pp.plan", "--steps", "2", "--log-every", "0", "--trace", "san.json", cwd=tmp)
            check("ASan+UBSan: a traced run is clean", r.returncode == 0 and "runtime error" not in r.stderr and
                  "Sanitizer" not in r.stderr, r.stderr[-2000:])
    print(f"{passes} passed, {fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
