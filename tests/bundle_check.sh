#!/bin/bash
# tools/bundle.sh: a bundle of the build's programs runs from its own folder with only env.sh's
# LD_LIBRARY_PATH, holds the packages' libraries (cJSON at least), and bad arguments fail.
# tools/gpu_suite.sh: refuses what is not a bundle; without a GPU its two tests skip (exit 77)
# and it exits 0 (with a GPU that path is the gpu suite itself, not run here).
# usage: bundle_check.sh SOURCE_ROOT BUILD
root=$1 build=$2 pass=0 fail=0
t=$(mktemp -d) && trap 'rm -rf "$t"' EXIT
check() { if eval "$2"; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
check "bundle.sh with no arguments exits 2 with its usage" 'bash "$root/tools/bundle.sh" > "$t/usage" 2>&1; [ $? = 2 ] && grep -q "^bundle.sh BUILD OUT" "$t/usage"'
check "a build without the programs exits 1 naming it" 'bash "$root/tools/bundle.sh" "$t/none" "$t/b0" 2>&1 | grep -q "none/plancc: not built"'
check "bundles the build" 'bash "$root/tools/bundle.sh" "$build" "$t/b" >/dev/null'
check "cJSON comes along" '[ -e "$t/b/lib/libcjson.so.1" ]'
check "planrun runs from the bundle" '(. "$t/b/env.sh" && "$t/b/bin/planrun" --version | grep -q "^planrun ")'
check "plancc compiles from the bundle" '(. "$t/b/env.sh" && "$t/b/bin/plancc" -q "$root/models/mlp.json" --cluster "$root/models/clusters/cpu.json" --devices 2 -o "$t/m.plan" && [ -s "$t/m.plan" ])'
if [ -f "$build/planrun-cuda.so" ]; then
  check "planrun's cuda module comes along, and planrun loads it from the bundle (a GPU or its absence is what stops it)" \
    '[ -f "$t/b/bin/planrun-cuda.so" ] && (. "$t/b/env.sh" && "$t/b/bin/plancc" -q "$root/models/mlp.json" --cluster "$root/models/clusters/cpu.json" --devices 1 -o "$t/m1.plan" && { "$t/b/bin/planrun" "$t/m1.plan" --backend cuda --steps 1 > "$t/cu" 2>&1; true; }) && ! grep -q "module" "$t/cu" && grep -Eq "no GPU|1/1" "$t/cu"'
fi
check "gpu_suite.sh on a folder that is not a bundle exits 2" 'bash "$root/tools/gpu_suite.sh" "$t" "$t/l" > "$t/gs" 2>&1; [ $? = 2 ] && grep -q "not a bundle" "$t/gs"'
if ! command -v nvidia-smi >/dev/null 2>&1; then
  check "gpu_suite.sh without a GPU: both tests skipped, exit 0" 'bash "$root/tools/gpu_suite.sh" "$t/b" "$t/logs" > "$t/gs" 2>&1 && grep -q "0 passed, 0 failed, 2 skipped" "$t/gs" && [ -s "$t/logs/equiv.log" ]'
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
