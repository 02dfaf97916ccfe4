#!/usr/bin/python3
"""planrun under mpirun: the cpu backend one rank per process, through MPI (runtime/comm_mpi.c).

usage: mpi.py PLANCC PLANRUN SOURCE_ROOT

  - bit for bit: `mpirun -np 4 planrun PLAN` gives the threaded run's losses (--losses, %.9g, which
    tells every float32 apart) on gpt-tiny's 4-rank --auto plan and on plans with every kind of
    communication: dp 2 x tp 2 (all-reduce, all-gather, reduce-scatter), pp 2 x dp 2 with 4
    micro-batches (sends and receives), pp 2 x tp 2, ZeRO-3 over dp 4, interlaced operators (GPipe,
    and 1F1B on 2 and 4 stages: collectives over pp between the pipeline's messages), the loss on the LM head's
    vocabulary pieces (over tp, and interlaced over pp x tp); on the shipped corpus; and
    once over TCP (--mca btl tcp,self), the transport between machines, instead of shared memory;
  - a rank that is killed (SIGKILL) ends the job within the timeout, and the job's output names it;
  - a rank that hangs (SIGSTOP) makes the others give up after --timeout, each naming it, exit 11;
  - mpirun -np 2 with a 4-rank plan: exit 10, saying so; --save under mpirun: exit 2.
Runs mpirun with --allow-run-as-root --oversubscribe (CI runs as root on 2 cores). Exits 77 (meson's
skip) when mpirun is missing or planrun was built without MPI; "N passed, M failed" otherwise.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

plancc, planrun, root = (os.path.abspath(a) for a in sys.argv[1:4])
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
passed = failed = 0
# A launcher's variables from the environment this test runs in would confuse planrun's discovery.
ENV = {k: v for k, v in os.environ.items()
       if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "OMPI_", "PMIX_", "SLURM_"))}


def check(name, ok, detail=""):
    global passed, failed
    passed += bool(ok)
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok or not detail else f"\n     {detail}"))
    return ok


def run(cmd, timeout=300, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, cwd=root, env=ENV, **kw)


def ranks_of(marker):
    """The pids of this job's planrun processes by rank (their environment carries the marker)."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"PLANCC_MPI_TEST={marker}".encode() not in env:
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                found[int(e.split(b"=")[1])] = int(pid)
    return found


def same_losses(tmp, name, args, steps=10, mca=()):
    plan = os.path.join(tmp, "p.plan")
    p = run([plancc, "models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", 4, *args, "-q", "-o", plan])
    if not check(f"compile gpt-tiny {name}", p.returncode == 0, p.stderr[-500:]):
        return
    a, b = os.path.join(tmp, "threads.loss"), os.path.join(tmp, "mpi.loss")
    common = ["--steps", steps, "--data", "data/kjv.bin", "--log-every", 0]
    t = run([planrun, plan, *common, "--losses", a])
    m = run([*MPIRUN, *mca, "-np", 4, planrun, plan, *common, "--losses", b, "--timeout", 60])
    la = open(a).read() if t.returncode == 0 else "threads failed"
    lb = open(b).read() if m.returncode == 0 and os.path.exists(b) else "mpirun failed"
    check(f"{name}: mpirun -np 4 gives the threaded run's {steps} losses bit for bit", la == lb and len(la.split()) == steps,
          f"threads exit {t.returncode} {la.split()[-2:]}; mpirun exit {m.returncode} {lb.split()[-2:]} {m.stderr[-800:]}")
    return m


def job(plan, marker, *extra):
    env = dict(ENV, PLANCC_MPI_TEST=marker)
    return subprocess.Popen([*MPIRUN, "-x", "PLANCC_MPI_TEST", "-np", "4", planrun, plan, "--steps", "1000000", *map(str, extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root, env=env)


def wait_ranks(marker, n=4, limit=60):
    t0 = time.time()
    while time.time() - t0 < limit:
        r = ranks_of(marker)
        if len(r) == n:
            time.sleep(2)  # let the job get into its steps
            return r
        time.sleep(0.2)
    return ranks_of(marker)


def failures(tmp):
    plan = os.path.join(tmp, "g4.plan")
    run([plancc, "models/gpt-tiny.json", "--cluster", "models/clusters/cpu.json", "--devices", 4, "-q", "-o", plan])
    # A rank killed: mpirun ends the job at once and names the rank.
    marker = f"kill{os.getpid()}"
    p = job(plan, marker, "--timeout", 20, "--log-every", 0)
    r = wait_ranks(marker)
    t0 = time.time()
    if 1 in r:
        os.kill(r[1], signal.SIGKILL)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    el = time.time() - t0
    check("a rank killed: the job ends within the timeout (20 s), not after it", 1 in r and el < 20, f"{el:.1f} s, ranks {r}")
    check("... with a failure exit and the dead rank named", p.returncode != 0 and "rank 1" in err, f"exit {p.returncode}: {err[-600:]}")
    # A rank that hangs: every other rank gives up after --timeout, naming it; exit 11. Stopped
    # only once rank 0 has logged a step: MPI's start-up has no timeout of its own, and on a
    # loaded machine two seconds after the ranks appear can still be inside it.
    marker = f"stop{os.getpid()}"
    p = job(plan, marker, "--timeout", 3, "--log-every", 1)
    r = wait_ranks(marker)
    stepping = threading.Event()

    def drain():  # rank 0's log, read as it comes (a full pipe would stall the rank)
        for line in p.stdout:
            if line.startswith("step "):
                stepping.set()
    threading.Thread(target=drain, daemon=True).start()
    stepping.wait(60)
    t0 = time.time()
    if 2 in r:
        os.kill(r[2], signal.SIGSTOP)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    err = p.stderr.read()
    el = time.time() - t0
    for pid in r.values():  # nothing left behind, stopped or not
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    check("a rank that hangs: the others give up after --timeout 3", 2 in r and el < 30, f"{el:.1f} s, ranks {r}")
    check("... exit 11, each naming rank 2", p.returncode == 11 and "heard nothing from rank 2" in err,
          f"exit {p.returncode}: {err[-800:]}")
    # The launch: a world other than the plan's; --save needs every rank in one process.
    m = run([*MPIRUN, "-np", 2, planrun, plan, "--steps", 1])
    check("mpirun -np 2 with a 4-rank plan: exit 10, saying so", m.returncode == 10 and "mpirun started 2 processes" in m.stderr,
          f"exit {m.returncode}: {m.stderr[-400:]}")
    m = run([*MPIRUN, "-np", 4, planrun, plan, "--steps", 1, "--save", os.path.join(tmp, "x.st")])
    check("--save under mpirun: exit 2", m.returncode == 2 and "--save" in m.stderr, f"exit {m.returncode}: {m.stderr[-400:]}")


def main():
    if not shutil.which("mpirun"):
        print("mpi: skipped: no mpirun (tools/setup.sh installs openmpi-bin)")
        return 77
    v = run([planrun, "--version"]).stdout
    if "one rank per process" not in v:
        print(f"mpi: skipped: this planrun was built without MPI ({v.strip()})")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        m = same_losses(tmp, "--auto (dp 4)", [])
        check("... rank 0 alone prints, and says it runs over MPI", m is not None and m.returncode == 0 and
              m.stdout.count("planrun:") == 2 and "over MPI (4 processes)" in m.stdout, m.stdout[-600:] if m else "")
        same_losses(tmp, "dp 2 x tp 2", ["--dp", 2, "--tp", 2])
        same_losses(tmp, "pp 2 x dp 2, 4 micro-batches", ["--pp", 2, "--dp", 2, "--micro-batches", 4])
        same_losses(tmp, "pp 2 x tp 2, 2 micro-batches", ["--pp", 2, "--tp", 2, "--micro-batches", 2], steps=6)
        same_losses(tmp, "ZeRO-3 over dp 4", ["--dp", 4, "--zero", 3], steps=6)
        # Interlaced: the embedding, the LM head and the loss on every stage (collectives over pp
        # between the pipeline's messages), GPipe on tp 2 x pp 2, 1F1B on dp 2 x pp 2 and on pp 4
        # (whose stages between receive their forward inputs a pass early).
        rules = [{"ops": "tok_emb", "split": "v", "stage": "all"}, {"ops": "logits", "split": "n", "stage": "all"},
                 {"ops": "loss", "split": "b.1", "stage": "all"}]
        for name, mesh in (("GPipe, tp 2 x pp 2", {"dp": 1, "tp": 2, "pp": 2, "schedule": "gpipe"}),
                           ("1F1B, dp 2 x pp 2", {"dp": 2, "tp": 1, "pp": 2, "schedule": "1f1b"}),
                           ("1F1B, pp 4, 6 micro-batches", {"dp": 1, "tp": 1, "pp": 4, "schedule": "1f1b", "micro_batches": 6})):
            pol = os.path.join(tmp, "interlaced.json")
            with open(pol, "w", encoding="utf-8") as f:
                json.dump({"version": 1, "mesh": dict({"micro_batches": 4}, **mesh), "rules": rules}, f)
            same_losses(tmp, f"interlaced embedding and head, {name}", ["--policy", pol], steps=6)
        # The loss on the LM head's vocabulary pieces (vocab_ce: the statistics all-gathered over tp),
        # interlaced over pp x tp too.
        for name, mesh, stage in (("dp 2 x tp 2", {"dp": 2, "tp": 2, "pp": 1}, {}),
                                  ("interlaced, GPipe, tp 2 x pp 2", {"dp": 1, "tp": 2, "pp": 2, "schedule": "gpipe"}, {"stage": "all"})):
            pol = os.path.join(tmp, "vocab.json")
            vr = [dict({"ops": "logits", "split": "n"}, **stage), dict({"ops": "loss", "split": "v"}, **stage)]
            with open(pol, "w", encoding="utf-8") as f:
                json.dump({"version": 1, "mesh": dict(mesh, micro_batches=4), "rules": ([dict(rules[0])] if stage else []) + vr}, f)
            same_losses(tmp, f"vocabulary-parallel loss, {name}", ["--policy", pol], steps=6)
        # Over TCP, as between machines, instead of shared memory.
        same_losses(tmp, "dp 2 x tp 2 over TCP (--mca btl tcp,self)", ["--dp", 2, "--tp", 2], steps=6, mca=("--mca", "btl", "tcp,self"))
        failures(tmp)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
