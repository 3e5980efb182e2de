#!/usr/bin/env bash
# On a GPU machine: unpacks a bundle made by tools/gpu_bundle.sh into DEST and writes DEST/env.sh,
# which puts the bundle's Open MPI and libraries and the machine's NVIDIA libraries on the paths.
#
#   tools/gpu_unpack.sh [BUNDLE.tar.xz] [DEST]     (defaults: .gpu/qtrain-gpu.tar.xz, /tmp/qtrain-gpu)
#   . DEST/env.sh && BUILD_DIR=DEST/build tools/gpu_check.sh
#
# Also unpacks MNIST into data/mnist when it is absent. Fails, naming the library, when a program
# of the bundle cannot find one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
archive=${1:-$root/.gpu/qtrain-gpu.tar.xz}
dest=${2:-/tmp/qtrain-gpu}
[[ -f "$archive" ]] || { echo "gpu_unpack: $archive not found (tools/gpu_bundle.sh makes it)" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
xz -dc -T0 "$archive" | tar -C "$dest" -xf -

# The CTest files name the build and source trees of the machine that built them, and Debian's mpiexec.
{ read -r built_in; read -r source_in; } <"$dest/build/.built_in"
find "$dest/build" -name CTestTestfile.cmake -exec sed -i -e "s#$built_in#$dest/build#g" \
  -e "s#$source_in#$root#g" -e "s#/usr/bin/mpiexec#$dest/ompi/usr/bin/mpiexec#g" {} +

mkdir -p "$root/data/mnist"
for f in "$dest"/mnist/*.gz; do
  out="$root/data/mnist/$(basename "$f" .gz)"
  [[ -f "$out" ]] || gunzip -c "$f" >"$out"
done

# NVIDIA's libraries: the CUDA toolkit's, then those of the Python packages beside PyTorch.
candidates=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
if site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null); then
  while IFS= read -r d; do candidates+=("$d"); done < <(find "$site/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null)
fi
nvidia_dirs=()
for soname in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudnn.so.9 libnccl.so.2; do
  found=
  for d in "${candidates[@]}"; do
    if [[ -e "$d/$soname" ]]; then found=$d; break; fi
  done
  [[ -n "$found" ]] || { echo "gpu_unpack: $soname not found in ${candidates[*]}" >&2; exit 1; }
  [[ " ${nvidia_dirs[*]} " == *" $found "* ]] || nvidia_dirs+=("$found")
done

ompi=$dest/ompi/usr
cat >"$dest/env.sh" <<ENV
# Written by tools/gpu_unpack.sh: the bundle's Open MPI (relocated with OPAL_PREFIX) and libraries.
export OPAL_PREFIX=$ompi
export PMIX_PREFIX=$ompi/lib/x86_64-linux-gnu/pmix2
export PMIX_MCA_mca_base_component_path=$ompi/lib/x86_64-linux-gnu/pmix2/lib/pmix
export OMPI_MCA_mca_base_param_files=$dest/ompi/openmpi-mca-params.conf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A GPU machine may have a PMIx of another version in the same place, whose zlib plugin then fails to load.
export PMIX_MCA_pcompress_base_silence_warning=1
export PATH=$ompi/bin:\$PATH
export LD_LIBRARY_PATH=$dest/lib:$ompi/lib/x86_64-linux-gnu/openmpi/lib:$(IFS=:; echo "${nvidia_dirs[*]}")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
ENV
# shellcheck disable=SC1091
. "$dest/env.sh"
missing=$(find "$dest/build" -type f -perm -u+x -exec ldd {} + 2>/dev/null | grep 'not found' | sort -u || true)
if [[ -n "$missing" ]]; then
  echo "gpu_unpack: libraries not found:" >&2
  echo "$missing" >&2
  exit 1
fi
echo "gpu_unpack: $dest ready; NVIDIA libraries from ${nvidia_dirs[*]}"
