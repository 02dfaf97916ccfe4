#!/usr/bin/env python3
"""The bad-input corpora: every model in tests/bad/ (or, with --cluster, every cluster in
tests/bad_cluster/) must be refused with its diagnostic.

tests/bad/expect.tsv lists, one per line, FILE<TAB>JSON-POINTER<TAB>FRAGMENT. For each, plancc
--check must exit 2 and print exactly one diagnostic line "plancc: tests/bad/FILE:POINTER: ..."
containing FRAGMENT (POINTER may be "LINE:COL" for syntax errors). No crash, no sanitizer report:
a run under ASan/UBSan shows its report on stderr and a different exit code, and fails here.
Every file in tests/bad/ must be listed, so nothing in the corpus goes unchecked.

usage: run_reject.py [--cluster | --config | --policy] [--forkserver] PLANCC SOURCE_ROOT [WRAPPER ...]
--cluster: the corpus is tests/bad_cluster/ (same expect.tsv format), each case run as
plancc --check models/mlp.json --cluster tests/bad_cluster/FILE.
--config: the corpus is tests/bad_config/ (plancc --config files), each case run as
plancc --check models/mlp.json --config tests/bad_config/FILE.
--policy: the corpus is tests/bad_policy/ (plancc --policy files), each case run as
plancc models/gpt-tiny.json --cluster cpu --devices 8 --estimate-only --policy tests/bad_policy/FILE.
WRAPPER (e.g. valgrind -q --error-exitcode=97) runs plancc under a memory checker: its reports
go to stderr and change the exit code, so they fail the case. --forkserver: PLANCC is plancc-fork
(tests/forkserver.c), started once under WRAPPER, and each case runs in a child of it, checked as
alone but without the memory checker's start-up each time, and with the loaders already run once
in the server (WARM_UP).
"""
import os
import subprocess
import sys

from common import Forkserver, forkserver_child

# What the fork server runs itself before the cases (forkserver.c's warm-up: under valgrind a case
# then finds the code it shares with these translated, most of its time): good models and clusters
# checked, and a policy refused as it loads. Only runs that end in the loaders, with no warning:
# plancc keeps its warnings and its search's counters process-wide, and no search runs here.
WARM_UP = [(["--check", m], 0) for m in ("models/gpt-tiny.json", "tests/models/ops-mix.json", "models/dlrm-small.json",
                                         "models/cnn-small.json", "models/t5-small.json", "models/evoformer.json")] + [
    (["--check", "models/mlp.json", "--cluster", c], 0) for c in ("models/clusters/dgx-h100.json",
                                                                  "models/clusters/a100-h100.json")] + [
    (["models/gpt-tiny.json", "--cluster", "cpu", "--devices", "8", "--estimate-only", "--policy",
      "tests/bad_policy/split2-same-letter.json"], 2)]


def main():
    args = sys.argv[1:]
    mode = args[0] if args and args[0] in ("--cluster", "--config", "--policy") else None
    cluster = mode == "--cluster"
    if mode:
        args = args[1:]
    forkserver = args[0] == "--forkserver"
    if forkserver:
        args = args[1:]
    plancc, root = os.path.abspath(args[0]), os.path.abspath(args[1])
    wrapper = args[2:]
    corpus = {"--cluster": "bad_cluster", "--config": "bad_config", "--policy": "bad_policy"}.get(mode, "bad")
    bad = os.path.join(root, "tests", corpus)
    cases = []
    with open(os.path.join(bad, "expect.tsv"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                print(f"expect.tsv:{n}: want FILE<TAB>POINTER<TAB>FRAGMENT")
                return 1
            cases.append(parts)
    listed = {c[0] for c in cases}
    files = {f for f in os.listdir(bad) if f != "expect.tsv"}
    passed = failed = 0
    for extra in sorted(files - listed):
        print(f"FAIL {extra}: in tests/{corpus}/ but not in expect.tsv")
        failed += 1
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:exitcode=99", UBSAN_OPTIONS="halt_on_error=1:exitcode=98")
    server = Forkserver(plancc, wrapper, root, env) if forkserver else None
    for args, code in WARM_UP if server else []:
        got = server.warm(args)
        if got != code:
            print(f"FAIL warm-up: plancc {' '.join(args)}: exit {got}, want {code}")
            failed += 1
    for name, pointer, fragment in cases:
        path = os.path.join("tests", corpus, name)
        if not os.path.exists(os.path.join(root, path)):
            print(f"FAIL {name}: listed in expect.tsv but missing")
            failed += 1
            continue
        check = ["--check", "models/mlp.json", mode, path] if mode else ["--check", path]
        if mode == "--policy":
            check = ["models/gpt-tiny.json", "--cluster", "cpu", "--devices", "8", "--estimate-only", mode, path]
        if server:
            p = server.run(check)
        else:
            p = subprocess.run([*wrapper, plancc, *check], cwd=root, capture_output=True, env=env)
        try:
            stderr = p.stderr.decode("utf-8")
        except UnicodeDecodeError as e:  # garbage in a diagnostic: uninitialized memory, say
            failed += 1
            print(f"FAIL {name}: the diagnostic is not UTF-8 ({e}): {p.stderr!r}")
            continue
        lines = [l for l in stderr.splitlines() if not l.startswith("plancc: warning:")]
        want = f"plancc: {path}:{pointer}: "
        ok = p.returncode == 2 and len(lines) == 1 and lines[0].startswith(want) and fragment in lines[0]
        if ok:
            passed += 1
            print(f"ok   {name}: {lines[0][len('plancc: '):]}")
        else:
            failed += 1
            print(f"FAIL {name}: exit {p.returncode}{forkserver_child(p)}, want 2 and a line starting {want!r} containing {fragment!r}; stderr:")
            print("     " + stderr.replace("\n", "\n     "))
    if server and server.close():
        print("FAIL the fork server (under the wrapper) exited with a failure")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
