#!/bin/bash
# bundle.sh BUILD OUT: plancc, planrun and plandump from meson build directory BUILD, with the
# shared libraries they take from this machine's packages (cJSON, GLPK and its SuiteSparse,
# OpenBLAS and gfortran), into OUT, for a machine that has a GPU driver and the CUDA libraries
# but not these packages (a cluster node, a container with PyTorch). OUT/env.sh sets
# LD_LIBRARY_PATH to OUT/lib, then the CUDA toolkit's lib64, then the lib folders of Python's
# nvidia-* wheels (cuDNN, NCCL), wherever they are on the machine that sources it:
#
#   tools/bundle.sh build /tmp/plancc-bundle && tar -C /tmp -czf plancc.tgz plancc-bundle
#   # on the GPU machine:
#   tar -xzf plancc.tgz && . plancc-bundle/env.sh && plancc-bundle/bin/planrun --version
#
# The C library, libstdc++ and the CUDA libraries are not copied: the target needs a glibc at
# least as new as this machine's, and CUDA libraries of the major versions planrun links.
# tests/gpu_kernels comes along when BUILD has it, and planrun's cuda module (planrun-cuda.so,
# beside planrun in bin/, where planrun looks first).
set -euo pipefail
if [ $# -ne 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
build=$1 out=$2
for b in plancc planrun plandump; do
  [ -x "$build/$b" ] || { echo "bundle.sh: $build/$b: not built (meson compile -C $build)" >&2; exit 1; }
done
mkdir -p "$out/bin" "$out/lib"
bins=("$build/plancc" "$build/planrun" "$build/plandump")
[ -x "$build/tests/gpu_kernels" ] && bins+=("$build/tests/gpu_kernels")
[ -f "$build/planrun-cuda.so" ] && bins+=("$build/planrun-cuda.so")
cp "${bins[@]}" "$out/bin/"
# Every library a binary resolves here, less the C runtime and CUDA's (the target has its own).
skip='/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/libcu|/libnccl|/libcudnn|/libnv'
n=0
while read -r lib; do
  cp -L "$lib" "$out/lib/" && n=$((n + 1))
done < <(for b in "${bins[@]}"; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | grep -Ev "$skip" || true)
missing=$(for b in "${bins[@]}"; do ldd "$b"; done | grep 'not found' | sort -u || true)
[ -z "$missing" ] || { echo "bundle.sh: unresolved here, so not bundled:" >&2; echo "$missing" >&2; }
cat > "$out/env.sh" <<'EOF'
# Source this: LD_LIBRARY_PATH for the bundle's binaries (tools/bundle.sh).
_b=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_p=$_b/lib
for _d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$_d" ] && _p=$_p:$_d; done
for _d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, q, "lib") for p in nvidia.__path__ for q in os.listdir(p)))' 2>/dev/null); do
  [ -d "$_d" ] && _p=$_p:$_d
done
export LD_LIBRARY_PATH=$_p${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset _b _p _d
EOF
echo "bundle.sh: ${#bins[@]} programs and $n libraries in $out ($(du -sh "$out" | cut -f1)); source $out/env.sh before running them"
