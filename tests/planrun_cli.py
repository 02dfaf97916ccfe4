#!/usr/bin/env python3
"""planrun's command line and its bad inputs: every failure has its own exit code and a message
that names the file (and the rank and instruction, for a failing step); nothing hangs.

usage: planrun_cli.py PLANCC PLANRUN PLANDUMP SOURCE_ROOT [WRAPPER...]

With a WRAPPER (valgrind ...), every planrun runs under it.
"""
import os
import subprocess
import sys
import tempfile

passed = failed = 0
wrapper = []


def check(name, ok, p=None, detail=""):
    global passed, failed
    if ok:
        passed += 1
        return True
    failed += 1
    print(f"FAIL {name}{': ' + detail if detail else ''}")
    if p is not None:
        print(f"     exit {p.returncode}\n     stdout: {p.stdout[-1500:]}\n     stderr: {p.stderr[-2500:]}")
    return False


def run(*args, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def expect(name, p, code, *needles):
    ok = p.returncode == code and all(n in p.stdout + p.stderr for n in needles)
    check(name, ok, p, f"want exit {code} and {list(needles)}")


def main():
    global wrapper
    plancc, planrun, plandump, root = sys.argv[1:5]
    wrapper = sys.argv[5:]
    pr = lambda *a, **k: run(*wrapper, planrun, *a, **k)
    cpu = os.path.join(root, "models", "clusters", "cpu.json")
    mlp = os.path.join(root, "models", "mlp.json")
    gpt = os.path.join(root, "models", "gpt-tiny.json")
    bad = os.path.join(root, "tests", "run_bad")
    with tempfile.TemporaryDirectory() as t:
        j = lambda n: os.path.join(t, n)
        p = run(plancc, mlp, "--cluster", cpu, "--devices", 2, "--dp", 2, "-o", j("mlp.plan"))
        check("compile mlp", p.returncode == 0, p)

        # usage
        expect("--help", pr("--help"), 0, "usage: planrun", "Exit codes")
        expect("--version", pr("--version"), 0, "planrun ")
        expect("no plan", pr(), 1, "want one plan file")
        expect("unknown option", pr(j("mlp.plan"), "--frobnicate"), 1, "--frobnicate")
        expect("bad --steps", pr(j("mlp.plan"), "--steps", "ten"), 1, "--steps", "ten")
        expect("bad --backend", pr(j("mlp.plan"), "--backend", "tpu"), 1, "tpu")

        # the plan file
        expect("missing plan", pr(j("nope.plan")), 2, "nope.plan")
        with open(j("junk.plan"), "wb") as f:
            f.write(b"not a plan at all, just some bytes" * 4)
        expect("not a plan", pr(j("junk.plan")), 2, "junk.plan")
        with open(j("mlp.plan"), "rb") as f:
            data = f.read()
        with open(j("short.plan"), "wb") as f:
            f.write(data[: len(data) // 2])
        expect("truncated plan", pr(j("short.plan")), 2, "short.plan")
        flipped = bytearray(data)
        flipped[len(data) - 20] ^= 0x40
        with open(j("flip.plan"), "wb") as f:
            f.write(flipped)
        expect("corrupt plan", pr(j("flip.plan")), 2, "flip.plan")
        p = run(plandump, "--assemble", os.path.join(root, "tests", "bad_plans", "read-before-write.plan.txt"),
                "-o", j("rbw.plan"), "--force")
        check("assemble a broken plan", p.returncode == 0, p)
        expect("plan fails its check", pr(j("rbw.plan")), 3, "rbw.plan", "before anything writes it")
        expect("stale plan", pr(j("mlp.plan"), "--model", gpt), 4, "model")
        expect("cuda without the cuda backend", pr(j("mlp.plan"), "--backend", "cuda", "--steps", 1), 5, "cuda")

        # a run that cannot go on: a deadlock is found at once, naming each blocked receive
        p = run(plandump, "--assemble", os.path.join(bad, "deadlock.plan.txt"), "-o", j("deadlock.plan"))
        check("assemble the deadlock plan", p.returncode == 0, p)
        expect("deadlock", pr(j("deadlock.plan"), "--steps", 1, "--timeout", 120, timeout=100), 6, "deadlock",
               "rank 0 (program 0 \"first\") stream 0: insn 0 (recv", "rank 1 (program 1 \"second\") stream 0: insn 0 (recv")
        p = run(plandump, "--assemble", os.path.join(bad, "grouped.plan.txt"), "-o", j("grouped.plan"))
        check("assemble the grouped plan", p.returncode == 0, p)
        expect("a send/recv group does not deadlock", pr(j("grouped.plan"), "--steps", 2), 0, "2 steps")

        # data files
        expect("missing token file", pr(j("mlp.plan"), "--data", j("none.bin")), 8, "none.bin")
        with open(j("odd.bin"), "wb") as f:
            f.write(b"\x01\x02\x03")
        expect("odd token file", pr(j("mlp.plan"), "--data", j("odd.bin")), 8, "odd.bin", "uint16")
        p = run(plancc, gpt, "--cluster", cpu, "--devices", 1, "-o", j("gpt.plan"))
        check("compile gpt-tiny", p.returncode == 0, p)
        with open(j("big.bin"), "wb") as f:
            f.write(bytes([0, 1]) * 2000)  # token 256: outside gpt-tiny's vocabulary of 256
        expect("token outside the vocabulary", pr(j("gpt.plan"), "--steps", 1, "--data", j("big.bin")), 8, "256",
               "vocabulary")

        # save, load, compare
        expect("run and save", pr(j("mlp.plan"), "--steps", 3, "--save", j("a.st"), "--losses", j("a.loss")), 0,
               "step 3/3", "saved")
        expect("compare with itself", pr(j("mlp.plan"), "--steps", 3, "--compare", j("a.st")), 0, "parameters equal")
        expect("compare after another number of steps", pr(j("mlp.plan"), "--steps", 2, "--compare", j("a.st")), 7,
               "differs", "tensor \"")
        # resuming: 2 steps, save, then 1 more from the file == 3 straight
        expect("save after 2", pr(j("mlp.plan"), "--steps", 2, "--save", j("b.st"), "--quiet"), 0)
        expect("resume for 1", pr(j("mlp.plan"), "--steps", 1, "--load", j("b.st"), "--compare", j("a.st"), "--rtol", 0), 0,
               "parameters equal")
        with open(j("junk.st"), "wb") as f:
            f.write(b"\xff" * 64)
        expect("load junk", pr(j("mlp.plan"), "--steps", 1, "--load", j("junk.st")), 8, "junk.st", "safetensors")
        p = run(plancc, gpt, "--cluster", cpu, "--devices", 1, "-o", j("gpt.plan"))
        expect("load another model's file", pr(j("gpt.plan"), "--steps", 1, "--load", j("a.st")), 8, "a.st", "no tensor")
        expect("unwritable --save", pr(j("mlp.plan"), "--steps", 1, "--save", j("no/such/dir.st")), 8, "dir.st")
        # the losses file has one line per step
        with open(j("a.loss")) as f:
            check("losses file", len(f.read().split()) == 3)

        # double precision: F64 files, resumable bit for bit; an f32 run loads them (rounded)
        expect("bad --precision", pr(j("mlp.plan"), "--precision", "f16"), 1, "--precision", "f16")
        expect("f64 on cuda", pr(j("mlp.plan"), "--precision", "f64", "--backend", "cuda"), 1, "cpu backends only")
        expect("f64 run and save", pr(j("mlp.plan"), "--precision", "f64", "--steps", 3, "--save", j("d.st"),
                                      "--losses", j("d.loss")), 0, "step 3/3")
        with open(j("d.st"), "rb") as f:
            check("f64 file holds F64", b'"F64"' in f.read(4096))
        expect("f64 save after 2", pr(j("mlp.plan"), "--precision", "f64", "--steps", 2, "--save", j("e.st"), "--quiet"), 0)
        expect("f64 resume for 1", pr(j("mlp.plan"), "--precision", "f64", "--steps", 1, "--load", j("e.st"),
                                      "--compare", j("d.st"), "--rtol", 0, "--atol", 0), 0, "parameters equal")
        expect("f32 run from an f64 file", pr(j("mlp.plan"), "--steps", 1, "--load", j("e.st"), "--compare", j("d.st"),
                                              "--rtol", 1e-4), 0, "parameters equal")
        with open(j("d.loss")) as f, open(j("a.loss")) as g:
            d, a = [float(x) for x in f.read().split()], [float(x) for x in g.read().split()]
        check("f64 losses near f32's", all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(d, a)))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
