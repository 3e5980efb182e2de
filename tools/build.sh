#!/usr/bin/env bash
# Configures (once) and builds qtrain into build/ (BUILD_DIR overrides). Incremental and quick when
# nothing changed. Extra arguments are passed to the CMake configure step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
if [[ ! -f "$build/build.ninja" || $# -gt 0 ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
