#!/usr/bin/env bash
# Installs the Debian 12 packages qtrain builds with, when any is missing (idempotent: a no-op, in well
# under a second, when everything is present). The CUDA toolkit is not a Debian package: when
# /usr/local/cuda exists the CUDA paths are built, otherwise the build is CPU-only.
# Usage: tools/install_deps.sh [--bench]   (--bench adds what the CPU comparison benchmarks need besides PyTorch)
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config git
          openmpi-bin libopenmpi-dev libyaml-cpp-dev libspdlog-dev libfmt-dev catch2
          libopenblas-dev libcli11-dev nlohmann-json3-dev zlib1g-dev npm
          libfftw3-dev libjpeg62-turbo-dev ccache
          gnuplot-nox   # gnuplot: the plots of `qtrain compare` reports (training never needs it)
          nftables      # nft: the testbed's packet-loss faults (tools/netbed.sh --loss)
          dataset-fashion-mnist   # the second dataset of docs/results.md (real-data tests use it too)
          clang-format  # tools/check_format.sh, the CTest test check_format
          clang-tidy    # tools/check_tidy.sh, the CTest test check_tidy
          clang libclang-rt-14-dev   # libFuzzer: tools/test.sh's short fuzz of every target (docs/fuzzing.md)
          # The Python module (python/, docs/python.md) and its tests: PyTorch 1.13 is what its DDP hook
          # plugs into, never a dependency of the qtrain program.
          python3-dev pybind11-dev python3-torch python3-numpy python3-pytest python3-setuptools python3-pip)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-psutil)
fi

missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
# npm may come from elsewhere (e.g. a Node.js install); only ask apt for it when there is no npm at all.
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install_deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "install_deps: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
