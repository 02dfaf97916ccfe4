#!/usr/bin/env python3
"""--auto weighs ZeRO-3 without its prefetch (--prefetch none) where nothing faster fits.

usage: auto_prefetch.py PLANCC PLANDUMP SOURCE_ROOT

gpt-tiny on 2 CPU ranks, with a policy that pins the mesh to dp 2 (tp 1, pp 1), so that every
configuration --auto has is a data-parallel template: ZeRO 0, 1 or 3, recompute auto, none or full.
From the templates' own plans (on cpu.json's 4 GiB) it takes the smallest peak without --prefetch
none (the least memory --auto could fit before it searched --prefetch none) and the peak of
`--dp 2 --zero 3 --prefetch none`, and gives a copy of cpu.json a memory between the two:
  - every template without --prefetch none is refused there (exit 3): --auto had nothing;
  - --auto compiles, and its plan is ZeRO-3 without the prefetch: the report and --json say
    "prefetch none", the plan gathers no layer ahead (plandump --text: no layer+1 / layer-1),
    its notes say --auto chose --prefetch none, and its peak is within the memory;
  - with --recompute none where only full recompute without the prefetch fits, --auto refuses and
    suggests --recompute full (whose search tries --prefetch none), not --prefetch none itself;
  - with the memory of the template `--dp 2 --zero 3` (prefetch on) and a little more, --auto
    keeps the prefetch (faster by the estimate): "prefetch layer", and its estimate is below the
    plan without it; on cpu.json's own 4 GiB, without the policy, no --prefetch none either.
What it catches: --auto not trying --prefetch none (no plan), trying it where a faster plan fits,
a plan that says one thing and gathers another. The numerics are the equivalence suite's
(tests/equiv.py, DEEP_ZERO3: --dp 2 --zero 3 --prefetch none, the combination chosen here).
"""
import json
import os
import subprocess
import sys
import tempfile

from common import check, summary


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def main():
    plancc, plandump, root = sys.argv[1:4]
    model = os.path.join(root, "models", "gpt-tiny.json")
    with open(os.path.join(root, "models", "clusters", "cpu.json")) as f:
        base = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        policy = os.path.join(tmp, "dp2.json")
        with open(policy, "w") as f:
            json.dump({"version": 1, "mesh": {"tp": 1, "pp": 1}}, f)

        def cluster(nbytes):
            c = json.loads(json.dumps(base))
            c["device"]["memory_bytes"] = int(nbytes)
            path = os.path.join(tmp, "cpu-%d.json" % int(nbytes))
            with open(path, "w") as f:
                json.dump(c, f)
            return path

        def compile_(clu, *opts, out=None):
            p = run(plancc, model, "--cluster", clu, "--devices", 2, "--json", "-o", out or os.path.join(tmp, "x.plan"), *opts)
            return p, json.loads(p.stdout) if p.returncode == 0 else None

        # step 1: the templates' peaks on 4 GiB
        ample = os.path.join(root, "models", "clusters", "cpu.json")
        peaks = {}
        for z in ("0", "1", "3"):
            for rc in ("auto", "none", "full"):
                for pf in (("layer", "none") if z == "3" else ("layer",)):
                    p, j = compile_(ample, "--dp", 2, "--zero", z, "--recompute", rc, "--prefetch", pf)
                    if not check(f"template --zero {z} --recompute {rc} --prefetch {pf} compiles", j is not None, p.stderr):
                        return summary()
                    peaks[(z, rc, pf)] = (j["memory"]["peak_bytes"], j["estimate"]["step_s"], j["strategy"])
        _, _, s = peaks[("3", "auto", "none")]
        check("a template's --prefetch none is in the report", s["prefetch"] == "none" and "prefetch none" in s["text"], str(s))
        _, _, s = peaks[("3", "auto", "layer")]
        check("the prefetch's template says layer", s["prefetch"] == "layer" and "prefetch" not in s["text"], str(s))
        least_layer = min(v[0] for k, v in peaks.items() if k[2] == "layer")
        late = peaks[("3", "auto", "none")][0]
        if not check(f"setup: --prefetch none needs less ({late} B) than any plan with the prefetch ({least_layer} B)",
                     late < least_layer):
            return summary()

        # step 2: between the two, only --prefetch none fits
        tight = cluster((late + least_layer) // 2)
        refused = [k for k in peaks if k[2] == "layer" and compile_(tight, "--dp", 2, "--zero", k[0], "--recompute", k[1])[0].returncode != 3]
        check("every template with the prefetch is refused (exit 3) at the tight memory", not refused, str(refused))
        out = os.path.join(tmp, "auto.plan")
        p, j = compile_(tight, "--policy", policy, out=out)
        if check("--auto compiles at the tight memory", j is not None, p.stderr):
            s = j["strategy"]
            check("--auto: ZeRO-3 without the prefetch (--json)", s["zero"] == 3 and s["prefetch"] == "none", str(s))
            check("--auto: the report says prefetch none", "prefetch none" in s["text"], s["text"])
            check("--auto: its peak fits", j["memory"]["peak_bytes"] <= (late + least_layer) // 2, str(j["memory"]))
            d = run(plandump, "--text", out)
            check("--auto: the plan gathers no layer ahead", d.returncode == 0 and "gather" in d.stdout
                  and "layer+1" not in d.stdout and "layer-1" not in d.stdout, d.stderr)
            n = run(plandump, out)
            check("--auto: its notes say --prefetch none", n.returncode == 0 and "zero 3: --prefetch none" in n.stdout, n.stdout[-2000:])
        p = run(plancc, model, "--cluster", tight, "--devices", 2, "--policy", policy, "-o", os.path.join(tmp, "y.plan"))
        check("the summary line says prefetch none", p.returncode == 0 and "zero 3, prefetch none (--auto)" in p.stdout, p.stdout)

        # step 3: --auto --recompute none where only full recompute without the prefetch fits: the
        # refusal names what --auto left out (--recompute full, whose search tries --prefetch none),
        # not --prefetch none as if unsearched; and --auto --recompute full compiles there
        late_full, late_none = peaks[("3", "full", "none")][0], peaks[("3", "none", "none")][0]
        if check(f"setup: full recompute without the prefetch needs less ({late_full} B) than none ({late_none} B)",
                 late_full < late_none):
            mid = cluster((late_full + late_none) // 2)
            p = run(plancc, model, "--cluster", mid, "--devices", 2, "--policy", policy, "--recompute", "none", "-o",
                    os.path.join(tmp, "n.plan"))
            check("--auto --recompute none: refused, suggests --recompute full", p.returncode == 3
                  and "it fits with --recompute full\n" in p.stderr and "it fits with --zero 3" not in p.stderr, p.stderr)
            p, j = compile_(mid, "--policy", policy, "--recompute", "full")
            check("--auto --recompute full compiles there, without the prefetch", j is not None and j["strategy"]["prefetch"] == "none",
                  p.stderr)

        # step 4: where a plan with the prefetch fits, --auto keeps it
        z3, z3_s, _ = peaks[("3", "auto", "layer")]
        roomy = cluster(z3 + 4096)
        out = os.path.join(tmp, "roomy.plan")
        p, j = compile_(roomy, "--policy", policy, out=out)
        if check("--auto compiles where ZeRO-3 with the prefetch fits", j is not None, p.stderr):
            s = j["strategy"]
            check("--auto keeps the prefetch there", s["prefetch"] == "layer" and "prefetch none" not in s["text"], str(s))
            check("--auto's estimate there beats --prefetch none's", j["estimate"]["step_s"] < peaks[("3", "auto", "none")][1],
                  "%g vs %g" % (j["estimate"]["step_s"], peaks[("3", "auto", "none")][1]))
            d = run(plandump, "--text", out)
            check("--auto there: a ZeRO-3 plan gathers a layer ahead", d.returncode == 0
                  and (s["zero"] != 3 or "layer+1" in d.stdout), s["text"])
        p, j = compile_(ample, out=os.path.join(tmp, "free.plan"))
        check("--auto on 4 GiB: no --prefetch none", j is not None and j["strategy"]["prefetch"] == "layer", p.stderr)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
