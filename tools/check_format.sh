#!/usr/bin/env bash
# Checks that every tracked C++/CUDA file is laid out as .clang-format says; prints the files that are
# not and exits 1. `--fix` rewrites them instead. Formatting differs between clang-format releases, so
# the check is pinned to the one Debian 12 ships (14); with another release or none it exits 77 with
# the reason (CTest reports "Skipped"). CI runs it as the CTest test check_format (label unit).
# Usage: tools/check_format.sh [--fix]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
clang_format=${CLANG_FORMAT:-clang-format}
source tools/llvm_pin.sh
require_llvm_tool check_format "$clang_format" clang-format "the layout"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
else  # an unpacked source archive
  mapfile -t files < <(find . -path ./build -prune -o -path ./build-fuzz -prune -o \
                         \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -type f -print | sort)
fi
if [[ "${1:-}" == "--fix" ]]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
# One clang-format process for every file: each violation is reported as "FILE:LINE:COL: error: ...".
status=0
report=$("$clang_format" --dry-run --Werror "${files[@]}" 2>&1) || status=$?
mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<< "$report" | sort -u)
if [[ $status -ne 0 && ${#bad[@]} -eq 0 ]]; then  # it failed for another reason: show it
  echo "check_format: $clang_format failed (exit $status):"
  echo "$report" | head -20
  exit 2
fi
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check_format: ${#bad[@]} file(s) differ from .clang-format (fix: tools/check_format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files follow .clang-format"
