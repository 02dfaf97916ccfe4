#!/usr/bin/python3
"""Expert parallelism of a routed mixture of experts moves only the routed tokens.

tests/models/mixtral-routed-ep.json is models/torch/mixtral.py:make_routed_ep as plancc-import
writes it: GShard's dispatch with a capacity (each expert takes at most C = 10 of a sequence's 32
token choices, 40 slots in all) written with one-hot products. On 2 and 4 ranks of the cpu cluster with
`--tp N --tp-batch` (the ILP may split the batch of the dense layers and the experts of the
expert products), this checks that
  - the plan exchanges tensors by all-to-all, and every tensor it exchanges so is a tensor of
    expert slots: B x E x C x dim elements with an axis of C or E x C (the dispatched tokens
    going to their experts' devices and the experts' outputs coming back), never a tensor of
    every token (B x S x dim) - what the dense formulation's expert parallelism would move;
  - the plan trains equal to one device (tests/equiv.py's check, f64).

usage: moe_routing.py PLANCC PLANRUN PLANDUMP SOURCE_ROOT
"""
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

B, S, K, E, C, DIM = 4, 16, 2, 4, 10, 64


def exchanged(plandump, plan):
    """The shapes of the tensors the plan's all_to_all collectives read."""
    text = subprocess.run([plandump, "--text", plan], capture_output=True, text=True, check=True).stdout
    tensors = {m.group(1): [int(x) for x in m.group(2).split(",")]
               for m in re.finditer(r'^tensor (\d+) "[^"]*" \S+ \S+ \[([0-9,]+)\]', text, re.M)}
    buffers = {m.group(1): m.group(2) for m in re.finditer(r"^\s*buffer (\d+) tensor (\d+)", text, re.M)}
    shapes = []
    for m in re.finditer(r"coll all_to_all \S+ group \d+ args ([0-9,]+) ->", text):
        for arg in m.group(1).split(","):
            shapes.append(tensors[buffers[arg]])
    return shapes


def main():
    plancc, planrun, plandump, root = (os.path.abspath(a) for a in sys.argv[1:5])
    model = os.path.join(root, "tests", "models", "mixtral-routed-ep.json")
    equiv.PRECISION, equiv.RTOL, equiv.ATOL = "f64", 1e-10, 1e-12
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n in (2, 4):
            opts = f"--tp {n} --tp-batch"
            plan = os.path.join(tmp, f"ep{n}.plan")
            p = subprocess.run([plancc, model, "--cluster", os.path.join(root, "models", "clusters", "cpu.json"),
                                "--devices", str(n), *opts.split(), "-o", plan], capture_output=True, text=True)
            if p.returncode != 0:
                failed += 1
                print(f"FAIL {n} ranks {opts}: plancc exits {p.returncode}\n{p.stderr[-1500:]}")
                continue
            shapes = exchanged(plandump, plan)
            slots = [s for s in shapes if math.prod(s) == B * E * C * DIM and (C in s or E * C in s)]
            ok = shapes and len(slots) == len(shapes)
            passed, failed = passed + ok, failed + (not ok)
            print(f"{'ok  ' if ok else 'FAIL'} {n} ranks {opts}: {len(shapes)} all-to-all exchanges, of shapes "
                  f"{sorted(set(map(tuple, shapes)))}; expert slots are {B}x{E}x{C}x{DIM}, every token {B}x{S}x{DIM}")
            c = equiv.Case(plancc, planrun, root, tmp, "cpu")
            c.paths["mixtral-routed-ep"] = model
            c.check("mixtral-routed-ep", n, opts)
    passed, failed = passed + equiv.passed, failed + equiv.failed + equiv.skipped
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
