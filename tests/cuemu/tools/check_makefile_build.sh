#!/usr/bin/env bash
# The emulator builds with CMake's default generator (Unix Makefiles), as `cmake -S . -B b && cmake
# --build b` does. Make, unlike Ninja, does not create the folder of a custom command's output, so the
# launch rewrite must create the folders of the rewritten tree itself (it once failed: "cannot write
# b/tests/cuemu/rewritten/quant/common.cu.cpp"). Builds one target, the emulated quant library
# (cuemu_quant: rewritten .cu files and the rewritten quant/cuda_common.cuh), in a scratch build
# folder kept between runs, so that ccache and the configure cache make later runs quick; the
# rewritten tree is removed first, so every run writes it into folders that are not there.
# Usage: check_makefile_build.sh SOURCE_DIR SCRATCH_DIR [cmake configure argument...]
# (CMAKE: the cmake to run, by default the one on the PATH.)
set -euo pipefail
cmake=${CMAKE:-cmake}
src=$1
scratch=$2
shift 2
launcher=()
if command -v ccache >/dev/null; then  # as tools/build.sh: paths relative to the checkout
  cc="env;CCACHE_BASEDIR=$src;ccache"
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=$cc" "-DCMAKE_CUDA_COMPILER_LAUNCHER=$cc")
fi
rm -rf "$scratch/tests/cuemu/rewritten"
mkdir -p "$scratch"
if ! "$cmake" -S "$src" -B "$scratch" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" \
  >"$scratch/configure.log" 2>&1; then
  tail -n 30 "$scratch/configure.log"
  echo "check_makefile_build: configuring $scratch with Unix Makefiles failed (the log: $scratch/configure.log)"
  exit 1
fi
# OPTIMIZE_DEPENDENCIES (set at configure) keeps the libraries cuemu_quant links out of its build.
"$cmake" --build "$scratch" --target cuemu_quant -j 2
test -s "$scratch/tests/cuemu/rewritten/quant/common.cu.cpp"
test -s "$scratch/tests/cuemu/rewritten/quant/cuda_common.cuh"
echo "check_makefile_build: cuemu_quant builds with Unix Makefiles"
