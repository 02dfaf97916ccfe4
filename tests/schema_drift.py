#!/usr/bin/env python3
"""The JSON Schemas and the C loaders must agree: every model or cluster the schema rejects
(tests/schema_bad/model-*.json, cluster-*.json) plancc rejects too (exit 2), and every one the
schema accepts (tests/schema_good/*.json, models/*.json, tests/models/*.json, models/clusters/*.json) plancc accepts
(exit 0). validate_schemas.py proves the schema side; this proves plancc's.

usage: schema_drift.py PLANCC SOURCE_ROOT
"""
import glob
import os
import subprocess
import sys

plancc, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
passed = failed = 0
cases = [(f, 2) for f in sorted(glob.glob(os.path.join(root, "tests", "schema_bad", "model-*.json")))]
cases += [(f, 0) for f in sorted(glob.glob(os.path.join(root, "tests", "schema_good", "*.json")))]
cases += [(f, 0) for f in sorted(glob.glob(os.path.join(root, "models", "*.json")))]
cases += [(f, 0) for f in sorted(glob.glob(os.path.join(root, "tests", "models", "*.json")))]
cases += [(f, 2) for f in sorted(glob.glob(os.path.join(root, "tests", "schema_bad", "cluster-*.json")))]
cases += [(f, 0) for f in sorted(glob.glob(os.path.join(root, "models", "clusters", "*.json")))]
mlp = os.path.join(root, "models", "mlp.json")
for path, want in cases:
    cluster = os.path.basename(path).startswith("cluster-") or os.path.basename(os.path.dirname(path)) == "clusters"
    args = ["--check", "-q", mlp, "--cluster", path] if cluster else ["--check", "-q", path]
    p = subprocess.run([plancc, *args], capture_output=True, text=True)
    rel = os.path.relpath(path, root)
    if p.returncode == want:
        passed += 1
        print(f"ok   {rel}: exit {want}" + (f" ({p.stderr.strip()})" if want else ""))
    else:
        failed += 1
        print(f"FAIL {rel}: exit {p.returncode}, want {want}; {p.stderr.strip()}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
