#!/usr/bin/env python3
"""plandump on the plan corpora: good plans round-trip, broken plans are refused as expected.

usage: run_plans.py [--good | --bad | --cli] [--forkserver] PLANDUMP SOURCE_ROOT [WRAPPER ...]

--good (tests/plans/*.plan.txt): each assembles (exit 0, nothing on stderr); the plan passes its
  check (summary "check ... ok", --check-only exit 0 and silent); --text prints the file (but for
  its comments); that text assembles to the same bytes (compared with cmp) and prints the same
  text again; --json follows
  schemas/plan.schema.json (when python3-jsonschema is there), which refuses it with a param's
  init, an input's data taken away or an activation given an init; the summary counts the
  sources; --rank R reads each rank (its program only) and --rank WORLD is a usage error.
--bad (tests/bad_plans/, listed in expect.tsv as FILE<TAB>EXIT<TAB>FRAGMENT): --assemble exits
  with EXIT and prints one diagnostic line "plandump: tests/bad_plans/FILE..." containing
  FRAGMENT; a plan that fails only plan_check (exit 5) and that the format can hold is written
  with --force, and plandump on the file refuses it the same way (exit 5, the same fragment).
  Every file in the folder must be listed. Binary damage (truncation, magic, version, a CRC)
  exits 4; a missing file or a folder exits 4 (not a plan file), an output that cannot be written 8.
--cli: --help, --version, usage errors and their exit codes.
Without a mode, all three. WRAPPER (valgrind -q --error-exitcode=97 ...) runs plandump under a
memory checker, whose reports change the exit code or add to stderr and so fail the case.
--forkserver: PLANDUMP is plandump-fork (tests/forkserver.c), started once under WRAPPER; each run
is a child of it, checked as alone but without the memory checker's start-up each time, and
with plandump's common paths already run once in the server (Runner.warm).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

from common import Forkserver, forkserver_child

passed = failed = 0


def check(name, ok, p=None, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
        return True
    failed += 1
    print(f"FAIL {name}{': ' + detail if detail else ''}")
    if p is not None:
        print(f"     exit {p.returncode}{forkserver_child(p)}\n     stdout: {p.stdout[:800]!r}\n     stderr: {p.stderr[:800]!r}")
    return False


class Runner:
    def __init__(self, plandump, root, wrapper, forkserver=False):
        self.plandump, self.root, self.wrapper = plandump, root, wrapper
        self.env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:exitcode=99", UBSAN_OPTIONS="halt_on_error=1:exitcode=98")
        self.server = Forkserver(plandump, wrapper, root, self.env) if forkserver else None
        if self.server:
            self.warm()

    def warm(self):
        """The fork server runs plandump's common paths once itself (a good plan assembled, shown
        and checked, a broken one refused): under valgrind every case then starts with them
        translated, a third of its time. A warm-up that fails is a failed check."""
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "warm.plan")
            for args, code in ((["--assemble", "tests/plans/tp2pp2.plan.txt", "-o", out], 0), ([out], 0), (["--json", out], 0),
                               (["--assemble", "tests/bad_plans/send-recv-size.plan.txt", "-o", out + "2"], 5)):
                got = self.server.warm(args)
                if got != code:
                    check(f"warm-up: plandump {' '.join(args)}: exit {code}", False, detail=f"exit {got}")

    def __call__(self, *args):
        if self.server:
            p = self.server.run(list(args))
        else:
            p = subprocess.run([*self.wrapper, self.plandump, *args], cwd=self.root, capture_output=True, env=self.env)
        p.stdout = p.stdout.decode("utf-8", "replace")
        p.stderr = p.stderr.decode("utf-8", "replace")
        return p


def strip_comments(text):
    return "".join(l for l in text.splitlines(True) if not l.lstrip().startswith("#"))


def same_bytes(a, b):
    cmp = shutil.which("cmp")
    if cmp:
        return subprocess.run([cmp, "-s", a, b]).returncode == 0
    with open(a, "rb") as x, open(b, "rb") as y:
        return x.read() == y.read()


def json_validator(root):
    try:
        from jsonschema import Draft202012Validator
    except ImportError:
        return None
    with open(os.path.join(root, "schemas", "plan.schema.json"), encoding="utf-8") as f:
        schema = json.load(f)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_refuses_bad_sources(name, validator, doc):
    """The schema holds every param to an init and every input to a data source, and no other
    tensor to either: a copy of doc broken in each of these ways is refused."""
    breaks = {"param": lambda t: t.pop("init"), "input": lambda t: t.pop("data"),
              "activation": lambda t: t.update(init={"kind": "zeros"})}
    for kind, spoil in breaks.items():
        index = next((i for i, t in enumerate(doc["tensors"]) if t["kind"] == kind), None)
        if index is None:
            continue
        bad = json.loads(json.dumps(doc))
        spoil(bad["tensors"][index])
        check(f"{name}: the schema refuses a broken {kind} source", any(True for _ in validator.iter_errors(bad)))


def good_plan(run, tmp, path, validator):
    name = os.path.basename(path)
    rel = os.path.relpath(path, run.root)
    a, b, t = os.path.join(tmp, "a.plan"), os.path.join(tmp, "b.plan"), os.path.join(tmp, "a.txt")
    p = run("--assemble", rel, "-o", a)
    if not check(f"{name}: assembles", p.returncode == 0 and p.stderr == "", p):
        return
    p = run(a)
    check(f"{name}: summary, check ok", p.returncode == 0 and "check           ok" in p.stdout and p.stderr == "", p)
    p = run("--check-only", a)
    check(f"{name}: --check-only exit 0, silent", p.returncode == 0 and p.stdout == "" and p.stderr == "", p)
    p = run("--text", a)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    check(f"{name}: --text prints the file (but its comments)", p.returncode == 0 and
          strip_comments(p.stdout) == strip_comments(source), p)
    text = p.stdout
    with open(t, "w", encoding="utf-8") as f:
        f.write(text)
    p = run("--assemble", t, "-o", b)
    check(f"{name}: --text assembles to the same bytes (cmp)", p.returncode == 0 and same_bytes(a, b), p)
    p = run("--text", b)
    check(f"{name}: and prints the same text again", p.returncode == 0 and p.stdout == text, p)
    p = run("--json", a)
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        check(f"{name}: --json is JSON", False, p, str(e))
        return
    check(f"{name}: --json check ok", p.returncode == 0 and doc["check"] == {"ok": True}, p)
    if validator is not None:
        errors = [e.message for e in validator.iter_errors(doc)]
        check(f"{name}: --json follows schemas/plan.schema.json", not errors, None, "; ".join(errors[:3]))
        schema_refuses_bad_sources(name, validator, doc)
    kinds = {t["kind"] for t in doc["tensors"]}
    p = run(a)
    check(f"{name}: the summary counts the params' inits and the inputs' data",
          ("\n  params          " in p.stdout) == ("param" in kinds) and ("\n  inputs          " in p.stdout) == ("input" in kinds), p)
    world = doc["world"]
    for r in range(world):
        p = run("--rank", str(r), "--json", a)
        d = json.loads(p.stdout) if p.returncode == 0 else {}
        progs = d.get("programs", [])
        check(f"{name}: --rank {r} reads its own program only",
              p.returncode == 0 and len(progs) == 1 and r in progs[0]["ranks"] and d.get("rank") == r, p)
    p = run("--rank", "0", "--text", a)
    shows_one = ("# program 1: not " in p.stdout) == (doc["n_programs"] > 1)
    check(f"{name}: --rank 0 --text shows one program", p.returncode == 0 and shows_one and "program 0 " in p.stdout, p)
    p = run("--rank", str(world), a)
    check(f"{name}: --rank {world} is out of range (exit 2)", p.returncode == 2 and "out of range" in p.stderr, p)


def run_good(run):
    validator = json_validator(run.root)
    if validator is None:
        print("note: python3-jsonschema is missing: --json is not checked against the schema")
    plans = sorted(glob.glob(os.path.join(run.root, "tests", "plans", "*.plan.txt")))
    check("tests/plans/ has at least 3 plans", len(plans) >= 3)
    with tempfile.TemporaryDirectory() as tmp:
        for path in plans:
            good_plan(run, tmp, path, validator)


def read_expect(bad):
    cases = []
    with open(os.path.join(bad, "expect.tsv"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 3 or not parts[1].isdigit():
                check(f"expect.tsv:{n}: FILE<TAB>EXIT<TAB>FRAGMENT", False)
                continue
            cases.append((parts[0], int(parts[1]), parts[2]))
    return cases


def one_line(p, prefix, fragment):
    lines = p.stderr.splitlines()
    return len(lines) == 1 and lines[0].startswith(prefix) and fragment in lines[0]


def bad_plan(run, tmp, name, code, fragment):
    rel = os.path.join("tests", "bad_plans", name)
    out = os.path.join(tmp, "x.plan")
    if os.path.exists(out):
        os.remove(out)
    p = run("--assemble", rel, "-o", out)
    ok = check(f"{name}: exit {code}, {fragment[:60]!r}",
               p.returncode == code and p.stdout == "" and one_line(p, f"plandump: {rel}", fragment), p)
    if not ok or code != 5:
        return
    check(f"{name}: nothing written without --force", not os.path.exists(out))
    p = run("--assemble", rel, "-o", out, "--force")
    if p.returncode != 0:  # the format cannot hold it (an index out of range): refused the same way
        check(f"{name}: --force cannot encode it", p.returncode == 5 and "cannot encode" in p.stderr, p)
        return
    p = run(out)
    check(f"{name}: plandump on the forced file: exit 5, same diagnostic",
          p.returncode == 5 and one_line(p, f"plandump: {out}: ", fragment) and "FAILED" in p.stdout, p)
    if run.wrapper:  # under a memory checker: --check-only runs the same reader and checks again
        return
    p = run("--check-only", out)
    check(f"{name}: --check-only on it: exit 5, silent stdout", p.returncode == 5 and p.stdout == "", p)


def binary_damage(run, tmp):
    good = os.path.join(tmp, "good.plan")
    p = run("--assemble", "tests/plans/tp2pp2.plan.txt", "-o", good)
    with open(good, "rb") as f:
        data = f.read()
    cases = [("truncated", data[:len(data) - 16], "truncated: file is"),
             ("empty", b"", "truncated: file is 0 bytes"),
             ("bad magic", b"XLANCC\r\n" + data[8:], "bad magic"),
             ("version 5", data[:8] + b"\x05" + data[9:], "version 5 (this reader knows 4)"),
             ("section CRC", data[:-1] + bytes([data[-1] ^ 1]), "(PROGRAM 1): CRC mismatch"),
             ("a text plan given as a plan file", open(os.path.join(run.root, "tests/plans/single.plan.txt"), "rb").read(), "bad magic")]
    for what, blob, fragment in cases:
        path = os.path.join(tmp, "damaged.plan")
        with open(path, "wb") as f:
            f.write(blob)
        p = run(path)
        check(f"binary: {what}: exit 4", p.returncode == 4 and one_line(p, f"plandump: {path}: ", fragment), p)
    with open(os.path.join(tmp, "damaged.plan"), "wb") as f:
        f.write(data[:-1] + bytes([data[-1] ^ 1]))
    p = run("--rank", "0", os.path.join(tmp, "damaged.plan"))
    check("binary: --rank 0 does not read PROGRAM 1 (damaged): exit 0", p.returncode == 0, p)
    p = run("--rank", "2", os.path.join(tmp, "damaged.plan"))
    check("binary: --rank 2 reads PROGRAM 1 (damaged): exit 4", p.returncode == 4 and "CRC mismatch" in p.stderr, p)
    p = run(os.path.join(tmp, "missing.plan"))
    check("a missing file: exit 4", p.returncode == 4 and "cannot open" in p.stderr, p)
    p = run(tmp)
    check("a folder: exit 4", p.returncode == 4 and "not a regular file" in p.stderr, p)
    p = run("--assemble", "tests/plans/single.plan.txt", "-o", os.path.join(tmp, "no", "such", "dir.plan"))
    check("an output that cannot be written: exit 8", p.returncode == 8 and "cannot create" in p.stderr, p)


def run_bad(run):
    bad = os.path.join(run.root, "tests", "bad_plans")
    cases = read_expect(bad)
    listed = {c[0] for c in cases}
    files = {f for f in os.listdir(bad) if f != "expect.tsv"}
    for extra in sorted(files - listed):
        check(f"{extra}: listed in expect.tsv", False)
    for missing in sorted(listed - files):
        check(f"{missing}: in tests/bad_plans/", False)
    check("at least 12 broken plans", len(cases) >= 12)
    with tempfile.TemporaryDirectory() as tmp:
        for name, code, fragment in cases:
            if name in files:
                bad_plan(run, tmp, name, code, fragment)
        binary_damage(run, tmp)


def run_cli(run):
    p = run("--help")
    check("--help: usage on stdout, exit 0", p.returncode == 0 and "usage: plandump" in p.stdout and p.stderr == "", p)
    check("--help documents the exit codes (the table the three tools share)",
          "Exit codes (the same in plancc, plandump and planrun)" in p.stdout and " 4  not a plan file" in p.stdout
          and " 5  the plan fails plan_check" in p.stdout and " 8  unusable data, checkpoint or output file" in p.stdout, p)
    p = run("--version")
    check("--version: exit 0", p.returncode == 0 and p.stdout.startswith("plandump ") and p.stderr == "", p)
    usage = [([], "no plan given"), (["a.plan", "b.plan"], "more than one plan"), (["--bogus", "x"], "unknown option"),
             (["--json", "--text", "x"], "only one of"), (["--rank", "-1", "x"], "--rank wants"),
             (["--rank", "x", "y"], "--rank wants"), (["--assemble", "tests/plans/single.plan.txt"], "-o PLAN"),
             (["-o", "x.plan", "y"], "goes with --assemble"), (["--rank"], "needs a value"),
             (["--assemble", "tests/plans/single.plan.txt", "-o", "x", "--json"], "nothing else")]
    for args, fragment in usage:
        p = run(*args)
        check(f"usage error {' '.join(args) or '(no arguments)'}: exit 2", p.returncode == 2 and fragment in p.stderr
              and p.stdout == "", p)


def main():
    args = sys.argv[1:]
    mode = args.pop(0) if args and args[0] in ("--good", "--bad", "--cli") else None
    forkserver = bool(args) and args[0] == "--forkserver"
    if forkserver:
        args.pop(0)
    run = Runner(os.path.abspath(args[0]), os.path.abspath(args[1]), args[2:], forkserver)
    if mode in (None, "--good"):
        run_good(run)
    if mode in (None, "--bad"):
        run_bad(run)
    if mode in (None, "--cli"):
        run_cli(run)
    if run.server:
        check("the fork server (under the wrapper) exits 0", run.server.close() == 0)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
