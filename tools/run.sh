#!/usr/bin/env bash
# tools/run.sh: the main job, from a fresh machine: install what is missing, build, compile the
# default model into a plan for 4 CPU ranks, show the plan, and train it for 200 steps with
# planrun's CPU backend on the shipped corpus (data/kjv.bin; a model without token inputs gets
# synthetic data).
#
#   bash tools/run.sh [MODEL [DEVICES]]     (default: models/gpt-tiny.json on 4 ranks)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/gpt-tiny.json}
devices=${2:-4}
plan=build/$(basename "$model" .json).plan

bash tools/setup.sh
if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=debugoptimized
fi
ninja -C build
echo
echo "\$ build/plancc --check $model"
build/plancc --check "$model"
echo
echo "\$ build/plancc $model --cluster models/clusters/cpu.json --devices $devices -o $plan"
build/plancc "$model" --cluster models/clusters/cpu.json --devices "$devices" -o "$plan"
echo
echo "\$ build/plandump $plan"
build/plandump "$plan"
echo
data=()
if grep -q '"tokens"' "$model"; then data=(--data data/kjv.bin); fi
echo "\$ build/planrun $plan --steps 200 --log-every 25 ${data[*]}"
build/planrun "$plan" --steps 200 --log-every 25 "${data[@]}"
