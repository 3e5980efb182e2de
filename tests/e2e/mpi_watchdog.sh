#!/usr/bin/env bash
# The watchdog under mpirun (CTest label mpi): one of 4 training ranks is stopped (SIGSTOP: alive but
# silent, as a stalled process or a dead link looks to the others); the job must end within
# communication.timeout_s plus a margin, with a non-zero exit and the watchdog's message naming the
# operation and what the rank was doing. Without the watchdog the job waits for ever (the test's own
# bound then fails it).
# Usage: mpi_watchdog.sh QTRAIN_BINARY SOURCE_DIR   (needs SOURCE_DIR/data/mnist; skips without it)
set -uo pipefail
qtrain=$1
src=$2
mnist="$src/data/mnist"
source "$src/tests/support/real_data.sh"
[[ -f "$mnist/train-images-idx3-ubyte" ]] || skip_without_data mnist "$mnist" "$mnist_hint"
tmp=$(mktemp -d)
job=
cleanup() {
  [[ -n "$job" ]] && pkill -KILL -P "$job" 2>/dev/null
  [[ -n "$job" ]] && kill -KILL "$job" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout_s=3
margin_s=30  # a bound against a hang on a loaded machine, not a speed check
status=0

# A long run (it is never meant to finish), reduce-scatter + allgather so that ranks wait on each other's
# messages, a checkpoint every 20 steps.
mpirun --oversubscribe --bind-to none --mca btl self,vader --mca mpi_yield_when_idle 1 -np 4 \
  "$qtrain" train "$src/configs/mnist_mlp.yaml" --set data.path="$mnist" --set data.limit_train=4096 \
  --set data.limit_test=200 --set train.threads=1 --set output.progress=none --set data.batch_size=32 \
  --set train.epochs=1000 --set quantization.method=qsgd --set communication.timeout_s=$timeout_s \
  --set output.checkpoint_every_steps=20 --set output.dir="$tmp/run" >"$tmp/log" 2>&1 &
job=$!

# Wait until the ranks train (metrics.csv is written after the first epoch; the log says more sooner).
ranks=()
for _ in $(seq 1 600); do
  mapfile -t ranks < <(pgrep -P "$job" -f "qtrain train")
  [[ ${#ranks[@]} -eq 4 && -f "$tmp/run/checkpoint.safetensors" ]] && break
  sleep 0.1
done
if [[ ${#ranks[@]} -ne 4 || ! -f "$tmp/run/checkpoint.safetensors" ]]; then
  echo "FAIL: the 4 ranks did not start training (found ${#ranks[@]} processes)"; tail -5 "$tmp/log"; exit 1
fi
victim=${ranks[2]}
kill -STOP "$victim"
stopped_at=$(date +%s.%N)
ended=0
for _ in $(seq 1 $(((timeout_s + margin_s) * 10))); do
  if ! kill -0 "$job" 2>/dev/null; then ended=1; break; fi
  sleep 0.1
done
elapsed=$(awk -v a="$(date +%s.%N)" -v b="$stopped_at" 'BEGIN { printf "%.1f", a - b }')
if [[ $ended -ne 1 ]]; then
  echo "FAIL: the job still waits $elapsed s after a rank was stopped (communication.timeout_s=$timeout_s)"
  tail -5 "$tmp/log"; exit 1
fi
wait "$job"
rc=$?
job=
echo "the job ended $elapsed s after one rank was stopped, exit code $rc"
if [[ $rc -eq 0 ]]; then echo "FAIL: the job exited 0"; status=1; fi
if ! grep -q "watchdog: no progress for .* s in .*waiting for .*communication.timeout_s is $timeout_s" "$tmp/log"; then
  echo "FAIL: no watchdog message naming the operation and the timeout:"; tail -8 "$tmp/log"; status=1
else
  grep -m1 "watchdog:" "$tmp/log" | sed 's/^/    /'
fi
if ! grep -q "watchdog: .*(step [0-9]*, exchange of bucket\|watchdog: .*(checkpoint at step" "$tmp/log"; then
  echo "FAIL: the watchdog's message does not say which step it was in"; status=1
fi
# The last checkpoint (step 20, or a later one on a slow machine) is intact: the job resumes from it,
# on 4 ranks as it was written, up to step 25.
if [[ $status -eq 0 ]]; then
  if mpirun --oversubscribe --bind-to none --mca btl self,vader --mca mpi_yield_when_idle 1 -np 4 \
       "$qtrain" train --resume "$tmp/run" --set data.path="$mnist" --set train.max_steps=25 \
       --set output.progress=none >"$tmp/resume.log" 2>&1; then
    echo "ok: the run resumes from its last checkpoint"
  else
    echo "FAIL: the run does not resume after the watchdog ended it"; tail -5 "$tmp/resume.log"; status=1
  fi
fi
[[ $status -eq 0 ]] && echo "ok: the watchdog ended the job with its message"
exit $status
