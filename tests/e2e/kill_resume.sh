#!/usr/bin/env bash
# Kill anywhere, resume exactly (CTest label mpi): a 2-rank job is killed with SIGKILL (every rank and
# mpirun at once) at random moments, at least 20 times per method, including during checkpoint
# writes (a checkpoint every step), and resumed each time from whatever the run directory holds. The
# end state (parameters, optimizer state, every rank's error-feedback residuals) must be
# bit-identical to an uninterrupted run. Methods: onebit and qsgd, reduce-scatter + allgather.
# Usage: kill_resume.sh QTRAIN_BINARY SOURCE_DIR [KILLS]   (needs SOURCE_DIR/data/mnist; skips without it)
set -uo pipefail
qtrain=$1
src=$2
kills=${3:-20}
mnist="$src/data/mnist"
source "$src/tests/support/real_data.sh"
[[ -f "$mnist/train-images-idx3-ubyte" ]] || skip_without_data mnist "$mnist" "$mnist_hint"
tmp=$(mktemp -d)
job=
cleanup() {
  [[ -n "$job" ]] && { pkill -KILL -P "$job" 2>/dev/null; kill -KILL "$job" 2>/dev/null; }
  rm -rf "$tmp"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca mpi_yield_when_idle 1 -np 2)
steps=400
RANDOM=${KILL_RESUME_SEED:-7}  # the kill moments are random but the same on every run of the test
status=0

# A small model keeps each checkpoint write short, so that kills land before, inside and after them.
cat >"$tmp/small.yaml" <<'EOF_CFG'
name: kill-resume
data: {dataset: mnist, batch_size: 32}
model:
  input: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: dense, units: 64}
    - {type: relu}
    - {type: dense, units: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 100}
EOF_CFG

train() {  # train RUN_DIR METHOD [--resume]
  local dir=$1 method=$2
  shift 2
  local args=(--set data.path="$mnist" --set data.limit_train=4096 --set data.limit_test=100 --set train.threads=1
              --set output.progress=none --set train.max_steps=$steps --set output.checkpoint_every_steps=1
              --set quantization.method="$method" --set quantization.min_numel=0 --set quantization.error_feedback=true
              --set communication.algorithm=reduce_scatter_allgather)
  if [[ $# -gt 0 ]]; then "${mpirun[@]}" "$qtrain" train --resume "$dir" "${args[@]}"
  else "${mpirun[@]}" "$qtrain" train "$tmp/small.yaml" "${args[@]}" --set output.dir="$dir"; fi
}

# The kill reaches every process at once, but one may take a moment to go (a rank in a system call;
# mpirun's daemon). A resume started before they are gone races them (that made the last resume fail
# once under load): wait until no process names the run dir.
wait_gone() {  # wait_gone RUN_DIR
  local waited=0
  while pgrep -f -- "$1" >/dev/null && [[ $waited -lt 300 ]]; do sleep 0.1; waited=$((waited + 1)); done
  if pgrep -f -- "$1" >/dev/null; then echo "FAIL: processes of $1 outlived their killed mpirun by 30 s"; exit 1; fi
}

# The state a run ends with: one line per tensor of its checkpoint files (the metadata, which holds
# wall-clock times, is left out).
state_of() { "$src/tests/support/checkpoint_tensors.py" "$1"; }

for method in onebit qsgd; do
  started=${EPOCHREALTIME/./}
  train "$tmp/ref-$method" "$method" >"$tmp/ref.log" 2>&1 || { echo "FAIL: the uninterrupted $method run"; tail -3 "$tmp/ref.log"; exit 1; }
  # How long a whole run takes here, start-up included: the kills land anywhere inside it. A fixed
  # window (it was 0.5-2.5 s, when start-up took a second) let every kill land after the last step
  # once start-up and steps got faster, and the test then interrupted nothing.
  run_ms=$(((${EPOCHREALTIME/./} - started) / 1000))
  dir="$tmp/killed-$method"
  killed=0 attempts=0 finished=0 during_write=0
  at=()  # the committed step after each kill
  while [[ $killed -lt $kills && $attempts -lt $((kills * 4)) ]]; do
    attempts=$((attempts + 1))
    if [[ -f "$dir/checkpoint.safetensors" ]]; then train "$dir" "$method" --resume >>"$tmp/killed.log" 2>&1 &
    else rm -rf "$dir"; train "$dir" "$method" >>"$tmp/killed.log" 2>&1 & fi
    job=$!
    # 0.1 s .. half the whole run's time: start-up, training steps and checkpoint writes alike. Half,
    # because a resumed leg has less left to do: over the whole time most legs finished first (24
    # restarts from scratch for 20 kills under ctest -j2), and the committed steps still walk the whole
    # run as each leg resumes where the last was killed.
    half_ms=$((run_ms / 2 > 200 ? run_ms / 2 - 100 : 100))
    delay_ms=$((100 + (RANDOM * 32768 + RANDOM) % half_ms))
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    if kill -0 "$job" 2>/dev/null; then
      # A write in progress: a temporary file, or rank files of a step not yet committed (two per rank).
      if ls -a "$dir" 2>/dev/null | grep -q '\.tmp\.' ||
         [[ $(ls "$dir" 2>/dev/null | grep -c '^checkpoint\.rank0\.step') -gt 1 ]]; then
        during_write=$((during_write + 1))
      fi
      # Every rank (their command lines name the run dir) and mpirun at once: killed through mpirun
      # alone, the ranks went on for up to a second, long enough to finish a 400-step run.
      pkill -KILL -f -- "$dir" 2>/dev/null
      pkill -KILL -P "$job" 2>/dev/null
      kill -KILL "$job" 2>/dev/null
      killed=$((killed + 1))
    fi
    wait "$job" 2>/dev/null
    job=
    wait_gone "$dir"
    at+=("$(state_of "$dir" 2>/dev/null | awk '$1 == "checkpoint.safetensors" {print $3; exit}')")
    if grep -q "step $steps\b" <(state_of "$dir" 2>/dev/null) && [[ $killed -lt $kills ]]; then
      rm -rf "$dir"  # it finished before enough kills: start the run over
      finished=$((finished + 1))
    fi
  done
  # The last leg: resume (or start) and run to the end.
  if [[ -f "$dir/checkpoint.safetensors" ]]; then train "$dir" "$method" --resume >>"$tmp/killed.log" 2>&1
  else train "$dir" "$method" >>"$tmp/killed.log" 2>&1; fi || { echo "FAIL: $method: the last resume"; tail -5 "$tmp/killed.log"; status=1; continue; }
  echo "$method: a run takes ${run_ms} ms; $killed kills (${during_write} with a checkpoint being written), $finished runs finished between kills;" \
       "committed steps after each: ${at[*]:-none}"
  [[ $killed -ge $kills ]] || { echo "FAIL: $method: only $killed kills landed"; status=1; }
  # Most kills must interrupt the run before its last step (a checkpoint below it, or none yet).
  interrupted=0
  for a in "${at[@]}"; do [[ -z $a || $a -lt $steps ]] && interrupted=$((interrupted + 1)); done
  [[ $interrupted -ge $((kills / 2)) ]] ||
    { echo "FAIL: $method: only $interrupted of $killed kills interrupted training (a run takes ${run_ms} ms)"; status=1; }
  if diff <(state_of "$tmp/ref-$method") <(state_of "$dir") >"$tmp/diff"; then
    echo "ok: $method: after $killed kills the state is bit-identical to the uninterrupted run ($(state_of "$dir" | wc -l) tensors)"
  else
    echo "FAIL: $method: the state differs from the uninterrupted run:"; head -5 "$tmp/diff"; status=1
  fi
done
exit $status
