#!/usr/bin/env bash
# Quick start, step 2: installs what is missing, builds, fetches MNIST (the end-to-end tests train on
# it) and runs every test with CTest. Extra arguments go to ctest, e.g. tools/test.sh -L unit
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools/install_deps.sh
tools/build.sh
tools/fetch_mnist.sh
# Open MPI refuses to start as root unless told that it is intended (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
