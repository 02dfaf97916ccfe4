#!/usr/bin/python3
"""tools/plancc-import on torch.nn's transformer layers as PyTorch makes them by default, with
dropout 0.1 (tests/import_ok/stdlayers.py:dropout), in training mode: the model comes in
(nothing refused), every attention carries the layer's "dropout": 0.1 (the probabilities'
dropout fused into plancc's attention, no separate dropout op of the scores' shape left), the
hidden dropouts stay dropout ops with p 0.1, --verify 3 agrees with PyTorch (with the dropouts
off on both sides, which it says), and the imported model trains in planrun with its dropouts on
(the loss moves off the dropout-free run's). Exit 77 (skip) without python3-torch.

usage: import_dropout.py PLANCC PLANRUN SOURCE_ROOT
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, summary  # noqa: E402


def walk(ops):
    for o in ops:
        yield o
        yield from walk(o.get("ops", []))


def main():
    plancc, planrun, root = sys.argv[1:4]
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.json")
        p = subprocess.run(["/usr/bin/python3", os.path.join(root, "tools", "plancc-import"), "torch",
                            os.path.join(root, "tests", "import_ok", "stdlayers.py:dropout"), "-o", out,
                            "--verify", "3", "--plancc", plancc, "--planrun", planrun], capture_output=True, text=True)
        print(p.stdout.strip())
        check("plancc-import --verify 3 exits 0", p.returncode == 0, p.stderr[-2000:])
        check("--verify says the dropouts are off on both sides", "dropout(s) off on both sides" in p.stdout)
        if not os.path.exists(out):
            return summary()
        with open(out, encoding="utf-8") as f:
            m = json.load(f)
        ops = list(walk(m["ops"]))
        attn = [o for o in ops if o.get("type") == "attention"]
        drops = [o for o in ops if o.get("type") == "dropout"]
        check("the layers' attention is plancc's attention", len(attn) >= 1, f"{len(attn)} attention ops")
        check("every attention has dropout 0.1", attn and all((o.get("attrs") or {}).get("dropout") == 0.1 for o in attn),
              str([o.get("attrs") for o in attn]))
        check("the hidden dropouts are dropout ops with p 0.1 (three a layer)",
              len(drops) >= 3 and all(o["attrs"]["p"] == 0.1 for o in drops), str([o.get("attrs") for o in drops]))
        losses = {}
        for tag, model in (("on", m), ("off", None)):
            path = out
            if model is None:
                for o in walk(m["ops"]):
                    at = o.get("attrs") or {}
                    if o.get("type") == "dropout":
                        at["p"] = 0.0
                    if o.get("type") == "attention":
                        at["dropout"] = 0.0
                path = os.path.join(tmp, "off.json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(m, f)
            plan, lf = os.path.join(tmp, tag + ".plan"), os.path.join(tmp, tag + ".loss")
            p = subprocess.run([plancc, path, "--cluster", os.path.join(root, "models", "clusters", "cpu.json"),
                                "--devices", "2", "--dp", "2", "-o", plan, "-q"], capture_output=True, text=True)
            check(f"plancc --dp 2 (dropout {tag}) exits 0", p.returncode == 0, p.stderr[-1500:])
            p = subprocess.run([planrun, plan, "--steps", "3", "--quiet", "--losses", lf, "--seed", "1"],
                               capture_output=True, text=True)
            check(f"planrun (dropout {tag}) exits 0", p.returncode == 0, p.stderr[-1500:])
            if p.returncode == 0:
                with open(lf, encoding="utf-8") as f:
                    losses[tag] = [float(x) for x in f.read().split()]
        if len(losses) == 2:
            check("the dropouts act: the losses differ from the dropout-free run's",
                  losses["on"] != losses["off"] and all(x == x for x in losses["on"]), str(losses))
    return summary()


if __name__ == "__main__":
    sys.exit(main())
