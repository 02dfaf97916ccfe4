#!/usr/bin/env python3
"""Context parallelism (--cp N, DeepSpeed-Ulysses' form and ring attention's): what the plan does, read from it.

usage: context_parallel.py PLANCC PLANDUMP SOURCE_ROOT

For gpt-tiny on CPU ranks with --cp 2, --cp 4, --dp 2 --cp 2, --cp 2 --tp 2 and --cp 2 --tp 2
--sequence-parallel, compiles the plan and reads its text form (plandump --text):
  - the mesh has a cp axis of N and the plan's options record --cp N;
  - every forward operator but attention writes its output split along the sequence (S) over
    cp; attention reads q, k and v split along the heads (N) over cp and nowhere along S;
  - the forward pass of the block has exactly four all-to-alls on the cp group: q, k and v from
    the S split to the N split, and attention's output back; the backward pass has the mirror
    ones (the output's gradient to N; dq, dk, dv back to S), no fewer than four;
  - the weight gradients are all-reduced on the cp group (they are partial sums over it);
  - the per-device peak memory (the plan's peak_bytes) is lower than the same options without
    --cp on 1/N of the devices (the same model, each device holding 1/N of the sequence).
What it catches: a sequence split that no longer reaches every operator (an operator gathered
whole on every cp rank), attention split along S (wrong: every query reads every key) or left
whole, an all-to-all missing or onto the wrong dimension, gradients not summed over cp, the
memory saving lost. The numerics are the equivalence suite's (tests/equiv.py, SEQ).
With --cp-form ring (--cp 2, --cp 4, --dp 2 --cp 2), ring_plan's checks: no all-to-all or
all-gather on cp, the ring's steps and shifts counted, the k/v shifts on a stream of their own, the weight gradients all-reduced over cp,
and the memory saving. With --cp-form zigzag (those and --cp 2 --tp 2) the same, and the order:
the inputs along the sequence, and nothing else, carry zigzag of 2 cp chunks, and every ring step
masks by them (attrs i[3]).
And --auto searches it (both forms): on gpt-32k over 16 DGX A100 GPUs (estimate only) --auto
picks cp > 1 (JSON "cp"), its step is no slower than `--cp 8 --tp 2`, and the template of its own
mesh and form ("cp_form") has the same estimate; on gpt-tiny with one sequence of 512 tokens (equiv.py's gpt-tiny-long) --auto
picks cp on 4 CPU ranks and the plan passes plan_check; on gpt-tiny-dropout (tests/models/; hidden
dropout along the sequence) at one sequence of 512 tokens it picks the zigzag ring on 4 ranks
(dropout no longer keeps zigzag out: its masks are drawn by logical positions), and that plan's
dropouts and their gradients all carry the zigzag's dimension and chunks (attrs i[1] 1, i[3] 2 cp).
Without ZeRO (--dp 2 --cp 2, both forms), the gradients summed over dp and cp are all-reduced in
one collective on the dp+cp group, as Megatron-Core's data-parallel group with context parallelism.
And ZeRO over dp x cp (Megatron-Core's distributed optimizer; --dp 2 --cp 2 with ZeRO 1 and 3, --cp
4 with ZeRO-3, the ring with ZeRO-2): every optimizer state buffer is cut over both axes along one
dimension, the gradients summed over both are reduce-scattered on the dp+cp group in one
collective (not all-reduced over cp first), ZeRO-3 gathers on that group, and the peak is lower
than without ZeRO.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sequence_parallel as sp  # noqa: E402  (its plan reader and checks)

from common import check, summary  # noqa: E402

run = sp.run


def split_on(buf, buffers, tensors, shapes, dim, axis="cp"):
    """Whether buffer buf holds its tensor (or the gradient of one: "d:q4@42") split along
    dimension `dim` over `axis`."""
    t, shard = buffers[buf]
    dims = shapes.get(re.sub(r"^d:|@\d+$", "", tensors[t]))
    return dims is not None and dim in dims and shard.get(axis) == f"d{dims.index(dim)}"


def cp_plan(name, text, shapes, cp):
    tensors, groups, buffers, insns, peak = sp.read_plan(text)
    check(f"{name}: the mesh has a cp axis of {cp}", re.search(rf"^mesh .*\bcp {cp}\b", text, re.M) is not None)
    check(f"{name}: the plan records --cp {cp}", re.search(rf'^options ".*--cp {cp}\b', text, re.M) is not None)
    cpg = {g for g, axes in groups.items() if "cp" in axes.split("+")}
    fwd = [i for i in insns if i["phase"] == "fwd"]
    bwd = [i for i in insns if i["phase"] == "bwd"]
    # operators that write a tensor (not scratch: the loss's statistics on the vocabulary pieces)
    ops = [i for i in fwd if i["kind"] == "compute" and i["name"] != "attention" and i["out"][0] in buffers]
    seq = [i for i in ops if "S" in (shapes.get(tensors[buffers[i["out"][0]][0]]) or [])]
    off = [tensors[buffers[i["out"][0]][0]] for i in seq if not split_on(i["out"][0], buffers, tensors, shapes, "S")]
    check(f"{name}: {len(seq)} forward operators write their output split along S over cp", seq and not off, f"not along S: {off}")
    att = [i for i in fwd if i["kind"] == "compute" and i["name"] == "attention"]
    heads = all(split_on(b, buffers, tensors, shapes, "N") and not split_on(b, buffers, tensors, shapes, "S")
                for i in att for b in i["in"][:3] + i["out"])
    check(f"{name}: attention reads q, k, v and writes its output split along N over cp, not along S", att and heads)
    a2a = [i for i in fwd if i["kind"] == "coll" and i["name"] == "all_to_all" and i["group"] in cpg]
    to_n = [i for i in a2a if split_on(i["in"][0], buffers, tensors, shapes, "S") and split_on(i["out"][0], buffers, tensors, shapes, "N")]
    to_s = [i for i in a2a if split_on(i["in"][0], buffers, tensors, shapes, "N") and split_on(i["out"][0], buffers, tensors, shapes, "S")]
    check(f"{name}: the forward block has 4 all-to-alls on cp: q, k, v from S to N, the output from N to S",
          len(a2a) == 4 and len(to_n) == 3 and len(to_s) == 1,
          " ".join(f"{i['name']}({tensors[buffers[i['in'][0]][0]]})" for i in a2a))
    b2a = [i for i in bwd if i["kind"] == "coll" and i["name"] == "all_to_all" and i["group"] in cpg]
    back = [i for i in b2a if split_on(i["in"][0], buffers, tensors, shapes, "N") and split_on(i["out"][0], buffers, tensors, shapes, "S")]
    check(f"{name}: the backward block's all-to-alls on cp mirror them: dq, dk, dv from N to S ({len(b2a)} in all)",
          len(b2a) >= 4 and len(back) == 3, f"{len(b2a)} all-to-alls, {len(back)} back to S")
    ar = [i for i in bwd if i["kind"] == "coll" and i["name"] == "all_reduce" and i["group"] in cpg]
    check(f"{name}: the weight gradients are all-reduced over cp", len(ar) > 0)
    return peak


def ring_plan(name, text, shapes, cp, form="ring"):
    """--cp-form ring: no all-to-all or all-gather on cp (attention keeps the sequence split); per
    attention cp forward steps and 2 (cp - 1) shifts of k and v; in the backward pass the forward
    ring again, cp gradient steps, and the shifts of k, v, dk and dv (dk and dv home once more)."""
    tensors, groups, buffers, insns, peak = sp.read_plan(text)
    check(f"{name}: the plan records --cp {cp} --cp-form {form}", re.search(rf'^options ".*--cp {cp} --cp-form {form}\b', text, re.M) is not None)
    cpg = {g for g, axes in groups.items() if "cp" in axes.split("+")}
    fwd = [i for i in insns if i["phase"] == "fwd"]
    bwd = [i for i in insns if i["phase"] == "bwd"]
    ops = [i for i in fwd if i["kind"] == "compute" and i["name"] != "attention_block" and i["out"][0] in buffers]
    seq = [i for i in ops if "S" in (shapes.get(tensors[buffers[i["out"][0]][0]]) or [])]
    off = [tensors[buffers[i["out"][0]][0]] for i in seq if not split_on(i["out"][0], buffers, tensors, shapes, "S")]
    check(f"{name}: {len(seq)} forward operators write their output split along S over cp", seq and not off, f"not along S: {off}")
    moves = [i["name"] for i in insns if i["kind"] == "coll" and i["name"] in ("all_to_all", "all_gather") and i["group"] in cpg]
    check(f"{name}: no all-to-all or all-gather on cp", not moves, " ".join(moves))
    steps = [i for i in fwd if i["kind"] == "compute" and i["name"] == "attention_block"]
    own = all(split_on(i["in"][0], buffers, tensors, shapes, "S") for i in steps)
    check(f"{name}: the forward attention is {cp} ring steps on the rank's piece of q", len(steps) == cp and own, f"{len(steps)} steps")
    shifts = [i for i in fwd if i["kind"] == "coll" and i["name"] == "shift" and i["group"] in cpg]
    check(f"{name}: the forward ring shifts k and v {cp - 1} times", len(shifts) == 2 * (cp - 1), f"{len(shifts)} shifts")
    check(f"{name}: the ring's k/v shifts run on a stream of their own, not behind ZeRO's and the gradients' on stream 1",
          shifts and all(i["stream"] == 2 for i in shifts), str(sorted({i["stream"] for i in shifts})))
    grads = [i for i in bwd if i["kind"] == "compute" and i["name"] == "attention_block_grad"]
    again = [i for i in bwd if i["kind"] == "compute" and i["name"] == "attention_block"]
    bshifts = [i for i in bwd if i["kind"] == "coll" and i["name"] == "shift" and i["group"] in cpg]
    check(f"{name}: the backward recomputes the ring ({len(again)} steps) and runs the gradient's ({len(grads)} steps)",
          len(again) == cp and len(grads) == cp)
    check(f"{name}: the backward shifts k, v twice around, dk and dv once and home ({len(bshifts)} shifts)", len(bshifts) == 6 * cp - 4)
    ar = [i for i in bwd if i["kind"] == "coll" and i["name"] == "all_reduce" and i["group"] in cpg]
    check(f"{name}: the weight gradients are all-reduced over cp", len(ar) > 0)
    return peak


def zigzag_plan(name, text, shapes, cp):
    """--cp-form zigzag: the ring's checks, and the order: every input along the sequence (S) and
    no other tensor carries zigzag on that dimension with 2 cp chunks, and every ring step's attrs
    give the kernel those chunks (i[3])."""
    peak = ring_plan(name, text, shapes, cp, "zigzag")
    tensors = re.findall(r'^tensor (\d+) "([^"]*)" \S+ (\S+) \[([\d,]*)\].*?(?: zigzag (\d+) (\d+))?$', text, re.M)
    want = {(n, str(shapes[n].index("S")), str(2 * cp)) for _, n, kind, _, *_ in tensors
            if kind == "input" and "S" in (shapes.get(n) or [])}
    got = {(n, d, z) for _, n, _, _, d, z in tensors if z}
    check(f"{name}: the inputs along S, and no other tensor, are in zigzag order of {2 * cp} chunks", want and got == want,
          f"want {sorted(want)}, got {sorted(got)}")
    attrs = {a: i.split(",") for a, i in re.findall(r'^  attrs (\d+) .*?\bi ([-\d,]+)', text, re.M)}
    steps = re.findall(r'compute attention_block(?:_grad)? .* attrs (\d+) ', text)
    ends = {attrs.get(a, ["0"] * 4)[3] if len(attrs.get(a, [])) > 3 else "0" for a in steps}
    check(f"{name}: all {len(steps)} ring steps mask by the zigzag's {2 * cp} chunks (attrs i[3])", steps and ends == {str(2 * cp)},
          str(ends))
    return peak


def zero_plan(name, text, zero, dp):
    """ZeRO over dp x cp: every optimizer state buffer is cut over both axes (cp alone where dp is
    1) along one dimension, and the gradients that are partial sums over them are reduce-scattered
    in one collective on that group, with no all-reduce of them over cp first. Returns the peak."""
    tensors, groups, buffers, insns, peak = sp.read_plan(text)
    axes = "dp+cp" if dp > 1 else "cp"
    states = [(tensors[t], sh) for t, sh in buffers.values() if re.search(r":[mv]$", tensors[t])]
    cut = lambda sh: sh.get("cp", "").startswith("d") and (dp == 1 or sh.get("dp") == sh.get("cp"))  # noqa: E731
    whole = [n for n, sh in states if not cut(sh)]
    check(f"{name}: all {len(states)} optimizer state buffers are cut over {axes} along one dimension", states and not whole,
          f"not so: {sorted(set(whole))[:6]}")
    rs = [i for i in insns if i["name"] == "reduce_scatter" and groups.get(i["group"]) == axes]
    both = {"dp": "v", "cp": "v"} if dp > 1 else {"cp": "v"}
    cp_ar = [i for i in insns if i["name"] == "all_reduce" and groups.get(i["group"]) == "cp" and any(buffers[b][1] == both for b in i["in"])]
    check(f"{name}: the gradients are reduce-scattered on the {axes} group ({len(rs)} collectives), none all-reduced over cp first",
          len(rs) > 0 and not cp_ar, f"{len(cp_ar)} all-reduces over cp of the sums")
    if zero == 3:
        ag = [i for i in insns if i["name"] == "all_gather" and groups.get(i["group"]) == axes and i["phase"] == "fwd"]
        check(f"{name}: ZeRO-3 gathers the parameters on the {axes} group ({len(ag)} collectives)", len(ag) > 0)
    return peak


def compile_json(plancc, model, cluster, n, *opts):
    p = sp.run(plancc, model, "--cluster", cluster, "--devices", n, *opts, "--json")
    ok = check(f"{os.path.basename(model)} on {n}: {' '.join(map(str, opts))}: compiles", p.returncode == 0, p.stderr.strip()[-300:])
    return json.loads(p.stdout) if ok else None


def auto_searches_cp(plancc, root, tmp):
    model, a100 = os.path.join(root, "models", "gpt-32k.json"), os.path.join(root, "models", "clusters", "dgx-a100.json")
    auto = compile_json(plancc, model, a100, 16, "--auto", "--estimate-only")
    ref = compile_json(plancc, model, a100, 16, "--cp", 8, "--tp", 2, "--estimate-only")
    if auto is None or ref is None:
        return
    check("--auto picks context parallelism on gpt-32k, 16 GPUs", auto["cp"] > 1,
          json.dumps({k: auto[k] for k in ("pp", "dp", "cp", "tp", "sequence_parallel")}))
    a, r = auto["estimate"]["step_s"], ref["estimate"]["step_s"]
    check(f"--auto's step {a:.4g} s <= --cp 8 --tp 2's {r:.4g} s", a <= r * (1 + 1e-9))
    mesh = ["--dp", auto["dp"], "--tp", auto["tp"], "--pp", auto["pp"], "--micro-batches", auto["micro_batches"],
            "--zero", auto["zero"]] + (["--cp", auto["cp"], "--cp-form", auto["cp_form"]] if auto["cp"] > 1 else []) + \
        (["--sequence-parallel"] if auto["sequence_parallel"] else [])
    for rc in ("auto", "none", "full"):  # --auto's recompute is one of the three
        t = compile_json(plancc, model, a100, 16, *mesh, "--recompute", rc, "--estimate-only")
        if t is not None and abs(t["estimate"]["step_s"] - a) <= 1e-9 * a:
            break
    check(f"the template of --auto's mesh ({' '.join(map(str, mesh))}) has its estimate {a:.6g} s",
          t is not None and abs(t["estimate"]["step_s"] - a) <= 1e-9 * a, str(t and t["estimate"]["step_s"]))
    with open(os.path.join(root, "models", "gpt-tiny.json"), encoding="utf-8") as f:
        text = f.read()
    long = os.path.join(tmp, "gpt-tiny-long.json")
    with open(long, "w", encoding="utf-8") as f:
        f.write(text.replace('"B": 4, "S": 32,', '"B": 1, "S": 512,', 1))
    d = compile_json(plancc, long, os.path.join(root, "models", "clusters", "cpu.json"), 4, "--auto", "-o",
                     os.path.join(tmp, "long.plan"))
    check("--auto picks cp > 1 on gpt-tiny with one sequence of 512, 4 ranks (plan_check passed)",
          d is not None and d["strategy"]["cp"] > 1, d and d["strategy"]["text"])
    auto_zigzag_dropout(plancc, root, tmp)


def auto_zigzag_dropout(plancc, root, tmp):
    with open(os.path.join(root, "tests", "models", "gpt-tiny-dropout.json"), encoding="utf-8") as f:
        text = f.read()
    long = os.path.join(tmp, "gpt-tiny-dropout-long.json")
    with open(long, "w", encoding="utf-8") as f:
        f.write(text.replace('"B": 4, "S": 32,', '"B": 1, "S": 512,', 1))
    out = os.path.join(tmp, "drop-long.plan")
    d = compile_json(plancc, long, os.path.join(root, "models", "clusters", "cpu.json"), 4, "--auto", "-o", out)
    st = d["strategy"] if d else {}
    check("--auto picks the zigzag ring on gpt-tiny-dropout with one sequence of 512, 4 ranks (plan_check passed)",
          st.get("cp", 1) > 1 and st.get("cp_form") == "zigzag", st.get("text"))
    if not st.get("cp_form") == "zigzag":
        return
    plandump = os.path.join(os.path.dirname(os.path.abspath(plancc)), "plandump")
    text = sp.run(plandump, "--text", out).stdout
    attrs = {a: i.split(",") for a, i in re.findall(r'^  attrs (\d+) .*?\bi ([-\d,]+)', text, re.M)}
    drops = re.findall(r'compute dropout(?:_grad)? .* attrs (\d+) ', text)
    marks = {(attrs[a][1], attrs[a][3]) if len(attrs.get(a, [])) > 3 else None for a in drops}
    check(f"its {len(drops)} dropouts and dropout gradients draw by the zigzag's dimension 1 and {2 * st['cp']} chunks "
          "(attrs i[1], i[3])", len(drops) >= 6 and marks == {("1", str(2 * st["cp"]))}, str(marks))


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    plancc, plandump, root = sys.argv[1:]
    shapes = sp.model_shapes(root)
    with __import__("tempfile").TemporaryDirectory() as tmp:
        ulysses = [(2, 2, ""), (4, 4, ""), (4, 2, "--dp 2"), (4, 2, "--tp 2"), (4, 2, "--tp 2 --sequence-parallel")]
        for form, read, cases in [("", cp_plan, ulysses), (" --cp-form ring", ring_plan, ulysses[:3]),
                                  (" --cp-form zigzag", zigzag_plan, ulysses[:4])]:
            for n, cp, mesh in cases:
                plain = sp.plan_text(plancc, plandump, root, tmp, n // cp, mesh)
                text = sp.plan_text(plancc, plandump, root, tmp, n, f"{mesh} --cp {cp}{form}".strip())
                if plain is None or text is None:
                    continue
                name = f"{n} ranks {mesh} --cp {cp}{form}".replace("  ", " ")
                peak_cp = read(name, text, shapes, cp)
                peak = sp.read_plan(plain)[4]
                check(f"{name}: peak memory per device {peak_cp} bytes < {peak} without --cp on {n // cp}",
                      peak_cp is not None and peak is not None and peak_cp < peak)
        # Without ZeRO, gradients summed over dp and cp: one all-reduce on the dp x cp group.
        for form in ("", " --cp-form ring"):
            text = sp.plan_text(plancc, plandump, root, tmp, 4, "--dp 2 --cp 2" + form)
            if text is not None:
                tensors, groups, buffers, insns, _ = sp.read_plan(text)
                ars = [i for i in insns if i["name"] == "all_reduce"]
                both = [i for i in ars if groups.get(i["group"]) == "dp+cp"]
                seen = [b for i in ars for b in i["in"]]
                twice = sorted({tensors[buffers[b][0]] for b in seen if seen.count(b) > 1})
                check(f"4 ranks --dp 2 --cp 2{form}: the gradients summed over dp and cp are all-reduced in one collective on "
                      f"the dp+cp group ({len(both)} collectives), none twice", both and not twice, f"all-reduced twice: {twice[:6]}")
        # ZeRO over dp x cp (Megatron-Core's distributed optimizer): less memory than over dp alone.
        for n, mesh, zero in [(4, "--dp 2 --cp 2", 1), (4, "--dp 2 --cp 2", 3), (4, "--cp 4", 3), (4, "--dp 2 --cp 2 --cp-form ring", 2)]:
            dp = 2 if "--dp 2" in mesh else 1
            text = sp.plan_text(plancc, plandump, root, tmp, n, f"{mesh} --zero {zero}")
            plain = sp.plan_text(plancc, plandump, root, tmp, n, mesh)
            if text is None or plain is None:
                continue
            name = f"{n} ranks {mesh} --zero {zero}"
            peak_z, peak = zero_plan(name, text, zero, dp), sp.read_plan(plain)[4]
            check(f"{name}: peak memory per device {peak_z} bytes < {peak} without ZeRO",
                  peak_z is not None and peak is not None and peak_z < peak)
        auto_searches_cp(plancc, root, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
