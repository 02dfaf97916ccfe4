"""graph.py: the importer's model under construction, and its JSON (schemas/model.schema.json).

A front end (fxmap.py for torch.fx, onnxmap.py for ONNX) adds values and operators in program
order; this file then
  - names the dimensions: every axis of every value is a variable, and each operator's rule (the
    annotations of runtime/ops.def, read from the file itself, and the broadcast, reduction and
    data-movement rules of schemas/README.md) unites the axes that are one dimension; each class
    becomes one named dimension ("B" for the batch: axis 0 of the first input; else "d<size>",
    "d<size>_2", ... in order of first appearance), so a split of one is visible on every tensor
    that carries it, and --global-batch resizes the batch alone;
  - folds a run of identical copies (the modules of one nn.ModuleList, in order) into one
    repeated block, with in, carry and out bindings, when every copy's operators, attributes,
    shapes and wiring are the same (else the copies stay unrolled, and a note says why);
  - writes the model JSON.

Values have a torch shape (a list of ints) and a dtype (f32 or i32). Parameters and constants carry
their name (PyTorch's, with a repeated block's copy index taken out: layers.3.wq.weight is copy 3
of the block tensor layers.wq.weight, which planrun's weights files call layers.wq.weight.3).
"""
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


class ImportError_(Exception):
    """A construct the importer cannot map: the message names it, the node and the source line."""


def _read_annotations():
    ann = {}
    path = os.path.join(ROOT, "runtime", "ops.def")  # the source tree; installed: share/plancc/ops.def
    if not os.path.isfile(path):
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "ops.def")
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r'OP\(\s*\w+,\s*(\w+),\s*-?\d+,\s*-?\d+,\s*-?\d+,\s*"([^"]*)"', line)
            if m:
                ann[m.group(1)] = m.group(2)
    return ann


ANNOTATIONS = _read_annotations()


class Value:
    def __init__(self, name, shape, dtype="f32", kind="activation"):
        self.name, self.shape, self.dtype, self.kind = name, list(shape), dtype, kind
        self.init = None        # param/const: the initializer (a dict)
        self.data = None        # input: the data source (a dict)
        self.tensor = None      # param/const: the torch tensor (values for the weights file)
        self.copy = None        # (list name, index) when it belongs to a copy of a repeated block
        self.producer = None    # the op that writes it


class Op:
    def __init__(self, type_, ins, outs, attrs=None, where=""):
        self.type, self.ins, self.outs, self.attrs, self.where = type_, ins, outs, attrs or {}, where
        self.copy = None        # (list name, index)
        self.bias_axes = None   # attention: the scores' axes [b,n,s,t] its bias has (fuse.py)


class Graph:
    def __init__(self, name):
        self.name = name
        self.values, self.ops, self.inputs = [], [], []
        self.loss = None
        self.notes = []
        self._names = set()

    def unique(self, base):
        base = re.sub(r"[^A-Za-z0-9_.:-]", "_", base)[:100] or "t"
        name, k = base, 1
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def value(self, base, shape, dtype="f32", kind="activation"):
        v = Value(self.unique(base), shape, dtype, kind)
        self.values.append(v)
        return v

    def op(self, type_, ins, out_shapes, attrs=None, where="", out_names=None, dtype="f32", copy=None):
        outs = []
        for i, s in enumerate(out_shapes):
            v = self.value((out_names or [type_])[min(i, len(out_names or [type_]) - 1)], s, dtype)
            v.copy = copy
            outs.append(v)
        o = Op(type_, ins, outs, attrs, where)
        o.copy = copy
        for v in outs:
            v.producer = o
        self.ops.append(o)
        return outs[0] if len(outs) == 1 else outs

    def prune(self):
        """Drops the operators (and values) the loss does not depend on: a reshape the loss
        stopped reading, a PyTorch value computed but unused."""
        live, need = set(), {id(self.loss)}
        for o in reversed(self.ops):
            if any(id(v) in need for v in o.outs):
                live.add(id(o))
                need.update(id(v) for v in o.ins)
        self.ops = [o for o in self.ops if id(o) in live]
        used = need | {id(v) for v in self.inputs} | {id(v) for o in self.ops for v in o.outs}
        self.values = [v for v in self.values if id(v) in used]

    # ---- dimensions ----

    def _dims(self):
        parent = {}

        def find(a):
            while parent.setdefault(a, a) != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        def unite(a, b):
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        order = {}
        for v in self.values:
            for i in range(len(v.shape)):
                order.setdefault((id(v), i), len(order))
                find((order[(id(v), i)]))
        key = lambda v, i: order[(id(v), i)]
        for o in self.ops:
            for a, b in op_axis_pairs(o):
                (va, ia), (vb, ib) = a, b
                if va.shape[ia] != vb.shape[ib]:
                    raise ImportError_(f"{o.where}: {o.type}: axis {ia} of {va.name} {va.shape} and axis {ib} of "
                                       f"{vb.name} {vb.shape} should be one dimension")
                unite(key(va, ia), key(vb, ib))
        names, taken = {}, {}
        batch = self.inputs[0] if self.inputs and self.inputs[0].shape else None
        if batch is not None:
            names[find(key(batch, 0))] = "B"
        dims = {"B": batch.shape[0]} if batch is not None else {}
        for v in self.values:
            for i, n in enumerate(v.shape):
                r = find(key(v, i))
                if r not in names:
                    k = taken.get(n, 0) + 1
                    taken[n] = k
                    names[r] = f"d{n}" if k == 1 else f"d{n}_{k}"
                    dims[names[r]] = n
        return dims, {id(v): [names[find(key(v, i))] for i in range(len(v.shape))] for v in self.values}

    # ---- JSON ----

    def to_json(self, optimizer, blocks=True, description=None):
        self.prune()
        dims, vdims = self._dims()
        plans = find_blocks(self) if blocks else []
        m = {"version": 1, "name": self.name}
        if description:
            m["description"] = description
        m["dims"] = dims
        tensors, ops = {}, []

        def decl(v, name=None):
            d = {"shape": vdims[id(v)]}
            if v.kind != "activation":
                d = {"kind": v.kind, **d}
            if v.dtype != "f32":
                d["dtype"] = v.dtype
            if v.data:
                d["data"] = v.data
            if v.init:
                d["init"] = v.init
            return d

        def op_json(o, rename=lambda v: v.name):
            j = {"type": o.type, "in": [rename(v) for v in o.ins], "out": [rename(v) for v in o.outs]}
            if o.attrs:
                j["attrs"] = o.attrs
            return j

        tensors, ops = emit_with_blocks(self, plans, decl, op_json)
        used = {d for t in tensors.values() for d in t["shape"]}
        for e in ops:
            used.update(d for t in e.get("tensors", {}).values() for d in t["shape"])
        used.add("B")
        m["dims"] = {k: v for k, v in dims.items() if k in used}
        m["tensors"] = tensors
        m["ops"] = ops
        m["loss"] = self.loss.name
        m["optimizer"] = optimizer
        return m


def op_axis_pairs(o):
    """The (value, axis) pairs an operator makes one dimension."""
    t = o.type
    ins, outs = o.ins, o.outs
    if t in ("add", "mul", "sub", "div", "masked_fill", "expand", "sum", "mean", "max", "reduce_sum"):
        big, small = (outs[0], ins[0]) if t == "expand" else (ins[0], outs[0]) if t in ("sum", "mean", "max") else (ins[0], ins[1])
        amap = axis_map(o, big, small)
        pairs = [((small, j), (big, amap[j])) for j in range(len(small.shape))]
        if t not in ("expand", "sum", "mean", "max"):
            pairs += [((ins[0], i), (outs[0], i)) for i in range(len(ins[0].shape))]
        return pairs
    if t in ("concat", "split", "slice"):
        whole, parts = (outs[0], ins) if t == "concat" else (ins[0], outs)
        ax = o.attrs["axis"] % len(whole.shape)
        return [((p, i), (whole, i)) for p in parts for i in range(len(whole.shape)) if i != ax]
    if t == "transpose":
        return [((outs[0], i), (ins[0], p)) for i, p in enumerate(o.attrs["perm"])]
    if t in ("gather", "index_select"):  # the axis is idx's; every other axis x's
        x, idx, y, ax = ins[0], ins[1], outs[0], o.attrs["axis"]
        pairs = [((x, i), (y, i)) for i in range(len(x.shape)) if i != ax]
        if t == "gather":
            return pairs + [((idx, i), (y, i)) for i in range(len(y.shape))]
        return pairs + [((idx, 0), (y, ax))]
    if t == "attention":  # q [b,s,n,d], k [b,t,m,d], v [b,t,m,e] -> y [b,s,n,e]; bias on [b,n,s,t]
        q, k, v, y = ins[0], ins[1], ins[2], outs[0]
        pairs = [((q, 0), (k, 0)), ((q, 0), (v, 0)), ((q, 0), (y, 0)), ((q, 1), (y, 1)), ((k, 1), (v, 1)), ((q, 2), (y, 2)),
                 ((k, 2), (v, 2)), ((q, 3), (k, 3)), ((v, 3), (y, 3))]
        if q.shape[2] == k.shape[2]:
            pairs.append(((q, 2), (k, 2)))  # as many kv heads as query heads: one head dimension
        if len(ins) > 3:
            where = [(q, 0), (q, 2), (q, 1), (k, 1)]  # the scores' axes [b,n,s,t]
            pairs += [((ins[3], j), where[a]) for j, a in enumerate(o.bias_axes)]
        return pairs
    if t == "reshape":
        return reshape_pairs(ins[0], outs[0])
    ann = ANNOTATIONS.get(t, "")
    if not ann:
        return []
    return annotation_pairs(ann, ins, outs)


def axis_map(o, big, small):
    """The axes of big that small's axes are (the op's attrs axes, in the loader's sense)."""
    axes = o.attrs.get("axes")
    if axes is None:  # small is big's suffix
        return list(range(len(big.shape) - len(small.shape), len(big.shape)))
    axes = [a % len(big.shape) for a in axes]
    if o.type in ("sum", "mean", "max", "expand"):  # axes lists what the small one lacks
        return [i for i in range(len(big.shape)) if i not in axes]
    return sorted(axes)


def reshape_pairs(x, y):
    pairs, i, j = [], 0, 0
    while i < len(x.shape) and j < len(y.shape):
        i0, j0 = i, j
        pi, pj = x.shape[i], y.shape[j]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj and i < len(x.shape):
                pi *= x.shape[i]
                i += 1
            elif pj < pi and j < len(y.shape):
                pj *= y.shape[j]
                j += 1
            else:
                break
        if i - i0 == 1 and j - j0 == 1:
            pairs.append(((x, i0), (y, j0)))
    return pairs


def annotation_pairs(ann, ins, outs):
    lhs, rhs = ann.split("->")
    sides = [t.strip() for t in lhs.split(",")], [t.strip() for t in rhs.split(",")]
    seen, pairs = {}, []
    for tensors, specs in ((ins, sides[0]), (outs, sides[1])):
        for v, spec in zip(tensors, specs):
            letters = [s.rstrip("+^") for s in spec.split()]
            var = bool(letters) and letters[0].startswith("*")
            fixed = len(letters) - 1 if var else len(letters)
            lead = len(v.shape) - fixed
            pos = 0
            for L in letters:
                count = lead if L.startswith("*") else 1
                for k in range(count):
                    name = f"{L}.{k}" if L.startswith("*") else L
                    if name in seen:
                        pairs.append((seen[name], (v, pos)))
                    else:
                        seen[name] = (v, pos)
                    pos += 1
    return pairs


# ---- repeated blocks ----

class BlockPlan:
    """Copies [0, n) of a module list, ops[first:last) of the graph, as one block."""

    def __init__(self, lst, n, first, last, per_copy):
        self.list, self.n, self.first, self.last, self.per_copy = lst, n, first, last, per_copy

    def emit(self, g, decl, op_json):
        """This block's JSON entry, the values its copies own (not declared at the top level) and
        the outer values its `out` binds (declared there)."""
        c0 = self.per_copy[0]
        inner = {}          # copy-0 value -> inner name
        block_tensors, bind_in, carry, out = {}, {}, {}, {}
        produced0 = {id(v) for o in c0 for v in o.outs}
        for o in c0:
            for v in o.outs:
                inner[id(v)] = v.name
                block_tensors[v.name] = decl(v)
            for v in o.ins:
                if v.kind in ("param", "const") and v.copy and v.copy[0] == self.list and id(v) not in inner:
                    nm = strip_copy(v.name, self.list, 0)
                    inner[id(v)] = nm
                    block_tensors[nm] = decl(v)
        c1 = self.per_copy[1]
        ext0 = external_inputs(c0, produced0, self.list)
        ext1 = external_inputs(c1, {id(v) for o in c1 for v in o.outs}, self.list)
        prev_outs = {id(v): (k, k2) for k, o in enumerate(c0) for k2, v in enumerate(o.outs)}
        for v0, v1 in zip(ext0, ext1):
            nm = "in." + v0.name
            inner[id(v0)] = nm
            bind_in[nm] = v0.name
            if id(v1) in prev_outs:
                k, k2 = prev_outs[id(v1)]
                carry[nm] = c0[k].outs[k2].name
        last = self.per_copy[-1]
        later = set()
        for o in g.ops[self.last:]:
            later.update(id(v) for v in o.ins)
        later.add(id(g.loss))
        outers = []
        for k, o in enumerate(last):
            for k2, v in enumerate(o.outs):
                if id(v) in later:
                    out[v.name] = c0[k].outs[k2].name
                    outers.append(v)
        block = {"block": self.list.replace(".", "_"), "repeat": self.n, "in": bind_in}
        if carry:
            block["carry"] = carry
        block["out"] = out
        block["tensors"] = block_tensors
        block["ops"] = [op_json(o, lambda v: inner.get(id(v), v.name)) for o in c0]
        owned = {id(v) for c in self.per_copy for o in c for v in o.outs} - {id(v) for v in outers}
        owned |= {id(v) for v in g.values if v.copy and v.copy[0] == self.list and v.kind in ("param", "const")}
        return block, owned


def emit_with_blocks(g, plans, decl, op_json):
    """The top-level tensors and ops of g with each plan's copies as one block entry."""
    owned, entries, k = set(), [], 0
    for p in sorted(plans, key=lambda p: p.first):
        entries += [op_json(o) for o in g.ops[k:p.first]]
        block, own = p.emit(g, decl, op_json)
        entries.append(block)
        owned |= own
        k = p.last
    entries += [op_json(o) for o in g.ops[k:]]
    tensors = {}
    for v in g.values:
        if id(v) in owned:
            continue
        if v.kind != "activation" or v.producer is not None:
            tensors[v.name] = decl(v)
    return tensors, entries


def strip_copy(name, lst, i):
    return name.replace(f"{lst}.{i}.", f"{lst}.", 1)


def external_inputs(ops, produced, lst):
    seen, ext = set(), []
    for o in ops:
        for v in o.ins:
            if id(v) in produced or id(v) in seen:
                continue
            if v.kind in ("param", "const") and v.copy and v.copy[0] == lst:
                continue
            seen.add(id(v))
            ext.append(v)
    return ext


def find_blocks(g):
    """A BlockPlan for every module list whose copies are identical (notes say why not)."""
    lists, plans = [], []
    for o in g.ops:
        if o.copy and o.copy[0] not in lists:
            lists.append(o.copy[0])
    for lst in lists:
        idx = [k for k, o in enumerate(g.ops) if o.copy and o.copy[0] == lst]
        first, last = idx[0], idx[-1] + 1
        if any(not (g.ops[k].copy and g.ops[k].copy[0] == lst) for k in range(first, last)):
            g.notes.append(f"module list {lst}: other operators run between its copies; written out")
            continue
        copies = {}
        for k in range(first, last):
            copies.setdefault(g.ops[k].copy[1], []).append(g.ops[k])
        n = len(copies)
        if sorted(copies) != list(range(n)) or n < 2:
            continue
        per = [copies[i] for i in range(n)]
        why = same_copies(per, lst)
        if why:
            g.notes.append(f"module list {lst}: {why}; written out, not as a repeated block")
            continue
        plans.append(BlockPlan(lst, n, first, last, per))
    return plans


def same_copies(per, lst):
    c0 = per[0]
    pos = [{id(v): (k, j) for k, o in enumerate(c) for j, v in enumerate(o.outs)} for c in per]
    ext0 = external_inputs(c0, set(pos[0]), lst)
    for i, c in enumerate(per[1:], 1):
        if len(c) != len(c0):
            return f"copy {i} has {len(c)} operators, copy 0 {len(c0)}"
        exti = external_inputs(c, set(pos[i]), lst)
        if len(exti) != len(ext0):
            return f"copy {i} reads {len(exti)} outside values, copy 0 {len(ext0)}"
        for a, b in zip(exti, ext0):
            if a is b:
                continue
            if id(a) in pos[i - 1] and (i == 1 or True):
                continue
            return f"copy {i} reads {a.name} where copy 0 reads {b.name}"
        for o, o0 in zip(c, c0):
            if o.type != o0.type or o.attrs != o0.attrs or [v.shape for v in o.outs] != [v.shape for v in o0.outs]:
                return f"copy {i}'s {o.type} ({o.where}) differs from copy 0's {o0.type}"
            for v, v0 in zip(o.ins, o0.ins):
                if v.shape != v0.shape or v.dtype != v0.dtype:
                    return f"copy {i}'s {o.type} reads {v.name} {v.shape}, copy 0's {v0.name} {v0.shape}"
                if v.kind in ("param", "const") and v.copy and v.copy[0] == lst:
                    if strip_copy(v.name, lst, i) != strip_copy(v0.name, lst, 0):
                        return f"copy {i}'s {o.type} reads {v.name}, copy 0's {v0.name}"
                    continue
                if id(v) in pos[i] and pos[i][id(v)] != pos[0].get(id(v0)):
                    return f"copy {i}'s {o.type} is wired unlike copy 0's"
        # the carried values: copy i reads copy i-1's outputs at the positions copy 1 reads copy 0's
        if i >= 2:
            e1 = external_inputs(per[1], set(pos[1]), lst)
            for a, b in zip(exti, e1):
                pa, pb = pos[i - 1].get(id(a)), pos[0].get(id(b))
                if (pa is None) != (pb is None) or (pa and pa != pb) or (pa is None and a is not b):
                    return f"copy {i} is wired to copy {i - 1} unlike copy 1 to copy 0"
    return None


def write_json(m, path):
    text = json.dumps(m, indent=1)
    if os.path.exists(path) and not os.path.isfile(path):
        raise ImportError_(f"{path}: exists and is not a regular file; not written")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
