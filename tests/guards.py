#!/usr/bin/env python3
"""No silent failure: the run-time guards and the tools' files, end to end.

usage: guards.py PLANCC PLANDUMP PLANRUN SOURCE_ROOT

Each case is a defect of issue 24 that this test would catch again:
  - a diverging run (mlp with adamw's lr 1e3) stops at the first non-finite value with exit 12,
    naming the step, the tensor and the operator, and writes no checkpoint; --allow-nonfinite
    runs on (it used to print `loss -nan`, exit 0 and save an all-NaN checkpoint);
  - --timeout bounds a run whose other rank is busy computing (tests/run_bad/busy.plan.txt: it
    used to end only when the long products had all run);
  - --save, --losses, --compare and --load paths are checked before the first step (a typo
    used to lose the whole run), and plancc's -o before it compiles; --load of a directory is
    refused with a message (it aborted under ASan);
  - a checkpoint carries its step and each tensor's CRC-32C: damaged bytes, a damaged step or a
    missing __metadata__ are refused on --load (they used to load silently, as step 0);
  - plancc -o, plandump --assemble -o and planrun --save write a FIFO in place (they renamed a
    regular file over it); plandump --assemble /dev/zero stops at its input limit.
"""
import json
import os
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

passed = failed = 0


def check(name, ok, p=None, detail=""):
    global passed, failed
    if ok:
        passed += 1
        return True
    failed += 1
    print(f"FAIL {name}{': ' + detail if detail else ''}")
    if p is not None:
        print(f"     exit {p.returncode}\n     stdout: {p.stdout[-1500:]}\n     stderr: {p.stderr[-1500:]}")
    return False


def run(*args, timeout=120):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def expect(name, p, code, *frags):
    ok = p.returncode == code and all(f in p.stdout + p.stderr for f in frags)
    return check(name, ok, p, f"want exit {code} and {frags}")


def read_fifo(path, out):
    with open(path, "rb") as f:
        out.append(f.read())


def rewrite_meta(src, dst, fn):
    """src's safetensors file with its header passed through fn, written to dst."""
    with open(src, "rb") as f:
        d = f.read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    fn(h)
    hj = json.dumps(h).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + d[8 + n:])


def nonfinite(plandump, planrun, j):
    text = run(plandump, "--text", j("mlp.plan")).stdout
    lines = [ln.replace(",0.001,0.9,0.999", ",1000,0.9,0.999") if ln.lstrip().startswith("attrs") else ln
             for ln in text.splitlines()]
    check("the mlp plan has adamw's lr 0.001 to change", "\n".join(lines) != text)
    with open(j("diverge.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    p = run(plandump, "--assemble", j("diverge.txt"), "-o", j("diverge.plan"))
    check("assemble the diverging plan", p.returncode == 0, p)
    p = run(planrun, j("diverge.plan"), "--steps", 40, "--save", j("nan.st"), "--log-every", 0)
    expect("a diverging run stops with exit 12", p, 12, "step ", "a non-finite value", "written by insn", "nothing saved")
    check("no checkpoint of a diverged run", not os.path.exists(j("nan.st")))
    p = run(planrun, j("diverge.plan"), "--steps", 40, "--allow-nonfinite", "--save", j("nan.st"), "--log-every", 0)
    expect("--allow-nonfinite runs on", p, 0, "nan")
    p = run(planrun, j("mlp.plan"), "--steps", 1, "--load", j("nan.st"), "--log-every", 0)
    expect("a NaN checkpoint loaded stops at the first operator", p, 12, "step 41", "a non-finite value", "written by insn 0")


def watchdog(plandump, planrun, root, j):
    p = run(plandump, "--assemble", os.path.join(root, "tests", "run_bad", "busy.plan.txt"), "-o", j("busy.plan"))
    check("assemble busy.plan", p.returncode == 0, p)
    t0 = time.monotonic()
    p = run(planrun, j("busy.plan"), "--steps", 1, "--timeout", 1)
    took = time.monotonic() - t0
    # 6 today; issue 26 renumbers a failed step to 11
    ok = p.returncode == 11 and "the watchdog" in p.stderr and "rank 0 stream 0 is still in insn" in p.stderr
    check("--timeout ends a run whose other rank computes", ok, p)
    check("... within --timeout of the failure (plus setting up)", took < 12, p, f"took {took:.1f} s")


def early_paths(planrun, j):
    for opt, path, frag in [("--save", j("no/such/a.st"), "does not exist"), ("--losses", j(""), "directory"),
                            ("--compare", j("missing.st"), "cannot read"), ("--load", j(""), "directory")]:
        t0 = time.monotonic()
        p = run(planrun, j("mlp.plan"), "--steps", 100000, opt, path, "--log-every", 1)
        expect(f"{opt} checked before the first step", p, 8, opt, frag)
        check(f"{opt}: no step ran", "step 1/" not in p.stdout and time.monotonic() - t0 < 20, p)


def plancc_output(plancc, root, j):
    """plancc -o into a folder that does not exist fails before the compile (a minute of CPU here)."""
    t0 = time.monotonic()
    p = run(plancc, os.path.join(root, "models", "gpt3-175b.json"), "--cluster",
            os.path.join(root, "models", "clusters", "dgx-a100.json"), "--nodes", 128, "--global-batch", 1536,
            "-o", j("no/such/gpt3.plan"))
    check("plancc -o checked before compiling", p.returncode == 8 and "does not exist" in p.stderr and
          time.monotonic() - t0 < 20, p)


def checkpoints(planrun, j):
    p = run(planrun, j("mlp.plan"), "--steps", 2, "--save", j("a.st"), "--log-every", 0)
    check("save", p.returncode == 0, p)
    with open(j("a.st"), "rb") as f:
        d = bytearray(f.read())
    d[-3] ^= 0x10
    with open(j("flip.st"), "wb") as f:
        f.write(d)
    expect("damaged tensor bytes", run(planrun, j("mlp.plan"), "--steps", 1, "--load", j("flip.st")), 8, "damaged", "CRC-32C")
    rewrite_meta(j("a.st"), j("step.st"), lambda h: h["__metadata__"].update(step="2x"))
    expect("damaged step", run(planrun, j("mlp.plan"), "--steps", 1, "--load", j("step.st")), 8, "/__metadata__/step")
    rewrite_meta(j("a.st"), j("nometa.st"), lambda h: h.pop("__metadata__"))
    expect("no __metadata__", run(planrun, j("mlp.plan"), "--steps", 1, "--load", j("nometa.st")), 8, "/__metadata__")
    rewrite_meta(j("a.st"), j("nocrc.st"), lambda h: [h["__metadata__"].pop(k) for k in list(h["__metadata__"])
                                                       if k.startswith("crc32c:w1")])
    expect("a tensor without its checksum", run(planrun, j("mlp.plan"), "--steps", 1, "--load", j("nocrc.st")), 8, "crc32c:w1")
    p = run(planrun, j("mlp.plan"), "--steps", 1, "--load", j("a.st"), "--losses", j("resumed.txt"), "--log-every", 0)
    q = run(planrun, j("mlp.plan"), "--steps", 3, "--losses", j("whole.txt"), "--log-every", 0)
    with open(j("resumed.txt")) as f, open(j("whole.txt")) as g:
        check("a good checkpoint resumes at its step (step 3's loss)", p.returncode == 0 and q.returncode == 0 and
              f.read().split() == g.read().split()[2:], p)


def fifos(plancc, plandump, planrun, root, j):
    cpu = os.path.join(root, "models", "clusters", "cpu.json")
    for name, cmd in [("plancc -o FIFO", [plancc, os.path.join(root, "models", "mlp.json"), "--cluster", cpu, "--devices", 2,
                                           "--dp", 2, "-o"]),
                      ("plandump --assemble -o FIFO", [plandump, "--assemble", os.path.join(root, "tests", "plans",
                                                                                            "single.plan.txt"), "-o"]),
                      ("planrun --save FIFO", [planrun, j("mlp.plan"), "--steps", 1, "--log-every", 0, "--save"])]:
        fifo = j("out.fifo")
        if os.path.exists(fifo):
            os.unlink(fifo)
        os.mkfifo(fifo)
        got = []
        th = threading.Thread(target=read_fifo, args=(fifo, got), daemon=True)
        th.start()
        p = run(*cmd, fifo, timeout=60)
        th.join(10)
        check(name, p.returncode == 0 and got and len(got[0]) > 64, p)
        check(name + " leaves the FIFO a FIFO", stat.S_ISFIFO(os.stat(fifo).st_mode))
    p = run(plandump, "--assemble", "/dev/zero", "-o", j("zero.plan"))
    expect("plandump --assemble /dev/zero", p, 4, "/dev/zero", "more than")


def main():
    plancc, plandump, planrun, root = sys.argv[1:5]
    cpu = os.path.join(root, "models", "clusters", "cpu.json")
    with tempfile.TemporaryDirectory() as t:
        j = lambda n: os.path.join(t, n)
        p = run(plancc, os.path.join(root, "models", "mlp.json"), "--cluster", cpu, "--devices", 2, "--dp", 2, "-o", j("mlp.plan"))
        check("compile mlp", p.returncode == 0, p)
        nonfinite(plandump, planrun, j)
        early_paths(planrun, j)
        plancc_output(plancc, root, j)
        checkpoints(planrun, j)
        fifos(plancc, plandump, planrun, root, j)
        watchdog(plandump, planrun, root, j)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
