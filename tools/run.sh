#!/usr/bin/env bash
# tools/run.sh: the main job, from a fresh machine: install what is missing, build, and run
# plancc on the default model (today: `plancc --check`, the front end's report).
#
#   bash tools/run.sh [MODEL]        (default: models/gpt-tiny.json)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/gpt-tiny.json}

bash tools/setup.sh
if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=debugoptimized
fi
ninja -C build
echo
echo "\$ build/plancc --check $model"
build/plancc --check "$model"
