#!/usr/bin/python3
"""The importer's bad-input corpus: every factory of tests/import_bad/cases.py listed in
tests/import_bad/expect.tsv must make `tools/plancc-import torch` exit 2 with one message line
that holds the listed fragment and, for a construct of the model, the fx node and the line of
cases.py it comes from ("fx node NAME ... cases.py", line N). No traceback, no file written.
Every case runs the tool's main() in this process (torch loads once). Then three ONNX graphs
(tools/plancc-import onnx): a file that is not ONNX, a node without a
mapping (named by index and type), a graph of two outputs. Exit 77 (skip) where Debian's
python3-torch is missing.

usage: import_reject.py SOURCE_ROOT
"""
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import sys
import tempfile


def load_tool(tool):
    """tools/plancc-import as a module: its main() runs in this process (torch loads once)."""
    loader = importlib.machinery.SourceFileLoader("plancc_import_tool", tool)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def run_tool(mod, args):
    """(exit status, stderr) of `plancc-import ARGS`."""
    err, argv = io.StringIO(), sys.argv
    sys.argv = ["plancc-import"] + args
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                rc = mod.main()
            except SystemExit as e:
                rc = e.code
    finally:
        sys.argv = argv
    return rc, err.getvalue()


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
    mod = load_tool(tool)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.json")
        for factory, frag in rows:
            rc, stderr = run_tool(mod, ["torch", f"{cases}:{factory}", "-o", out])
            lines = stderr.strip().splitlines()
            ok = rc == 2 and len(lines) == 1 and frag in lines[0] and not os.path.exists(out)
            if ok and "fx node" in frag:
                ok = 'cases.py", line ' in lines[0]
            if ok:
                passed += 1
                print(f"ok   {factory}: {lines[0][:200]}")
            else:
                failed += 1
                print(f"FAIL {factory}: exit {rc}, want 2 and one line with {frag!r}:\n{stderr[-1500:]}")
        p_ok, p_failed = onnx_cases(mod, tmp)
        passed, failed = passed + p_ok, failed + p_failed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def onnx_cases(mod, tmp):
    """ONNX graphs plancc-import onnx must refuse: not ONNX at all, a node without a mapping (named
    with its index and type), a node whose values do not fit it (a reshape to another size: named
    likewise, PyTorch's message after it), two outputs."""
    import onnx
    from onnx import TensorProto, helper

    def graph(nodes, outputs):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, []) for o in outputs]
        w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3], [0.1] * 9)
        return helper.make_model(helper.make_graph(nodes, "g", [x], outs, [w]), opset_imports=[helper.make_opsetid("", 14)])

    axis = helper.make_tensor("axis", TensorProto.INT64, [], [1])
    five = helper.make_tensor("five", TensorProto.INT64, [1], [5])
    cases = {
        "not-onnx.onnx": (b"this is not a model", "not a valid ONNX model"),
        "cumsum.onnx": (graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Constant", [], ["ax"], value=axis),
                               helper.make_node("CumSum", ["h", "ax"], ["c"]), helper.make_node("ReduceMean", ["c"], ["loss"], keepdims=0)],
                              ["loss"]), 'node 2 "" of type CumSum (no mapping'),
        "reshape-size.onnx": (graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Constant", [], ["sh"], value=five),
                                     helper.make_node("Reshape", ["h", "sh"], ["r"]), helper.make_node("ReduceMean", ["r"], ["loss"], keepdims=0)],
                                    ["loss"]), 'node 2 "" (Reshape): RuntimeError: shape \'[5]\' is invalid for input of size 6'),
        "two-outputs.onnx": (graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("ReduceMean", ["h"], ["a"], keepdims=0),
                                    helper.make_node("ReduceSum", ["h"], ["b"], keepdims=0)], ["a", "b"]), "it must have one, the scalar loss"),
    }
    passed = failed = 0
    for name, (model, frag) in cases.items():
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(model if isinstance(model, bytes) else model.SerializeToString())
        out = os.path.join(tmp, "o.json")
        rc, stderr = run_tool(mod, ["onnx", path, "-o", out])
        lines = stderr.strip().splitlines()
        if rc == 2 and len(lines) == 1 and frag in lines[0] and not os.path.exists(out):
            passed += 1
            print(f"ok   onnx {name}: {lines[0][:200]}")
        else:
            failed += 1
            print(f"FAIL onnx {name}: exit {rc}, want 2 and one line with {frag!r}:\n{stderr[-1500:]}")
    return passed, failed


if __name__ == "__main__":
    sys.exit(main())
