#!/usr/bin/python3
"""The importer's bad-input corpus: every factory of tests/import_bad/cases.py listed in
tests/import_bad/expect.tsv must make `tools/plancc-import torch` exit 2 with one message line
that holds the listed fragment and, for a construct of the model, the fx node and the line of
cases.py it comes from ("fx node NAME ... cases.py", line N). No traceback, no file written.
Then three ONNX graphs (tools/plancc-import onnx): a file that is not ONNX, a node without a
mapping (named by index and type), a graph of two outputs. Exit 77 (skip) where Debian's
python3-torch is missing.

usage: import_reject.py SOURCE_ROOT
"""
import os
import subprocess
import sys
import tempfile


def main():
    root = sys.argv[1]
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: python3-torch is not installed")
        return 77
    tool = os.path.join(root, "tools", "plancc-import")
    cases = os.path.join(root, "tests", "import_bad", "cases.py")
    passed = failed = 0
    with open(os.path.join(root, "tests", "import_bad", "expect.tsv"), encoding="utf-8") as f:
        rows = [l.rstrip("\n").split("\t") for l in f if l.strip() and not l.startswith("#")]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.json")
        for factory, frag in rows:
            p = subprocess.run(["/usr/bin/python3", tool, "torch", f"{cases}:{factory}", "-o", out], capture_output=True, text=True)
            lines = p.stderr.strip().splitlines()
            ok = p.returncode == 2 and len(lines) == 1 and frag in lines[0] and not os.path.exists(out)
            if ok and "fx node" in frag:
                ok = 'cases.py", line ' in lines[0]
            if ok:
                passed += 1
                print(f"ok   {factory}: {lines[0][:200]}")
            else:
                failed += 1
                print(f"FAIL {factory}: exit {p.returncode}, want 2 and one line with {frag!r}:\n{p.stderr[-1500:]}")
        p_ok, p_failed = onnx_cases(tool, tmp)
        passed, failed = passed + p_ok, failed + p_failed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def onnx_cases(tool, tmp):
    """ONNX graphs plancc-import onnx must refuse: not ONNX at all, a node without a mapping (named
    with its index and type), two outputs."""
    import onnx
    from onnx import TensorProto, helper

    def graph(nodes, outputs):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, []) for o in outputs]
        w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3], [0.1] * 9)
        return helper.make_model(helper.make_graph(nodes, "g", [x], outs, [w]), opset_imports=[helper.make_opsetid("", 14)])

    axis = helper.make_tensor("axis", TensorProto.INT64, [], [1])
    cases = {
        "not-onnx.onnx": (b"this is not a model", "not a valid ONNX model"),
        "cumsum.onnx": (graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Constant", [], ["ax"], value=axis),
                               helper.make_node("CumSum", ["h", "ax"], ["c"]), helper.make_node("ReduceMean", ["c"], ["loss"], keepdims=0)],
                              ["loss"]), 'node 2 "" of type CumSum (no mapping'),
        "two-outputs.onnx": (graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("ReduceMean", ["h"], ["a"], keepdims=0),
                                    helper.make_node("ReduceSum", ["h"], ["b"], keepdims=0)], ["a", "b"]), "it must have one, the scalar loss"),
    }
    passed = failed = 0
    for name, (model, frag) in cases.items():
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(model if isinstance(model, bytes) else model.SerializeToString())
        out = os.path.join(tmp, "o.json")
        p = subprocess.run(["/usr/bin/python3", tool, "onnx", path, "-o", out], capture_output=True, text=True)
        lines = p.stderr.strip().splitlines()
        if p.returncode == 2 and len(lines) == 1 and frag in lines[0] and not os.path.exists(out):
            passed += 1
            print(f"ok   onnx {name}: {lines[0][:200]}")
        else:
            failed += 1
            print(f"FAIL onnx {name}: exit {p.returncode}, want 2 and one line with {frag!r}:\n{p.stderr[-1500:]}")
    return passed, failed


if __name__ == "__main__":
    sys.exit(main())
