#!/bin/bash
# gpu_suite.sh BUNDLE [LOGS]: the gpu test suite and the GPU benchmarks from a bundle made by
# tools/bundle.sh (a GPU machine without the build's packages, or without meson), run from a
# checkout of this repository (the tests and tools it names, and models/):
#
#   tests/gpu_kernels      every operator's CUDA kernel against the CPU's
#   tests/gpu_equiv.py     training on the GPU against the CPU backend
#   tools/gpu_bench.py     gpt2-small step time against PyTorch eager (f32, --tf32, bf16)
#   tools/gpu_bench_sync.py  dlrm, synchronous against background rounds, on one GPU
#
# Each one's output goes to LOGS/NAME.log (default: gpu-suite-logs); the end is a table of each
# one's exit status. A test that finds no GPU exits 77 and is counted as skipped; the benchmarks
# run only when both tests passed. Exit 0 when no test failed, 1 otherwise, 2 on bad arguments.
set -u
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
bundle=$(cd "$1" 2>/dev/null && pwd) || { echo "gpu_suite.sh: $1: no such folder" >&2; exit 2; }
[ -f "$bundle/env.sh" ] && [ -x "$bundle/bin/planrun" ] || { echo "gpu_suite.sh: $1: not a bundle (tools/bundle.sh makes one)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
logs=${2:-gpu-suite-logs}
mkdir -p "$logs" || exit 2
logs=$(cd "$logs" && pwd)
. "$bundle/env.sh"
B=$bundle/bin
export PYTHONUNBUFFERED=1
declare -a names codes
run() { # NAME COMMAND...: runs it, its output to the log and to the terminal
  local name=$1; shift
  echo "== $name"
  "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  names+=("$name"); codes+=("$rc")
  return "$rc"
}
cd "$root" || exit 2
if [ -x "$B/gpu_kernels" ]; then run kernels "$B/gpu_kernels"; k=$?; else echo "gpu_suite.sh: the bundle has no gpu_kernels (build tests first)"; k=77; fi
run equiv python3 tests/gpu_equiv.py "$B/plancc" "$B/planrun" "$root"; e=$?
if [ $k = 0 ] && [ $e = 0 ]; then
  torch=$(python3 -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
  skip=(); [ "$torch" = 1 ] || skip=(--skip-torch)
  run bench-f32 python3 tools/gpu_bench.py --plancc "$B/plancc" --planrun "$B/planrun" "${skip[@]}"
  run bench-tf32 python3 tools/gpu_bench.py --plancc "$B/plancc" --planrun "$B/planrun" --tf32 "${skip[@]}"
  run bench-bf16 python3 tools/gpu_bench.py --plancc "$B/plancc" --planrun "$B/planrun" --dtype bf16 "${skip[@]}"
  run bench-sync python3 tools/gpu_bench_sync.py --plancc "$B/plancc" --planrun "$B/planrun" --plandump "$B/plandump"
fi
failed=0 skipped=0
echo
echo "suite        exit"
for i in "${!names[@]}"; do
  printf '%-12s %s\n' "${names[$i]}" "${codes[$i]}"
  case ${codes[$i]} in 0) ;; 77) skipped=$((skipped + 1)) ;; *) failed=$((failed + 1)) ;; esac
done
echo "$(( ${#names[@]} - failed - skipped )) passed, $failed failed, $skipped skipped (logs in $logs)"
[ $failed = 0 ]
