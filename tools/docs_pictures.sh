#!/usr/bin/env bash
# tools/docs_pictures.sh: draws the pictures in docs/ again with the current plancc and plandump,
# so that a picture shows what the binaries compute today, not what they computed when it was
# committed. Each picture is a plan compiled here and drawn by `plandump --svg` (the simulated
# timeline); the commands below are the ones docs/deeppool.md shows. The plans are compiled in a
# scratch directory under the names the pictures' titles carry.
#
#   bash tools/docs_pictures.sh [--check] [BUILD_DIR]     (default BUILD_DIR: build)
#
# Without --check it writes docs/*.svg. With --check it draws them into a scratch directory and
# compares them with docs/ byte for byte: exit 1, naming each picture that differs, if any does
# (the docs suite runs this, so a picture cannot rot); `bash tools/docs_pictures.sh` then redraws.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
build=$(cd "${1:-build}" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
out=$src/docs
if [ $check = 1 ]; then out=$scratch/docs; mkdir "$out"; fi

a100=$src/models/clusters/dgx-a100.json
cd "$scratch"
# DeepPool's burst parallelism, VGG-16 on 8 A100s, global batch 32: the convolutions on all 8,
# fc6..loss on four while the others idle.
"$build/plancc" -q "$src/models/vgg16.json" --cluster "$a100" --devices 8 --global-batch 32 --tf32 --burst \
  -o vgg16-burst8.plan
"$build/plandump" --svg "$out/burst-vgg16-8gpu.svg" vgg16-burst8.plan
# WRN-50-2 on 32 A100s, global batch 16 (ranks 0-7 drawn): 16 ranks run the blocks, rank 0 the
# classifier alone.
"$build/plancc" -q "$src/models/wrn-50-2.json" --cluster "$a100" --devices 32 --global-batch 16 --tf32 --burst \
  -o wrn-50-2-burst32.plan
"$build/plandump" --svg "$out/burst-wrn-50-2-32gpu.svg" --ranks 0-7 wrn-50-2-burst32.plan

if [ $check = 1 ]; then
  status=0
  for f in "$out"/*.svg; do
    name=docs/$(basename "$f")
    if ! cmp -s "$f" "$src/$name"; then
      echo "FAIL $name differs from what plandump draws now (run: bash tools/docs_pictures.sh)"
      status=1
    else
      echo "ok   $name"
    fi
  done
  for f in "$src"/docs/*.svg; do
    if [ ! -f "$out/$(basename "$f")" ]; then
      echo "FAIL docs/$(basename "$f") is not drawn by tools/docs_pictures.sh"
      status=1
    fi
  done
  exit $status
fi
echo "wrote $(ls "$out"/*.svg | sed "s|$src/||" | tr '\n' ' ')"
