#!/usr/bin/python3
"""The importer's bad-input corpus: every factory of tests/import_bad/cases.py listed in
tests/import_bad/expect.tsv must make `tools/plancc-import torch` exit 2 with one message line
that holds the listed fragment and, for a construct of the model, the fx node and the line of
cases.py it comes from ("fx node NAME ... cases.py", line N). No traceback, no file written.
Exit 77 (skip) where Debian's python3-torch is missing.

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
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
