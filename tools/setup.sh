#!/usr/bin/env bash
# tools/setup.sh: install what plancc needs from Debian's packages, and nothing that is already there.
#
# Idempotent: it asks dpkg which packages are missing and runs apt-get only for those, so a second
# run on a ready machine installs nothing and needs no network. Runs as root (CI and the development
# machines are root) or through sudo where that exists.
set -euo pipefail

need=(
  meson ninja-build pkg-config gcc     # build
  libcjson-dev                         # model/cluster JSON front end
  libglpk-dev                          # the scheduler's ILP solver
  libopenblas-dev                      # GEMM for the CPU backend of planrun
  libopenmpi-dev openmpi-bin           # planrun's cpu backend one rank per process under mpirun
  python3 python3-jsonschema           # schema validation of models/ in the test suite
  valgrind                             # the bad-input corpus also runs under memcheck
  clang-14 libclang-rt-14-dev          # tests/fuzz: libFuzzer harnesses (without them the fuzz suite is not built)
  python3-torch                        # tools/torch_ref.py: the PyTorch reference of gpt-tiny (Debian's 1.13;
                                       # without it the script exits 77, meson's skip); tools/plancc-import torch
  python3-onnx                         # tools/plancc-import onnx: graphs exported by torch.onnx.export
  python3-numpy                        # tools/torch_ref.py: planrun's attention dropout mask (python3-torch pulls it in too)
)

missing=()
for p in "${need[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#need[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
