#!/bin/bash
# tools/bundle.sh: a bundle of the build's programs runs from its own folder with only env.sh's
# LD_LIBRARY_PATH, holds the packages' libraries (cJSON at least), and bad arguments fail.
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
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
