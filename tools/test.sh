#!/usr/bin/env bash
# tools/test.sh: the whole test suite, from a fresh machine: install what is missing, build with
# warnings as errors, and run every meson suite (unit, reject, models, schema, cli; the
# sanitizer builds run inside unit and reject). Ends with meson's summary (Ok: N  Fail: N ...).
#
#   bash tools/test.sh [meson test args...]     e.g. --suite reject
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
if [ ! -f build-test/build.ninja ]; then
  meson setup build-test --buildtype=debugoptimized -Dwerror=true
fi
ninja -C build-test
meson test -C build-test --print-errorlogs --num-processes "$(nproc)" "$@"
