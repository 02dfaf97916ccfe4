"""fuse.py: rewrites of the importer's graph into plancc's larger operators, where PyTorch code
spells them out:

  rmsnorm     x * rsqrt(mean(x^2, last axis) + eps) * w  ->  rmsnorm(x, w, eps)
              (the weight on either side: LLaMA's and T5's forms)
  attention   [dropout_p](softmax(scale (q k^T) [+ bias])) v (scale: a scale, or a division or
              product by a scalar constant) over [b, heads, s, d] layouts, with
              q, k, v transposed from [b, s, heads, d] and the output transposed back  ->
              attention(q, k, v[, bias]) with attrs scale, causal and dropout p (PyTorch's
              attention dropout: plancc draws its own mask, as it does for every dropout). A bias
              that is a causal mask (a constant over the query and key positions, 0 on and below
              the diagonal and at most -1e9 above it, as `torch.full((s, s), -1e9).triu(1)`
              builds it), or a masked_fill of the scores with -inf (at most -1e9) where a constant
              marks exactly the entries above the diagonal (nanoGPT's tril(ones) == 0),
              becomes causal true with no bias: the same softmax, exp of the masked
              scores being 0 either way, without an s x s constant (which a 128k-token model
              cannot hold) and with attention's causal kernels and cost

Each rewrite needs every intermediate value used once (by the next operator of the pattern), so
nothing the rest of the graph reads goes away; the rewritten output keeps its value (and name),
and prune() drops what became dead. The arithmetic is the same up to rounding (the fused kernels
compute 1/sqrt once, the softmax in one pass), which --verify measures.
"""
import torch

from graph import Op, axis_map


def consumers(g):
    use = {}
    for o in g.ops:
        for v in o.ins:
            use.setdefault(id(v), []).append(o)
    if g.loss is not None:
        use.setdefault(id(g.loss), []).append(None)
    return use


def only_use(use, v, op):
    u = use.get(id(v), [])
    return len(u) == 1 and u[0] is op


def producer(v, type_):
    o = v.producer
    return o if o is not None and o.type == type_ else None


def scalar_value(v):
    """The value of a scalar constant made by the importer (init normal, std 0), or None."""
    if v.kind != "const" or v.shape != [] or v.init is None:
        return None
    i = v.init
    return 1.0 if i["kind"] == "ones" else 0.0 if i["kind"] == "zeros" else i["mean"] if i.get("std") == 0 else None


def replace(g, old, new):
    """new (an Op writing old's outputs) takes old's place in program order."""
    g.ops[g.ops.index(old)] = new
    for v in new.outs:
        v.producer = new


def unit_reshaped(use, v, user):
    """v's source through reshapes that only add or drop axes of size 1 (keepdim, a broadcast's
    squeeze), each read only by the next; the chain's values, to check their uses."""
    chain = []
    o = v.producer
    while o is not None and o.type == "reshape" and [n for n in o.ins[0].shape if n != 1] == [n for n in v.shape if n != 1] \
            and only_use(use, v, user):
        chain.append(v)
        user, v = o, o.ins[0]
        o = v.producer
    return v, user


def fuse_rmsnorm(g, use, m2):
    """m2 = mul(t, w), t = mul(x, r), r = rsqrt(add(mean(pow(x, 2)), eps))."""
    if m2.type != "mul" or len(m2.ins) != 2 or m2.attrs:
        return False
    t, w = m2.ins
    if w.kind != "param" or len(w.shape) != 1 or not t.shape or t.shape[-1] != w.shape[0]:
        return False
    m1 = producer(t, "mul")
    if m1 is None or not only_use(use, t, m2):
        return False
    x, r = m1.ins
    r, r_user = unit_reshaped(use, r, m1)
    rs = producer(r, "rsqrt")
    ad = producer(rs.ins[0], "add") if rs else None
    if ad is None:
        return False
    mv, mv_user = unit_reshaped(use, ad.ins[0], ad)
    mn = producer(mv, "mean")
    pw = producer(mn.ins[0], "pow") if mn else None
    if not pw or pw.ins[0] is not x or pw.attrs.get("exponent") != 2.0 or mn.attrs.get("axes") != [len(x.shape) - 1]:
        return False
    eps = scalar_value(ad.ins[1])
    if eps is None or not (0 < eps <= 1):
        return False
    for v, o in ((r, r_user), (rs.ins[0], rs), (mv, mv_user), (pw.outs[0], mn)):
        if not only_use(use, v, o):
            return False
    new = Op("rmsnorm", [x, w], m2.outs, {"eps": eps}, m2.where)
    new.copy = m2.copy
    replace(g, m2, new)
    return True


def untransposed(g, v, perm=(0, 2, 1, 3)):
    """v's source when v is transpose(perm) of it, else None."""
    t = producer(v, "transpose")
    return t.ins[0] if t is not None and tuple(t.attrs.get("perm", ())) == perm else None


def transposed(g, v, before, copy):
    """A new value: v [b, h, s, d] transposed to [b, s, h, d], computed just before op `before`."""
    out = g.value(v.name + "_bshd", [v.shape[0], v.shape[2], v.shape[1], v.shape[3]], v.dtype)
    out.copy = copy
    o = Op("transpose", [v], [out], {"perm": [0, 2, 1, 3]}, before.where)
    o.copy = copy
    out.producer = o
    g.ops.insert(g.ops.index(before), o)
    return out


MASKED = -1e9  # at most this above the diagonal: exp(score + mask) is 0 in f32 and f64


def causal_values(v, axes, s, filled):
    """Whether constant v, over the scores' axes `axes` [b, n, s, t], is s x s and marks what a
    causal attention masks: an additive mask (0 on and below the diagonal, at most MASKED above
    it), or with filled, masked_fill's mask (nonzero exactly above the diagonal). Its
    values show it (v.tensor), or the importer saw it built as an additive one (v.causal:
    fxmap.py's causal_built, on the meta device, where there are no values)."""
    r = producer(v, "reshape")  # the importer squeezes a broadcast operand's size-1 axes with a reshape
    src = r.ins[0] if r is not None and r.ins[0].kind == "const" else v
    if s < 2 or src.kind != "const" or axes is None:
        return False
    big = [(a, n) for a, n in zip(axes, v.shape) if n != 1]
    if [a for a, _ in big] != [2, 3] or [n for _, n in big] != [s, s] or [n for n in src.shape if n != 1] != [s, s]:
        return False
    if not filled and getattr(src, "causal", False):
        return True
    t = src.tensor
    if t is None or t.device.type == "meta":
        return False
    t = t.detach().reshape(s, s).double()
    above = torch.ones(s, s, dtype=torch.bool).triu(1)
    masked = t[above] != 0 if filled else t[above] <= MASKED
    return bool((t[~above] == 0).all()) and bool(masked.all())


def fuse_attention(g, use, sm):
    """sm = softmax(z); z = [add(u, bias) | masked_fill(u, causal mask, -inf)]; u = [scale(s) | div(s, c) | mul(s, c)]; s = bmm(qh, kT);
    p = [dropout(sm)]; o = bmm(p, vh);
    the output of the transpose of o (or o)."""
    if sm.type != "softmax" or len(sm.ins[0].shape) != 4:
        return False
    p = sm.outs[0]
    pv, drop = use.get(id(p), []), None
    if len(pv) == 1 and pv[0] is not None and pv[0].type == "dropout" and pv[0].ins[0] is p:
        drop = pv[0]
        p = drop.outs[0]
        pv = use.get(id(p), [])
    if len(pv) != 1 or pv[0] is None or pv[0].type != "bmm" or pv[0].ins[0] is not p:
        return False
    pv = pv[0]
    z, bias, scale = sm.ins[0], None, 1.0
    ad, bias_axes = producer(z, "add"), None
    mf = producer(z, "masked_fill")  # nanoGPT's att.masked_fill(tril == 0, -inf): causal, or no fusion
    if mf is not None and only_use(use, z, sm) and mf.attrs["value"] <= MASKED and \
            causal_values(mf.ins[1], axis_map(mf, z, mf.ins[1]), z.shape[2], True):  # z: [b, n, s, s] (s x s axes 2 and 3)
        z, ad = mf.ins[0], None
    else:
        mf = None
    if ad is not None and only_use(use, z, sm):
        scores, bias = ad.ins
        if producer(scores, "scale") is None and producer(scores, "bmm") is None:
            scores, bias = bias, scores  # the scores are whichever comes from the product
            bias_axes = list(range(4))
        else:
            bias_axes = axis_map(ad, scores, bias)
        z = scores
    sc = producer(z, "scale") or producer(z, "div") or producer(z, "mul")
    if sc is not None and sc.type != "scale":  # a division or product by a scalar constant (ONNX's Div)
        c = scalar_value(sc.ins[1]) if len(sc.ins) == 2 else None
        sc = None if not c else sc
    if sc is not None and only_use(use, z, ad or mf or sm):
        c = sc.attrs["scale"] if sc.type == "scale" else scalar_value(sc.ins[1])
        scale, z = (1 / c if sc.type == "div" else c), sc.ins[0]
    qk = producer(z, "bmm")
    if qk is None or not only_use(use, z, sc or ad or mf or sm):
        return False
    qh, kt = qk.ins
    kh = untransposed(g, kt, (0, 1, 3, 2))
    ks = untransposed(g, kt, (0, 2, 3, 1)) if kh is None else None  # k^T straight from [b, s, h, d] (ONNX's)
    vh = pv.ins[1]
    if (kh is None and ks is None) or len(qh.shape) != 4 or len(vh.shape) != 4 or scale == 0:
        return False
    o = pv.outs[0]
    ot = use.get(id(o), [])
    back = ot[0] if len(ot) == 1 and ot[0] is not None and ot[0].type == "transpose" and ot[0].attrs.get("perm") == [0, 2, 1, 3] else None
    anchor = back or pv
    copy = anchor.copy
    q = untransposed(g, qh) or transposed(g, qh, anchor, copy)
    k = ks or untransposed(g, kh) or transposed(g, kh, anchor, copy)
    v = untransposed(g, vh) or transposed(g, vh, anchor, copy)
    causal = mf is not None or (bias is not None and q.shape[1] == k.shape[1] and causal_values(bias, bias_axes, q.shape[1], False))
    if causal:
        bias, bias_axes = None, None
    ins = [q, k, v] + ([bias] if bias is not None else [])
    attrs = {"causal": causal, "scale": float(scale)}
    if drop is not None:
        attrs["dropout"] = float(drop.attrs["p"])
    if back is not None:
        new = Op("attention", ins, back.outs, attrs, anchor.where)
    else:  # the output stays [b, h, s, e]: attention writes [b, s, h, e], then a transpose
        mid = g.value(o.name + "_bshe", [o.shape[0], o.shape[2], o.shape[1], o.shape[3]], o.dtype)
        mid.copy = copy
        new = Op("attention", ins, [mid], attrs, anchor.where)
        mid.producer = new
        tr = Op("transpose", [mid], [o], {"perm": [0, 2, 1, 3]}, anchor.where)
        tr.copy = copy
        g.ops.insert(g.ops.index(pv) + 1, tr)
        o.producer = tr
    new.copy = copy
    new.bias_axes = bias_axes
    replace(g, anchor, new)
    if back is not None:
        g.ops.remove(pv)  # its output is read by nothing now
    if drop is not None:
        g.ops.remove(drop)  # the attention draws its mask
    return True


def fuse(g):
    """Applies the rewrites until none applies; returns how many of each it made."""
    made = {"rmsnorm": 0, "attention": 0}
    changed = True
    while changed:
        changed = False
        use = consumers(g)
        for o in list(g.ops):
            if fuse_rmsnorm(g, use, o):
                made["rmsnorm"] += 1
                changed = True
                break
            if fuse_attention(g, use, o):
                made["attention"] += 1
                changed = True
                break
    return made
