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


class Forkserver:
    """Runs a tool's cases as children of one process, tests/forkserver.c built around the tool
    (plancc-fork, plandump-fork), started under WRAPPER (valgrind ...) once: run(args) returns what
    subprocess.run(capture_output=True) would of WRAPPER TOOL ARGS, with the memory checker's
    start-up paid once for the whole corpus. The server's children run in ROOT with ENV. The
    checker's reports go to this process's stderr, each line marked ==PID== with the case's child
    (the result's .pid), not to the result's stderr: its exit code still fails the case."""

    def __init__(self, server, wrapper, root, env):
        import os
        import subprocess
        import tempfile
        self._tmp = tempfile.TemporaryDirectory()
        self._proc = subprocess.Popen([*wrapper, os.path.abspath(server)], cwd=root, env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE)

    def _request(self, out, err, args, kinds, words):
        """Sends one request (forkserver.c's protocol) and returns its reply line's words, which
        must be `words` many and start with one of `kinds`."""
        import os
        self._proc.stdin.write(b"".join(os.fsencode(f) + b"\0" for f in [out, err, str(len(args)), *args]))
        self._proc.stdin.flush()
        reply = self._proc.stdout.readline().decode().split()
        if len(reply) != words or reply[0] not in kinds:
            raise RuntimeError(f"forkserver: {reply!r} (it exited {self._proc.poll()})")
        return reply

    def run(self, args):
        import os
        import subprocess
        out, err = (os.path.join(self._tmp.name, n) for n in ("out", "err"))
        reply = self._request(out, err, args, ("exit", "signal"), 3)
        code = int(reply[1]) if reply[0] == "exit" else -int(reply[1])
        with open(out, "rb") as o, open(err, "rb") as e:
            p = subprocess.CompletedProcess(args, code, o.read(), e.read())
        p.pid = int(reply[2])
        return p

    def warm(self, args):
        """Runs the tool on ARGS in the server itself, its output discarded (forkserver.c: a
        warm-up, for a tool that keeps no state between runs): every later case starts with that
        code translated by the memory checker. Returns the tool's exit status."""
        return int(self._request("", "", args, ("warm",), 2)[1])

    def close(self):
        self._proc.stdin.close()
        rc = self._proc.wait()
        self._tmp.cleanup()
        return rc


def forkserver_child(p):
    """Where a run's memory-checker report is when the run was a fork server's child (Forkserver.run
    sets p.pid): ' (child PID ...)', to follow its exit code in a FAIL line; '' for a plain run."""
    pid = getattr(p, "pid", None)
    return f" (child {pid} of the fork server: look for =={pid}== on stderr)" if pid is not None else ""


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
