#!/usr/bin/env bash
# tests/install_check.sh: `meson install` into a temporary folder, then the installed programs run
# from there: plancc finds a cluster by name in the installed share/plancc/clusters (not in the
# source tree), compiles; planrun runs the plan; plandump simulates it; the manual pages are
# troff that man renders; bash completion completes options and cluster names; a C program builds
# against the plan-reading library through its pkg-config file and reads the plan.
#
#   bash tests/install_check.sh SOURCE_ROOT BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; bad "meson install"; exit 1; }
prefix=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
top="$tmp/root$prefix"
bin="$top/bin"
for p in plancc plandump planrun; do
  [ -x "$bin/$p" ] && ok "installed $p" || bad "installed $p"
done
if [ -f "$src/tools/plancc-import" ]; then
  [ -x "$bin/plancc-import" ] && ok "installed plancc-import" || bad "installed plancc-import"
  # The installed importer finds its package under share/plancc and imports a model.
  if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    if "$bin/plancc-import" torch "$src/tests/import_ok/lookups.py:make" -o "$tmp/imported.json" >"$tmp/import.log" 2>&1 &&
       "$bin/plancc" --check "$tmp/imported.json" >/dev/null 2>&1; then ok "installed plancc-import imports a model plancc accepts"
    else cat "$tmp/import.log"; bad "installed plancc-import imports a model plancc accepts"; fi
  fi
fi

# plancc finds --cluster dgx-a100 by name in the installed share folder (beside its bin/), not in
# the source tree: PLANCC_CLUSTERS and the compiled-in folders point elsewhere or nowhere here.
cd "$tmp"
cp "$src/models/gpt-tiny.json" .
out=$("$bin/plancc" gpt-tiny.json --cluster dgx-a100 --devices 8 --json -q -o a100.plan)
file=$(printf '%s' "$out" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["file"])')
if [ -f "$prefix/share/plancc/clusters/dgx-a100.json" ]; then
  echo "skip --cluster by name: $prefix already holds an installed plancc, which comes first"
else
  case "$file" in "$top/share/plancc/clusters/dgx-a100.json") ok "--cluster dgx-a100 found installed: $file" ;;
    *) bad "--cluster dgx-a100 resolved to $file, not under $top" ;; esac
fi
"$bin/plancc" gpt-tiny.json --cluster "$top/share/plancc/clusters/cpu.json" --devices 2 -q -o cpu.plan && ok "--cluster by path" || bad "--cluster by path"
"$bin/planrun" cpu.plan --steps 2 --quiet && ok "installed planrun runs the plan" || bad "installed planrun"
"$bin/plandump" --sim --json cpu.plan | grep -q '"step_s"' && ok "installed plandump simulates it" || bad "installed plandump"
# planrun's cuda module (built with the cuda backend) is installed under LIBDIR/plancc, and the
# installed planrun finds it there, relative to its own folder (the install moved by DESTDIR):
# what stops --backend cuda is then the GPU or its absence, never the module.
if [ -f "$build/planrun-cuda.so" ]; then
  "$bin/plancc" gpt-tiny.json --cluster "$top/share/plancc/clusters/cpu.json" --devices 1 -q -o one.plan
  rc=0
  "$bin/planrun" one.plan --backend cuda --steps 1 --quiet >cuda.log 2>&1 || rc=$?
  if find "$top" -path '*/lib*/plancc/planrun-cuda.so' | grep -q . && ! grep -q module cuda.log &&
     { [ "$rc" = 0 ] || { [ "$rc" = 9 ] && grep -q "no GPU" cuda.log; }; }; then ok "installed planrun loads its cuda module"
  else cat cuda.log; bad "installed planrun loads its cuda module"; fi
fi
for s in compile sim planrun model cluster plan; do
  [ -f "$top/share/plancc/schemas/$s.schema.json" ] || bad "schema $s installed"
done
ok "the schemas are installed"

# Manual pages from --help.
for p in plancc plandump planrun; do
  page="$top/share/man/man1/$p.1"
  if [ -f "$page" ] && grep -q '^\.SH SYNOPSIS' "$page" && grep -q 'Exit codes' "$page"; then ok "man page $p.1"; else bad "man page $p.1"; fi
done
if command -v man >/dev/null; then
  man -l "$top/share/man/man1/plancc.1" 2>/dev/null | grep -q "tensor-model-parallel-size" && ok "man renders plancc.1" || bad "man renders plancc.1"
fi

# Bash completion: options from --help, cluster names from the installed folder.
comp="$top/share/bash-completion/completions/plancc"
PATH="$bin:$PATH" bash -c '
  source "$1"
  COMP_WORDS=(plancc --tensor-model); COMP_CWORD=1; _plancc_complete plancc; echo "${COMPREPLY[*]}"
  COMP_WORDS=(plancc --cluster dgx-a1); COMP_CWORD=2; _plancc_complete plancc; echo "${COMPREPLY[*]}"
  COMP_WORDS=(planrun x.plan --met); COMP_CWORD=2; _plancc_complete planrun; echo "${COMPREPLY[*]}"
' _ "$comp" >"$tmp/comp.txt" 2>&1
mapfile -t got <"$tmp/comp.txt"
[ "${got[0]:-}" = "--tensor-model-parallel-size" ] && ok "completion: --tensor-model" || bad "completion: --tensor-model gave '${got[0]:-}'"
[ "${got[1]:-}" = "dgx-a100" ] && ok "completion: --cluster dgx-a1" || bad "completion: --cluster dgx-a1 gave '${got[1]:-}'"
[ "${got[2]:-}" = "--metrics" ] && ok "completion: planrun --met" || bad "completion: planrun --met gave '${got[2]:-}'"

# The plan-reading library through pkg-config.
cat >reader.c <<'C'
#include <plan/plan.h>
#include <stdio.h>
int main(int argc, char **argv) {
    plan p;
    char err[512];
    if (plan_read(argv[1], -1, &p, err, sizeof err) != PLAN_OK) return fprintf(stderr, "%s\n", err), 1;
    int ok = plan_check(&p, err, sizeof err) == PLAN_OK;
    printf("world %u, %u programs, plan_check %s\n", p.meta.world, p.n_programs, ok ? "passed" : err);
    plan_free(&p);
    return !ok;
}
C
pc="$top/lib/pkgconfig"
[ -d "$pc" ] || pc=$(dirname "$(find "$top" -name plancc-plan.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --define-variable=prefix="$top" --cflags --libs plancc-plan)
libdir=$(PKG_CONFIG_PATH="$pc" pkg-config --define-variable=prefix="$top" --variable=libdir plancc-plan)
if cc -std=c11 reader.c $flags -o reader 2>"$tmp/cc.log"; then
  line=$(LD_LIBRARY_PATH="$libdir" ./reader cpu.plan) && [ "$line" = "world 2, 1 programs, plan_check passed" ] &&
    ok "a C program reads the plan through pkg-config plancc-plan: $line" || bad "the reader: $line"
else
  cat "$tmp/cc.log"; bad "a C program builds against plancc-plan"
fi
exit $fail
