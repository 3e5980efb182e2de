#!/usr/bin/env bash
# Quick start, step 2: installs what is missing, builds, fetches MNIST (the end-to-end tests train on
# it) and runs every test with CTest. Extra arguments go to ctest, e.g. tools/test.sh -L unit
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools/install_deps.sh
tools/build.sh
tools/fetch_mnist.sh
# MNIST was just fetched, so a test that finds it absent is a broken setup, not a reason to skip: its
# tests fail instead of reporting "Skipped" (tests/support/real_data.h). The shared real data (AN4, the
# CIFAR-10 subset) is optional: its tests skip where it is absent. QTRAIN_REQUIRE_DATA=mnist,an4,... or
# =all from the caller overrides this.
export QTRAIN_REQUIRE_DATA=${QTRAIN_REQUIRE_DATA-mnist}
# Open MPI refuses to start as root unless told that it is intended (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The tests labelled long (docs/design.md, "Tests and what they cost": the whole clang-tidy pass, the
# shuffled emulated quantizer test's largest span) are left out, to keep CI within its time; run
# them with QTRAIN_LONG_TESTS=1 tools/test.sh, or ctest --test-dir build -L long.
long=(-LE '^long$')
[[ ${QTRAIN_LONG_TESTS:-0} == 1 ]] && long=()
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "${long[@]}" "$@"
# A short fuzz of every target (docs/fuzzing.md) where clang with libFuzzer is installed: the fuzzing
# build in build-fuzz/ (ccache makes it quick after the first), then QTRAIN_FUZZ_SECONDS (10) per
# target, nproc targets at a time (about a minute in all on 2 cores with a warm cache); a finding
# fails the run. libFuzzer's random seed is fixed (QTRAIN_FUZZ_SEED, 1), so that a commit's run walks
# the same inputs every time and a finding reproduces: it is the change that found it, not the draw.
# Open-ended fuzzing with fresh seeds is tools/fuzz.sh's job. QTRAIN_FUZZ_SECONDS=0 leaves it out.
fuzz_seconds=${QTRAIN_FUZZ_SECONDS:-10}
if [[ $fuzz_seconds == 0 ]]; then
  echo "fuzzing skipped: QTRAIN_FUZZ_SECONDS=0"
elif reason=$(tools/fuzz.sh --check); then
  echo "fuzzing every target for ${fuzz_seconds} s (tools/fuzz.sh)"
  FUZZ_QUIET=1 FUZZ_PARALLEL=$(nproc) FUZZ_ARGS="-seed=${QTRAIN_FUZZ_SEED:-1} ${FUZZ_ARGS:-}" \
    tools/fuzz.sh "$fuzz_seconds"
else
  echo "fuzzing skipped: $reason"
fi
