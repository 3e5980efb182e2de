#!/usr/bin/env bash
# Configures (once) and builds qtrain into build/ (BUILD_DIR overrides). Incremental and quick when
# nothing changed. Extra arguments are passed to the CMake configure step. Uses ccache when it is
# installed (paths relative to the checkout, so several checkouts share one cache).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
launcher=()
if command -v ccache >/dev/null; then
  cc="env;CCACHE_BASEDIR=$root;ccache"
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=$cc" "-DCMAKE_CUDA_COMPILER_LAUNCHER=$cc")
fi
if [[ ! -f "$build/build.ninja" || $# -gt 0 ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
