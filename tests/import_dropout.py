#!/usr/bin/python3
"""tools/plancc-import on torch.nn's transformer layers as PyTorch makes them by default, with
dropout 0.1 (tests/import_ok/stdlayers.py:dropout), in training mode: the model comes in
(nothing refused), every attention carries the layer's "dropout": 0.1 (the probabilities'
dropout fused into plancc's attention, no separate dropout op of the scores' shape left), the
hidden dropouts stay dropout ops with p 0.1, --verify 3 agrees with PyTorch (with the dropouts
off on both sides, which it says), and the imported model trains in planrun with its dropouts on
(the loss moves off the dropout-free run's). Attention written out with dropout
(stdlayers.py:written) likewise through the torch front end and, exported by torch.onnx.export in
training mode, through the ONNX one (its Dropout nodes; its scale a Div by a constant; k^T one
transpose from [b, s, h, d]); nn.TransformerEncoderLayer's own ONNX export (a reshape that
splits and merges at once: two reshapes); and a hand-made ONNX graph whose reshape reads the width from
Shape, Gather of index -1 and an integer Div (ONNX's C division) imports and verifies. Exit 77
(skip) without python3-torch or python3-onnx.

usage: import_dropout.py PLANCC PLANRUN SOURCE_ROOT
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, onnx_export, plancc_import, lacks, summary, walk_ops as walk  # noqa: E402


def main():
    plancc, planrun, root = sys.argv[1:4]
    if lacks("onnx", "torch"):
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.json")
        p = plancc_import(root, ["torch", os.path.join(root, "tests", "import_ok", "stdlayers.py:dropout")], out, plancc, planrun)
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
        written(plancc, planrun, root, tmp)
        shape_arithmetic(plancc, planrun, root, tmp)
    return summary()


def import_verify(plancc, planrun, root, args, out):
    p = plancc_import(root, args, out, plancc, planrun)
    check(f"plancc-import {args[0]} {os.path.basename(args[1])} --verify 3 exits 0", p.returncode == 0,
          p.stdout[-1500:] + p.stderr[-1500:])
    if p.returncode:
        return None
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def written(plancc, planrun, root, tmp):
    sys.path.insert(0, os.path.join(root, "tests", "import_ok"))
    import stdlayers
    model, inputs = stdlayers.written()
    onnx_path = os.path.join(tmp, "written.onnx")
    onnx_export(model, inputs, onnx_path)
    for args in (["torch", os.path.join(root, "tests", "import_ok", "stdlayers.py:written")], ["onnx", onnx_path]):
        m = import_verify(plancc, planrun, root, args, os.path.join(tmp, "written.json"))
        if m is None:
            continue
        attn = [o for o in walk(m["ops"]) if o.get("type") == "attention"]
        check(f"{args[0]}: the written-out attention with dropout is one attention with dropout 0.1",
              len(attn) == 1 and abs((attn[0].get("attrs") or {}).get("dropout", 0) - 0.1) < 1e-6, str([o.get("attrs") for o in attn]))
    # nn.TransformerEncoderLayer as exported: its heads reshaped [L, N, E] -> [L, N H, D] (a split
    # and a merge), its attention in parts over [N H, L, S] (not fused), its dropouts training.
    model, inputs = stdlayers.dropout()
    onnx_path = os.path.join(tmp, "encoder.onnx")
    onnx_export(model, inputs, onnx_path)
    m = import_verify(plancc, planrun, root, ["onnx", onnx_path], os.path.join(tmp, "encoder.json"))
    check("onnx: nn.TransformerEncoderLayer's export: its dropouts are dropout ops",
          m is not None and sum(o.get("type") == "dropout" for o in walk(m["ops"])) == 8)


def shape_arithmetic(plancc, planrun, root, tmp):
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    loss = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])
    w = helper.make_tensor("w", TensorProto.FLOAT, [6, 6], [0.01 * i for i in range(36)])
    const = lambda name, vals: helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(vals)], vals))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Shape", ["h"], ["s"]),
             const("last", [-1]), helper.make_node("Gather", ["s", "last"], ["width"], axis=0),
             const("three", [3]), helper.make_node("Div", ["width", "three"], ["third"]),  # 6 / 3 = 2, as integers
             const("lead", [2, 3]), helper.make_node("Concat", ["lead", "third"], ["shape"], axis=0),
             helper.make_node("Reshape", ["h", "shape"], ["r"]), helper.make_node("Mul", ["r", "r"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0)]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [loss], [w]), opset_imports=[helper.make_opsetid("", 14)])
    path = os.path.join(tmp, "shapes.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    m = import_verify(plancc, planrun, root, ["onnx", path], os.path.join(tmp, "shapes.json"))
    check("onnx: Shape, Gather of index -1, integer Div: the reshape is [2, 3, 2]",
          m is not None and any(o.get("type") == "reshape" for o in walk(m["ops"])) and
          any([m["dims"].get(d, d) if isinstance(d, str) else d for d in t.get("shape", [])] == [2, 3, 2]
              for t in m.get("tensors", {}).values()), str(m and (m.get("dims"), m.get("tensors"))))


if __name__ == "__main__":
    sys.exit(main())
