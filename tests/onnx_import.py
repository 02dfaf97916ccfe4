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
import subprocess
import sys
import tempfile
import warnings


def main():
    plancc, planrun, root = sys.argv[1:4]
    try:
        import onnx  # noqa: F401
        import torch
    except ImportError as e:
        print(f"SKIP: {e}")
        return 77
    sys.path.insert(0, os.path.join(root, "models", "torch"))
    sys.path.insert(0, os.path.join(root, "tools", "plancc_import"))
    import onnxmap
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("llama", "vit"):
            mod = __import__(arch)
            model, inputs = mod.make()
            path = os.path.join(tmp, arch + ".onnx")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, inputs, path, opset_version=14, training=torch.onnx.TrainingMode.TRAINING,
                                  do_constant_folding=False)
            om, _ = onnxmap.module_of(path)
            with torch.no_grad():
                want, got = float(model(*inputs)), float(om(*inputs))
            ok = abs(got - want) <= 1e-6 * abs(want)
            print(f"{'ok  ' if ok else 'FAIL'} {arch}: the exported graph's loss {got:.9f}, PyTorch's {want:.9f}")
            failed += not ok
            p = subprocess.run(["/usr/bin/python3", os.path.join(root, "tools", "plancc-import"), "onnx", path, "-o",
                                os.path.join(tmp, arch + ".json"), "--verify", "3", "--plancc", plancc, "--planrun", planrun],
                               capture_output=True, text=True)
            print(p.stdout.strip())
            if p.returncode:
                failed += 1
                print(f"FAIL {arch}: plancc-import onnx --verify exits {p.returncode}\n{p.stderr[-2000:]}")
    # torch.nn's transformer layers as torch.onnx.export writes them (tests/import_ok/stdlayers.py):
    # heads reshaped [L, N, E] -> [L, N H, D], causal masks of -inf (a bool buffer turned into a
    # float one; generate_square_subsequent_mask's) held at the lowest finite float, a key padding
    # mask given as an input (a Where: masked_fill).
    sys.path.insert(0, os.path.join(root, "tests", "import_ok"))
    import stdlayers
    with tempfile.TemporaryDirectory() as tmp:
        for factory in ("encoder", "attention", "transformer"):
            model, inputs = getattr(stdlayers, factory)()
            path = os.path.join(tmp, factory + ".onnx")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, inputs, path, opset_version=14, training=torch.onnx.TrainingMode.TRAINING,
                                  do_constant_folding=False)
            p = subprocess.run(["/usr/bin/python3", os.path.join(root, "tools", "plancc-import"), "onnx", path, "-o",
                                os.path.join(tmp, factory + ".json"), "--verify", "3", "--plancc", plancc, "--planrun", planrun],
                               capture_output=True, text=True)
            print(p.stdout.strip())
            if p.returncode:
                failed += 1
                print(f"FAIL nn.{factory}: plancc-import onnx --verify exits {p.returncode}\n{p.stderr[-2000:]}")
    print("all passed" if not failed else f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
