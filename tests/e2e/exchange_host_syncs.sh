#!/usr/bin/env bash
# The GPU path's host round trips, counted by the CUDA emulator (label cuda_emu): 2 ranks train an MLP
# over NCCL with overlap on, and CUEMU_STATS (tests/cuemu/README.md) counts the host's waits
# (host_syncs: stream, device and event synchronizations and blocking copies) and the copies to the
# host. A step's share is the difference between a run of S2 steps and one of S1 steps, over S2 - S1:
# start-up, the evaluation and the checkpoint at the end are the same in both and cancel.
#
# The targets (issue "The GPU path at its floor"): per step at most kMaxSyncs host syncs, and the same
# counts for an MLP of 3 dense layers and one of 12: nothing per tensor. Methods: qsgd 4-bit
# (reduce-scatter + allgather with device payloads), fp8 and nvfp4 (the same, with a scale in the
# header that the decoders read on the device), dettmers8 (the allgather algorithm with device
# payloads, its scale read on the device too), adaptive (reduce-scatter + allgather, its payloads in
# slots of their largest size, the count read on the device), randomk (allreduce_compact: its key
# read on the device) and fp32 (NCCL all-reduce).
# Usage: exchange_host_syncs.sh CUEMU_QTRAIN SOURCE_DIR   (needs SOURCE_DIR/data/mnist; skips without)
set -uo pipefail
emulated=$1
src=$2
mnist="$src/data/mnist"
source "$src/tests/support/real_data.sh"
[[ -f "$mnist/train-images-idx3-ubyte" ]] || skip_without_data mnist "$mnist" "$mnist_hint"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
max_syncs=4
s1=3
s2=7
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A config of DENSE hidden layers of 32 units (small: the emulator runs every thread on the CPU).
write_config() {
  local dense=$1 out=$2
  {
    echo "name: host-syncs-$dense"
    echo "seed: 1"
    echo "data: {dataset: mnist, path: $mnist, batch_size: 32, limit_train: 1024, limit_test: 64}"
    echo "model:"
    echo "  input: [1, 28, 28]"
    echo "  layers:"
    echo "    - {type: flatten}"
    for ((i = 1; i < dense; ++i)); do
      echo "    - {type: dense, units: 32}"
      echo "    - {type: relu}"
    done
    echo "    - {type: dense, units: 10}"
    echo "  loss: softmax_cross_entropy"
    echo "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}"
    echo "train: {epochs: 1, threads: 1}"
  } >"$out"
}

# counts CONFIG METHOD STEPS: "host_syncs d2h_copies" summed over the 2 ranks of a run of STEPS steps.
counts() {
  local config=$1 method=$2 steps=$3 stats
  # A file of its own per run (mktemp): the emulator appends, and a name shared with an earlier run
  # (as $RANDOM's could be, about once in 250 runs of this test) would add that run's counts.
  stats=$(mktemp "$tmp/stats-XXXXXX.jsonl")
  local dir="$tmp/run-$(basename "$config" .yaml)-$method-$steps"
  if ! CUEMU_DEVICES=2 CUEMU_STATS="$stats" mpirun --oversubscribe --bind-to none --mca btl self,vader \
      --mca mpi_yield_when_idle 1 -x CUEMU_STATS -x CUEMU_DEVICES -np 2 "$emulated" train "$config" \
      --set device=cuda --set communication.backend=nccl --set communication.overlap=true \
      --set quantization.method="$method" --set quantization.min_numel=0 ${bits:+--set quantization.bits=$bits} \
      --set train.max_steps="$steps" --set output.progress=none \
      --set output.dir="$dir" </dev/null >"$dir.log" 2>&1; then
    echo "training failed: $(tail -3 "$dir.log")" >&2
    return 1
  fi
  python3 - "$stats" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
if len(rows) != 2:
    sys.exit(f"expected one stats line per rank (2) in {sys.argv[1]}, got {len(rows)}")
# mpirun's launcher is not emulated: only the ranks write lines.
print(sum(r["host_syncs"] for r in rows), sum(r["d2h_copies"] for r in rows))
PY
}

for method in qsgd fp8 nvfp4 dettmers8 adaptive randomk fp32; do
  bits=""
  [[ $method == qsgd ]] && bits=4
  declare -A per_step=()
  for dense in 3 12; do
    config="$tmp/mlp$dense.yaml"
    write_config "$dense" "$config"
    a=$(counts "$config" "$method" $s1) || { fail "$method, $dense dense layers, $s1 steps"; continue; }
    b=$(counts "$config" "$method" $s2) || { fail "$method, $dense dense layers, $s2 steps"; continue; }
    read -r sync_a d2h_a <<<"$a"
    read -r sync_b d2h_b <<<"$b"
    # Per step and rank (2 ranks).
    syncs=$(python3 -c "print(($sync_b - $sync_a) / ($s2 - $s1) / 2)")
    d2h=$(python3 -c "print(($d2h_b - $d2h_a) / ($s2 - $s1) / 2)")
    per_step[$dense]="$syncs $d2h"
    echo "$method, $dense dense layers: $syncs host syncs and $d2h copies to the host per step and rank"
    python3 -c "import sys; sys.exit(0 if $syncs <= $max_syncs else 1)" ||
      fail "$method, $dense dense layers: $syncs host syncs per step, more than $max_syncs"
  done
  if [[ -n "${per_step[3]:-}" && "${per_step[3]}" != "${per_step[12]:-}" ]]; then
    fail "$method: per step, 3 dense layers give '${per_step[3]}' (syncs, copies) and 12 give '${per_step[12]:-}': a cost per tensor"
  fi
  unset per_step
done
[[ $failures -eq 0 ]] && echo "exchange_host_syncs: ok"
exit $((failures > 0))
