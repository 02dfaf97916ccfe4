"""verify.py: plancc-import's weights file and --verify.

write_weights: every parameter and constant of the imported graph under planrun's names (a
repeated block's copy K as NAME.K), with the optimizer state planrun expects (NAME:m and NAME:v
for adamw, zeros), as one safetensors file for `planrun --load`.

run: trains the PyTorch module and planrun's plans (one device; four CPU devices with --auto)
from that file for N steps on the inputs planrun draws (weights.draw_input), all in float64, and
compares every step's loss and the final parameters. Dropout (hidden, and attention's) draws its
mask from planrun's generator, not torch's, so a model with dropout is compared with every
dropout off on both sides (p 0 in the compiled copy; torch.nn.functional.dropout the identity
while PyTorch trains), which --verify says; tests/meson.build's torch suite checks planrun's
dropout against PyTorch given planrun's mask (tools/torch_ref.py). torch.optim.AdamW (foreach=False) is the
optimizer planrun's adamw kernel implements (tools/torch_ref.py explains the formula). A
parameter whose float64 gradient in PyTorch never exceeds NOISE (its exact gradient is 0: a bias
that a softmax ignores) is left out of the parameter comparison and named: AdamW divides each
gradient element by its running magnitude, so rounding noise moves it by lr in any direction.
"""
import os
import subprocess
import sys
import tempfile

import torch

import weights

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
NOISE = 1e-12  # a parameter whose float64 gradient never exceeds this is trained on rounding noise


def block_lists(m):
    return {o["block"] for o in m["ops"] if "block" in o}


def file_name(v, lists):
    """planrun's name for parameter or constant v in a weights file."""
    if v.copy and v.copy[0].replace(".", "_") in lists:  # graph.py names the block so
        lst, i = v.copy
        return v.name.replace(f"{lst}.{i}.", f"{lst}.", 1) + f".{i}", f".{i}"
    return v.name, ""


def write_weights(g, m, path, a):
    lists = block_lists(m)
    out = {}
    for v in g.values:
        if v.kind not in ("param", "const"):
            continue
        if v.tensor is None or v.tensor.device.type == "meta":
            raise SystemExit(f"plancc-import: {v.name} has no values (a model on the meta device): no weights file")
        name, suffix = file_name(v, lists)
        out[name] = (v.shape, v.tensor)
        if v.kind == "param":
            base = name[: len(name) - len(suffix)]
            for s in ("m", "v"):
                out[f"{base}:{s}{suffix}"] = (v.shape, [0.0] * max(1, _numel(v.shape)) if _numel(v.shape) else [])
    if os.path.exists(path) and not os.path.isfile(path):
        raise SystemExit(f"plancc-import: {path}: exists and is not a regular file; not written")
    weights.write(path, out)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def run_cmd(args):
    return subprocess.run([str(x) for x in args], capture_output=True, text=True)


def planrun_losses(a, model_path, wfile, devices, tmp, tag, steps):
    plan, lf, final = (os.path.join(tmp, f"{tag}.{e}") for e in ("plan", "loss", "st"))
    cluster = os.path.join(ROOT, "models", "clusters", "cpu.json")
    if not os.path.isfile(cluster):
        cluster = "cpu"  # installed: plancc finds its cpu cluster by name
    p = run_cmd([a.plancc, model_path, "--cluster", cluster, "--devices", devices, "-o", plan])
    if p.returncode:
        raise RuntimeError(f"plancc ({devices} device(s)) exits {p.returncode}: {p.stderr.strip()[-1500:]}")
    summary = [l for l in p.stdout.splitlines() if "pp " in l and " x dp " in l]
    p = run_cmd([a.planrun, plan, "--steps", steps, "--quiet", "--load", wfile, "--losses", lf, "--save", final,
                 "--precision", "f64", "--seed", a.seed])
    if p.returncode:
        raise RuntimeError(f"planrun ({devices} device(s)) exits {p.returncode}: {p.stderr.strip()[-1500:]}")
    with open(lf, encoding="utf-8") as f:
        losses = [float(x) for x in f.read().split()]
    return losses, weights.read(final), (summary[0].split("): ", 1)[-1] if summary else "")


def without_dropout(m):
    """The model file m with every dropout's p set to 0 (dropout ops, attention's dropout); how
    many it changed."""
    n = 0
    stack = [m.get("ops", [])]
    while stack:
        for o in stack.pop():
            if "ops" in o:
                stack.append(o["ops"])
            at = o.get("attrs") or {}
            if o.get("type") == "dropout" and at.get("p", 0) > 0:
                at["p"], n = 0.0, n + 1
            elif o.get("type") == "attention" and at.get("dropout", 0) > 0:
                at["dropout"], n = 0.0, n + 1
    return n


class no_torch_dropout:
    """torch.nn.functional.dropout as the identity while the block runs (nn.Dropout and
    nn.MultiheadAttention call it by that name)."""

    def __enter__(self):
        self.saved = torch.nn.functional.dropout
        torch.nn.functional.dropout = lambda x, p=0.5, training=True, inplace=False: x

    def __exit__(self, *exc):
        torch.nn.functional.dropout = self.saved


def torch_losses(g, model, a, steps):
    model = model.double()
    model.train()
    model._plancc_gmax = {}  # per parameter, the largest |gradient| seen
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, weight_decay=a.weight_decay, foreach=False)
    losses = []
    for s in range(steps):
        ins = []
        for v in g.inputs:
            d = v.data
            vals = weights.draw_input(v.name, d["kind"], v.shape, d.get("high", 0), a.seed, s)
            t = torch.tensor(vals, dtype=torch.float64 if v.dtype == "f32" else torch.long).reshape(v.shape)
            ex = getattr(v, "example", None)
            if isinstance(ex, torch.Tensor) and ex.dtype == torch.bool:
                t = t.bool()  # a boolean input (a padding mask): planrun's i32 0/1 as PyTorch's bool
            ins.append(t)
        opt.zero_grad()
        loss = model(*ins)
        loss.backward()
        for name, p in model.named_parameters():
            if p.grad is not None:
                gm = float(p.grad.abs().max()) if p.grad.numel() else 0.0
                model._plancc_gmax[name] = max(model._plancc_gmax.get(name, 0.0), gm)
        opt.step()
        losses.append(float(loss))
    return losses, model


def compare_params(g, m, model, saved, a):
    lists = block_lists(m)
    named = dict(model.named_parameters())
    worst, worst_name, bad, noise = 0.0, "", [], []
    for v in g.values:
        if v.kind != "param":
            continue
        name, _ = file_name(v, lists)
        ref = named[v.torch_name].detach().double().flatten().tolist()
        got = saved.get(name)
        if got is None:
            bad.append(f"{name}: not in planrun's file")
            continue
        scale = max(1e-30, max(abs(x) for x in ref))
        d = max(abs(x - y) for x, y in zip(got[1], ref)) / scale
        if model._plancc_gmax.get(v.torch_name, 1.0) <= NOISE:
            # its exact gradient is 0 (e.g. a bias before a softmax, which ignores a shift): AdamW
            # turns rounding noise into updates of lr's size, different in any two programs
            noise.append(name)
            continue
        if d > worst:
            worst, worst_name = d, name
        if d > a.param_tol:
            bad.append(f"{name}: differs by {d:.3g} of its largest magnitude")
    return worst, worst_name, bad, noise


def run(g, m, model, inputs, a):
    if model is None:
        print("plancc-import: --verify needs the torch front end", file=sys.stderr)
        return 2
    if any(p.device.type == "meta" for p in model.parameters()):
        print("plancc-import: --verify needs a model with values (not on the meta device)", file=sys.stderr)
        return 2
    n = a.verify
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        mp, wf = os.path.join(tmp, "model.json"), os.path.join(tmp, "init.st")
        import copy
        import graph
        m_off = copy.deepcopy(m)
        dropouts = without_dropout(m_off)
        graph.write_json(m_off, mp)
        write_weights(g, m, wf, a)
        if dropouts:
            print(f"plancc-import: --verify: {dropouts} dropout(s) off on both sides (planrun draws its own masks)")
            with no_torch_dropout():
                ref, tmodel = torch_losses(g, copy.deepcopy(model), a, n)
        else:
            ref, tmodel = torch_losses(g, copy.deepcopy(model), a, n)
        print(f"PyTorch (f64)      losses {' '.join(f'{x:.9f}' for x in ref)}")
        for devices in ("1", "4"):
            try:
                got, saved, summary = planrun_losses(a, mp, wf, devices, tmp, f"p{devices}", n)
            except RuntimeError as e:
                print(f"FAIL planrun on {devices}: {e}")
                failed += 1
                continue
            rel = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(got, ref)) if got else float("inf")
            worst, wname, bad, noise = compare_params(g, m, tmodel, saved, a)
            ok = len(got) == n and rel <= a.loss_tol and not bad
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} planrun {devices} device(s) ({summary}): losses {' '.join(f'{x:.9f}' for x in got)}; "
                  f"largest loss difference {rel:.3g} relative; parameters within {worst:.3g} of their largest magnitude"
                  f"{' (' + wname + ')' if wname else ''}")
            for b in bad[:5]:
                print(f"     {b}")
            if noise:
                print(f"     not compared (exact gradient 0, trained on rounding noise): {', '.join(noise)}")
    print(f"plancc-import: --verify {n}: {'all agree' if not failed else f'{failed} plan(s) differ'}")
    return 1 if failed else 0
