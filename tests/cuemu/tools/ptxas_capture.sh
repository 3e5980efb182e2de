#!/usr/bin/env bash
# CUDA compiler launcher of the kernel resource objects (cuemu_ptxas_*, tests/cuemu/CMakeLists.txt):
# runs the compile it is given (nvcc ... --resource-usage -c SRC -o OBJ, possibly behind ccache, which
# replays the report on a hit) and keeps ptxas's report in OBJ.ptxas, headed by "source SRC", for
# cuemu_resource_check. The report stays out of the build log; on a failed compile it is printed.
set -uo pipefail
args=("$@")
out="" src=""
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -o) out=${args[i + 1]} ;;
    -c) src=${args[i + 1]} ;;
  esac
done
if [[ -z "$out" || -z "$src" ]]; then
  echo "ptxas_capture.sh: no -c SOURCE or -o OBJECT in: $*" >&2
  exit 2
fi
tmp="$out.ptxas.tmp"
echo "source $src" >"$tmp" || exit 1
"$@" 2>>"$tmp"
rc=$?
if ((rc != 0)); then
  tail -n +2 "$tmp" >&2
  rm -f "$tmp"
  exit "$rc"
fi
mv -f "$tmp" "$out.ptxas"
