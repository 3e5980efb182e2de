#!/usr/bin/env bash
# `qtrain compare` and `qtrain predict` end to end on a small MNIST subset (one rank, one epoch):
#  1. an unknown method fails before anything runs, listing the known ones;
#  2. a sweep of two methods is interrupted (its process group killed) while the second run trains,
#     after that run wrote a checkpoint, and its curve.csv's last line is cut short; rerunning with
#     --resume reuses the finished first run (its files untouched), continues the second from its
#     checkpoint and repairs its curve; a plain rerun reuses both;
#  3. the report has its table and images; --report-only regenerates it;
#  4. predict reads the sweep; a directory without metrics.csv is a clear error;
#  5. a copy of the binary elsewhere reuses the finished runs; a changed command retrains, and the run
#     it replaces is moved to replaced/, not deleted;
#  6. runs bounded by train.max_steps inside their first epoch finish, are reported with their steps,
#     and are reused by a rerun; the default baseline (bf16) joins the runs and the speedups are over it;
#  7. --seeds 2 trains each method (and the baseline) once per seed in runs/<method>/seed<N>/, and the
#     report has the intervals and the tests against the baseline; bad --seeds and --baseline values
#     fail before anything runs;
#  8. a --methods entry with its own schedule ('@') trains under it beside a per-step run, and the
#     report and predict name both schedules; a schedule out of range fails before anything runs.
# Parts 1-5 measure against fp32 (--baseline fp32), so that they train two methods, not three.
# Usage: compare_sweep.sh QTRAIN_BINARY SOURCE_DIR   (needs SOURCE_DIR/data/mnist; skips without it)
set -uo pipefail
qtrain=$1
src=$2
mnist="$src/data/mnist"
source "$src/tests/support/real_data.sh"
[[ -f "$mnist/train-images-idx3-ubyte" ]] || skip_without_data mnist "$mnist" "$mnist_hint"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

sweep="$tmp/sweep"
common=(--epochs 1 --out "$sweep" --set data.path="$mnist" --set data.limit_train=6144 --set data.limit_test=1000 --set train.threads=1
      --set output.checkpoint_every_steps=4 --gnuplot "" --baseline fp32)
args=("$src/configs/mnist_mlp.yaml" --methods fp32,qsgd:bits=4 "${common[@]}")

# 1. unknown method: one line naming the known methods, nothing created
if "$qtrain" compare "$src/configs/mnist_mlp.yaml" --methods fp32,int3 "${common[@]}" 2>"$tmp/err"; then fail "unknown method accepted"; fi
grep -q "quantization.method must be one of fp32, fp16, bf16, dettmers8" "$tmp/err" || fail "unknown method message: $(cat "$tmp/err")"
[[ ! -e "$sweep" ]] || fail "the sweep folder was created for a bad method list"

# 2. interrupt the sweep while the qsgd run trains, after its first checkpoint
setsid "$qtrain" compare "${args[@]}" >"$tmp/first.log" 2>&1 &
leader=$!
for _ in $(seq 1 600); do
  # a checkpoint, and a first row in curve.csv (every 10 steps) for the cut below to damage
  [[ -f "$sweep/runs/qsgd_bits4/checkpoint.safetensors" &&
     $(wc -l <"$sweep/runs/qsgd_bits4/curve.csv" 2>/dev/null || echo 0) -ge 2 ]] && break
  kill -0 "$leader" 2>/dev/null || break
  sleep 0.1
done
kill -TERM -- -"$leader" 2>/dev/null
wait "$leader" 2>/dev/null
# A kill during a write leaves curve.csv's last line cut short (no newline): the resume must repair it.
curve="$sweep/runs/qsgd_bits4/curve.csv"
[[ -s "$curve" ]] && truncate -s -3 "$curve"
if [[ -f "$sweep/runs/qsgd_bits4/compare.done" ]]; then
  fail "the qsgd run finished before it could be interrupted (the test needs a slower run)"
fi
[[ -f "$sweep/runs/fp32/compare.done" ]] || { fail "the fp32 run did not finish first"; cat "$tmp/first.log"; }
fp32_sum=$(md5sum "$sweep/runs/fp32/metrics.csv" "$sweep/runs/fp32/compare.done" | md5sum)
cp "$sweep/runs/fp32/metrics.csv" "$tmp/fp32.metrics"
"$qtrain" compare "${args[@]}" --resume >"$tmp/second.log" 2>&1 || { fail "rerun failed"; cat "$tmp/second.log"; }
grep -q "fp32: finished run reused" "$tmp/second.log" || fail "fp32 was not reused: $(cat "$tmp/second.log")"
grep -q "qsgd:bits=4: resuming the unfinished run from its checkpoint" "$tmp/second.log" ||
  fail "qsgd was not resumed: $(cat "$tmp/second.log")"
[[ "$(md5sum "$sweep/runs/fp32/metrics.csv" "$sweep/runs/fp32/compare.done" | md5sum)" == "$fp32_sum" ]] ||
  fail "the finished fp32 run was modified"
grep -q "resumed from" "$sweep/runs/qsgd_bits4/train.log" || fail "the qsgd training did not resume"
awk -F, 'NR > 1 { if (NF != 3 || $2 + 0 <= last) bad = 1; last = $2 + 0 } END { exit bad }' "$curve" ||
  fail "curve.csv after the resume is not one row per increasing step: $(cat "$curve")"
"$qtrain" compare "${args[@]}" >"$tmp/third.log" 2>&1 || fail "third run failed"
[[ $(grep -c "finished run reused" "$tmp/third.log") -eq 2 ]] || fail "not both runs reused: $(cat "$tmp/third.log")"

# 3. the report
report="$sweep/report/report.md"
grep -q "^| fp32 | 1 | 1 (48) | " "$report" || fail "no fp32 row in the report: $(cat "$report")"
grep -q "^| qsgd:bits=4 | 1 | 1 (48) | " "$report" || fail "no qsgd row in the report"
rm -rf "$sweep/report"
"$qtrain" compare --report-only "$sweep" 2>"$tmp/err" || fail "--report-only failed: $(cat "$tmp/err")"
[[ -f "$report" ]] || fail "--report-only wrote no report"
if command -v gnuplot >/dev/null; then
  for f in accuracy loss_time phases exchange bytes; do
    [[ -s "$sweep/report/$f.png" && -s "$sweep/report/$f.svg" ]] || fail "missing plot $f"
  done
fi
if "$qtrain" compare --report-only "$tmp/none" 2>"$tmp/err"; then fail "--report-only of a missing folder succeeded"; fi
grep -q "no finished runs" "$tmp/err" || fail "--report-only message: $(cat "$tmp/err")"

# 4. predict
"$qtrain" predict --from "$sweep" --gpus 2,96 --bandwidth 1gbit >"$tmp/predict.md" 2>"$tmp/err" ||
  fail "predict failed: $(cat "$tmp/err")"
grep -q "^Fastest: p=2: " "$tmp/predict.md" || fail "predict output: $(cat "$tmp/predict.md")"
mkdir -p "$tmp/empty"
if "$qtrain" predict --from "$tmp/empty" 2>"$tmp/err"; then fail "predict of an empty folder succeeded"; fi
grep -q "no metrics.csv" "$tmp/err" || fail "predict message: $(cat "$tmp/err")"

# 5. the binary's path is not part of a run; a replaced run is kept
mkdir -p "$tmp/elsewhere" && cp "$qtrain" "$tmp/elsewhere/qtrain"
"$tmp/elsewhere/qtrain" compare "${args[@]}" >"$tmp/fourth.log" 2>&1 || fail "the copied binary failed: $(cat "$tmp/fourth.log")"
[[ $(grep -c "finished run reused" "$tmp/fourth.log") -eq 2 ]] ||
  fail "a copy of the binary did not reuse both runs: $(cat "$tmp/fourth.log")"
"$qtrain" compare "$src/configs/mnist_mlp.yaml" --methods fp32 "${common[@]}" --set seed=7 >"$tmp/fifth.log" 2>&1 ||
  fail "the changed sweep failed: $(cat "$tmp/fifth.log")"
grep -q "fp32: stale run in .* is started again (the old one is kept in $sweep/replaced/fp32.1)" "$tmp/fifth.log" ||
  fail "the stale run was not reported as kept: $(cat "$tmp/fifth.log")"
[[ "$(md5sum <"$sweep/replaced/fp32.1/metrics.csv")" == "$(md5sum <"$tmp/fp32.metrics")" ]] ||
  fail "the replaced fp32 run was not kept intact"
[[ -f "$sweep/runs/fp32/compare.done" ]] || fail "the changed fp32 run did not finish"

# 6. runs bounded by train.max_steps (10 of an epoch's 48 steps)
short_common=(--epochs 1 --set data.path="$mnist" --set data.limit_train=6144 --set data.limit_test=1000
              --set train.threads=1 --set train.max_steps=10 --gnuplot "")
short=("$src/configs/mnist_mlp.yaml" --methods fp32,qsgd:bits=4 --out "$tmp/short" "${short_common[@]}")
"$qtrain" compare "${short[@]}" >"$tmp/short.log" 2>&1 || fail "a sweep bounded by train.max_steps failed: $(cat "$tmp/short.log")"
grep -q "^| fp32 | 1 | 0 (10) | " "$tmp/short/report/report.md" ||
  fail "the step-bounded fp32 run is not reported with its steps: $(cat "$tmp/short/report/report.md")"
grep -q "^| bf16 | 1 | 0 (10) | .* | 1.00x | " "$tmp/short/report/report.md" ||
  fail "the default baseline bf16 did not join the runs: $(cat "$tmp/short/report/report.md")"
grep -q "| speedup over bf16 |" "$tmp/short/report/report.md" || fail "the speedups are not over bf16"
grep -q "One seed per method: no confidence interval or test can be given" "$tmp/short/report/report.md" ||
  fail "the one-seed report does not say that no interval can be given"
"$qtrain" compare "${short[@]}" >"$tmp/short2.log" 2>&1 || fail "the step-bounded rerun failed: $(cat "$tmp/short2.log")"
[[ $(grep -c "finished run reused" "$tmp/short2.log") -eq 3 ]] ||
  fail "the step-bounded runs were not reused: $(cat "$tmp/short2.log")"

# 7. seeds
for bad in "--seeds 0" "--seeds a,b" "--seeds 2 --set seed=3" "--baseline int3"; do
  # shellcheck disable=SC2086 # the flag and its value are two words
  if "$qtrain" compare "$src/configs/mnist_mlp.yaml" --methods fp32 --out "$tmp/bad" "${short_common[@]}" $bad 2>"$tmp/err"; then
    fail "$bad accepted"
  fi
  [[ ! -e "$tmp/bad" ]] || fail "$bad created the sweep folder"
done
grep -q "error: --baseline int3: quantization.method must be one of fp32, fp16, bf16" "$tmp/err" ||
  fail "--baseline int3 message: $(cat "$tmp/err")"
seeded=("$src/configs/mnist_mlp.yaml" --methods fp32 --seeds 2 --out "$tmp/seeds" "${short_common[@]}")
"$qtrain" compare "${seeded[@]}" >"$tmp/seeds.log" 2>&1 || fail "the seeded sweep failed: $(cat "$tmp/seeds.log")"
for run in bf16/seed1 bf16/seed2 fp32/seed1 fp32/seed2; do
  [[ -f "$tmp/seeds/runs/$run/compare.done" ]] || fail "no finished run in runs/$run"
done
grep -q "^seed: 2$" "$tmp/seeds/runs/fp32/seed2/config.resolved.yaml" || fail "the seed-2 run did not train with seed 2"
seeds_report="$tmp/seeds/report/report.md"
grep -q "^| fp32 | 2 (1, 2) | 1 | 0 (10) | .* ± .*% | " "$seeds_report" || fail "no mean ± sd row for fp32: $(cat "$seeds_report")"
grep -q "^## 95% confidence intervals over the seeds" "$seeds_report" || fail "no interval table"
grep -q "^- \*\*fp32\*\*: final accuracy: .*(p=" "$seeds_report" || fail "no test of fp32 against bf16: $(cat "$seeds_report")"
"$qtrain" compare "${seeded[@]}" >"$tmp/seeds2.log" 2>&1 || fail "the seeded rerun failed"
[[ $(grep -c "finished run reused" "$tmp/seeds2.log") -eq 4 ]] || fail "the seeded runs were not reused: $(cat "$tmp/seeds2.log")"
"$qtrain" predict --from "$tmp/seeds" --gpus 2 --bandwidth 1gbit >"$tmp/predict_seeds.md" 2>"$tmp/err" ||
  fail "predict of a seeded sweep failed: $(cat "$tmp/err")"
grep -q "^| fp32 seed 2 | " "$tmp/predict_seeds.md" || fail "predict does not name the seeds: $(cat "$tmp/predict_seeds.md")"
"$qtrain" compare --report-only "$tmp/seeds" --baseline fp32 2>"$tmp/err" || fail "--report-only --baseline fp32 failed: $(cat "$tmp/err")"
grep -q "^## Against the baseline: fp32" "$seeds_report" || fail "--report-only --baseline fp32 did not change the baseline"
if "$qtrain" compare --report-only "$tmp/seeds" --baseline onebit 2>"$tmp/err"; then fail "a baseline outside the sweep was accepted"; fi
grep -q "not a method of the sweep in .* (its methods: bf16, fp32)" "$tmp/err" || fail "--report-only --baseline message: $(cat "$tmp/err")"

# 8. schedules side by side
scheduled=("$src/configs/mnist_mlp.yaml" --methods 'fp32,fp32@diloco:inner_steps=4' --baseline fp32 --out "$tmp/sched"
           "${short_common[@]}")
"$qtrain" compare "${scheduled[@]}" >"$tmp/sched.log" 2>&1 || fail "the sweep with a schedule failed: $(cat "$tmp/sched.log")"
grep -q "^  inner_steps: 4$" "$tmp/sched/runs/fp32@diloco_inner_steps4/config.resolved.yaml" ||
  fail "the '@diloco' run did not train under its schedule"
sched_report="$tmp/sched/report/report.md"
grep -q "^| fp32 | 1 | every step | 0 (10) | " "$sched_report" || fail "no per-step row: $(cat "$sched_report")"
grep -q "^| fp32@diloco:inner_steps=4 | 1 | DiLoCo H=4 | 0 (10) | " "$sched_report" || fail "no DiLoCo row: $(cat "$sched_report")"
"$qtrain" predict --from "$tmp/sched" --gpus 4 --bandwidth 10mbit >"$tmp/predict_sched.md" 2>"$tmp/err" ||
  fail "predict of the scheduled sweep failed: $(cat "$tmp/err")"
grep -q "^| fp32@diloco:inner_steps=4 | DiLoCo H=4 | " "$tmp/predict_sched.md" || fail "predict's inputs: $(cat "$tmp/predict_sched.md")"
if "$qtrain" compare "$src/configs/mnist_mlp.yaml" --methods 'fp32@diloco:inner_steps=4:fragments=5' --out "$tmp/bad" \
    "${short_common[@]}" 2>"$tmp/err"; then
  fail "5 fragments of 4 inner steps accepted"
fi
[[ ! -e "$tmp/bad" ]] || fail "a bad schedule created the sweep folder"
grep -q "sync.fragments" "$tmp/err" || fail "bad schedule message: $(cat "$tmp/err")"

if [[ $failures -gt 0 ]]; then echo "$failures failure(s)"; exit 1; fi
echo "compare_sweep: all checks passed"
