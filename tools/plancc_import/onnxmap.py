"""onnxmap.py: an ONNX graph (as torch.onnx.export writes one: the forward pass and the loss) as a
PyTorch module, which fxmap.py then imports like any other.

OnnxModule holds the graph's initializers as parameters (trained, under their ONNX names; an
initializer of integers is a constant) and runs the nodes with PyTorch's functions. Shapes are
static: at construction the graph runs once on zero inputs of the declared shapes, and every node
whose inputs are all known then (Constant, Shape and the shape arithmetic torch.onnx.export
writes: ConstantOfShape, Equal, Where, Gather of a shape, Concat, Unsqueeze, Cast, ...) is kept
as a value, so in forward only the computation on inputs and parameters remains, with Reshape's
and Expand's shapes as plain integers. torch.fx traces forward; fxmap.py folds what is left of
the constants and maps the rest. The module is also --verify's PyTorch reference: it computes
what the ONNX graph computes.

Mapped: MatMul, Gemm, Add, Sub, Mul, Div, Pow, Sqrt, Neg, Exp, Log, Erf, Sigmoid, Tanh, Relu,
Softmax, ReduceMean, ReduceSum, Reshape, Transpose, Unsqueeze, Squeeze, Flatten, Concat, Slice,
Split, Expand, Gather (a lookup in a parameter: an embedding), Conv, MaxPool, AveragePool,
Identity, Dropout (training: plancc's dropout, its mask output unused), Cast (of a float), Trilu, SoftmaxCrossEntropyLoss
(mean or sum, ignore_index), and any node whose inputs are all constants. Anything else is an error
naming the node, its type and its index in the graph (plancc-import exits 2).
"""
import warnings

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

from graph import ImportError_

DT = {1: torch.float32, 6: torch.int32, 7: torch.int64, 9: torch.bool, 10: torch.float16, 11: torch.float64}


def attrs_of(node):
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


class OnnxModule(nn.Module):
    def __init__(self, model):
        super().__init__()
        g = model.graph
        self.nodes = list(g.node)
        self.inputs = [i.name for i in g.input if i.name not in {t.name for t in g.initializer}]
        if len(g.output) != 1:
            raise ImportError_(f"the graph has {len(g.output)} outputs; it must have one, the scalar loss")
        self.output = g.output[0].name
        self.names = {}  # ONNX name -> attribute name of a parameter
        self.static = {}
        for t in g.initializer:
            a = torch.from_numpy(numpy_helper.to_array(t).copy())
            if a.is_floating_point():
                attr = "p%d" % len(self.names)
                self.register_parameter(attr, nn.Parameter(finite(a.float())))
                self.names[t.name] = attr
            else:
                self.static[t.name] = a
        self.plancc_names = {attr: name for name, attr in self.names.items()}  # fxmap.py names the parameters so
        self.example = tuple(self._zeros(i) for i in g.input if i.name in self.inputs)
        self._fold()

    @staticmethod
    def _zeros(vi):
        """An example of input vi: normal floats (the data planrun draws for them), zero ids."""
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if any(s <= 0 for s in shape):
            raise ImportError_(f"input {vi.name} has a dynamic shape {shape}; export with fixed sizes")
        dt = DT.get(t.elem_type, torch.float32)
        return torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dt) if dt.is_floating_point else torch.zeros(shape, dtype=dt)

    def _fold(self):
        """Runs the graph once on zeros: every value that depends on no input and no parameter is
        kept (static); the shapes of the others are recorded for Shape nodes."""
        env = {n: self.example[k] for k, n in enumerate(self.inputs)}
        env.update({n: getattr(self, a).detach() for n, a in self.names.items()})
        env.update(self.static)
        dynamic = set(self.inputs) | set(self.names)
        self.shapes = {n: list(v.shape) for n, v in env.items() if isinstance(v, torch.Tensor)}
        for k, node in enumerate(self.nodes):
            ins = [env.get(x) if x else None for x in node.input]
            outs = node_run(node, ins, k, self.shapes)
            dyn = any(x in dynamic for x in node.input if x) and node.op_type != "Shape"
            for name, v in zip(node.output, outs):
                env[name] = v
                if isinstance(v, torch.Tensor):
                    self.shapes[name] = list(v.shape)
                if dyn:
                    dynamic.add(name)
                else:
                    self.static[name] = finite(v)
        self.dynamic = dynamic

    def run(self, inputs):
        env = dict(zip(self.inputs, inputs))
        for n, a in self.names.items():
            env[n] = getattr(self, a)
        for k, node in enumerate(self.nodes):
            if not any(o in self.dynamic for o in node.output):
                continue
            ins = [(self.static[x] if x in self.static else env.get(x)) if x else None for x in node.input]
            for name, v in zip(node.output, node_run(node, ins, k, self.shapes)):
                env[name] = v
        return env[self.output]


def finite(v):
    """A constant with -inf (an additive mask: generate_square_subsequent_mask, masked_fill) holding
    the dtype's lowest finite value instead: a softmax gives the same 0 after it, and the sum of
    the scores and the mask, an activation in plancc where the attention is not fused, stays
    finite (planrun refuses a non-finite activation as divergence). The module, --verify's
    reference, computes with the same value."""
    if isinstance(v, torch.Tensor) and v.is_floating_point() and bool(torch.isneginf(v).any()):
        return v.masked_fill(torch.isneginf(v), torch.finfo(v.dtype).min)
    return v


def shape_in(shapes, name, x):
    """The static shape of value `name` (recorded by the folding run), else x's."""
    return shapes[name] if name in shapes else list(x.shape)


def ints(t):
    return [int(x) for x in (t.tolist() if isinstance(t, torch.Tensor) else t)]


def node_run(node, ins, k, shapes):
    """run_node, with any failure of PyTorch's on the node's values (a shape that does not fit, an
    index out of range) reported as bad input naming the node."""
    try:
        return run_node(node, ins, k, shapes)
    except ImportError_:
        raise
    except Exception as e:  # noqa: BLE001 - the graph's values do not fit its node
        first = (str(e).splitlines() or [""])[0]
        raise ImportError_(f"node {k} \"{node.name}\" ({node.op_type}): {type(e).__name__}: {first}") from e


def run_node(node, ins, k, shapes):
    """The outputs of one ONNX node on torch values (traced proxies or tensors)."""
    op, a = node.op_type, attrs_of(node)
    x = ins[0] if ins else None
    simple = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div, "MatMul": torch.matmul, "Equal": torch.eq}
    unary = {"Sqrt": torch.sqrt, "Neg": torch.neg, "Exp": torch.exp, "Log": torch.log, "Erf": torch.erf, "Sigmoid": torch.sigmoid,
             "Tanh": torch.tanh, "Relu": F.relu, "Identity": lambda v: v}
    if op == "Div" and all(isinstance(v, torch.Tensor) and not v.is_floating_point() for v in ins[:2]):
        return [torch.div(ins[0], ins[1], rounding_mode="trunc")]  # ONNX divides integers as C does
    if op in simple:
        return [simple[op](ins[0], ins[1])]
    if op in unary:
        return [unary[op](x)]
    if op == "Constant":
        return [torch.from_numpy(numpy_helper.to_array(a["value"]).copy())]
    if op == "Pow":
        e = ins[1]
        return [x ** (float(e) if isinstance(e, torch.Tensor) and e.numel() == 1 else e)]
    if op == "Shape":
        return [torch.tensor(shapes[node.input[0]] if node.input[0] in shapes else list(x.shape), dtype=torch.int64)]
    if op == "ConstantOfShape":
        v = numpy_helper.to_array(a["value"]).item() if "value" in a else 0.0
        return [torch.full(ints(x), v)]
    if op == "Where":
        return [torch.where(ins[0], ins[1], ins[2])]
    if op == "Cast":
        dt = DT.get(a["to"], torch.float32)
        return [x.to(dt) if not (isinstance(x, torch.Tensor) and x.is_floating_point() and dt.is_floating_point) or not dt.is_floating_point else x]
    if op == "Reshape":
        shape = ints(ins[1])
        src = shape_in(shapes, node.input[0], x)
        shape = [src[i] if s == 0 else s for i, s in enumerate(shape)]
        return [torch.reshape(x, shape)]
    if op == "Transpose":
        return [x.permute(*a["perm"]) if "perm" in a else x.t()]
    if op in ("Unsqueeze", "Squeeze", "Flatten"):
        out = shapes.get(node.output[0])
        if out is None:  # the folding run: compute the shape
            if op == "Unsqueeze":
                axes = ints(ins[1]) if len(ins) > 1 and ins[1] is not None else a["axes"]
                y = x
                for ax in sorted(ax % (y.dim() + len(axes)) for ax in axes):
                    y = y.unsqueeze(ax)
                return [y]
            if op == "Squeeze":
                axes = ints(ins[1]) if len(ins) > 1 and ins[1] is not None else a.get("axes")
                return [x.squeeze() if axes is None else x.reshape([s for i, s in enumerate(x.shape) if i not in [q % x.dim() for q in axes]])]
            return [torch.flatten(x, a.get("axis", 1))] if a.get("axis", 1) == 0 else [x.reshape(x.shape[0] if a.get("axis", 1) == 1 else -1, -1)]
        return [torch.reshape(x, out)]
    if op == "Concat":
        return [torch.cat([v for v in ins], dim=a["axis"])]
    if op == "Slice":
        starts, ends = ints(ins[1]), ints(ins[2])
        axes = ints(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = ints(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
        src = shape_in(shapes, node.input[0], x)
        idx = [slice(None)] * len(src)
        for s, e, ax, st in zip(starts, ends, axes, steps):
            n = src[ax]
            s, e = max(min(s if s >= 0 else s + n, n), 0), max(min(e if e >= 0 else e + n, n), 0)
            idx[ax] = slice(s, e, st)
        return [x[tuple(idx)]]
    if op == "Expand":
        out = shapes[node.output[0]] if node.output[0] in shapes else list(torch.broadcast_shapes(tuple(x.shape), tuple(ints(ins[1]))))
        return [x.expand(*out)]
    if op == "Gather":
        axis = a.get("axis", 0)
        idx = ins[1]
        if isinstance(x, nn.Parameter) or (isinstance(x, torch.fx.Proxy) and axis == 0 and isinstance(idx, torch.fx.Proxy)):
            return [F.embedding(idx, x)]
        if isinstance(idx, torch.Tensor) and idx.dim() == 0:
            sel = [slice(None)] * axis + [int(idx)]
            return [x[tuple(sel)]]
        idx = torch.where(idx < 0, idx + x.shape[axis], idx)  # ONNX counts negative indices from the end
        return [torch.index_select(x, axis, idx.flatten()).reshape(list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1:]))]
    if op == "Gemm":
        A, B = ins[0], ins[1]
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
            raise ImportError_(f"node {k} \"{node.name}\" (Gemm) with transA, alpha or beta")
        if a.get("transB", 0):
            return [F.linear(A, B, ins[2] if len(ins) > 2 else None)]
        y = torch.matmul(A, B)
        return [y + ins[2] if len(ins) > 2 and ins[2] is not None else y]
    if op == "Trilu":  # a causal mask's upper triangle (which fuse.py makes attention's causal attribute)
        diag = int(ins[1]) if len(ins) > 1 and ins[1] is not None else 0
        return [torch.triu(x, diag) if a.get("upper", 1) else torch.tril(x, diag)]
    if op == "Softmax":
        return [F.softmax(x, dim=a.get("axis", -1))]
    if op in ("ReduceMean", "ReduceSum"):
        axes = a.get("axes") if "axes" in a else (ints(ins[1]) if len(ins) > 1 and ins[1] is not None else None)
        keep = bool(a.get("keepdims", 1))
        dims = list(range(len(shape_in(shapes, node.input[0], x)))) if axes is None else axes
        fn = torch.mean if op == "ReduceMean" else torch.sum
        return [fn(x, dim=dims, keepdim=keep)]
    if op == "Split":
        sizes = ints(ins[1]) if len(ins) > 1 and ins[1] is not None else a.get("split")
        axis, parts = a.get("axis", 0), len(node.output)
        if sizes is None:  # equal parts, one per output
            sizes = shape_in(shapes, node.input[0], x)[axis] // parts
        y = torch.split(x, sizes, dim=axis)
        return [y[i] for i in range(parts)]  # indexed: a traced tuple cannot be iterated
    if op == "Dropout":
        ratio = float(ins[1]) if len(ins) > 1 and ins[1] is not None else a.get("ratio", 0.5)
        training = len(ins) > 2 and ins[2] is not None and bool(ins[2])
        if ratio == 0 or not training:
            return [x, None]
        if not 0 < ratio < 1:
            raise ImportError_(f"node {k} \"{node.name}\" (Dropout) with ratio {ratio}: a drop probability is in [0, 1)")
        return [F.dropout(x, ratio, True), None]  # the mask output: planrun draws its own
    if op == "Conv":
        if a.get("group", 1) != 1 or any(d != 1 for d in a.get("dilations", [1, 1])):
            raise ImportError_(f"node {k} \"{node.name}\" (Conv) with groups or dilation")
        pads = a.get("pads", [0, 0, 0, 0])
        if pads[:2] != pads[2:]:
            raise ImportError_(f"node {k} \"{node.name}\" (Conv) with uneven padding {pads}")
        return [F.conv2d(x, ins[1], ins[2] if len(ins) > 2 else None, stride=a.get("strides", [1, 1]), padding=pads[:2])]
    if op in ("MaxPool", "AveragePool"):
        pads = a.get("pads", [0, 0, 0, 0])
        fn = F.max_pool2d if op == "MaxPool" else F.avg_pool2d
        return [fn(x, a["kernel_shape"], stride=a.get("strides", a["kernel_shape"]), padding=pads[:2])]
    if op == "SoftmaxCrossEntropyLoss":
        red = a.get("reduction", "mean")
        kw = {"reduction": red}
        if "ignore_index" in a:
            kw["ignore_index"] = a["ignore_index"]
        if len(ins) > 2 and ins[2] is not None:
            raise ImportError_(f"node {k} \"{node.name}\" (SoftmaxCrossEntropyLoss) with class weights")
        scores = x
        if len(shape_in(shapes, node.input[0], x)) > 2:  # [N, C, d...] -> [N, d..., C]
            r = len(shape_in(shapes, node.input[0], x))
            scores = x.permute(0, *range(2, r), 1)
        return [F.cross_entropy(scores, ins[1], **kw), None]
    raise ImportError_(f"node {k} \"{node.name}\" of type {op} (no mapping to plancc's operators)")


def load(path):
    try:
        with warnings.catch_warnings():  # protobuf's own warning on a broken file: the message below says it
            warnings.simplefilter("ignore")
            model = onnx.load(path)
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - an unreadable or invalid file is bad input
        raise ImportError_(f"not a valid ONNX model: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    return model


def module_of(path):
    """(module, example inputs): the ONNX graph as a PyTorch module, and examples of its inputs.
    forward takes one named argument per graph input (torch.fx cannot trace *args here)."""
    m = OnnxModule(load(path))
    names = ", ".join(f"x{i}" for i in range(len(m.inputs)))
    ns = {}
    exec(f"def forward(self, {names}):\n    return self.run(({names},))\n", ns)  # noqa: S102 - names are ours
    m.__class__ = type("OnnxGraph", (OnnxModule,), {"forward": ns["forward"]})
    return m, m.example
