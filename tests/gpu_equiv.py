#!/usr/bin/env python3
"""The cuda backend trains like the cpu backend: one-rank plans on the GPU against the same plans on
the CPU, and the launcher's paths with a world of one.

usage: gpu_equiv.py PLANCC PLANRUN SOURCE_ROOT [MODEL...]

Exits 77 (meson's skip), saying why, where planrun has no cuda backend or the machine no GPU.

For mlp, gpt-tiny, cnn-small and dlrm-small (or the models named), a one-device f32 plan runs 10
steps with planrun --backend cpu (--save, --losses) and with --backend cuda (--losses, --compare
against the cpu's file). It passes when every step's loss is within LOSS_RTOL of the cpu's and
every parameter within ATOL + RTOL |ref|. The tolerances are float32's, not the equivalence
suite's 1e-5: cuBLAS and OpenBLAS sum in different orders, cuDNN's convolutions and the
embedding gradients' atomics too, and AdamW turns rounding noise in a near-zero gradient into
updates of up to lr (tools/torch_ref.py measured 3e-3 of max |w| between two float32 runs of
gpt-tiny), so the parameters get 1e-2 + 2e-3 and the losses 2e-3; a wrong kernel is off by far
more. Each line prints the largest differences measured.

gpt-tiny compiled in bf16 (bf16 weights and activations, f32 master weights and optimizer state)
trains on the GPU with losses within 5e-2 of the f32 cpu run's (bf16 keeps 8 bits of mantissa).

Then gpt-tiny on the GPU under a launcher's variables (RANK=0 WORLD_SIZE=1 LOCAL_RANK=0) through
the tcp and the file rendezvous (a world of one goes through the motions when --rendezvous is
given) must give the same losses; and with --tf32 the losses stay within 1e-2.

ShadowSync on one GPU: MA every step and continuous MA with one trainer leave the parameters as
the plain plan does, bit for bit; EASGD and BMUF every 2 steps on dlrm-small train as on the cpu.

gpt-tiny on the GPU with a cnn-small background replica beside it (planrun --background, 1 and 4
pieces in flight): both within the same tolerances of their cpu runs.

With two or more GPUs (nvidia-smi -L), gpt-tiny on 2 ranks (dp 2, and tp 2) runs as two planrun
processes (torchrun's variables, tcp rendezvous) against the same plan on the cpu backend, and a
tp 2 policy whose loss runs on the LM head's pieces of the vocabulary (vocab_ce over NCCL).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile

STEPS = 10
LOSS_RTOL = 2e-3
BG_LOSS_RTOL = 2e-2
RTOL, ATOL = 1e-2, 2e-3
MODELS = ["mlp", "gpt-tiny", "cnn-small", "dlrm-small"]

passed = failed = 0


def run(*args, env=None, timeout=900):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "OMPI_COMM_WORLD", "SLURM_")):
            del e[k]
    e.update(env or {})
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=e, timeout=timeout)


def losses(path):
    with open(path, encoding="utf-8") as f:
        return [float(x) for x in f.read().split()]


def report(ok, name, detail):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}  ({detail})")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def compare_losses(got, ref, tol):
    if len(got) != len(ref):
        return False, f"{len(got)} losses, the reference has {len(ref)}"
    worst = max((abs(a - b) / max(abs(b), 1e-30) for a, b in zip(got, ref)), default=0)
    return worst <= tol, f"losses within {worst:.2g} relative (tolerance {tol:g})"


def gpu_count():
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return sum(1 for line in p.stdout.splitlines() if line.startswith("GPU ")) if p.returncode == 0 else 0
    except (OSError, subprocess.TimeoutExpired):
        return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_model(plancc, planrun, root, tmp, model):
    base = os.path.join(tmp, model)
    p = run(plancc, os.path.join(root, "models", model + ".json"), "--cluster", os.path.join(root, "models", "clusters", "cpu.json"),
            "--devices", 1, "-o", base + ".plan")
    if p.returncode:
        return report(False, model, f"plancc exits {p.returncode}: {p.stderr[-800:]}")
    p = run(planrun, base + ".plan", "--steps", STEPS, "--quiet", "--save", base + ".cpu.st", "--losses", base + ".cpu.loss")
    if p.returncode:
        return report(False, model, f"the cpu run exits {p.returncode}: {p.stderr[-800:]}")
    p = run(planrun, base + ".plan", "--backend", "cuda", "--steps", STEPS, "--losses", base + ".gpu.loss", "--compare",
            base + ".cpu.st", "--rtol", RTOL, "--atol", ATOL)
    if p.returncode not in (0, 7):
        return report(False, model, f"the cuda run exits {p.returncode}: {p.stdout[-600:]} {p.stderr[-1500:]}")
    ok, detail = compare_losses(losses(base + ".gpu.loss"), losses(base + ".cpu.loss"), LOSS_RTOL)
    largest = p.stdout.strip().splitlines()[-1].split("largest difference ")[-1] if p.returncode == 0 else p.stderr.strip()
    report(ok and p.returncode == 0, f"{model}: cuda vs cpu, 10 steps", f"{detail}; parameters: largest difference {largest}")


def launcher_paths(planrun, tmp):
    base = os.path.join(tmp, "gpt-tiny")
    ref = losses(base + ".gpu.loss") if os.path.exists(base + ".gpu.loss") else None
    if ref is None:
        return report(False, "launcher paths", "no gpt-tiny reference run on the GPU")
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    for name, extra in (("tcp", ["--rendezvous", f"tcp:127.0.0.1:{free_port()}"]),
                        ("file", ["--rendezvous", "file:" + os.path.join(tmp, "nccl.id")]), ("torchrun's variables", [])):
        p = run(planrun, base + ".plan", "--backend", "cuda", "--steps", STEPS, "--losses", base + ".l.loss", *extra, env=env)
        if p.returncode:
            report(False, f"gpt-tiny, world of one, {name}", f"exit {p.returncode}: {p.stdout[-600:]} {p.stderr[-800:]}")
            continue
        ok, detail = compare_losses(losses(base + ".l.loss"), ref, 1e-6)
        report(ok and "rank 0 (RANK)" in p.stdout, f"gpt-tiny, world of one, {name}", detail)
    p = run(planrun, base + ".plan", "--backend", "cuda", "--tf32", "--steps", STEPS, "--losses", base + ".tf32.loss")
    if p.returncode:
        return report(False, "gpt-tiny with --tf32", f"exit {p.returncode}: {p.stderr[-800:]}")
    ok, detail = compare_losses(losses(base + ".tf32.loss"), losses(base + ".cpu.loss"), 1e-2)
    report(ok, "gpt-tiny with --tf32 vs cpu", detail)


def bf16(plancc, planrun, root, tmp):
    base = os.path.join(tmp, "gpt-tiny")
    with open(os.path.join(root, "models", "gpt-tiny.json")) as f:
        m = json.load(f)
    m["dtype"] = "bf16"
    with open(base + ".bf16.json", "w") as f:
        json.dump(m, f)
    p = run(plancc, base + ".bf16.json", "--cluster", os.path.join(root, "models", "clusters", "cpu.json"), "--devices", 1,
            "-o", base + ".bf16.plan")
    if p.returncode:
        return report(False, "gpt-tiny in bf16", f"plancc exits {p.returncode}: {p.stderr[-600:]}")
    p = run(planrun, base + ".bf16.plan", "--backend", "cuda", "--steps", STEPS, "--losses", base + ".bf16.loss")
    if p.returncode:
        return report(False, "gpt-tiny in bf16", f"exit {p.returncode}: {p.stdout[-600:]} {p.stderr[-1200:]}")
    ok, detail = compare_losses(losses(base + ".bf16.loss"), losses(base + ".cpu.loss"), 5e-2)
    report(ok, "gpt-tiny in bf16 on the GPU vs f32 on the cpu", detail)


def two_ranks(plancc, planrun, root, tmp):
    vocab = os.path.join(tmp, "vocab-tp2.json")  # the loss on the LM head's vocabulary pieces over tp (compiler/vocab.c)
    with open(vocab, "w") as f:
        json.dump({"version": 1, "mesh": {"dp": 1, "tp": 2, "pp": 1}, "rules": [{"ops": "logits", "split": "n"}, {"ops": "loss", "split": "v"}]}, f)
    for opts in ("--dp 2", "--tp 2", f"--policy {vocab}"):
        name = f"gpt-tiny on 2 GPUs, {opts}"
        base = os.path.join(tmp, "two")
        p = run(plancc, os.path.join(root, "models", "gpt-tiny.json"), "--cluster", os.path.join(root, "models", "clusters", "cpu.json"),
                "--devices", 2, *opts.split(), "-o", base + ".plan")
        if p.returncode:
            report(False, name, f"plancc exits {p.returncode}: {p.stderr[-600:]}")
            continue
        p = run(planrun, base + ".plan", "--steps", STEPS, "--quiet", "--losses", base + ".cpu.loss")
        if p.returncode:
            report(False, name, f"the cpu run exits {p.returncode}: {p.stderr[-600:]}")
            continue
        port = free_port()
        env = dict(os.environ)
        procs = []
        for r in (1, 0):
            e = {**env, "RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            procs.append(subprocess.Popen([str(planrun), base + ".plan", "--backend", "cuda", "--steps", str(STEPS), "--losses",
                                           base + ".gpu.loss", "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=e))
        outs = [q.communicate(timeout=900) for q in procs]
        if any(q.returncode for q in procs):
            report(False, name, " / ".join(f"exit {q.returncode}: {o[-300:]} {e[-600:]}" for q, (o, e) in zip(procs, outs)))
            continue
        ok, detail = compare_losses(losses(base + ".gpu.loss"), losses(base + ".cpu.loss"), LOSS_RTOL)
        report(ok, name, detail)


def background_job(planrun, tmp):
    """GPU multiplexing: gpt-tiny on the GPU with a cnn-small replica beside it on the same GPU
    (planrun --background: the replica's streams at the lowest priority, the gate's marks and
    releases as host functions). Both must train as they do alone on the cpu: replica 0 has seed
    1, the cpu reference's."""
    fg, bg = os.path.join(tmp, "gpt-tiny"), os.path.join(tmp, "cnn-small")
    if not (os.path.exists(fg + ".cpu.st") and os.path.exists(bg + ".cpu.st")):
        return report(False, "background job", "no gpt-tiny or cnn-small reference run")
    for inflight in (1, 4):
        p = run(planrun, fg + ".plan", "--backend", "cuda", "--steps", STEPS, "--losses", fg + ".mux.loss", "--compare",
                fg + ".cpu.st", "--rtol", RTOL, "--atol", ATOL, "--background", bg + ".plan", "--background-steps", STEPS,
                "--background-inflight", inflight, "--background-compare", bg + ".cpu.st")
        name = f"gpt-tiny + cnn-small beside it on the GPU, {inflight} in flight"
        if p.returncode:
            report(False, name, f"exits {p.returncode}: {p.stdout[-800:]} {p.stderr[-1500:]}")
            continue
        ok, detail = compare_losses(losses(fg + ".mux.loss"), losses(fg + ".cpu.loss"), LOSS_RTOL)
        line = next((x for x in p.stdout.splitlines() if x.startswith("background beside rank 0")), "")
        ok = ok and f"seed 1, {STEPS} steps" in line and p.stdout.count("parameters equal") == 2
        report(ok, name, f"{detail}; {line}")


def background_sync(plancc, planrun, root, tmp):
    """ShadowSync on the GPU, one rank (the round's own stream and communicator, its events against
    the next step): MA every step and continuous MA with one trainer leave the parameters exactly
    as the plain plan on the GPU leaves them (the average of one replica is itself); EASGD and BMUF
    every 2 steps on dlrm-small train as the same plan does on the cpu backend. Their losses get
    BG_LOSS_RTOL, not LOSS_RTOL: on both backends the round outlives its step, so whether the next
    forward reads a parameter before or after the round's delta lands is a race the algorithm
    allows (EASGD's one-trainer pull moves the parameters; measured on an H100: 3.2e-3)."""
    def plan(name, model, *extra):
        out = os.path.join(tmp, name + ".plan")
        p = run(plancc, "-q", os.path.join(root, "models", model + ".json"), "--cluster",
                os.path.join(root, "models", "clusters", "cpu.json"), "--devices", 1, *extra, "-o", out)
        return out if p.returncode == 0 else report(False, f"compile {name}", p.stderr[-600:])

    ref = plan("mlp-plain", "mlp")
    st = os.path.join(tmp, "mlp-plain.gpu.st")
    p = run(planrun, ref, "--backend", "cuda", "--steps", STEPS, "--save", st, "--quiet")
    if p.returncode:
        return report(False, "background sync: the plain mlp plan on the GPU", f"exit {p.returncode}: {p.stderr[-800:]}")
    for period, rounds in (("1", f"background rounds: {STEPS} to {STEPS} per rank"), ("continuous", "background rounds: ")):
        bg = plan(f"mlp-ma-{period}", "mlp", "--sync", f"background:algo=ma,period={period}")
        p = run(planrun, bg, "--backend", "cuda", "--steps", STEPS, "--compare", st, "--rtol", 0, "--atol", 0, "--log-every", 0)
        report(p.returncode == 0 and rounds in p.stdout, f"one trainer, MA period={period} on the GPU: parameters equal the "
               "plain plan's bit for bit", (p.stdout + p.stderr)[-800:])
    for algo in ("easgd", "bmuf"):
        bg = plan(f"dlrm-{algo}", "dlrm-small", "--sync", f"background:algo={algo},period=2")
        base = os.path.join(tmp, f"dlrm-{algo}")
        p = run(planrun, bg, "--steps", STEPS, "--quiet", "--save", base + ".cpu.st", "--losses", base + ".cpu.loss")
        if p.returncode:
            report(False, f"dlrm-small, {algo} every 2 steps: the cpu run", f"exit {p.returncode}: {p.stderr[-800:]}")
            continue
        p = run(planrun, bg, "--backend", "cuda", "--steps", STEPS, "--losses", base + ".gpu.loss", "--compare",
                base + ".cpu.st", "--rtol", RTOL, "--atol", ATOL)
        if p.returncode not in (0, 7):
            report(False, f"dlrm-small, {algo} every 2 steps, cuda vs cpu", f"exit {p.returncode}: {p.stdout[-600:]} {p.stderr[-1200:]}")
            continue
        ok, detail = compare_losses(losses(base + ".gpu.loss"), losses(base + ".cpu.loss"), BG_LOSS_RTOL)
        report(ok and p.returncode == 0 and "background rounds: 5 to 5 per rank" in p.stdout,
               f"dlrm-small, {algo} every 2 steps, cuda vs cpu", f"{detail}; {p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-600:]}")


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    plancc, planrun, root = sys.argv[1:4]
    models = sys.argv[4:] or MODELS
    v = run(planrun, "--version")
    if "cuda" not in v.stdout:
        print("SKIP: this planrun has no cuda backend (meson found no CUDA toolkit)")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.plan")
        run(plancc, os.path.join(root, "models", "mlp.json"), "--cluster", os.path.join(root, "models", "clusters", "cpu.json"),
            "--devices", 1, "-o", probe)
        p = run(planrun, probe, "--backend", "cuda", "--steps", 0)
        if p.returncode == 9:
            print("SKIP: the gpu suite needs a GPU: " + p.stderr.strip())
            return 77
        for m in models:
            one_model(plancc, planrun, root, tmp, m)
        if "gpt-tiny" in models:
            launcher_paths(planrun, tmp)
            bf16(plancc, planrun, root, tmp)
        if "gpt-tiny" in models and "cnn-small" in models:
            background_job(planrun, tmp)
        background_sync(plancc, planrun, root, tmp)
        if gpu_count() >= 2:
            two_ranks(plancc, planrun, root, tmp)
        else:
            print("note: one GPU: the 2-rank runs (NCCL between processes) need two")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
