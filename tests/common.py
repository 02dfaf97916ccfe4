"""What the Python test scripts share: a tally of checks and its summary.

    from common import check, summary
    check("what is checked", condition, "detail printed when it fails")
    ...
    return summary()        # prints "N passed, M failed"; 1 if any failed, else 0

Each check prints one line, "ok   NAME" or "FAIL NAME: DETAIL", as meson's log shows them.
"""

_tally = {"passed": 0, "failed": 0}


def lacks(*modules):
    """Whether a Python module the test needs is missing: prints the skip and says so (the
    caller returns 77, meson's skip)."""
    import importlib
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            print(f"SKIP: {e}")
            return True
    return False


def walk_ops(ops):
    """Every operator of a model file's op list, blocks' operators included, in order."""
    for o in ops:
        yield o
        yield from walk_ops(o.get("ops", []))


def check(name, ok, detail=""):
    """Counts and prints one check; returns ok, so that a caller can stop on a failure."""
    if ok:
        _tally["passed"] += 1
        print(f"ok   {name}")
    else:
        _tally["failed"] += 1
        print(f"FAIL {name}{': ' + detail if detail else ''}")
    return ok


def failures():
    return _tally["failed"]


def summary():
    """Prints the tally; the script's exit status: 1 if a check failed, else 0."""
    print(f"{_tally['passed']} passed, {_tally['failed']} failed")
    return 1 if _tally["failed"] else 0


def onnx_export(model, inputs, path):
    """torch.onnx.export of a module that computes the loss, as plancc-import onnx takes one:
    training mode, opset 14, nothing folded (the exporter's warnings silenced)."""
    import warnings

    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, path, opset_version=14, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)


def plancc_import(root, args, out, plancc, planrun, verify=3):
    """tools/plancc-import ARGS -o OUT --verify N (with these plancc and planrun): the process."""
    import os
    import subprocess
    return subprocess.run(["/usr/bin/python3", os.path.join(root, "tools", "plancc-import"), *args, "-o", out,
                           "--verify", str(verify), "--plancc", plancc, "--planrun", planrun], capture_output=True, text=True)
