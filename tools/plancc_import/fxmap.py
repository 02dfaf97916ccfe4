"""fxmap.py: a PyTorch module, traced with torch.fx, as the importer's graph (graph.py).

trace(module, inputs) traces *into* every module (nn.Linear, nn.Embedding, nn.LayerNorm,
nn.Conv2d, the user's own: is_leaf_module is False; nn.MultiheadAttention and the nn.Transformer*
layers through stdlayers.py's traceable forwards), records which module each node was made
in (so the copies of an nn.ModuleList can become one repeated block) and the node's source line,
runs the example inputs through the traced graph once (every node's value: shapes, and the values
of constant subgraphs), and maps each node to model operators:

  placeholder             an input: f32 data "normal" (or "binary" when the example holds only 0
                          and 1), integer data "randint" with high = the embedding's rows or the
                          loss's classes it feeds (else the example's maximum + 1), dtype i32
  get_attr                a parameter (trained, PyTorch's name) or a constant (a buffer, or a
                          parameter with requires_grad False)
  nodes of no input       constant subgraphs (torch.arange, a buffer sliced, x.new_full(...),
    and no trained        which reads only x's device): folded into one constant with the
    parameter             value PyTorch computed; one built as a causal mask is marked so
                          (causal_built), for fuse.py
  call_function / method  F.linear, matmul/@/bmm, F.embedding, F.layer_norm, F.softmax, F.gelu
                          (erf or tanh), F.silu, F.relu, sigmoid, tanh, exp, log, sqrt, rsqrt,
                          sin, cos, pow, neg, + - * / (tensors or numbers, broadcasting), mean,
                          sum, amax/max(dim), view/reshape/flatten/unsqueeze/squeeze, transpose/
                          permute, expand, cat, chunk/split, getitem (slices, None, an index),
                          F.conv2d, F.max_pool2d, F.avg_pool2d, F.dropout (p = 0 or eval: none),
                          F.cross_entropy (mean; with an explicit ignore_index: the sum over the
                          rows kept divided by their count, PyTorch's rule), masked_fill,
                          where(cond, number, y) (a masked_fill of y), contiguous, float/to/type_as
                          (no change of dtype)
Anything else (an unsupported function, data-dependent control flow, a dynamic shape) is an
ImportError_ naming the construct, the fx node and its source line (plancc-import exits 2).
"""
import dis
import inspect
import math
import operator
import traceback

import torch
import torch.fx as fx
import torch.nn.functional as F

import fuse
import stdlayers
from graph import Graph, ImportError_


# Methods and attributes of a traced tensor that say its shape (and dtype): the tracer answers them
# with what the example inputs give (Tracer.shape_of), so that model code may compute with sizes
# (b, t = idx.size(); assert t <= block; arange(0, t); a buffer sliced [:t]) as it runs; and
# x.device is the example inputs' device (the model's).
SIZE_METHODS = {"size", "dim", "numel"}
SIZE_ATTRS = {"shape", "ndim", "dtype"}


class Tracer(fx.Tracer):
    """Traces into every module; each node remembers the module path it was made in. torch.nn's
    transformer layers are traced through stdlayers.py's rewrites of their forward (theirs test
    their inputs' ranks and dtypes, which torch.fx cannot trace); examples: the example inputs,
    which tell those rewrites a mask's dtype, and every traced tensor its shape: x.size(),
    x.shape, x.dim() and x.numel() are plain numbers, as the model's code has them when it runs
    (the importer's shapes are static), computed on the meta device (shape_of)."""

    def __init__(self, examples=None):
        super().__init__()
        self.stack = []
        self.record_stack_traces = True
        self.examples = examples
        self.metas = {}  # fx node -> its value on meta copies of the examples (None: not known)

    def example(self, node):
        """The value of a placeholder (the example input) or a get_attr node (the module's tensor,
        read from the modules' dictionaries: while tracing, torch.fx answers getattr on a module
        with proxies), or None."""
        if node.op == "placeholder":
            k = [p for p in node.graph.nodes if p.op == "placeholder"].index(node)
            return self.examples[k] if self.examples is not None and k < len(self.examples) else None
        if node.op == "get_attr":
            obj = self.root
            for part in node.target.split("."):
                d = [getattr(obj, k, {}) for k in ("_modules", "_parameters", "_buffers")] + [vars(obj)]
                obj = next((x[part] for x in d if part in x), None)
            return obj
        return None

    def shape_of(self, node):
        """Node's value computed on the meta device from meta copies of the example inputs and the
        module's tensors (shapes and dtypes, no data: nothing real runs or changes), or None where
        that cannot be known (an operator the meta device lacks)."""
        if node in self.metas:
            return self.metas[node]
        self.metas[node] = None
        meta = lambda t: torch.empty_like(t, device="meta") if isinstance(t, torch.Tensor) else t
        val = lambda a: fx.node.map_aggregate(a, lambda x: self.shape_of(x) if isinstance(x, fx.Node) else x)
        try:
            if node.op in ("placeholder", "get_attr"):
                out = meta(self.example(node))
            else:
                args, kwargs = val(node.args), val(node.kwargs)
                if node.op == "call_function":
                    out = node.target(*args, **kwargs)
                elif node.op == "call_method":
                    out = getattr(args[0], node.target)(*args[1:], **kwargs)
                else:
                    out = None
        except Exception:  # noqa: BLE001 - not known: the proxy stays a proxy
            out = None
        self.metas[node] = out
        return out

    def create_proxy(self, kind, target, args, kwargs, *rest, **kw):
        if kind == "call_method" and target in SIZE_METHODS and isinstance(args[0], fx.Proxy):
            x = self.shape_of(args[0].node)
            if isinstance(x, torch.Tensor):
                try:
                    return getattr(x, target)(*args[1:], **kwargs)
                except Exception:  # noqa: BLE001 - a bad dimension: torch.fx's node reports it
                    pass
        return super().create_proxy(kind, target, args, kwargs, *rest, **kw)

    def is_leaf_module(self, m, qualname):
        return False

    def call_module(self, m, forward, args, kwargs):
        self.stack.append(self.path_of_module(m))
        try:
            return super().call_module(m, stdlayers.traceable(self, m, forward), args, kwargs)
        finally:
            self.stack.pop()

    def create_node(self, *args, **kwargs):
        n = super().create_node(*args, **kwargs)
        n.meta["module_stack"] = list(self.stack)
        return n

    def proxy(self, node):
        return _Proxy(node, self)

    def iter(self, obj):
        """A traced value unpacked (`q, k, v = x.split(d, dim=2)`, `B, T, C = x.size()`): one item
        per target, as torch.fx does before Python 3.11, whose Proxy.__iter__ looks for the
        UNPACK_SEQUENCE at index f_lasti / 2 of the code's instructions, which no longer holds
        once 3.11 leaves its inline caches out of that list (a wrong instruction, or an index
        past its end); here it is found by its offset. Any other iteration is torch.fx's error."""
        frame = inspect.currentframe().f_back.f_back  # _Proxy.__iter__'s caller: the model's code
        inst = next((i for i in dis.get_instructions(frame.f_code) if i.offset == frame.f_lasti), None)
        if inst is not None and inst.opname == "UNPACK_SEQUENCE":
            return iter([obj[i] for i in range(inst.argval)])
        return super().iter(obj)


class _Proxy(fx.Proxy):
    """torch.fx's Proxy, its iteration left to Tracer.iter and its shape known (Tracer.shape_of)."""

    def __iter__(self):
        return self.tracer.iter(self)

    def __getattr__(self, k):
        if k in SIZE_ATTRS:
            x = self.tracer.shape_of(self.node)
            if isinstance(x, torch.Tensor):
                return getattr(x, k)
        ex = self.tracer.examples
        if k == "device" and ex and all(isinstance(t, torch.Tensor) and t.device == ex[0].device for t in ex):
            return ex[0].device
        return super().__getattr__(k)


def source_line(node):
    """The innermost frame of the model's own code that made the node: 'File "...", line N, in f: code'."""
    st = node.meta.get("stack_trace") or getattr(node, "stack_trace", None) or ""
    lines = st.strip().splitlines()
    best = None
    for k, l in enumerate(lines):
        l = l.strip()
        if l.startswith("File ") and "/torch/" not in l and "plancc_import" not in l and "plancc-import" not in l:
            code = lines[k + 1].strip() if k + 1 < len(lines) and not lines[k + 1].strip().startswith("File ") else ""
            best = l + (": " + code if code else "")
            break  # torch.fx lists the innermost frame first
    if best is None and node.op == "output" and isinstance(node.args[0], fx.Node):
        return source_line(node.args[0])  # the output's own line: that of the value it returns
    return best or "(no source line recorded)"


def trace_error(exc, path):
    """A TraceError (control flow on a traced value, ...) as a message with the user's line."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/torch/" not in f.filename and "plancc_import" not in f.filename and "plancc-import" not in f.filename]
    where = f'File "{frames[-1].filename}", line {frames[-1].lineno}: {frames[-1].line}' if frames else "(unknown line)"
    if isinstance(exc, stdlayers.Unsupported):
        return f"cannot import the model: {exc} (at {where})"
    return f"cannot trace the model: {type(exc).__name__}: {exc} (at {where}); data-dependent control flow and dynamic shapes cannot be imported"


class Interp(fx.Interpreter):
    """Runs the traced graph once, keeping every node's value."""

    def __init__(self, gm):
        super().__init__(gm)
        self.vals = {}

    def run_node(self, n):
        try:
            r = super().run_node(n)
        except Exception as e:  # noqa: BLE001 - PyTorch could not run the node on the example
            r = meta_fallback(self, n)
            if r is None:
                raise ImportError_(f"PyTorch cannot run fx node {n.name} ({n.op} {target_name(n.target)}) on the example "
                                   f"inputs: {type(e).__name__}: {str(e).splitlines()[0]} at {source_line(n)}") from e
        self.vals[n] = r
        return r


def meta_fallback(interp, n):
    """The value of a node that torch 1.13 cannot run on the meta device (F.one_hot), or None."""
    if n.op == "call_function" and target_name(n.target) == "one_hot":
        x = interp.env[n.args[0]] if isinstance(n.args[0], fx.Node) else None
        classes = n.args[1] if len(n.args) > 1 else n.kwargs.get("num_classes", -1)
        if isinstance(x, torch.Tensor) and x.device.type == "meta" and classes > 0:
            return torch.empty(list(x.shape) + [classes], dtype=torch.long, device="meta")
    return None


def module_lists(model):
    """name -> length of each nn.ModuleList (direct children of the root or deeper)."""
    return {name: len(m) for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) >= 2}


def copy_of(stack, lists):
    for path in stack:
        for lst in lists:
            pre = lst + "."
            if path.startswith(pre):
                rest = path[len(pre):].split(".")[0]
                if rest.isdigit():
                    return (lst, int(rest))
    return None


def copy_of_name(name, lists):
    for lst in lists:
        pre = lst + "."
        if name.startswith(pre):
            rest = name[len(pre):].split(".")[0]
            if rest.isdigit():
                return (lst, int(rest))
    return None


class Mapper:
    def __init__(self, model, inputs, name):
        self.model, self.inputs = model, inputs
        self.g = Graph(name)
        self.v = {}            # fx node -> Value or a python object (ints, tuples of values)
        self.lists = module_lists(model)
        self.node = None
        self.unsq = {}         # id(value) -> (source value, axes added): undo for broadcasts

    # ---- errors and context ----

    def fail(self, what):
        n = self.node
        raise ImportError_(f"{what}: fx node {n.name} ({n.op} {target_name(n.target)}) at {source_line(n)}")

    def where(self):
        return f"{self.node.name} ({source_line(self.node)})" if self.node is not None else ""

    def copy(self):
        return copy_of(self.node.meta.get("module_stack", []), self.lists) if self.node is not None else None

    def op(self, type_, ins, shape, attrs=None, dtype=None, nout=1):
        """One operator writing one new value of `shape` (nout > 1: a list of shapes); data
        movement keeps its input's dtype, everything else makes floats."""
        shapes = shape if nout > 1 else [shape]
        if dtype is None:
            dtype = ins[0].dtype if type_ in ("reshape", "transpose", "slice", "concat", "split") else "f32"
        base = self.node.name if self.node is not None else type_
        return self.g.op(type_, ins, [list(x) for x in shapes], attrs, self.where(), [base], dtype, self.copy())

    # ---- constants ----

    def const(self, t, base):
        """A constant tensor value (PyTorch's values kept for the weights file)."""
        t = t.detach()
        dt = "i32" if not t.is_floating_point() else "f32"
        if dt == "i32":
            self.fail("an integer constant tensor (only float constants can be imported)")
        v = self.g.value(base, list(t.shape), dt, "const")
        v.tensor = t
        v.init = init_of(t)
        return v

    def scalar(self, x):
        """A scalar constant (one per value, shared by every copy of a block)."""
        x = float(x)
        if x not in self.scalars:
            v = self.g.value(f"c_{x:g}", [], "f32", "const")
            v.tensor, v.init = torch.tensor(x), {"kind": "normal", "mean": x, "std": 0}
            self.scalars[x] = v
        return self.scalars[x]

    # ---- shapes: reshapes, broadcasting ----

    def reshape(self, x, shape):
        shape = [int(s) for s in shape]
        if list(x.shape) == shape:
            return x
        if math.prod(shape) != math.prod(x.shape):
            self.fail(f"a reshape of {x.shape} into {shape}")
        if not reshape_ok(x.shape, shape):
            mid = refinement(x.shape, shape)
            if mid is None:
                self.fail(f"a reshape of {x.shape} into {shape} that regroups dimensions (plancc's reshape splits or merges adjacent ones)")
            x = self.op("reshape", [x], mid)  # split first, then merge: [L, N, E] -> [L, N, H, D] -> [L, N H, D]
        y = self.op("reshape", [x], shape)
        # remember pure insertions/removals of 1s, so a broadcast can use the source directly
        if [s for s in shape if s != 1] == [s for s in x.shape if s != 1]:
            self.unsq[id(y)] = x
        return y

    def squeezed(self, x, out_shape):
        """x (torch-broadcastable to out_shape) without its broadcast axes, and the axes of out
        its remaining axes are."""
        r = len(out_shape) - len(x.shape)
        keep, axes = [], []
        for i, n in enumerate(x.shape):
            if n == 1 and out_shape[r + i] != 1:
                continue
            keep.append(n)
            axes.append(r + i)
        if keep != list(x.shape):
            src = self.unsq.get(id(x))
            x = src if src is not None and list(src.shape) == keep else self.reshape(x, keep)
        return x, axes

    def expand_to(self, x, axes, out_shape):
        if list(x.shape) == list(out_shape):
            return x
        lack = [i for i in range(len(out_shape)) if i not in axes]
        return self.op("expand", [x], out_shape, {"axes": lack})

    def binary(self, kind, a, b, out_shape):
        """a OP b for values a and b with torch broadcasting (kind: add, sub, mul, div)."""
        a, aa = self.squeezed(a, out_shape)
        b, ba = self.squeezed(b, out_shape)
        full = list(range(len(out_shape)))
        if aa != full and ba == full and kind in ("add", "mul"):
            a, aa, b, ba = b, ba, a, aa
        if aa != full and ba == full and kind == "sub":  # a - b = (-b) + a
            nb = self.op("scale", [b], out_shape, {"scale": -1.0})
            return self._mapped("add", nb, a, aa, out_shape)
        if aa != full and ba == full and kind == "div":  # a / b = b^-1 * a
            rb = self.op("pow", [b], out_shape, {"exponent": -1.0})
            return self._mapped("mul", rb, a, aa, out_shape)
        if aa != full:
            a = self.expand_to(a, aa, out_shape)
        return self._mapped(kind, a, b, ba, out_shape)

    def _mapped(self, kind, a, b, baxes, out_shape):
        attrs = None
        r = len(out_shape) - len(b.shape)
        if baxes != list(range(r, len(out_shape))):
            attrs = {"axes": baxes}
        return self.op(kind, [a, b], out_shape, attrs)

    def with_number(self, kind, x, c, number_first, out_shape):
        if kind == "mul" or (kind == "div" and not number_first):
            f = float(c) if kind == "mul" else 1.0 / float(c)
            return x if f == 1.0 else self.op("scale", [x], out_shape, {"scale": f})
        if kind == "div":  # c / x
            r = self.op("pow", [x], out_shape, {"exponent": -1.0})
            return r if float(c) == 1.0 else self.op("scale", [r], out_shape, {"scale": float(c)})
        if kind == "sub" and number_first:  # c - x
            x = self.op("scale", [x], out_shape, {"scale": -1.0})
            kind = "add"
        elif kind == "sub":
            c, kind = -float(c), "add"
        if float(c) == 0:
            return x
        return self.op("add", [x, self.scalar(c)], out_shape)

    # ---- arguments ----

    def arg(self, a):
        if isinstance(a, fx.Node):
            x = self.v[a]
            if isinstance(x, Folded):
                return x.get(self)
            return x
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(b) for b in a)
        return a

    def tensor(self, a, what="operand"):
        x = self.arg(a)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return x
        if not isinstance(x, Value_):
            self.fail(f"a {what} that is {type(x).__name__}, not a tensor")
        return x

    # ---- the nodes ----

    def run(self):
        tracer = Tracer(self.inputs)
        try:
            graph = tracer.trace(self.model)
        except Exception as e:  # noqa: BLE001 - any tracing failure is the model's construct
            raise ImportError_(trace_error(e, "")) from e
        gm = fx.GraphModule(tracer.root, graph)
        interp = Interp(gm)
        with torch.no_grad():
            interp.run(*self.inputs)
        self.vals = interp.vals
        self.dep = dependence(graph, self.model)
        for n in graph.nodes:
            self.node = n
            if n.op == "output":
                loss = self.arg(n.args[0])
                if not isinstance(loss, Value_) or loss.shape != []:
                    self.fail("the model's output, which must be the scalar loss")
                self.g.loss = loss
                continue
            int_buffer = n.op == "get_attr" and isinstance(self.vals[n], torch.Tensor) and not self.vals[n].is_floating_point()
            if (n.op not in ("placeholder", "get_attr") or int_buffer) and not self.dep[n]:
                self.v[n] = Folded(n, self.vals[n])  # an integer buffer too: only lookups may read it
                continue
            self.v[n] = self.map_node(n)
        self.node = None
        self.finish_inputs()
        return self.g

    def map_node(self, n):
        if n.op == "placeholder":
            return self.placeholder(n)
        if n.op == "get_attr":
            return self.get_attr(n)
        name = target_name(n.target)
        fn = HANDLERS.get(name)
        if fn is None:
            self.fail(f"the function {name} (no mapping to plancc's operators)")
        out = self.vals[n]
        shape = list(out.shape) if isinstance(out, torch.Tensor) else None
        return fn(self, n, shape)

    def placeholder(self, n):
        t = self.vals[n]
        if not isinstance(t, torch.Tensor):
            self.fail("an input that is not a tensor")
        known = t.device.type != "meta" and t.numel() > 0  # a model on the meta device has shapes only
        if t.dtype == torch.bool:  # a mask: 0/1 floats (what masked_fill's mask operand takes)
            v = self.g.value(n.name, list(t.shape), "f32", "input")
            v.data = {"kind": "binary"}
        elif t.is_floating_point():
            v = self.g.value(n.name, list(t.shape), "f32", "input")
            binary = known and bool(((t == 0) | (t == 1)).all())
            v.data = {"kind": "binary" if binary else "normal"}
        else:
            v = self.g.value(n.name, list(t.shape), "i32", "input")
            v.data = {"kind": "randint", "high": int(t.max()) + 1 if known else 1}
        v.example = t
        self.g.inputs.append(v)
        return v

    def get_attr(self, n):
        cached = self.params.get(n.target)
        if cached is not None:
            return cached
        t = self.vals[n]
        p = dict(self.model.named_parameters()).get(n.target)
        kind = "param" if p is not None and p.requires_grad else "const"
        if kind == "const" and not t.is_floating_point():
            self.fail(f"the integer buffer {n.target} used in the computation")
        shown = getattr(self.model, "plancc_names", {}).get(n.target, n.target)  # an ONNX initializer's own name
        v = self.g.value(shown, list(t.shape), "f32", kind)
        v.tensor, v.init = t.detach(), init_of(t.detach())
        v.copy = copy_of_name(n.target, self.lists)
        v.torch_name = n.target
        self.params[n.target] = v
        return v

    def finish_inputs(self):
        """An integer input's range: the rows of the embedding or the classes of the loss it feeds."""
        for v in self.g.inputs:
            if v.dtype != "i32":
                continue
            for o in self.g.ops:
                if o.type == "embedding" and o.ins[0] is v:
                    v.data["high"] = o.ins[1].shape[0]
                elif o.type == "cross_entropy" and o.ins[1] is v:
                    v.data["high"] = o.ins[0].shape[-1]
                elif o.type == "one_hot" and o.ins[0] is v:
                    v.data["high"] = o.outs[0].shape[-1]
                elif o.type in ("gather", "index_select") and o.ins[1] is v:
                    v.data["high"] = o.ins[0].shape[o.attrs["axis"]]


Value_ = None  # set below (graph.Value), for isinstance checks


class Folded:
    """A node whose value depends on no input and no trained parameter: a number, a shape, or a
    tensor that becomes a constant when an operator reads it."""

    def __init__(self, node, val):
        self.node, self.val, self.value = node, val, None

    def get(self, m):
        if not isinstance(self.val, torch.Tensor):
            return self.val
        if self.value is None:
            t = self.val
            if t.dtype == torch.bool:
                t = t.float()
            self.value = m.const(t, self.node.name)
            self.value.copy = copy_of(self.node.meta.get("module_stack", []), m.lists)
            self.value.causal = causal_built(self.node)
        return self.value


def causal_built(n):
    """Whether fx node n builds an additive causal mask, torch.full((s, s), c).triu(1) (or
    x.new_full((s, s), c, dtype=...).triu(1), which traces with x on any device) with c at
    most fuse.MASKED (or -inf): what tells fuse.py a mask is causal on the meta device, where
    its values are not computed."""
    arg = lambda node, i, key, default=None: node.args[i] if len(node.args) > i else node.kwargs.get(key, default)
    if n.op not in ("call_function", "call_method") or target_name(n.target) != "triu" or arg(n, 1, "diagonal", 0) != 1:
        return False
    f = n.args[0] if n.args else None
    if not isinstance(f, fx.Node) or target_name(f.target) not in ("full", "new_full"):
        return False
    first = 1 if f.op == "call_method" else 0  # x.new_full(size, fill): args (x, size, fill)
    size, fill = arg(f, first, "size"), arg(f, first + 1, "fill_value")
    return (isinstance(size, (tuple, list)) and len(size) == 2 and size[0] == size[1]
            and isinstance(fill, (int, float)) and fill <= fuse.MASKED)


def dependence(graph, model):
    """node -> whether its value depends on an input or a trained parameter."""
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    dep = {}
    for n in graph.nodes:
        if n.op == "placeholder":
            dep[n] = True
        elif n.op == "get_attr":
            dep[n] = n.target in trained
        elif target_name(n.target) in SHAPE_ONLY:
            dep[n] = False
        else:
            dep[n] = any(dep.get(a, False) for a in n.all_input_nodes)
    return dep


SHAPE_ONLY = {"zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full", "new_empty", "size", "dim", "getattr"}


def target_name(t):
    if isinstance(t, str):
        return t
    name = getattr(t, "__name__", str(t))
    return {"truediv": "div", "floordiv": "floordiv", "getitem": "getitem"}.get(name, name)


def init_of(t):
    """An initializer that reproduces t where it can (all one value), else its mean and std:
    the real values come with the weights file."""
    if t.numel() == 0 or t.device.type == "meta":
        return {"kind": "zeros"}
    t = t.double()
    if not bool(torch.isfinite(t).all()):  # a mask's -inf: the statistics of the finite entries
        t = t[torch.isfinite(t)]
        if t.numel() == 0:
            return {"kind": "zeros"}
    lo, hi = float(t.min()), float(t.max())
    clamp = lambda x, lo_, hi_: min(max(x, lo_), hi_)  # the loader's ranges: |mean| <= 1e6, std in [0, 1e6]
    if lo == hi and abs(lo) <= 1e6:
        return {"kind": "zeros"} if lo == 0 else {"kind": "ones"} if lo == 1 else {"kind": "normal", "mean": lo, "std": 0}
    return {"kind": "normal", "mean": clamp(float(t.mean()), -1e6, 1e6), "std": clamp(float(t.std()) if t.numel() > 1 else 0.0, 0, 1e6)}


def reshape_ok(a, b):
    """plancc's reshape rule (compiler/ops.c, reshape_group): groups of adjacent axes whose products
    agree, each one axis split into several or several merged into one."""
    i = j = 0
    while i < len(a) or j < len(b):
        i0, j0 = i, j
        pi = a[i] if i < len(a) else 1
        pj = b[j] if j < len(b) else 1
        i, j = i + (i < len(a)), j + (j < len(b))
        while pi != pj:
            if pi < pj and i < len(a):
                pi, i = pi * a[i], i + 1
            elif pj < pi and j < len(b):
                pj, j = pj * b[j], j + 1
            else:
                return False
        if i - i0 > 1 and j - j0 > 1:
            return False
    return True


def refinement(a, b):
    """The shape that both a and b merge adjacent axes of (where each axis boundary of either is
    one of it: the prefix products of both, merged), so that a reshape of a into b is a split into
    it and a merge out of it; None where a and b regroup elements across each other's axes
    ([6, 4] into [4, 6])."""
    def bounds(shape):
        out, p = set(), 1
        for n in shape:
            p *= n
            out.add(p)
        return out
    cuts = sorted(bounds(a) | bounds(b))
    mid, prev = [], 1
    for c in cuts:
        if c % prev:
            return None
        mid.append(c // prev)
        prev = c
    return mid if reshape_ok(a, mid) and reshape_ok(mid, b) else None


# ---- handlers: (mapper, node, the node's output shape) -> Value or python object ----

def _args(m, n):
    return [m.arg(a) for a in n.args], {k: m.arg(v) for k, v in n.kwargs.items()}


def h_linear(m, n, shape):
    (x, w, *rest), kw = _args(m, n)
    b = rest[0] if rest else kw.get("bias")
    return m.op("linear", [x, w] + ([b] if b is not None else []), shape)


def h_matmul(m, n, shape):
    (a, b), _ = _args(m, n)
    if len(a.shape) < 2 or len(b.shape) < 2:
        m.fail("a matrix product of a vector")
    if len(b.shape) == 2:
        return m.op("matmul", [a, b], shape)
    if a.shape[:-2] == b.shape[:-2]:
        return m.op("bmm", [a, b], shape)
    m.fail(f"a matrix product broadcasting {a.shape} against {b.shape}")


def h_embedding(m, n, shape):
    fv = m.v.get(n.args[0]) if isinstance(n.args[0], fx.Node) else None
    if isinstance(fv, Folded) and isinstance(fv.val, torch.Tensor) and not fv.val.is_floating_point():
        # a lookup at constant ids (T5's relative position buckets): a constant one-hot matrix
        # times the table, so the table is trained as in PyTorch
        w = m.arg(n.args[1])
        t = fv.val
        if t.device.type == "meta":
            oh = torch.zeros(list(t.shape) + [w.shape[0]], device="meta")
        else:
            oh = F.one_hot(t.long(), w.shape[0]).float()
        c = m.const(oh, n.args[0].name + "_onehot")
        c.copy = m.copy()
        return m.op("matmul", [c, w], shape)
    (ids, w, *rest), kw = _args(m, n)
    if (rest and rest[0] is not None) or kw.get("padding_idx") is not None or kw.get("max_norm") is not None:
        m.fail("an embedding with padding_idx or max_norm")
    return m.op("embedding", [ids, w], shape)


def h_layer_norm(m, n, shape):
    (x, norm_shape, *rest), kw = _args(m, n)
    w = rest[0] if len(rest) > 0 else kw.get("weight")
    b = rest[1] if len(rest) > 1 else kw.get("bias")
    eps = rest[2] if len(rest) > 2 else kw.get("eps", 1e-5)
    if len(norm_shape) != 1:
        m.fail("a layer norm over more than the last dimension")
    if w is None or b is None:
        m.fail("a layer norm without weight and bias (elementwise_affine=False)")
    return m.op("layernorm", [x, w, b], shape, {"eps": float(eps)})


def h_softmax(m, n, shape):
    (x, *rest), kw = _args(m, n)
    dim = rest[0] if rest else kw.get("dim")
    if dim is None or dim % len(x.shape) != len(x.shape) - 1:
        m.fail(f"a softmax over dimension {dim} (only the last)")
    return m.op("softmax", [x], shape)


def h_unary(kind):
    def h(m, n, shape):
        (x, *rest), kw = _args(m, n)
        if kind == "gelu":
            approx = kw.get("approximate", rest[0] if rest else "none")
            return m.op("gelu" if approx == "tanh" else "gelu_erf", [x], shape)
        if kind in ("relu", "silu") and (kw.get("inplace") or (rest and rest[0])):
            pass  # in place or not, the value is the same
        return m.op(kind, [x], shape)
    return h


def h_pow(m, n, shape):
    (x, e), _ = _args(m, n)
    if not isinstance(e, (int, float)):
        m.fail("a power with a tensor exponent")
    if e == 1:
        return x
    return m.op("pow", [x], shape, {"exponent": float(e)})


def h_neg(m, n, shape):
    (x,), _ = _args(m, n)
    return m.op("scale", [x], shape, {"scale": -1.0})


def h_arith(kind):
    def h(m, n, shape):
        (a, b, *rest), kw = _args(m, n)
        alpha = kw.get("alpha", 1)
        if alpha != 1:
            m.fail(f"{kind} with alpha")
        na, nb = isinstance(a, (int, float)), isinstance(b, (int, float))
        if na and nb:
            m.fail("arithmetic on two numbers that depends on the inputs")
        if nb:
            return m.with_number(kind, a, b, False, shape)
        if na:
            return m.with_number(kind, b, a, True, shape)
        return m.binary(kind, a, b, shape)
    return h


def h_reduce(kind):
    def h(m, n, shape):
        (x, *rest), kw = _args(m, n)
        dim = rest[0] if rest else kw.get("dim")
        keep = (rest[1] if len(rest) > 1 else kw.get("keepdim", False))
        if dim is None:
            dims = list(range(len(x.shape)))
        else:
            dims = [d % len(x.shape) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
        out = [s for i, s in enumerate(x.shape) if i not in dims]
        op = {"amax": "max"}.get(kind, kind)
        y = m.op(op, [x], out, {"axes": sorted(dims)})
        if kind == "max" and dim is not None:  # torch.max(x, dim) returns (values, indices)
            y = m.reshape(y, shape[0] if isinstance(shape, tuple) else [s if i not in dims else 1 for i, s in enumerate(x.shape)]) if keep else y
            return (y, None)
        return m.reshape(y, shape) if keep else y
    return h


def h_reshape(m, n, shape):
    x = m.arg(n.args[0])
    return m.reshape(x, shape)


def h_identity(m, n, shape):
    x = m.arg(n.args[0])
    if isinstance(x, Value_) and shape is not None and x.dtype == "i32" and m.vals[n].is_floating_point():
        m.fail("a cast of integer ids to float")
    return x


def h_transpose(m, n, shape):
    (x, *dims), kw = _args(m, n)
    r = len(x.shape)
    if target_name(n.target) == "permute":
        perm = list(dims[0]) if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else list(dims)
        perm = [d % r for d in perm]
    elif target_name(n.target) == "t":
        perm = [1, 0]
    else:
        d0, d1 = (dims + [kw.get("dim0"), kw.get("dim1")])[:2]
        perm = list(range(r))
        perm[d0 % r], perm[d1 % r] = perm[d1 % r], perm[d0 % r]
    if perm == list(range(r)):
        return x
    return m.op("transpose", [x], shape, {"perm": perm})


def h_expand(m, n, shape):
    x = m.arg(n.args[0])
    xs, axes = m.squeezed(x, shape)
    return m.expand_to(xs, axes, shape)


def h_cat(m, n, shape):
    (xs, *rest), kw = _args(m, n)
    dim = rest[0] if rest else kw.get("dim", 0)
    xs = [x for x in xs if not (isinstance(x, Value_) and 0 in x.shape)]
    if len(xs) == 1:
        return xs[0]
    return m.op("concat", list(xs), shape, {"axis": dim % len(shape)})


def h_split(m, n, shape):
    (x, size, *rest), kw = _args(m, n)
    dim = (rest[0] if rest else kw.get("dim", 0)) % len(x.shape)
    outs = m.vals[n]
    shapes = [list(t.shape) for t in outs]
    if len(shapes) == 1:
        return (x,)
    ys = m.op("split", [x], shapes, {"axis": dim}, nout=len(shapes))
    return tuple(ys)


def h_getitem(m, n, shape):
    x, idx = m.arg(n.args[0]), m.arg(n.args[1])
    if not isinstance(x, Value_):
        if isinstance(x, (tuple, list)):
            r = x[idx]
            if r is None:
                m.fail("the indices of a max over a dimension")
            return r
        return x[idx]
    return index_value(m, x, idx, shape)


def index_value(m, x, idx, shape):
    """x[idx] for slices, None, an integer, Ellipsis, and a list of rows (an integer tensor)."""
    if isinstance(idx, Value_) and idx.dtype == "i32" and len(idx.shape) == 1:
        return m.op("index_select", [x, idx], shape, {"axis": 0})
    idx = idx if isinstance(idx, tuple) else (idx,)
    if sum(i is Ellipsis for i in idx) > 1:
        m.fail("an index with two ellipses")
    explicit = sum(1 for i in idx if i is not None and i is not Ellipsis)
    full = []
    for i in idx:
        if i is Ellipsis:
            full += [slice(None)] * (len(x.shape) - explicit)
        else:
            full.append(i)
    full += [slice(None)] * (len(x.shape) - sum(1 for i in full if i is not None))
    cur, axis = x, 0
    for i in full:
        if i is None:
            continue
        if isinstance(i, slice):
            n = cur.shape[axis]
            start, stop, step = i.indices(n)
            if step != 1:
                m.fail("a slice with a step")
            if (start, stop) != (0, n):
                sh = list(cur.shape)
                sh[axis] = stop - start
                cur = m.op("slice", [cur], sh, {"axis": axis, "start": start, "end": stop})
            axis += 1
        elif isinstance(i, int):
            n = cur.shape[axis]
            i = i % n
            sh = list(cur.shape)
            sh[axis] = 1
            if n != 1:
                cur = m.op("slice", [cur], sh, {"axis": axis, "start": i, "end": i + 1})
            cur = m.reshape(cur, sh[:axis] + sh[axis + 1:])
        else:
            m.fail(f"an index by {type(i).__name__}")
    return m.reshape(cur, shape)


def h_conv2d(m, n, shape):
    (x, w, *rest), kw = _args(m, n)
    b = rest[0] if rest else kw.get("bias")
    stride = rest[1] if len(rest) > 1 else kw.get("stride", 1)
    pad = rest[2] if len(rest) > 2 else kw.get("padding", 0)
    dil = rest[3] if len(rest) > 3 else kw.get("dilation", 1)
    groups = rest[4] if len(rest) > 4 else kw.get("groups", 1)
    if groups != 1 or dil not in (1, (1, 1), [1, 1]) or isinstance(pad, str):
        m.fail("a convolution with groups, dilation or string padding")
    return m.op("conv2d", [x, w] + ([b] if b is not None else []), shape, {"stride": pair(stride), "padding": pair(pad)})


def h_pool(kind):
    def h(m, n, shape):
        (x, k, *rest), kw = _args(m, n)
        stride = rest[0] if rest else kw.get("stride")
        pad = rest[1] if len(rest) > 1 else kw.get("padding", 0)
        attrs = {"kernel": pair(k), "padding": pair(pad)}
        if stride:
            attrs["stride"] = pair(stride)
        if kind == "avgpool" and pair(pad) != [0, 0]:
            m.fail("an average pool with padding")
        return m.op(kind, [x], shape, attrs)
    return h


def pair(v):
    return list(v) if isinstance(v, (list, tuple)) else [int(v), int(v)]


def h_dropout(m, n, shape):
    (x, *rest), kw = _args(m, n)
    p = rest[0] if rest else kw.get("p", 0.5)
    training = rest[1] if len(rest) > 1 else kw.get("training", True)
    if p == 0 or not training:
        return x
    return m.op("dropout", [x], shape, {"p": float(p)})


def h_cross_entropy(m, n, shape):
    if n.kwargs.get("weight") is not None or n.kwargs.get("label_smoothing", 0) or (len(n.args) > 2 and n.args[2] is not None):
        m.fail("a cross-entropy with class weights or label smoothing")
    (x, t, *rest), kw = _args(m, n)
    ignore = kw.get("ignore_index", -100)
    red = kw.get("reduction", "mean")
    if len(x.shape) != len(t.shape) + 1:
        m.fail(f"a cross-entropy of logits {x.shape} and targets {t.shape} (want [*b, classes] and [*b])")
    # logits.view(-1, V) and targets.view(-1): the loss takes [*b, V] and [*b] as they were, so the
    # batch keeps its own dimension (--global-batch resizes it)
    xs, ts = unflattened(x), unflattened(t)
    if xs is not None and ts is not None and xs.shape[:-1] == ts.shape and xs.shape[-1] == x.shape[-1]:
        x, t = xs, ts
    if red == "mean" and t.kind == "input" and "ignore_index" not in n.kwargs:
        return m.op("cross_entropy", [x, t], [])  # labels straight from the data: no row is ignored
    if red not in ("mean", "sum"):
        m.fail(f"a cross-entropy with reduction {red}")
    total = m.op("cross_entropy", [x, t], [], {"ignore_index": int(ignore), "reduction": "sum"})
    if red == "sum":
        return total
    kept = m.op("ne", [t], t.shape, {"value": int(ignore)})
    count = m.op("sum", [kept], [], {"axes": list(range(len(t.shape)))})
    return m.op("div", [total, count], [])


def unflattened(v):
    """The input of the reshape that made v by merging leading axes (the last one kept), or None."""
    o = v.producer
    if o is None or o.type != "reshape":
        return None
    src = o.ins[0]
    if len(v.shape) >= 1 and len(src.shape) >= 1 and src.shape[-1] == v.shape[-1] and len(src.shape) > len(v.shape):
        return src
    if len(v.shape) == 1 and len(src.shape) > 1:
        return src
    return None


def h_mse(m, n, shape):
    (a, b, *rest), kw = _args(m, n)
    if kw.get("reduction", "mean") != "mean" or a.shape != b.shape:
        m.fail("an mse_loss that is not the mean over equal shapes")
    return m.op("mse_loss", [a, b], [])


def h_masked_fill(m, n, shape):
    (x, mask, value), _ = _args(m, n)
    if not isinstance(mask, Value_):
        m.fail("a masked_fill whose mask is not a tensor")
    if not isinstance(value, (int, float)):
        m.fail("a masked_fill with a tensor value")
    v = max(min(float(value), 1e30), -1e30)
    ms, axes = m.squeezed(mask, shape)
    attrs = {"value": v}
    if axes != list(range(len(shape) - len(ms.shape), len(shape))):
        attrs["axes"] = axes
    return m.op("masked_fill", [x, ms], shape, attrs)


def h_where(m, n, shape):
    """torch.where(cond, x, y) with x a number (ONNX's Where of a masked_fill): masked_fill(y,
    cond, x), y a tensor of the output's shape or a number (then a constant of it)."""
    if len(n.args) != 3 or n.kwargs:
        m.fail("a where without its three operands (the one-operand form is nonzero's)")
    cond, x, y = (m.arg(a) for a in n.args)

    def number(v):  # a number, or a constant tensor of one element: its value
        if isinstance(v, Value_) and v.kind == "const" and getattr(v, "tensor", None) is not None and v.tensor.numel() == 1:
            return float(v.tensor)
        return v

    x, y = number(x), number(y)
    if not isinstance(cond, Value_) or not isinstance(x, (int, float)):
        m.fail("a where whose condition is not a tensor or whose value where it holds is not a number")
    if isinstance(y, (int, float)):
        y = m.const(torch.full(shape, float(y)), n.name + "_else")
    elif list(y.shape) != list(shape):
        m.fail(f"a where whose other operand {list(y.shape)} is not of the output's shape {list(shape)}")
    ms, axes = m.squeezed(cond, shape)
    attrs = {"value": max(min(float(x), 1e30), -1e30)}
    if axes != list(range(len(shape) - len(ms.shape), len(shape))):
        attrs["axes"] = axes
    return m.op("masked_fill", [y, ms], shape, attrs)


def h_one_hot(m, n, shape):
    (x, *rest), kw = _args(m, n)
    return m.op("one_hot", [x], shape)


def h_topk(m, n, shape):
    (x, k, *rest), kw = _args(m, n)
    dim = rest[0] if rest else kw.get("dim", -1)
    largest = rest[1] if len(rest) > 1 else kw.get("largest", True)
    if dim % len(x.shape) != len(x.shape) - 1 or not largest or kw.get("sorted", True) is False:
        m.fail("a topk that is not of the largest, sorted, over the last dimension")
    sh = list(x.shape[:-1]) + [int(k)]
    vals, idx = m.op("topk", [x], [sh, sh], nout=2)
    idx.dtype = "i32"
    return (vals, idx)


def h_gather(m, n, shape):
    (x, dim, idx, *rest), kw = _args(m, n)
    if kw.get("sparse_grad"):
        m.fail("a gather with sparse_grad")
    return m.op("gather", [x, idx], shape, {"axis": dim % len(x.shape)})


def h_index_select(m, n, shape):
    (x, dim, idx), _ = _args(m, n)
    if len(idx.shape) != 1:
        m.fail("an index_select with rows that are not a list")
    return m.op("index_select", [x, idx], shape, {"axis": dim % len(x.shape)})


def h_python(m, n, shape):
    (x, *rest), _ = _args(m, n)
    m.fail(f"{target_name(n.target)} of a value that depends on the inputs (a dynamic shape)")


HANDLERS = {
    "linear": h_linear, "matmul": h_matmul, "bmm": h_matmul, "embedding": h_embedding, "layer_norm": h_layer_norm,
    "softmax": h_softmax, "gelu": h_unary("gelu"), "silu": h_unary("silu"), "relu": h_unary("relu"),
    "sigmoid": h_unary("sigmoid"), "tanh": h_unary("tanh"), "exp": h_unary("exp"), "log": h_unary("log"),
    "sqrt": h_unary("sqrt"), "rsqrt": h_unary("rsqrt"), "sin": h_unary("sin"), "cos": h_unary("cos"), "erf": h_unary("erf"),
    "pow": h_pow, "neg": h_neg, "add": h_arith("add"), "sub": h_arith("sub"), "mul": h_arith("mul"),
    "div": h_arith("div"), "iadd": h_arith("add"), "mean": h_reduce("mean"), "sum": h_reduce("sum"),
    "amax": h_reduce("amax"), "max": h_reduce("max"), "view": h_reshape, "reshape": h_reshape,
    "flatten": h_reshape, "unsqueeze": h_reshape, "squeeze": h_reshape, "contiguous": h_identity,
    "float": h_identity, "to": h_identity, "type_as": h_identity, "clone": h_identity, "long": h_identity,
    "transpose": h_transpose, "permute": h_transpose, "t": h_transpose, "expand": h_expand, "cat": h_cat,
    "chunk": h_split, "split": h_split, "getitem": h_getitem, "conv2d": h_conv2d, "max_pool2d": h_pool("maxpool"),
    "avg_pool2d": h_pool("avgpool"), "dropout": h_dropout, "cross_entropy": h_cross_entropy, "mse_loss": h_mse,
    "masked_fill": h_masked_fill, "where": h_where, "one_hot": h_one_hot, "topk": h_topk, "gather": h_gather, "index_select": h_index_select, "size": h_python, "getattr": h_python, "dim": h_python,
}


def import_module(model, inputs, name):
    """The importer's graph of model(*inputs) (the scalar loss)."""
    global Value_
    import graph as _g
    Value_ = _g.Value
    m = Mapper(model, inputs, name)
    m.params, m.scalars = {}, {}
    return m.run()
