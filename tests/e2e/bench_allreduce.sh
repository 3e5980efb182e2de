#!/usr/bin/env bash
# `qtrain bench-allreduce --baseline` on 2 ranks over shared memory, one small size, one iteration:
#  1. by default the speedups are over the bf16 all-reduce: its row comes right after MPI_Allreduce,
#     reads 1.00, and bf16 among --methods is not measured a second time;
#  2. --baseline fp32 and --baseline library (the communicator's fp32 all-reduce) move the 1.00;
#  3. an unknown baseline fails naming the known methods; a list fails too;
#  4. every exchange row was checked before it was timed: #wrong 0 (every rank's result identical),
#     a relative error to the fp32 mean, and the library's row unchecked ("-", null).
# Only which row is the baseline is checked: the times are measured, never asserted on.
# Usage: bench_allreduce.sh QTRAIN_BINARY
set -uo pipefail
qtrain=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
bench() {
  mpirun -np 2 --oversubscribe --bind-to none --mca btl self,vader --mca mpi_yield_when_idle 1 \
    "$qtrain" bench-allreduce --sizes 0.25 --iterations 1 --warmup 0 --methods fp32,bf16,qsgd:bits=4 "$@"
}
# The speedup column of the row of method M (one word, or two as in "bf16 (baseline)") in FILE.
speedup_of() { awk -v m="$1" '($2 " " $3) == m { print $9 } $2 == m { print $8 }' "$2"; }

# 1. the default baseline
bench --json "$tmp/rows.json" >"$tmp/default.txt" 2>&1 || fail "bench-allreduce failed: $(cat "$tmp/default.txt")"
grep -q "^# speedup: time of the baseline, bf16 (algorithm auto), at the same size" "$tmp/default.txt" ||
  fail "no baseline line: $(cat "$tmp/default.txt")"
[[ "$(speedup_of "bf16 (baseline)" "$tmp/default.txt")" == "1.00" ]] || fail "the bf16 row is not the baseline: $(cat "$tmp/default.txt")"
[[ $(grep -c "^ *[0-9.]* bf16  " "$tmp/default.txt") -eq 0 ]] || fail "bf16 was measured twice: $(cat "$tmp/default.txt")"
grep -q '"method": "qsgd:bits=4", .*"baseline": "bf16", "speedup_vs_baseline": ' "$tmp/rows.json" ||
  fail "the JSON rows do not name the baseline: $(cat "$tmp/rows.json")"

# 2. other baselines
bench --baseline fp32 >"$tmp/fp32.txt" 2>&1 || fail "--baseline fp32 failed: $(cat "$tmp/fp32.txt")"
[[ "$(speedup_of "fp32 (baseline)" "$tmp/fp32.txt")" == "1.00" ]] || fail "--baseline fp32: $(cat "$tmp/fp32.txt")"
grep -q "^ *0.2 bf16  " "$tmp/fp32.txt" || fail "--baseline fp32 dropped the bf16 row: $(cat "$tmp/fp32.txt")"
bench --baseline library >"$tmp/library.txt" 2>&1 || fail "--baseline library failed: $(cat "$tmp/library.txt")"
[[ "$(speedup_of "MPI_Allreduce fp32" "$tmp/library.txt")" == "1.00" ]] || fail "--baseline library: $(cat "$tmp/library.txt")"
grep -q "(baseline)" "$tmp/library.txt" && fail "--baseline library printed a method as the baseline"

# 3. bad baselines
if "$qtrain" bench-allreduce --baseline int3 --sizes 0.25 2>"$tmp/err"; then fail "--baseline int3 accepted"; fi
grep -q "bench-allreduce --baseline int3: quantization.method must be one of fp32, fp16, bf16" "$tmp/err" ||
  fail "--baseline int3 message: $(cat "$tmp/err")"
if "$qtrain" bench-allreduce --baseline fp32,bf16 --sizes 0.25 2>"$tmp/err"; then fail "a list as --baseline accepted"; fi
grep -q "give one method" "$tmp/err" || fail "--baseline list message: $(cat "$tmp/err")"

# 4. the correctness columns
grep -q '"method": "qsgd:bits=4", .*"wrong": 0, "rel_error": [0-9]' "$tmp/rows.json" ||
  fail "the qsgd row was not checked: $(cat "$tmp/rows.json")"
grep -q '"wrong": [1-9]' "$tmp/rows.json" && fail "ranks disagree: $(cat "$tmp/rows.json")"
grep -q '"method": "MPI_Allreduce fp32", .*"wrong": null' "$tmp/rows.json" ||
  fail "the library's row claims a check: $(cat "$tmp/rows.json")"

if [[ $failures -gt 0 ]]; then echo "$failures failure(s)"; exit 1; fi
echo "bench_allreduce: all checks passed"
