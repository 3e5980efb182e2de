#!/usr/bin/env bash
# Packs what a GPU machine without this project's dependencies needs to run tools/gpu_check.sh:
# qtrain and the `cuda` test programs built here, the small shared libraries they load (yaml-cpp,
# spdlog, OpenBLAS, ...), a relocatable copy of Debian's Open MPI (with its PMIx) and MNIST.
# The NVIDIA libraries (cudart, cuBLAS, cuRAND, cuDNN, NCCL) are NOT packed: the GPU machine's own are
# used (its CUDA toolkit, or the nvidia-* Python packages beside its PyTorch), found by
# tools/gpu_unpack.sh. docs/device.md of the shared docs describes such a machine.
#
#   tools/gpu_bundle.sh [BUILD_DIR] [OUT.tar.xz]    (defaults: build-gpu, .gpu/qtrain-gpu.tar.xz)
#
# BUILD_DIR should be configured with -DQTRAIN_ARCH=x86-64-v3 (or another -march the GPU machine's
# CPU has): `native` here may use instructions that CPU lacks. On the GPU machine:
#   tools/gpu_unpack.sh .gpu/qtrain-gpu.tar.xz /tmp/qtrain-gpu && . /tmp/qtrain-gpu/env.sh
#   BUILD_DIR=/tmp/qtrain-gpu/build tools/gpu_check.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build-gpu}" && pwd)
archive=${2:-$root/.gpu/qtrain-gpu.tar.xz}
programs=(qtrain tests/quant/test_quant_cuda tests/optim/test_optim_cuda tests/layers/test_layers_cuda
          tests/layers/test_sequence_cuda tests/comm/test_comm_cuda tests/exchange/test_powersgd_cuda)
for p in "${programs[@]}"; do
  [[ -x "$build/$p" ]] || { echo "gpu_bundle: $build/$p is missing: build it first" >&2; exit 1; }
done
[[ -f "$root/data/mnist/train-images-idx3-ubyte" ]] ||
  { echo "gpu_bundle: data/mnist is missing (tools/fetch_mnist.sh)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build" "$stage/lib" "$stage/mnist" "$stage/ompi/usr/bin" "$stage/ompi/usr/share" \
         "$stage/ompi/usr/lib/x86_64-linux-gnu"

# The build tree's programs and CTest files (absolute paths inside are rewritten by gpu_unpack.sh).
for p in "${programs[@]}"; do install -D -m 755 "$build/$p" "$stage/build/$p"; done
(cd "$build" && find . -name CTestTestfile.cmake -print0 | xargs -0 -I{} install -D -m 644 {} "$stage/build/{}")
printf '%s\n%s\n' "$build" "$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")" \
  >"$stage/build/.built_in"

# Open MPI as Debian installs it, under a prefix that OPAL_PREFIX points at there. Transports whose
# libraries a GPU machine's image may lack (UCX, libfabric, verbs, PSM) are left out: the bundle runs
# its ranks on one host over shared memory.
multi=/usr/lib/x86_64-linux-gnu
cp -aL "$multi/openmpi" "$stage/ompi/usr/lib/x86_64-linux-gnu/"
cp -aL "$multi/pmix2" "$stage/ompi/usr/lib/x86_64-linux-gnu/"
find "$stage/ompi" -name '*.so' \( -name '*ucx*' -o -name '*ofi*' -o -name '*openib*' -o -name '*uct*' \
     -o -name '*psm*' -o -name '*verbs*' -o -name '*java*' -o -name '*slurm*' -o -name '*fortran*' \
     -o -name '*usempi*' -o -name '*mpifh*' -o -name 'liboshmem*' -o -name 'mca_spml*' -o -name 'mca_sshmem*' \
     -o -name 'mca_atomic*' -o -name 'mca_scoll*' -o -name 'mca_memheap*' \) -delete
rm -rf "$stage/ompi/usr/lib/x86_64-linux-gnu/openmpi/lib/pkgconfig" "$stage/ompi/usr/lib/x86_64-linux-gnu/openmpi/include"
cp -a /usr/share/openmpi "$stage/ompi/usr/share/"
cp -a /etc/openmpi/openmpi-mca-params.conf "$stage/ompi/openmpi-mca-params.conf"
for b in orterun orted ompi_info; do cp -L "/usr/bin/$b" "$stage/ompi/usr/bin/"; done
ln -s orterun "$stage/ompi/usr/bin/mpirun"
ln -s orterun "$stage/ompi/usr/bin/mpiexec"

# Every shared library these ELF files load, except the C/C++ runtime (the GPU machine's own, which is
# newer) and NVIDIA's (the GPU machine's, matching its driver).
system='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libz\.|libcuda|libcudart|libcublas|libcudnn|libcurand|libnccl|libnvrtc|libnvJitLink)'
mapfile -t elves < <(find "$stage/build" "$stage/ompi" -type f \( -perm -u+x -o -name '*.so*' \) -print)
for f in "${elves[@]}"; do
  file -b "$f" | grep -q ELF || continue
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $system ]] && continue
  [[ "$path" == "$multi/openmpi/"* || "$path" == "$multi/pmix2/"* ]] && continue
  [[ -e "$stage/lib/$name" ]] || cp -L "$path" "$stage/lib/$name"
done

for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  gzip -1 -c "$root/data/mnist/$f" >"$stage/mnist/$f.gz"
done

mkdir -p "$(dirname "$archive")"
tar -C "$stage" -cf - . | xz -T0 -6 >"$archive.tmp"
mv "$archive.tmp" "$archive"
echo "gpu_bundle: $archive ($(du -h "$archive" | cut -f1)); libraries: $(ls "$stage/lib" | tr '\n' ' ')"
