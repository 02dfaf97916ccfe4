#!/usr/bin/env python3
"""Fault injection: how many wrong plans the verifier catches, and that none trains silently.

usage: faults.py [--per-kind N] [--seed S] [--plans a,b] PLANCC PLANDUMP PLANRUN SOURCE_ROOT

A handful of compiled plans (dp, tp, dp x tp, pp x dp, ZeRO-3, interleaved 1F1B, interlaced
operators under GPipe and 1F1B on 2 and 4 stages, a vocabulary-parallel loss, burst, a
background-synchronized plan, and a CNN for window attributes) are printed in their text form and mutated by this script's own mutator, one structural fault at a time, of these kinds:

  swap-colls       one rank (its program cloned) issues two same-size collectives of one group
                   in the other order
  swap-groups      one rank issues two collectives on different groups (dp and tp) in the other
                   order
  move-group       a collective runs on another group
  loop-count       a loop runs one iteration more or fewer
  partial-read     an in-place all-reduce moves past the first instruction that reads its buffer
  drop-sync        a record and the wait that pairs with it are deleted (a race between streams)
  attrs-shape      a window, slice or transpose attribute disagrees with the buffers
  swap-sends       one rank sends two same-size messages of a channel in the other order
  mb-shift         an instruction works on the micro-batch before or after its own

Each mutant is assembled (plandump --assemble --force) and checked (plandump --check-only), and
run for two steps in double precision (PLANRUN_UNCHECKED=1, so that what plan_check refuses runs
too) against the original's parameters (--compare, 1e-9) and loss. A fault that changes the
results, or that the run refuses, is result-changing; it is caught by plan_check, else caught at
run time (planrun fails: a deadlock, a kernel's shape check), else silent. A fault plan_check
refuses whose run matches the original is counted apart (refused but harmless). The table gives
each kind's catch rate; the test fails when any result-changing fault is silent or plan_check
catches fewer than 95% of them.

In the test suite a seeded sample (--per-kind 1: one site per kind and plan) keeps it short; the
benchmark runs up to --per-kind 8.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

KINDS = ["swap-colls", "swap-groups", "move-group", "loop-count", "partial-read", "drop-sync", "attrs-shape", "swap-sends",
         "mb-shift"]

# name, model, plancc options, planrun backend
PLANS = [
    ("dp", "mlp", "--devices 2 --dp 2"),
    ("tp", "gpt-tiny", "--devices 2 --tp 2"),
    ("dp-x-tp", "gpt-tiny", "--devices 4 --dp 2 --tp 2"),
    ("pp-x-dp", "gpt-tiny", "--devices 4 --pp 2 --dp 2 --micro-batches 4"),
    ("zero3", "gpt-tiny", "--devices 2 --dp 2 --zero 3"),
    ("interleaved", "gpt-tiny", "--devices 2 --pp 2 --micro-batches 4 --virtual-stages 2"),
    ("interlaced", "gpt-tiny", "--devices 8 --policy {root}/models/policies/interlaced-gpt-tiny.json"),
    ("interlaced-1f1b", "gpt-tiny", "--devices 8 --policy {root}/models/policies/interlaced-1f1b-gpt-tiny.json"),
    ("interlaced-1f1b-pp4", "gpt-tiny", "--devices 8 --policy {tmp}/interlaced-1f1b-pp4.json"),
    ("vocab", "gpt-tiny", "--devices 8 --policy {root}/models/policies/vocab-gpt-tiny.json"),
    ("burst", "mlp", "--devices 4 --burst"),
    ("bgsync", "mlp", "--devices 2 --dp 2 --sync background:algo=ma,period=1"),
    ("cnn-dp", "cnn-small", "--devices 2 --dp 2"),
]
# Policies of PLANS that are not examples, written to the run's folder ({tmp}): the interlaced head
# under 1F1B on 4 stages, whose stages between receive their inputs a pass early.
POLICIES = {"interlaced-1f1b-pp4.json": {
    "version": 1, "mesh": {"dp": 1, "tp": 2, "pp": 4, "schedule": "1f1b", "micro_batches": 6},
    "rules": [{"ops": "tok_emb", "split": "v", "stage": "all"}, {"ops": "logits", "split": "n", "stage": "all"},
              {"ops": "loss", "split": "v", "stage": "all"}]}}


def run(*args, env=None, timeout=120):
    try:
        return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", "timed out")


# ---- the text form, as far as the mutator needs it ----

class Program:
    def __init__(self, head):
        self.head = head          # the "program K ..." line
        self.buffers = []         # lines
        self.attrs = []           # lines
        self.insns = []           # the text after "I:"
        self.bytes = {}           # buffer -> bytes

    def loops(self):
        """(index, body end) of every loop instruction."""
        out = []
        for i, t in enumerate(self.insns):
            m = re.match(r"\s*loop (\S+) (\d+) body (\d+)", t)
            if m:
                out.append((i, i + 1 + int(m.group(3)), m.group(1)))
        return out

    def parent(self, i):
        """The innermost loop around instruction i (-1: none)."""
        best = -1
        for lo, hi, _ in self.loops():
            if lo < i < hi:
                best = lo
        return best

    def in_background(self, i):
        return any(lo < i < hi and var.startswith("background") for lo, hi, var in self.loops())

    def delete(self, i):
        for lo, hi, _ in self.loops():
            if lo < i < hi:
                self.insns[lo] = re.sub(r"body (\d+)", lambda m: f"body {int(m.group(1)) - 1}", self.insns[lo])
        del self.insns[i]

    def move(self, i, j):
        """Instruction i to just after instruction j (same parent, j > i)."""
        t = self.insns.pop(i)
        self.insns.insert(j, t)

    def text(self):
        out = [self.head] + self.buffers + self.attrs
        out += [f"  {i}:{t}" for i, t in enumerate(self.insns)]
        return out


class Plan:
    def __init__(self, text):
        self.top, self.ranks, self.programs = [], [], []
        cur = None
        for ln in text.splitlines():
            if ln.startswith("ranks "):
                m = re.match(r"ranks (\d+)(?:-(\d+))? program (\d+)", ln)
                lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
                self.ranks += [int(m.group(3))] * (hi - lo + 1)
            elif ln.startswith("program "):
                cur = Program(ln)
                self.programs.append(cur)
            elif cur is None:
                self.top.append(ln)
            elif ln.lstrip().startswith("buffer "):
                cur.buffers.append(ln)
                m = re.match(r"\s*buffer (\d+) .* bytes (\d+)", ln)
                cur.bytes[int(m.group(1))] = int(m.group(2))
            elif ln.lstrip().startswith("attrs "):
                cur.attrs.append(ln)
            elif re.match(r"\s*\d+:", ln):
                cur.insns.append(ln.split(":", 1)[1])

    def clone_for(self, k, rank):
        """Program k copied for `rank` alone; the copy's index."""
        src = self.programs[k]
        p = Program(re.sub(r"^program \d+ \"([^\"]*)\"", lambda m: f'program {len(self.programs)} "{m.group(1)}-r{rank}"',
                           src.head))
        p.buffers, p.attrs, p.insns, p.bytes = list(src.buffers), list(src.attrs), list(src.insns), dict(src.bytes)
        self.programs.append(p)
        self.ranks[rank] = len(self.programs) - 1
        return len(self.programs) - 1

    def text(self):
        out = list(self.top)
        r = 0
        while r < len(self.ranks):
            s = r
            while r + 1 < len(self.ranks) and self.ranks[r + 1] == self.ranks[s]:
                r += 1
            out.append(f"ranks {s}-{r} program {self.ranks[s]}" if r > s else f"ranks {s} program {self.ranks[s]}")
            r += 1
        for p in self.programs:
            out += p.text()
        return "\n".join(out) + "\n"


def args_of(t):
    m = re.search(r"args ([\d,]*)(?: -> ([\d,]+))?", t)
    if not m:
        return [], []
    ins = [int(x) for x in m.group(1).split(",") if x]
    outs = [int(x) for x in (m.group(2) or "").split(",") if x]
    return ins, outs


def coll_info(t):
    m = re.match(r"\s*coll (\S+) s\d+(?: mb[+-]\d+)? group (\d+)", t)
    return (m.group(1), int(m.group(2))) if m else None


# ---- the mutator: each kind yields (description, mutate(plan)) sites ----

def rank_of(plan, k, skip_single=True):
    rs = [r for r, q in enumerate(plan.ranks) if q == k]
    return rs[-1] if rs and (len(rs) > 1 or not skip_single) else None


def sites_swap(plan, same_group):
    out = []
    for k, p in enumerate(plan.programs):
        r = rank_of(plan, k)
        if r is None:
            continue
        idx = [i for i, t in enumerate(p.insns) if coll_info(t) and not p.in_background(i)]
        for a in range(len(idx)):
            for b in range(a + 1, len(idx)):
                i, j = idx[a], idx[b]
                (ka, ga), (kb, gb) = coll_info(p.insns[i]), coll_info(p.insns[j])
                if p.parent(i) != p.parent(j) or (ga == gb) != same_group:
                    continue
                si, sj = [p.bytes[x] for x in sum(args_of(p.insns[i]), [])], [p.bytes[x] for x in sum(args_of(p.insns[j]), [])]
                if same_group and (ka != kb or si != sj or args_of(p.insns[i]) == args_of(p.insns[j])):
                    continue
                if not same_group and j != i + 1:  # adjacent (a dp and a tp all-reduce back to back)
                    continue

                def mut(pl, k=k, r=r, i=i, j=j):
                    q = pl.programs[pl.clone_for(k, r)]
                    q.insns[i], q.insns[j] = q.insns[j], q.insns[i]
                out.append((f"program {k} (cloned for rank {r}): insns {i} and {j} swapped", mut))
    return out


def sites_move_group(plan):
    groups = [ln for ln in plan.top if ln.startswith("group ")]
    out = []
    for k, p in enumerate(plan.programs):
        for i, t in enumerate(p.insns):
            c = coll_info(t)
            if not c or p.in_background(i):
                continue
            for g in range(len(groups)):
                if g == c[1]:
                    continue

                def mut(pl, k=k, i=i, g=g):
                    q = pl.programs[k]
                    q.insns[i] = re.sub(r"group \d+", f"group {g}", q.insns[i], count=1)
                out.append((f"program {k}: insn {i} on group {g}", mut))
    return out


def sites_loop(plan):
    out = []
    for k, p in enumerate(plan.programs):
        for lo, hi, var in p.loops():
            if var.startswith("background"):
                continue
            count = int(re.search(r"loop \S+ (\d+)", p.insns[lo]).group(1))
            for d in (1, -1):
                if count + d < 1:
                    continue

                def mut(pl, k=k, lo=lo, d=d):
                    q = pl.programs[k]
                    q.insns[lo] = re.sub(r"(loop \S+ )(\d+)", lambda m: f"{m.group(1)}{int(m.group(2)) + d}", q.insns[lo])
                out.append((f"program {k}: loop {lo} count {d:+d}", mut))
    return out


def sites_partial(plan):
    out = []
    for k, p in enumerate(plan.programs):
        for i, t in enumerate(p.insns):
            c = coll_info(t)
            ins, outs = args_of(t)
            if not c or c[0] != "all_reduce" or ins != outs or p.in_background(i):
                continue
            for j in range(i + 1, len(p.insns)):
                if p.parent(j) != p.parent(i) or re.match(r"\s*loop", p.insns[j]):
                    break
                ji, jo = args_of(p.insns[j])
                if set(ji + jo) & set(ins) and not coll_info(p.insns[j]):
                    def mut(pl, k=k, i=i, j=j):
                        pl.programs[k].move(i, j)
                    out.append((f"program {k}: all_reduce insn {i} moved after insn {j}, which reads its buffer", mut))
                    break
    return out


def sites_drop_sync(plan):
    out = []
    for k, p in enumerate(plan.programs):
        for i, t in enumerate(p.insns):
            m = re.match(r"\s*record s\d+ event (\d+)", t)
            if not m or p.in_background(i):
                continue
            for j in range(i + 1, len(p.insns)):
                w = re.match(r"\s*(record|wait) s\d+ event (\d+)", p.insns[j])
                if w and w.group(2) == m.group(1):
                    if w.group(1) == "wait" and p.parent(j) == p.parent(i):
                        def mut(pl, k=k, i=i, j=j):
                            pl.programs[k].delete(j)
                            pl.programs[k].delete(i)
                        out.append((f"program {k}: record insn {i} and wait insn {j} deleted", mut))
                    break
    return out


def sites_attrs(plan):
    out = []
    for k, p in enumerate(plan.programs):
        used = {}
        for t in p.insns:
            m = re.match(r"\s*compute (\S+) .*attrs (\d+)", t)
            if m:
                used.setdefault(int(m.group(2)), set()).add(m.group(1))
        for a, ops in used.items():
            line = next(x for x in p.attrs if re.match(rf"\s*attrs {a}\b", x))
            if ops & {"conv2d", "maxpool", "avgpool", "maxpool_grad", "avgpool_grad", "conv2d_grad_x", "conv2d_grad_w"} and " win " in line:
                for slot in (0, 2):  # a pool's kernel, the stride
                    def mut(pl, k=k, a=a, slot=slot):
                        q = pl.programs[k]
                        n = next(x for x, y in enumerate(q.attrs) if re.match(rf"\s*attrs {a}\b", y))
                        def bump(m):
                            v = (m.group(1).split(",") + ["0"] * 6)[:6]
                            v[slot] = str(int(v[slot]) + 1)
                            return "win " + ",".join(v)
                        q.attrs[n] = re.sub(r"win ([\d,-]+)", bump, q.attrs[n])
                    out.append((f"program {k}: attrs {a} win[{slot}] + 1 ({', '.join(sorted(ops))})", mut))
            if ops & {"slice", "slice_grad", "transpose"}:
                def mut(pl, k=k, a=a):
                    q = pl.programs[k]
                    n = next(x for x, y in enumerate(q.attrs) if re.match(rf"\s*attrs {a}\b", y))
                    q.attrs[n] = re.sub(r" i (\d+),(\d+),(\d+),(\d+)", lambda m: f" i {m.group(1)},{m.group(2)},{m.group(3)},{int(m.group(4)) - 1}",
                                        q.attrs[n])
                    q.attrs[n] = re.sub(r"perm (\d+),(\d+)", r"perm \2,\1", q.attrs[n])
                out.append((f"program {k}: attrs {a} slice end - 1 / perm swapped ({', '.join(sorted(ops))})", mut))
    return out


def sites_swap_sends(plan):
    out = []
    for k, p in enumerate(plan.programs):
        r = rank_of(plan, k, skip_single=False)
        sends = [i for i, t in enumerate(p.insns) if re.match(r"\s*send ", t)]
        for a in range(len(sends)):
            for b in range(a + 1, len(sends)):
                i, j = sends[a], sends[b]
                key = lambda t: re.sub(r"(mb[+-]\d+ )|(args \d+)|(phase=\S+)|(t=\S+)", "", t)
                if p.parent(i) != p.parent(j) or key(p.insns[i]) != key(p.insns[j]):
                    continue
                if p.bytes[args_of(p.insns[i])[0][0]] != p.bytes[args_of(p.insns[j])[0][0]] or p.insns[i] == p.insns[j]:
                    continue

                def mut(pl, k=k, r=r, i=i, j=j):
                    q = pl.programs[pl.clone_for(k, r)] if r is not None and pl.ranks.count(k) > 1 else pl.programs[k]
                    q.insns[i], q.insns[j] = q.insns[j], q.insns[i]
                out.append((f"program {k}: sends {i} and {j} swapped", mut))
    return out


def sites_mb_shift(plan):
    mbs = int(re.search(r"micro_batches (\d+)", "\n".join(plan.top)).group(1))
    out = []
    if mbs < 2:
        return out
    for k, p in enumerate(plan.programs):
        for i, t in enumerate(p.insns):
            if not re.match(r"\s*(compute|coll|send|recv|copy) ", t) or p.in_background(i):
                continue
            for d in (1, -1):
                def mut(pl, k=k, i=i, d=d):
                    q = pl.programs[k]
                    t = q.insns[i]
                    m = re.search(r" mb([+-]\d+) ", t)
                    cur = int(m.group(1)) if m else 0
                    new = cur + d
                    word = "" if new == 0 else f" mb{new:+d}"
                    if m:
                        q.insns[i] = t.replace(m.group(0), word + " ", 1)
                    else:
                        q.insns[i] = re.sub(r"^(\s*\S+(?: \S+)? s\d+)", lambda x: x.group(1) + word, t, count=1)
                out.append((f"program {k}: insn {i} micro-batch {d:+d}", mut))
    return out


def sites(plan, kind):
    return {"swap-colls": lambda: sites_swap(plan, True), "swap-groups": lambda: sites_swap(plan, False),
            "move-group": lambda: sites_move_group(plan), "loop-count": lambda: sites_loop(plan),
            "partial-read": lambda: sites_partial(plan), "drop-sync": lambda: sites_drop_sync(plan),
            "attrs-shape": lambda: sites_attrs(plan), "swap-sends": lambda: sites_swap_sends(plan),
            "mb-shift": lambda: sites_mb_shift(plan)}[kind]()


# ---- evaluating a mutant ----

def outcome(tools, j, text, ref_st, ref_loss, name):
    plandump, planrun = tools
    with open(j(name + ".txt"), "w") as f:
        f.write(text)
    p = run(plandump, "--assemble", j(name + ".txt"), "-o", j(name + ".plan"), "--force")
    if p.returncode != 0:
        return "invalid", p.stderr.strip()[:200]
    c = run(plandump, "--check-only", j(name + ".plan"))
    caught = c.returncode == 5
    env = dict(os.environ, PLANRUN_UNCHECKED="1")
    losses = []
    for attempt in range(2):  # a race may show on one run of two
        r = run(planrun, j(name + ".plan"), "--precision", "f64", "--steps", 2, "--seed", 3, "--compare", ref_st, "--rtol",
                "1e-9", "--atol", "1e-12", "--losses", j(name + ".loss"), "--timeout", 5, "--log-every", 0, "--quiet",
                env=env, timeout=60)
        if r.returncode not in (0, 7):
            return ("caught" if caught else "runtime"), (c.stderr if caught else r.stderr).strip()[:300]
        loss = open(j(name + ".loss")).read().split() if os.path.exists(j(name + ".loss")) else []
        changed = r.returncode == 7 or loss != ref_loss
        if changed:
            return ("caught" if caught else "silent"), (c.stderr if caught else r.stderr or "results differ").strip()[:300]
        losses.append(loss)
    return ("refused-harmless" if caught else "harmless"), c.stderr.strip()[:300]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-kind", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--plans", default="")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("plancc")
    ap.add_argument("plandump")
    ap.add_argument("planrun")
    ap.add_argument("root")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    cpu = os.path.join(a.root, "models", "clusters", "cpu.json")
    table = {k: {"caught": 0, "runtime": 0, "silent": 0, "harmless": 0, "refused-harmless": 0, "invalid": 0, "sites": 0}
             for k in KINDS}
    bad = []
    with tempfile.TemporaryDirectory() as t:
        j = lambda n: os.path.join(t, n)
        for name, pol in POLICIES.items():
            with open(j(name), "w", encoding="utf-8") as f:
                json.dump(pol, f)
        for pname, model, opts in PLANS:
            if a.plans and pname not in a.plans.split(","):
                continue
            p = run(a.plancc, os.path.join(a.root, "models", model + ".json"), "--cluster", cpu, *opts.format(root=a.root, tmp=t).split(), "-o",
                    j(pname + ".plan"))
            if p.returncode != 0:
                print(f"FAIL compile {pname}: {p.stderr.strip()}")
                return 1
            text = run(a.plandump, "--text", j(pname + ".plan")).stdout
            r = run(a.planrun, j(pname + ".plan"), "--precision", "f64", "--steps", 2, "--seed", 3, "--save", j(pname + ".st"),
                    "--losses", j(pname + ".loss"), "--log-every", 0, "--quiet")
            if r.returncode != 0:
                print(f"FAIL run {pname}: {r.stderr.strip()}")
                return 1
            ref_loss = open(j(pname + ".loss")).read().split()
            for kind in KINDS:
                all_sites = sites(Plan(text), kind)
                table[kind]["sites"] += len(all_sites)
                for desc, mut in rng.sample(all_sites, min(a.per_kind, len(all_sites))):
                    plan = Plan(text)
                    mut(plan)
                    res, why = outcome((a.plandump, a.planrun), j, plan.text(), j(pname + ".st"), ref_loss, "m")
                    table[kind][res] += 1
                    if a.verbose or res in ("silent", "invalid"):
                        print(f"  {res:17} {pname:12} {kind:13} {desc}\n{'':20}{why.splitlines()[0] if why else ''}")
                    if res in ("silent", "invalid"):
                        bad.append((pname, kind, desc))
    print(f"\n{'kind':14} {'mutants':>7} {'result-changing':>15} {'plan_check':>10} {'run time':>8} {'silent':>6} "
          f"{'catch rate':>10} {'harmless':>8} {'refused, harmless':>17}")
    tot = {"caught": 0, "runtime": 0, "silent": 0, "harmless": 0, "refused-harmless": 0}
    for kind in KINDS:
        x = table[kind]
        changing = x["caught"] + x["runtime"] + x["silent"]
        n = changing + x["harmless"] + x["refused-harmless"]
        rate = f"{100 * x['caught'] / changing:.0f}%" if changing else "-"
        print(f"{kind:14} {n:7} {changing:15} {x['caught']:10} {x['runtime']:8} {x['silent']:6} {rate:>10} {x['harmless']:8} "
              f"{x['refused-harmless']:17}")
        for key in tot:
            tot[key] += x[key]
    changing = tot["caught"] + tot["runtime"] + tot["silent"]
    rate = 100 * tot["caught"] / changing if changing else 100.0
    print(f"{'all':14} {changing + tot['harmless'] + tot['refused-harmless']:7} {changing:15} {tot['caught']:10} "
          f"{tot['runtime']:8} {tot['silent']:6} {rate:9.1f}% {tot['harmless']:8} {tot['refused-harmless']:17}")
    ok = tot["silent"] == 0 and rate >= 95 and not any(k == "invalid" for _, k, _ in bad)
    if bad:
        print(f"{len(bad)} mutants silent or invalid")
    print("ok" if ok else "FAIL: a result-changing fault went silent, or plan_check caught fewer than 95%")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
