#!/usr/bin/env python3
"""GPU multiplexing on the CPU backend (planrun --background, DeepPool's background job): both
jobs train correctly when they share the ranks.

usage: background.py PLANCC PLANRUN SOURCE_ROOT

The foreground is a DeepPool burst plan of models/mlp.json on 4 CPU ranks (--global-batch 16),
with the cost model's widths and with widths 4,2,1,4 (narrowing and widening, gradient
all-reduces over 4 and 2 ranks, so the gate has collectives to hold the background back); the
background is a one-rank plan of cnn-small or mlp. For every pair, on the cpu backend and on
cpu-serial (one walker per rank, the cuda backend's path), with 1 and 2 pieces in flight:
  - the foreground's losses are bit for bit those of the same plan run alone, and its parameters
    equal the one-device plan's (planrun --compare, as the equivalence suite checks them);
  - every replica ran the steps asked, each the same number of pieces, never more in flight than
    --background-inflight, and held back no more often for collectives than in all;
  - the replica named by --background-replica equals a plain one-rank run of the background plan
    with that replica's seed (--background-seed + rank), parameter for parameter (--rtol 0
    --atol 0: the same arithmetic, so the same bits).
Then with --background-until-fg each replica runs the steps it finds room for; one replica's
saved parameters equal a plain run of exactly that many steps. And once with the replicas' threads
at nice 19 (--background-nice), once in double precision.
"""
import os
import re
import subprocess
import sys
import tempfile

FG_STEPS = 10
BG_STEPS = 4
SEED = 7  # --background-seed: replica r has seed SEED + r
passed = failed = 0

LINE = re.compile(r"background beside rank (\d+): seed (\d+), (\d+) steps?, loss \S+ -> \S+; (\d+) pieces, (\d+) held back by "
                  r"the gate \((\d+) during foreground collectives\), at most (\d+) in flight; (\d+) foreground collectives")


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)


def check(name, ok, p=None, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}{'  (' + detail + ')' if detail else ''}")
        return True
    failed += 1
    print(f"FAIL {name}{': ' + detail if detail else ''}")
    if p is not None:
        print(f"     exit {p.returncode}\n     stdout: {p.stdout[-2000:]}\n     stderr: {p.stderr[-2000:]}")
    return False


def replicas(out):
    """Per rank: (seed, steps, pieces, held, held during collectives, most in flight, fg collectives)."""
    return {int(m[0]): tuple(int(x) for x in m[1:]) for m in LINE.findall(out)}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class Suite:
    def __init__(self, plancc, planrun, root, tmp):
        self.plancc, self.planrun, self.root, self.tmp = plancc, planrun, root, tmp
        self.bg_refs = {}

    def j(self, name):
        return os.path.join(self.tmp, name)

    def compile(self, model, n, opts, out):
        p = run(self.plancc, os.path.join(self.root, "models", model + ".json"), "--cluster",
                os.path.join(self.root, "models", "clusters", "cpu.json"), "--devices", n, *opts, "-o", self.j(out))
        check(f"compile {model} on {n} {' '.join(opts)}", p.returncode == 0, p)
        return self.j(out)

    def bg_ref(self, bg, seed, steps, precision="f32"):
        """The plain one-rank run of the background plan: its parameter file."""
        key = (bg, seed, steps, precision)
        if key not in self.bg_refs:
            out = self.j(f"bgref-{os.path.basename(bg)}-{seed}-{steps}-{precision}.st")
            p = run(self.planrun, bg, "--steps", steps, "--seed", seed, "--precision", precision, "--quiet", "--save", out)
            check(f"plain run of {os.path.basename(bg)}, seed {seed}, {steps} steps", p.returncode == 0, p)
            self.bg_refs[key] = out
        return self.bg_refs[key]

    def multiplexed(self, fg, fg_ref, fg_alone, bg, backend, inflight, replica):
        name = f"{os.path.basename(fg)} + {os.path.basename(bg)} on {backend}, {inflight} in flight"
        loss = self.j("mux.loss")
        p = run(self.planrun, fg, "--steps", FG_STEPS, "--backend", backend, "--log-every", 0, "--losses", loss,
                "--compare", fg_ref, "--background", bg, "--background-steps", BG_STEPS, "--background-seed", SEED,
                "--background-inflight", inflight, "--background-replica", replica,
                "--background-compare", self.bg_ref(bg, SEED + replica, BG_STEPS), "--rtol", 1e-5, "--atol", 1e-5)
        if not check(f"{name}: both jobs pass their comparisons", p.returncode == 0 and "parameters equal" in p.stdout
                     and f"background replica beside rank {replica}: parameters equal" in p.stdout, p):
            return
        check(f"{name}: the foreground's losses are those it has alone", read(loss) == read(fg_alone))
        reps = replicas(p.stdout)
        ok = sorted(reps) == [0, 1, 2, 3]
        ok = ok and all(r[0] == SEED + q and r[1] == BG_STEPS for q, r in reps.items())
        ok = ok and len({r[2] for r in reps.values()}) == 1 and reps[0][2] % BG_STEPS == 0 and reps[0][2] > 0
        ok = ok and all(1 <= r[5] <= inflight and r[4] <= r[3] for r in reps.values())
        colls = sum(r[6] for r in reps.values())
        held = sum(r[3] for r in reps.values())
        check(f"{name}: the gate's accounting", ok, p, f"{reps[0][2] if reps else 0} pieces per replica, {held} held back, "
              f"{colls} foreground collectives")

    def niced(self, fg, fg_ref, bg):
        """--background-nice 19: the replicas' threads at the lowest CPU priority compute the same."""
        p = run(self.planrun, fg, "--steps", FG_STEPS, "--log-every", 0, "--compare", fg_ref, "--background", bg,
                "--background-steps", 2, "--background-nice", 19, "--background-seed", SEED, "--background-compare",
                self.bg_ref(bg, SEED, 2))
        check("--background-nice 19: both jobs pass their comparisons", p.returncode == 0 and p.stdout.count("parameters equal") == 2, p)

    def until_fg(self, fg, fg_ref, bg):
        p = run(self.planrun, fg, "--steps", FG_STEPS, "--log-every", 0, "--compare", fg_ref, "--background", bg,
                "--background-until-fg", "--background-seed", SEED, "--background-replica", 3, "--background-save",
                self.j("until.st"))
        if not check("--background-until-fg: the foreground passes its comparison", p.returncode == 0 and "parameters equal" in p.stdout, p):
            return
        reps = replicas(p.stdout)
        steps = reps.get(3, (0, 0))[1]
        q = run(self.planrun, bg, "--steps", steps, "--seed", SEED + 3, "--compare", self.j("until.st"), "--rtol", 0, "--atol", 0)
        check("--background-until-fg: replica 3 equals a plain run of the steps it ran", q.returncode == 0, q,
              f"steps per replica {[reps[r][1] for r in sorted(reps)]}")

    def f64(self, fg, bg):
        ref = self.j("fg1-f64.st")
        p = run(self.planrun, self.j("fg1.plan"), "--steps", FG_STEPS, "--precision", "f64", "--quiet", "--save", ref)
        check("one-device foreground in f64", p.returncode == 0, p)
        p = run(self.planrun, fg, "--steps", FG_STEPS, "--precision", "f64", "--log-every", 0, "--compare", ref, "--rtol", 1e-10,
                "--atol", 1e-12, "--background", bg, "--background-steps", BG_STEPS, "--background-seed", SEED,
                "--background-replica", 2, "--background-compare", self.bg_ref(bg, SEED + 2, BG_STEPS, "f64"))
        check("f64: both jobs pass their comparisons", p.returncode == 0 and p.stdout.count("parameters equal") == 2, p)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    plancc, planrun, root = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        s = Suite(plancc, planrun, root, tmp)
        fg1 = s.compile("mlp", 1, ["--global-batch", "16"], "fg1.plan")
        fg_ref = s.j("fg1.st")
        p = run(planrun, fg1, "--steps", FG_STEPS, "--quiet", "--save", fg_ref)
        check("one-device foreground", p.returncode == 0, p)
        fgs = [s.compile("mlp", 4, ["--burst", "--global-batch", "16"], "burst.plan"),
               s.compile("mlp", 4, ["--burst", "--global-batch", "16", "--burst-widths", "4,2,1,4"], "burst-w.plan")]
        bgs = [s.compile("cnn-small", 1, [], "bg-cnn.plan"), s.compile("mlp", 1, [], "bg-mlp.plan")]
        for fg in fgs:
            alone = s.j(os.path.basename(fg) + ".loss")
            p = run(planrun, fg, "--steps", FG_STEPS, "--quiet", "--losses", alone)
            check(f"{os.path.basename(fg)} alone", p.returncode == 0, p)
            for k, bg in enumerate(bgs):
                for backend in ("cpu", "cpu-serial"):
                    for inflight in (1, 2):
                        s.multiplexed(fg, fg_ref, alone, bg, backend, inflight, (k + inflight) % 4)
        s.until_fg(fgs[1], fg_ref, bgs[0])
        s.niced(fgs[1], fg_ref, bgs[1])
        s.f64(fgs[1], bgs[0])
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
