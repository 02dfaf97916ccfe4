#!/usr/bin/python3
"""tools/plancc-import onnx on graphs that torch.onnx.export writes (training mode, opset 14) of
the tiny models of models/torch/ (llama: rotary embeddings, GQA, RMSNorm; vit: conv, erf GELU,
a Gemm head): the ONNX graph, run as a PyTorch module (tools/plancc_import/onnxmap.py), computes
the PyTorch model's loss on the model's own example inputs (1e-6 relative: the export is
faithful), and plancc-import onnx --verify 3 then trains it in planrun on 1 and 4 devices as
PyTorch trains that module; likewise the exports of torch.nn's TransformerEncoder and Transformer
with causal masks and of MultiheadAttention with a key padding mask (tests/import_ok/stdlayers.py). Exit 77 (skip) without python3-torch or
python3-onnx.

usage: onnx_import.py PLANCC PLANRUN SOURCE_ROOT
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, onnx_export, plancc_import, summary  # noqa: E402


def main():
    plancc, planrun, root = sys.argv[1:4]
    try:
        import onnx  # noqa: F401
        import torch
    except ImportError as e:
        print(f"SKIP: {e}")
        return 77
    for d in (("models", "torch"), ("tools", "plancc_import"), ("tests", "import_ok")):
        sys.path.insert(0, os.path.join(root, *d))
    import onnxmap
    import stdlayers
    # The tiny llama and vit; then torch.nn's transformer layers as torch.onnx.export writes them
    # (tests/import_ok/stdlayers.py): heads reshaped [L, N, E] -> [L, N H, D], causal masks of -inf
    # (a bool buffer turned into a float one; generate_square_subsequent_mask's) held at the lowest
    # finite float, a key padding mask given as an input (a Where: masked_fill).
    cases = [(arch, __import__(arch).make) for arch in ("llama", "vit")]
    cases += [("nn." + f, getattr(stdlayers, f)) for f in ("encoder", "attention", "transformer")]
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in cases:
            model, inputs = make()
            path = os.path.join(tmp, name + ".onnx")
            onnx_export(model, inputs, path)
            if not name.startswith("nn."):
                om, _ = onnxmap.module_of(path)
                with torch.no_grad():
                    want, got = float(model(*inputs)), float(om(*inputs))
                check(f"{name}: the exported graph's loss {got:.9f}, PyTorch's {want:.9f}", abs(got - want) <= 1e-6 * abs(want))
            p = plancc_import(root, ["onnx", path], os.path.join(tmp, name + ".json"), plancc, planrun)
            print(p.stdout.strip())
            check(f"{name}: plancc-import onnx --verify 3 exits 0", p.returncode == 0, p.stderr[-2000:])
    return summary()


if __name__ == "__main__":
    sys.exit(main())
