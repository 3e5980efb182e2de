#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer (docs/fuzzing.md).
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   run TARGETs (default: all) for SECONDS (default 60) each
#   tools/fuzz.sh --check                            exit 0 when clang with libFuzzer is usable, else print why
# Configures build-fuzz/ once with clang (QTRAIN_FUZZ=ON, QTRAIN_CUDA=OFF; ccache when installed), builds
# the targets of tests/fuzz, and runs each from its seed corpus tests/fuzz/corpus/<target> plus the
# working corpus build-fuzz/corpus/<target> (kept between runs, where new inputs go). A finding (crash,
# sanitizer report, exception other than InputError, hang > 10 s, more than 2 GB) stops that target;
# its input is saved under build-fuzz/findings/<target>/. Prints per target: executions, coverage
# (libFuzzer's final cov: edges and ft: features), corpus size and findings; exits 1 on any finding.
# Environment: FUZZ_BUILD_DIR (build-fuzz), FUZZ_PARALLEL (targets run at once, 1), FUZZ_ARGS (more
# libFuzzer flags, e.g. -jobs=4 or -dict=...), FUZZ_QUIET=1 (no configure and build output).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
all_targets=(quant_payload demo_payload safetensors config idx cifar an4 jpeg)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
parallel=${FUZZ_PARALLEL:-1}

# Whether clang can link a libFuzzer target with the sanitizers this build uses; prints the reason if not.
check() {
  if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
    echo "clang/clang++ not found (libFuzzer ships with clang; Debian: apt-get install clang)"
    return 1
  fi
  local probe
  probe=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/t.cpp"
  if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/t.cpp" -o "$probe/t" >"$probe/log" 2>&1; then
    echo "clang++ cannot link -fsanitize=fuzzer,address,undefined: $(head -c 300 "$probe/log")"
    rm -rf "$probe"
    return 1
  fi
  rm -rf "$probe"
}

if [[ ${1-} == --check ]]; then
  check
  exit
fi
seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ && $seconds -ge 1 ]] || { echo "fuzz.sh: SECONDS_PER_TARGET must be a whole number >= 1, got '$seconds'" >&2; exit 2; }
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (known: ${all_targets[*]})" >&2; exit 2; }
done
if ! reason=$(check); then
  echo "fuzz.sh: $reason" >&2
  exit 2
fi

quiet=/dev/stdout
[[ ${FUZZ_QUIET:-0} == 1 ]] && quiet=/dev/null
if [[ ! -f $build/build.ninja ]]; then
  launcher=()
  # Paths relative to the checkout, and the build folder left out of the hash (which -g would put
  # in it), so that checkouts and build folders share the cache.
  command -v ccache >/dev/null &&
    launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_BASEDIR=$root;CCACHE_NOHASHDIR=1;ccache")
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQTRAIN_FUZZ=ON \
    -DQTRAIN_CUDA=OFF "${launcher[@]}" >"$quiet"
fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}" >"$quiet"

# One target: libFuzzer for $seconds, its log in $build/logs/<target>.log.
run_target() {
  local t=$1
  mkdir -p "$build/corpus/$t" "$build/findings/$t" "$build/logs"
  local status=0
  # Leaks are findings as well (libFuzzer's -detect_leaks, on by default with AddressSanitizer).
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/findings/$t/" ${FUZZ_ARGS:-} \
    "$build/corpus/$t" "$root/tests/fuzz/corpus/$t" >"$build/logs/$t.log" 2>&1 || status=$?
  echo "$status" >"$build/logs/$t.status"
}

running=0
for t in "${targets[@]}"; do
  rm -f "$build/findings/$t"/{crash,leak,timeout,oom}-* 2>/dev/null || true
  run_target "$t" &
  running=$((running + 1))
  if [[ $running -ge $parallel ]]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

printf '%-14s %8s %12s %8s %6s %7s %7s  %s\n' target seconds executions exec/s cov ft corpus findings
found=0
for t in "${targets[@]}"; do
  log=$build/logs/$t.log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  stats=$(grep -E 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$stats")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$stats")
  corp=$(sed -n 's/.*corp: \([0-9]*\).*/\1/p' <<<"$stats")
  artifacts=$(find "$build/findings/$t" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  status=$(cat "$build/logs/$t.status")
  summary=none
  if [[ -n $artifacts || $status != 0 ]]; then
    found=1
    summary="$(wc -l <<<"$artifacts" | tr -d ' ') (exit $status; $(tr '\n' ' ' <<<"$artifacts")log $log)"
    [[ -z $artifacts ]] && summary="exit $status without an input saved; log $log"
  fi
  printf '%-14s %8s %12s %8s %6s %7s %7s  %s\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" \
    "${corp:-?}" "$summary"
done
if [[ $found != 0 ]]; then
  echo "fuzz.sh: findings above: reproduce one with $build/tests/fuzz/fuzz_TARGET FILE (docs/fuzzing.md)" >&2
  for t in "${targets[@]}"; do
    if [[ $(cat "$build/logs/$t.status") != 0 ]]; then
      echo "---- $t: the end of $build/logs/$t.log" >&2
      grep -v -E '^#[0-9]+|^INFO:' "$build/logs/$t.log" | tail -25 >&2
    fi
  done
  exit 1
fi
