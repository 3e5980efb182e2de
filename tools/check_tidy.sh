#!/usr/bin/env bash
# Runs clang-tidy with the project's .clang-tidy set over qtrain's own C++ sources (every .cpp of the
# build's compile_commands.json outside tests/ and the build folders; the CUDA .cu files and the test
# programs are left out, for time) and fails on any finding, printing it. The findings depend on the
# clang-tidy release, so the check is pinned to Debian 12's (14); with another release or none it
# exits 77 with the reason (CTest reports "Skipped"). CI runs it as the CTest test check_tidy.
# Usage: tools/check_tidy.sh [BUILD_DIR] [FILE...]   (BUILD_DIR defaults to build; FILEs limit the run)
# About 2.5 minutes for the ~120 files on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
clang_tidy=${CLANG_TIDY:-clang-tidy}
build=${1:-build}
shift || true
source tools/llvm_pin.sh
require_llvm_tool check_tidy "$clang_tidy" clang-tidy "the check set"
db="$build/compile_commands.json"
if [[ ! -f "$db" ]]; then
  echo "check_tidy: $db not found: configure the build first (tools/build.sh writes it)"
  exit 2
fi
if [[ $# -gt 0 ]]; then
  files=("$@")
else
  # One entry per source file (the sanitizer and fuzzing copies of a library compile the same files).
  mapfile -t files < <(python3 - "$db" "$root" <<'PY'
import json, os, sys
db, root = sys.argv[1], os.path.realpath(sys.argv[2])
seen = set()
for entry in json.load(open(db)):
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    rel = os.path.relpath(path, root)
    if not rel.endswith(".cpp") or rel.startswith(("..", "build", "tests/")) or rel in seen:
        continue
    seen.add(rel)
    print(rel)
PY
)
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check_tidy: no source files found in $db"
  exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# --quiet drops the per-file summaries; the findings (WarningsAsErrors) go to stdout, the counts of
# suppressed system-header warnings to stderr.
status=0
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 4 "$clang_tidy" -p "$build" --quiet >"$out" 2>/dev/null || status=$?
mapfile -t findings < <(grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error):' "$out" | sort -u)
if [[ ${#findings[@]} -gt 0 ]]; then
  echo "check_tidy: ${#findings[@]} finding(s) of the .clang-tidy set:"
  printf '  %s\n' "${findings[@]}"
  exit 1
fi
if [[ $status -ne 0 ]]; then  # clang-tidy failed without a finding (a file that does not parse)
  echo "check_tidy: $clang_tidy failed (exit $status):"
  head -20 "$out"
  exit 2
fi
echo "check_tidy: ${#files[@]} files clean under .clang-tidy"
