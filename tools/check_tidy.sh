#!/usr/bin/env bash
# Runs clang-tidy with the project's .clang-tidy set over qtrain's own C++ sources (the .cpp files of
# the build's compile_commands.json outside tests/ and the build folders; the CUDA .cu files and the
# test programs are left out, for time) and fails on any finding, printing it. The findings depend on
# the clang-tidy release, so the check is pinned to Debian 12's (14); with another release or none it
# exits 77 with the reason (CTest reports "Skipped").
#
# Which files (docs/design.md, "Tests and what they cost"):
# - default (CTest check_tidy, label lint): the files a change touched, i.e. the .cpp files that differ
#   from the base or include a header that does, as the build's dependency log says. The base is
#   QTRAIN_TIDY_BASE, else the merge base of HEAD with origin/main or main, or HEAD~1 where HEAD is that
#   merge base (on main: the last commit, a merge's whole branch). A change to .clang-tidy or to this
#   script, or no base at all (no git, a shallow clone), checks every file.
# - --all (CTest check_tidy_all, labels lint and long): every file.
# - FILE...: those files, always run (no cache).
# Either way a file is skipped when the cache holds its key: a SHA-256 of the tidy release, the check
# set, its compile command, and its content and every header's (tools/tidy_select.py), stored after a
# run without findings. The cache (QTRAIN_TIDY_CACHE, default ~/.cache/qtrain-tidy) is shared by
# checkouts, as ccache is; QTRAIN_TIDY_CACHE=off turns it off.
# Usage: tools/check_tidy.sh [--all] [BUILD_DIR] [FILE...]   (BUILD_DIR defaults to build)
# Every file, nothing cached: about 2.5 minutes for the ~120 files on 2 AMD cores, 10 on a slow Intel guest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
clang_tidy=${CLANG_TIDY:-clang-tidy}
all=0
if [[ ${1:-} == --all ]]; then
  all=1
  shift
fi
build=${1:-build}
shift || true

# The commit the files a change touched are counted from (empty: none found, check every file).
find_base() {
  if [[ -n ${QTRAIN_TIDY_BASE:-} ]]; then
    git rev-parse -q --verify "$QTRAIN_TIDY_BASE^{commit}"
    return
  fi
  local ref merge head
  head=$(git rev-parse -q --verify HEAD) || return 1
  for ref in origin/main main; do
    git rev-parse -q --verify "$ref^{commit}" >/dev/null || continue
    merge=$(git merge-base HEAD "$ref") || continue
    if [[ $merge != "$head" ]]; then
      echo "$merge"
    else
      git rev-parse -q --verify HEAD~1
    fi
    return
  done
  return 1
}

# Prints the paths (relative to the root) that differ from the base, the working tree's edits and
# untracked files included; fails where every file must be checked.
changed_files() {
  base=$(find_base 2>/dev/null) || return 1
  local list
  list=$( { git diff --name-only "$base" -- && git ls-files --others --exclude-standard; } 2>/dev/null) || return 1
  if grep -qxE '\.clang-tidy|tools/check_tidy\.sh|tools/tidy_select\.py' <<<"$list"; then return 1; fi
  printf '%s\n' "$list"
}
source tools/llvm_pin.sh
require_llvm_tool check_tidy "$clang_tidy" clang-tidy "the check set"
db="$build/compile_commands.json"
if [[ ! -f "$db" ]]; then
  echo "check_tidy: $db not found: configure the build first (tools/build.sh writes it)"
  exit 2
fi
cache=${QTRAIN_TIDY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qtrain-tidy}
out=$(mktemp)
salt=$(mktemp)
changed=$(mktemp)
trap 'rm -f "$out" "$salt" "$changed"' EXIT
keys=()
if [[ $# -gt 0 ]]; then
  files=("$@")
else
  { "$clang_tidy" --version; cat .clang-tidy; } >"$salt"
  select=(python3 tools/tidy_select.py "$build" "$root" "$salt")
  if [[ $all -eq 0 ]] && changed_files >"$changed"; then
    select+=(--changed "$changed")
    echo "check_tidy: the files changed since $(git rev-parse --short "$base") and those including them"
  fi
  files=()
  selected=0
  while read -r key file; do
    selected=$((selected + 1))
    if [[ $cache != off && $key != - && -e "$cache/$key" ]]; then continue; fi
    files+=("$file")
    if [[ $key != - ]]; then keys+=("$key"); fi
  done < <("${select[@]}")
  if [[ $all -eq 1 && $selected -eq 0 ]]; then
    echo "check_tidy: no source files found in $db"
    exit 2
  fi
  if [[ ${#files[@]} -eq 0 ]]; then
    echo "check_tidy: nothing to check: $selected file(s) selected, all clean in the cache ($cache)"
    exit 0
  fi
  echo "check_tidy: $selected file(s) selected, ${#files[@]} not clean in the cache"
fi
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
if [[ $cache != off && ${#keys[@]} -gt 0 ]]; then  # the run found nothing: remember its files as clean
  mkdir -p "$cache" && (cd "$cache" && touch "${keys[@]}")
fi
echo "check_tidy: ${#files[@]} files clean under .clang-tidy"
