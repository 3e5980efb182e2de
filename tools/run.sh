#!/usr/bin/env bash
# Quick start, step 1: installs what is missing, builds, fetches MNIST and trains the default config
# (configs/mnist_mlp.yaml: Dettmers' MNIST MLP). Extra arguments go to `qtrain train`, e.g.
#   tools/run.sh --set train.epochs=1
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools/install_deps.sh
tools/build.sh
tools/fetch_mnist.sh
exec build/qtrain train configs/mnist_mlp.yaml "$@"
