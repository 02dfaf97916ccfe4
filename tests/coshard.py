#!/usr/bin/env python3
"""Co-shard (plancc --coshard, a policy's "coshard", compiler/coshard.c): memory, cost, reports, --auto.

usage: coshard.py PLANCC PLANDUMP SOURCE_ROOT

On gpt-tiny variants where one transient dominates (written to a temporary directory):
  - a 65,536-token vocabulary at 1,024 tokens: the LM head and its loss co-sharded 2, 4 and 8
    ways lower the memory planner's peak each time (the logits' gradient exists one piece at a
    time), and the estimate grows a little (k launches of the smaller GEMMs), never shrinks;
  - an MLP of 4,096 at 1,024 tokens: its chain (fc1, gelu, fc2) co-sharded 4 ways along the
    tokens lowers the peak with and without full recompute;
  - the plan's peak (plandump --json) is the one --estimate-only reports;
  - the summary and --json name the co-sharded operators, their letter and ways;
  - --auto's co-shard round: on two ranks of 21 MiB, where an 8,192-token vocabulary at 256
    tokens fits only by recomputing, --auto co-shards the LM head and the loss instead, faster by
    the estimate and by the simulator than its plan without co-shard (--coshard none), and says
    so (strategy.coshard_over_s, the summary); on 4 GiB it co-shards nothing;
  - --auto on a device of 450 MiB, where nothing fits (585 MiB without co-shard, recompute and
    ZeRO-3 do not help one device's LM head), co-shards the LM head and the loss, fits and
    exits 0; with --coshard given it does not add its own;
  - bad requests on the command line exit 2 naming the request.
The numerics are the equivalence suite's (equiv.py --coshard); the broken forms plan_check's
(tests/bad_plans/coshard-*).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, summary  # noqa: E402


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    plancc, plandump, root = sys.argv[1:]
    cpu = os.path.join(root, "models", "clusters", "cpu.json")
    with open(os.path.join(root, "models", "gpt-tiny.json"), encoding="utf-8") as f:
        tiny = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        def variant(name, **dims):
            m = json.loads(json.dumps(tiny))
            m["dims"].update(dims)
            path = os.path.join(tmp, name + ".json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(m, f)
            return path

        def run(*args):
            return subprocess.run([str(a) for a in args], capture_output=True, text=True)

        def estimate(model, *args, cluster=cpu):
            p = run(plancc, model, "--cluster", cluster, "--devices", 1, *args, "--estimate-only", "--json")
            if not check(f"{os.path.basename(model)} {' '.join(args)}: --estimate-only exits 0", p.returncode == 0, p.stderr[-400:]):
                return None
            return json.loads(p.stdout)

        vocab = variant("vocab", V=65536, S=1024, B=1)
        base = estimate(vocab)
        prev = base
        for k in (2, 4, 8):
            e = estimate(vocab, "--coshard", f"logits:{k},loss:{k}")
            if not (base and e and prev):
                continue
            check(f"LM head and loss {k} ways: peak {e['memory_bytes'] / 2**20:.1f} MiB < {prev['memory_bytes'] / 2**20:.1f} MiB",
                  e["memory_bytes"] < prev["memory_bytes"])
            check(f"LM head and loss {k} ways: estimate {e['estimate']['step_s']:.4g} s >= {base['estimate']['step_s']:.4g} s "
                  "without (k launches)", e["estimate"]["step_s"] >= base["estimate"]["step_s"])
            check(f"LM head and loss {k} ways: --json names them",
                  e["coshard"] == [{"op": "logits", "letter": "b.1", "dim": "S", "ways": k},
                                   {"op": "loss", "letter": "b.1", "dim": "S", "ways": k}], str(e["coshard"]))
            prev = e
        if base and prev is not base:
            check("LM head and loss 8 ways: the peak drops by more than half the logits' 256 MiB",
                  base["memory_bytes"] - prev["memory_bytes"] > 128 * 2**20,
                  f"{base['memory_bytes']} -> {prev['memory_bytes']}")

        mlp = variant("mlp", S=1024, F=4096)
        for rc in ("none", "full"):
            a = estimate(mlp, "--recompute", rc)
            b = estimate(mlp, "--recompute", rc, "--coshard", "layer.f:4,layer.g:4,layer.z:4")
            if a and b:
                check(f"MLP chain 4 ways, --recompute {rc}: peak {b['memory_bytes'] / 2**20:.1f} MiB < "
                      f"{a['memory_bytes'] / 2**20:.1f} MiB", b["memory_bytes"] < a["memory_bytes"])

        # The plan's peak is the estimate's, and the summary names the pieces.
        plan = os.path.join(tmp, "x.plan")
        p = run(plancc, vocab, "--cluster", cpu, "--devices", 1, "--coshard", "logits:4,loss:4", "-o", plan)
        check("the summary names the co-sharded operators",
              p.returncode == 0 and "co-shard: logits 4 ways along b.1=S, loss 4 ways along b.1=S" in p.stdout, p.stdout + p.stderr)
        d = run(plandump, "--json", plan)
        e = estimate(vocab, "--coshard", "logits:4,loss:4")
        if d.returncode == 0 and e:
            peak = json.loads(d.stdout)["estimate"]["peak_bytes"]
            check("the plan's peak is the estimate's", abs(peak - e["memory_bytes"]) <= 0.02 * peak, f"{peak} vs {e['memory_bytes']}")
        p = run(plancc, mlp, "--cluster", cpu, "--devices", 2, "--tp", 2, "--coshard", "layer.f:2", "--json", "-o", plan)
        check("compile --json: strategy.coshard", p.returncode == 0 and json.loads(p.stdout)["strategy"]["coshard"] ==
              [{"op": "layer.f", "letter": "b.1", "dim": "S", "ways": 2}], p.stdout[-400:] + p.stderr[-400:])

        # --auto's fit step: nothing fits 450 MiB until the LM head and the loss are co-sharded.
        with open(cpu, encoding="utf-8") as f:
            small = json.load(f)
        small["device"]["memory_bytes"] = 450 * 2**20
        small_path = os.path.join(tmp, "cpu-450m.json")
        with open(small_path, "w", encoding="utf-8") as f:
            json.dump(small, f)
        p = run(plancc, vocab, "--cluster", small_path, "--devices", 1, "--coshard", "logits:2", "-o", plan)
        check("a --coshard that does not fit: exit 3, --auto adds none of its own",
              p.returncode == 3 and "trying co-shard" not in p.stderr, p.stderr[-600:])
        p = run(plancc, vocab, "--cluster", small_path, "--devices", 1, "--json", "-o", plan)
        ok = check("--auto on 450 MiB: co-shard makes it fit (exit 0)", p.returncode == 0 and
                   "plancc: --auto: trying co-shard: --coshard logits:4,loss:4" in p.stderr, p.stderr[-800:])
        if ok:
            out = json.loads(p.stdout)
            check("--auto on 450 MiB: the plan co-shards the LM head and the loss, and fits",
                  [c["op"] for c in out["strategy"]["coshard"]] == ["logits", "loss"] and
                  all(pg["arena_bytes"] <= 450 * 2**20 for pg in out["programs"]), json.dumps(out["strategy"]))

        # --auto's co-shard round: gpt-tiny with an 8,192-token vocabulary at 256 tokens (batch 2) on
        # two ranks of 21 MiB fits only by recomputing (exit 3 with --recompute none and no co-shard; at
        # 21 MiB tp 2 with the loss on the vocabulary pieces fits without either);
        # --auto weighs co-shard against that plan and keeps it, faster by the estimate and the simulator.
        v8k = variant("v8k", V=8192, S=256, B=2, F=1024)
        small["device"]["memory_bytes"] = 21 * 2**20
        c21 = os.path.join(tmp, "cpu-21m.json")
        with open(c21, "w", encoding="utf-8") as f:
            json.dump(small, f)

        def auto(*args, cluster=c21):
            p = run(plancc, v8k, "--cluster", cluster, "--devices", 2, "--json", *args, "-o", plan)
            ok = check(f"--auto{''.join(' ' + a for a in args)} on {os.path.basename(cluster)}: exit 0", p.returncode == 0, p.stderr[-600:])
            return json.loads(p.stdout) if ok else None

        p = run(plancc, v8k, "--cluster", c21, "--devices", 2, "--coshard", "none", "--recompute", "none", "-o", plan)
        check("21 MiB: without co-shard and recompute nothing fits (exit 3, no co-shard step)",
              p.returncode == 3 and "trying co-shard" not in p.stderr, p.stderr[-600:])
        plain, chose = auto("--coshard", "none"), auto()
        if plain and chose:
            st, pe, ce = chose["strategy"], plain["estimate"]["step_s"], chose["estimate"]["step_s"]
            check("--coshard none: no co-shard, none chosen", plain["strategy"]["coshard"] == [] and
                  plain["strategy"]["coshard_over_s"] is None, json.dumps(plain["strategy"]))
            check("--auto on 21 MiB chooses co-shard: the LM head and the loss",
                  [c["op"] for c in st["coshard"]] == ["logits", "loss"] and st["coshard"][0]["ways"] in (2, 4, 8),
                  json.dumps(st))
            check(f"--auto on 21 MiB: co-shard over the plan without it ({st['coshard_over_s']} s = --coshard none's {pe} s)",
                  st["coshard_over_s"] is not None and abs(st["coshard_over_s"] - pe) <= 1e-9 * pe)
            check(f"--auto on 21 MiB: co-shard is faster by the estimate ({ce:.4g} s < {pe:.4g} s)", ce < pe)
            cs, ps = chose["simulation"]["step_s"], plain["simulation"]["step_s"]
            check(f"--auto on 21 MiB: co-shard is faster by the simulator ({cs:.4g} s < {ps:.4g} s)", cs < ps)
            check("--auto on 21 MiB: the co-shard plan fits", all(pg["arena_bytes"] <= 21 * 2**20 for pg in chose["programs"]),
                  str([pg["arena_bytes"] for pg in chose["programs"]]))
        p = run(plancc, v8k, "--cluster", c21, "--devices", 2, "-o", plan)
        check("the summary and stderr say --auto chose co-shard over the plan without it",
              p.returncode == 0 and "co-shard: logits 8 ways along b.1=S, loss 8 ways along b.1=S (pieces one after another "
              "on each device; --auto chose it: the best plan without co-shard, which memory bound, is estimated at "
              in p.stdout and "plancc: --auto: co-shard (--coshard logits:8,loss:8) is faster than the best plan without it"
              in p.stderr, p.stdout[-800:] + p.stderr[-400:])
        roomy = auto(cluster=cpu)
        if roomy:
            check("4 GiB: nothing recomputes, no co-shard", roomy["strategy"]["coshard"] == [] and
                  roomy["strategy"]["coshard_over_s"] is None, json.dumps(roomy["strategy"]))

        # Bad requests: exit 2, naming the request.
        for spec, why in [("logits", "not GLOB:K or GLOB:K:LETTER"), ("logits:1", "not GLOB:K"), ("nope:2", "selects no operator"),
                          ("logits:2:zz", 'has no letter "zz"'), ("layer.o4:2:s", "the annotation marks it unsplittable"),
                          ("loss:2:b.0", "it is the batch"), ("layer.f:3", "has no letter that splits 3 ways"),
                          # the reshape's letter runs from H (64) into N (4): 8 pieces of N are none
                          ("layer.q4:8:g2.0", "its size on an operand does not divide")]:
            p = run(plancc, os.path.join(root, "models", "gpt-tiny.json"), "--cluster", cpu, "--coshard", spec, "-o", plan)
            check(f"--coshard {spec}: exit 2, {why}", p.returncode == 2 and f'plancc: --coshard "{spec}": ' in p.stderr and
                  why in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
