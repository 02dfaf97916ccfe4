#!/usr/bin/env python3
"""planrun's command line and its bad inputs: every failure has its own exit code and a message
that names the file (and the rank and instruction, for a failing step); nothing hangs.

usage: planrun_cli.py PLANCC PLANRUN PLANDUMP SOURCE_ROOT [WRAPPER...]

With a WRAPPER (valgrind ...), every planrun runs under it.
"""
import os
import subprocess
import time
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


def has_gpu():
    """A GPU this process can use: nvidia-smi lists one."""
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return p.returncode == 0 and "GPU" in p.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_and_cuda(pr, plancc, cpu, mlp, j):
    """The launch (rank discovery, world size, rendezvous between real processes) and the cuda
    backend's refusals; on a machine without a GPU, planrun --backend cuda exits 9."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "OMPI_COMM_WORLD", "SLURM_"))}
    prx = lambda extra, *a, **k: subprocess.run([str(x) for x in (*wrapper, *pr.planrun, *a)], capture_output=True,
                                                text=True, timeout=k.get("timeout", 120), env={**env, **extra})
    p = run(plancc, mlp, "--cluster", cpu, "--devices", 1, "-o", j("mlp1.plan"))
    check("compile mlp on 1 rank", p.returncode == 0, p)
    p = run(plancc, mlp, "--cluster", cpu, "--devices", 2, "--dp", 2, "-o", j("mlp2.plan"))
    check("compile mlp on 2 ranks", p.returncode == 0, p)
    version = prx({}, "--version").stdout
    built = "cuda" in version
    # The cpu backends: a world of one from a launcher is fine; more is a mistake.
    expect("cpu under srun -n 1", prx({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, j("mlp2.plan"), "--steps", 1), 0, "1/1")
    expect("cpu as one of 2 processes", prx({"RANK": "0", "WORLD_SIZE": "2"}, j("mlp2.plan"), "--steps", 1), 10,
           "runs every rank", "WORLD_SIZE")
    expect("launchers that disagree: exit 10 naming both",
           prx({"RANK": "0", "WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}, j("mlp2.plan")), 10,
           "WORLD_SIZE=2 but OMPI_COMM_WORLD_SIZE=4")
    expect("bad RANK", prx({"RANK": "one", "WORLD_SIZE": "2"}, j("mlp2.plan")), 10, "RANK=\"one\"")
    expect("rank without world size", prx({"OMPI_COMM_WORLD_RANK": "1"}, j("mlp2.plan")), 10, "no world size")
    expect("--rank beyond --world-size", prx({}, j("mlp2.plan"), "--rank", 2, "--world-size", 2), 10, "rank 2")
    expect("bad --rank", prx({}, j("mlp2.plan"), "--rank", "1.5"), 2, "--rank")
    if os.environ.get("PLANRUN_EXPECT_CUDA") == "1":
        check("meson found CUDA, so planrun has the cuda backend", built, None, f"--version says: {version.strip()}")
    if not built:
        expect("cuda without the cuda backend", prx({}, j("mlp1.plan"), "--backend", "cuda", "--steps", 1), 9,
               "built without the cuda backend")
        return
    # The backend is a module planrun loads for --backend cuda only (runtime/cuda/loader.c):
    # one that is missing, or a library that is not it, is refused naming the path and why.
    expect("cuda: the module missing (PLANRUN_CUDA_MODULE)",
           prx({"PLANRUN_CUDA_MODULE": j("no-such-module.so")}, j("mlp1.plan"), "--backend", "cuda", "--steps", 1), 9,
           "cannot load the cuda backend's module", "no-such-module.so")
    expect("cuda: a library that is not the module",
           prx({"PLANRUN_CUDA_MODULE": "libm.so.6"}, j("mlp1.plan"), "--backend", "cuda", "--steps", 1), 9,
           "libm.so.6: it has no rt_cuda_module_table")
    expect("cpu runs do not load the module", prx({"PLANRUN_CUDA_MODULE": j("no-such-module.so")}, j("mlp1.plan"),
                                                  "--steps", 1), 0, "1/1")
    gpu = has_gpu()
    if gpu:
        expect("cuda on a GPU", prx({}, j("mlp1.plan"), "--backend", "cuda", "--steps", 1), 0, "1/1", "GPU 0")
    else:
        expect("cuda without a GPU", prx({}, j("mlp1.plan"), "--backend", "cuda", "--steps", 1), 9, "no GPU",
               "rank 0 (default)")
        expect("cuda without a GPU, CUDA_VISIBLE_DEVICES empty",
               prx({"CUDA_VISIBLE_DEVICES": ""}, j("mlp1.plan"), "--backend", "cuda"), 9, "no GPU")
    expect("cuda: world size differs from the plan's", prx({"RANK": "0", "WORLD_SIZE": "2"}, j("mlp1.plan"), "--backend", "cuda"),
           10, "compiled for 1 rank", "WORLD_SIZE says the world has 2")
    expect("cuda: a 2-rank plan in one process", prx({}, j("mlp2.plan"), "--backend", "cuda"), 10, "start 2 processes")
    expect("cuda: no way to meet rank 0", prx({"RANK": "1", "WORLD_SIZE": "2"}, j("mlp2.plan"), "--backend", "cuda"), 10,
           "MASTER_ADDR")
    expect("cuda: bad --rendezvous", prx({}, j("mlp2.plan"), "--backend", "cuda", "--rank", 0, "--world-size", 2,
                                         "--rendezvous", "tcp:host:0"), 10, "port")
    expect("cuda: --save with 2 processes", prx({}, j("mlp2.plan"), "--backend", "cuda", "--rank", 0, "--world-size", 2,
                                                "--save", j("x.st")), 2, "--save")
    port = free_port()
    if gpu:
        expect("cuda: rank 0 alone gives up, naming rank 1",
               prx({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}, j("mlp2.plan"),
                   "--backend", "cuda", "--timeout", 1), 10, "1 of 2 ranks joined", "missing: 1")
        return  # two ranks on one machine's GPUs: the gpu suite's business
    # Without a GPU a rank says so before it waits for its peers: at once, not after --timeout.
    t0 = time.time()
    expect("cuda: a lone rank without a GPU says so before the rendezvous",
           prx({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}, j("mlp2.plan"),
               "--backend", "cuda", "--timeout", 60), 9, "no GPU", "before the rendezvous", "rank 1")
    check("... and at once (not after the 60 s timeout)", time.time() - t0 < 30, None, f"{time.time() - t0:.1f} s")
    # Two real processes started as torchrun (variables) and as flags with a file rendezvous: both
    # stop for want of a GPU before they meet (the rendezvous itself: tests/unit_launch.c).
    def pair(name, envs, args):
        procs = [subprocess.Popen([str(x) for x in (*wrapper, *pr.planrun, j("mlp2.plan"), "--backend", "cuda",
                                                    "--timeout", 30, *args[r])],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**env, **envs[r]})
                 for r in (1, 0)]
        outs = [p.communicate(timeout=120) for p in procs]
        ok = all(p.returncode == 9 for p in procs) and all("before the rendezvous" in e and "rendezvous done" not in o
                                                           for o, e in outs)
        check(name, ok, None, " / ".join(f"exit {p.returncode}: {o[-400:]} {e[-400:]}" for p, (o, e) in zip(procs, outs)))
    port = free_port()
    tcp = [{"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
           for r in (0, 1)]
    pair("cuda: tcp rendezvous between two planruns", tcp, [[], []])
    pair("cuda: file rendezvous between two planruns", [{}, {}],
         [["--rank", r, "--world-size", 2, "--rendezvous", "file:" + j("nccl.id")] for r in (0, 1)])


def background(pr, j):
    """--background: the background plan's refusals (exit 11), its options' (exit 1), and a
    replica's --background-save/--background-compare. mlp.plan has 2 ranks, mlp1.plan one."""
    fg, bg = j("mlp.plan"), j("mlp1.plan")
    expect("background with 2 ranks", pr(fg, "--steps", 1, "--background", fg), 13, "--background", "2 ranks", "--devices 1")
    expect("missing background plan", pr(fg, "--steps", 1, "--background", j("nope-bg.plan")), 13, "nope-bg.plan")
    expect("background not a plan", pr(fg, "--steps", 1, "--background", j("junk.plan")), 13, "junk.plan")
    expect("corrupt background plan", pr(fg, "--steps", 1, "--background", j("flip.plan")), 13, "flip.plan")
    expect("truncated background plan", pr(fg, "--steps", 1, "--background", j("short.plan")), 13, "short.plan")
    expect("background plan fails its check", pr(fg, "--steps", 1, "--background", j("rbw.plan")), 13, "rbw.plan",
           "fails its check")
    expect("--background-steps without --background", pr(fg, "--background-steps", 2), 2, "need --background")
    expect("--background-steps and --background-until-fg", pr(fg, "--background", bg, "--background-steps", 2,
                                                              "--background-until-fg"), 2, "exclude each other")
    expect("--background-nice 20", pr(fg, "--background", bg, "--background-nice", 20), 2, "--background-nice", "0 to 19")
    expect("--background-inflight 0", pr(fg, "--background", bg, "--background-inflight", 0), 2, "--background-inflight")
    expect("--background-replica beyond the ranks", pr(fg, "--background", bg, "--background-replica", 2), 2,
           "replicas 0 to 1")
    # replica 1 (seed 5 + 1) after 3 steps is the plain run with seed 6
    expect("plain background run", pr(bg, "--steps", 3, "--seed", 6, "--quiet", "--save", j("bg6.st")), 0)
    expect("background replica equals the plain run",
           pr(fg, "--steps", 2, "--background", bg, "--background-steps", 3, "--background-seed", 5, "--background-replica", 1,
              "--background-compare", j("bg6.st"), "--background-save", j("bgr1.st")), 0,
           "background beside rank 0: seed 5, 3 steps", "background beside rank 1: seed 6, 3 steps", "held back by the gate",
           "background replica beside rank 1: parameters equal", "saved the background replica beside rank 1")
    expect("saved replica equals the plain run", pr(bg, "--steps", 3, "--seed", 6, "--compare", j("bgr1.st"), "--rtol", 0,
                                                    "--atol", 0), 0, "parameters equal")
    expect("background replica of another seed differs",
           pr(fg, "--steps", 1, "--background", bg, "--background-steps", 3, "--background-compare", j("bg6.st")), 7,
           "--background-compare", "replica beside rank 0")
    expect("unwritable --background-save", pr(fg, "--steps", 1, "--background", bg, "--background-steps", 1,
                                              "--background-save", j("no/such/bg.st")), 8, "bg.st")
    expect("--background with --quiet", pr(fg, "--steps", 1, "--background", bg, "--quiet"), 0)


def main():
    global wrapper
    plancc, planrun, plandump, root = sys.argv[1:5]
    wrapper = sys.argv[5:]
    pr = lambda *a, **k: run(*wrapper, planrun, *a, **k)
    pr.planrun = [planrun]
    cpu = os.path.join(root, "models", "clusters", "cpu.json")
    mlp = os.path.join(root, "models", "mlp.json")
    gpt = os.path.join(root, "models", "gpt-tiny.json")
    bad = os.path.join(root, "tests", "run_bad")
    with tempfile.TemporaryDirectory() as t:
        j = lambda n: os.path.join(t, n)
        p = run(plancc, mlp, "--cluster", cpu, "--devices", 2, "--dp", 2, "-o", j("mlp.plan"))
        check("compile mlp", p.returncode == 0, p)

        # usage
        expect("--help", pr("--help"), 0, "usage: planrun", "Exit codes", "--background BG.plan", "13  unusable --background plan")
        expect("--version", pr("--version"), 0, "planrun ")
        expect("no plan", pr(), 2, "want one plan file")
        expect("unknown option", pr(j("mlp.plan"), "--frobnicate"), 2, "--frobnicate")
        expect("bad --steps", pr(j("mlp.plan"), "--steps", "ten"), 2, "--steps", "ten")
        expect("bad --backend", pr(j("mlp.plan"), "--backend", "tpu"), 2, "tpu")

        # the plan file
        expect("missing plan", pr(j("nope.plan")), 4, "nope.plan")
        with open(j("junk.plan"), "wb") as f:
            f.write(b"not a plan at all, just some bytes" * 4)
        expect("not a plan", pr(j("junk.plan")), 4, "junk.plan")
        with open(j("mlp.plan"), "rb") as f:
            data = f.read()
        with open(j("short.plan"), "wb") as f:
            f.write(data[: len(data) // 2])
        expect("truncated plan", pr(j("short.plan")), 4, "short.plan")
        flipped = bytearray(data)
        flipped[len(data) - 20] ^= 0x40
        with open(j("flip.plan"), "wb") as f:
            f.write(flipped)
        expect("corrupt plan", pr(j("flip.plan")), 4, "flip.plan")
        p = run(plandump, "--assemble", os.path.join(root, "tests", "bad_plans", "read-before-write.plan.txt"),
                "-o", j("rbw.plan"), "--force")
        check("assemble a broken plan", p.returncode == 0, p)
        expect("plan fails its check", pr(j("rbw.plan")), 5, "rbw.plan", "before anything writes it")
        expect("stale plan", pr(j("mlp.plan"), "--model", gpt), 6, "model")
        launch_and_cuda(pr, plancc, cpu, mlp, j)
        background(pr, j)

        # a run that cannot go on: a deadlock is found at once, naming each blocked receive
        p = run(plandump, "--assemble", os.path.join(bad, "deadlock.plan.txt"), "-o", j("deadlock.plan"))
        check("assemble the deadlock plan", p.returncode == 0, p)
        expect("deadlock", pr(j("deadlock.plan"), "--steps", 1, "--timeout", 120, timeout=100), 11, "deadlock",
               "rank 0 (program 0 \"first\") stream 0: insn 0 (recv", "rank 1 (program 1 \"second\") stream 0: insn 0 (recv")
        # a failing foreground stops its background replicas too (the gates close), at once
        expect("deadlock with a background job", pr(j("deadlock.plan"), "--steps", 1, "--timeout", 120, "--background",
                                                    j("mlp1.plan"), "--background-steps", 1000000, timeout=100), 11, "deadlock")
        p = run(plandump, "--assemble", os.path.join(bad, "grouped.plan.txt"), "-o", j("grouped.plan"))
        check("assemble the grouped plan", p.returncode == 0, p)
        # a plan past plan_check's bounds: refused as beyond a limit (14), not as a faulty plan (5)
        p = run(plandump, "--assemble", os.path.join(bad, "unchecked.plan.txt"), "-o", j("unchecked.plan"), "--force")
        check("assemble --force the plan too large to check", p.returncode == 0 and "too large to check" in p.stderr, p)
        expect("a plan too large to check", pr(j("unchecked.plan")), 14, "too large to check")
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
        # resuming: 2 steps, save, then 1 more from the file == 3 straight, bit for bit (also: the
        # straight run drew step 3's inputs ahead, during step 2, the resumed one at its start)
        expect("save after 2", pr(j("mlp.plan"), "--steps", 2, "--save", j("b.st"), "--quiet"), 0)
        expect("resume for 1", pr(j("mlp.plan"), "--steps", 1, "--load", j("b.st"), "--compare", j("a.st"), "--rtol", 0,
                                  "--atol", 0), 0, "parameters equal")
        with open(j("junk.st"), "wb") as f:
            f.write(b"\xff" * 64)
        expect("load junk", pr(j("mlp.plan"), "--steps", 1, "--load", j("junk.st")), 8, "junk.st", "safetensors")
        p = run(plancc, gpt, "--cluster", cpu, "--devices", 1, "-o", j("gpt.plan"))
        expect("load another model's file", pr(j("gpt.plan"), "--steps", 1, "--load", j("a.st")), 8, "a.st", "no tensor")
        expect("unwritable --save", pr(j("mlp.plan"), "--steps", 1, "--save", j("no/such/dir.st")), 8, "dir.st")
        # the losses file has one line per step
        with open(j("a.loss")) as f:
            check("losses file", len(f.read().split()) == 3)

        # network emulation: the plan's times for communication; the same losses, bit for bit
        eth = os.path.join(root, "models", "clusters", "cpu-ethernet.json")
        p = run(plancc, mlp, "--cluster", eth, "--devices", 2, "--dp", 2, "-o", j("mlp-eth.plan"))
        check("compile mlp on 2 ethernet servers", p.returncode == 0 and "2 x CPU rank" in p.stdout, p)
        expect("--emulate-network on cuda", pr(j("mlp-eth.plan"), "--emulate-network", "--backend", "cuda"), 2,
               "--emulate-network is for the cpu backends")
        for be in ("cpu", "cpu-serial"):
            expect(f"emulated network ({be})", pr(j("mlp-eth.plan"), "--emulate-network", "--backend", be, "--steps", 3,
                                                  "--losses", j(f"eth-{be}.loss")), 0, "network emulated", "step 3/3")
        expect("--dilation without --emulate-network", pr(j("mlp-eth.plan"), "--dilation", 2), 2, "--dilation needs --emulate-network")
        expect("--dilation 0", pr(j("mlp-eth.plan"), "--emulate-network", "--dilation", 0), 2, "--dilation wants a number")
        expect("dilated", pr(j("mlp-eth.plan"), "--emulate-network", "--dilation", 2.5, "--steps", 1), 0, "time dilation 2.5")
        expect("the same without emulation", pr(j("mlp-eth.plan"), "--steps", 3, "--losses", j("eth.loss")), 0, "step 3/3")
        with open(j("eth.loss")) as f, open(j("eth-cpu.loss")) as g, open(j("eth-cpu-serial.loss")) as h:
            check("emulation changes no loss", f.read() == g.read() == h.read())

        # double precision: F64 files, resumable bit for bit; an f32 run loads them (rounded)
        expect("bad --precision", pr(j("mlp.plan"), "--precision", "f16"), 2, "--precision", "f16")
        expect("f64 on cuda", pr(j("mlp.plan"), "--precision", "f64", "--backend", "cuda"), 2, "cpu backends only")
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
