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
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
