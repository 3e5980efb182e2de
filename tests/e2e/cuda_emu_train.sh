#!/usr/bin/env bash
# The CUDA path end to end, under the CUDA emulator (label cuda_emu): 2 ranks train the MNIST MLP for
# 20 steps with device: cuda and communication.backend: nccl (the emulator's NCCL over MPI, one
# emulated GPU per rank) and --debug-check-replicas, for a quantizer of each family, then 4 ranks
# with the two-level exchange; the same run on device: cpu with build/qtrain must reach the same
# losses and accuracy.
#
# Tolerance, and why not bit for bit: the dense layers' GEMMs are the same library on both sides (the
# emulator's cuBLAS is OpenBLAS with the same operands), and the optimizers and quantizers are bit for
# bit by their own tests, but the softmax cross-entropy and the bias gradients sum over the batch in
# the CUDA kernels' block order, not the CPU's, so the gradients differ in their last bits from the
# first step (median relative difference 4e-7). SGD keeps such differences at rounding scale; a
# stochastic or error-feedback quantizer may put one value on another level when its input moved by an
# ulp. So losses must agree to a relative 1e-3 and test accuracy to 1 point (seen: 1e-5 and 0 points).
# RMSProp (the config's optimizer) is replaced by SGD with momentum here: in its first steps it turns
# every gradient, however small, into a step of lr * 10 * sign(g), so last-bit noise in near-zero
# gradients becomes whole steps and the runs part within a few steps, on any two implementations.
# The model is the config's with hidden layers of 256 instead of 1024 (the same layers and kernels):
# the emulated kernels cost in proportion to the parameters (1.86M -> 0.27M), and the emulated runs
# were nearly all of this test's time (167 s with 1024 on 2 AMD cores, 523 s on a slow Intel guest;
# docs/design.md, "Tests and what they cost"). piece_mb shrinks with it, to keep several pieces.
# Usage: cuda_emu_train.sh QTRAIN CUEMU_QTRAIN SOURCE_DIR   (needs SOURCE_DIR/data/mnist; skips without)
set -uo pipefail
qtrain=$1
emulated=$2
src=$3
mnist="$src/data/mnist"
source "$src/tests/support/real_data.sh"
[[ -f "$mnist/train-images-idx3-ubyte" ]] || skip_without_data mnist "$mnist" "$mnist_hint"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
model="{input: [1, 28, 28], loss: softmax_cross_entropy, layers: [{type: flatten}, {type: dropout, p: 0.2},
  {type: dense, units: 256}, {type: relu}, {type: dropout, p: 0.3}, {type: dense, units: 256}, {type: relu},
  {type: dropout, p: 0.3}, {type: dense, units: 10}]}"
common=(--set "model=$model" --set data.path="$mnist" --set data.limit_train=4096 --set data.limit_test=500 --set train.threads=1
        --set output.progress=none --set data.batch_size=64 --set train.max_steps=20
        --set "optimizer={type: sgd, lr: 0.05, momentum: 0.9}" --debug-check-replicas 5)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The last line of metrics.csv: train_loss train_accuracy test_loss test_accuracy.
final() { tail -1 "$1/metrics.csv" | awk -F, '{print $5, $6, $7, $8}'; }

launch() { mpirun --oversubscribe --bind-to none --mca btl self,vader --mca mpi_yield_when_idle 1 "$@"; }
# train_emulated RANKS RUN_DIR ARGS...: the config with ARGS on RANKS emulated GPUs over NCCL, its
# output in RUN_DIR.log.
train_emulated() {
  local ranks=$1 dir=$2
  shift 2
  CUEMU_DEVICES="$ranks" launch -np "$ranks" "$emulated" train \
    "$src/configs/mnist_mlp.yaml" "${common[@]}" "$@" --set device=cuda --set communication.backend=nccl \
    --set output.dir="$dir" </dev/null >"$dir.log" 2>&1
}

# run_pair LABEL RANKS PATTERN ARGS...: the config with ARGS on RANKS CPU ranks (build/qtrain) and
# on RANKS emulated GPUs over NCCL; the emulated run's train.log must show NCCL and PATTERN, and both
# runs must end with losses and accuracy within the tolerance.
run_pair() {
  local label=$1 ranks=$2 pattern=$3
  shift 3
  local cpu="$tmp/$label-cpu" gpu="$tmp/$label-cuda"
  if ! launch -np "$ranks" "$qtrain" train "$src/configs/mnist_mlp.yaml" "${common[@]}" "$@" --set device=cpu \
         --set output.dir="$cpu" </dev/null >"$cpu.log" 2>&1; then
    fail "$label on the CPU"; tail -3 "$cpu.log" | sed "s/^/    /"; return
  fi
  if ! train_emulated "$ranks" "$gpu" "$@"; then
    fail "$label on emulated GPUs"; grep -v "^\[20" "$gpu.log" | tail -5 | sed "s/^/    /"; return
  fi
  if ! grep -q "over nccl" "$gpu/train.log" || ! grep -qF "$pattern" "$gpu/train.log"; then
    fail "$label: the emulated run's log shows no NCCL${pattern:+ or no '$pattern'}"; return
  fi
  local cl ca ctl cta gl ga gtl gta
  read -r cl ca ctl cta <<<"$(final "$cpu")"
  read -r gl ga gtl gta <<<"$(final "$gpu")"
  if awk -v a="$cl" -v b="$gl" -v c="$ctl" -v d="$gtl" -v e="$cta" -v f="$gta" 'function abs(x) { return x < 0 ? -x : x }
       BEGIN { exit !(abs(a - b) <= 1e-3 * abs(a) && abs(c - d) <= 1e-3 * abs(c) && abs(e - f) <= 0.01) }'; then
    echo "ok: $label: train loss $cl (cpu) $gl (cuda), test loss $ctl / $gtl, test accuracy $cta / $gta"
  else
    fail "$label: cpu train loss $cl test loss $ctl accuracy $cta; cuda $gl $gtl $gta (beyond the tolerance)"
  fi
}

# One method per family: plain fp32 (NCCL all-reduce), a cast (bf16), a stochastic scale method (qsgd,
# reduce-scatter + allgather), error feedback with column scales (onebit), sparse (topk, allgather),
# low rank (powersgd: rank 2 from step 5 on, its P and Q in NCCL all-reduces), sparse at shared
# indices (randomk: the compact allreduce over NCCL), and the majority vote (signsgd, whose update is
# lr * vote: a small learning rate without momentum).
for method in fp32 bf16 qsgd onebit topk randomk signsgd powersgd; do
  extra=()
  [[ $method == powersgd ]] && extra=(--set quantization.rank=2 --set quantization.start_iter=5)
  [[ $method == signsgd ]] && extra=(--set "optimizer={type: sgd, lr: 0.001, momentum: 0}")
  run_pair "$method" 2 "" "${extra[@]}" --set quantization.method="$method"
done
# DeMo (sync.type demo): no exchange; the codec's kernels encode each rank's momentum, the payloads
# cross NCCL's communicator as host bytes (all_gather_bytes), and every rank decodes them on its GPU.
# The codec is the CPU's bits (test_demo_codec_cuda); the gradients are not, as above.
run_pair demo 2 "DeMo: DCT-II" --set sync.type=demo --set sync.topk=4 --set "optimizer={type: sgd, lr: 0.001}"
# On emulated GPUs over NCCL the reduce-scatter + allgather keeps every payload in device memory
# (device byte collectives); communication.payload_path host takes the host path instead. Both must
# end in the same bits: parameters, momentum and every rank's error-feedback residuals. qsgd and
# onebit repeat their runs above on the host path, and so do the allgather algorithm's topk
# (variable-size payloads, whose headers the device path reads on the host) and dettmers8 (fixed
# sizes, its scale read on the device); topk also runs both ways through reduce-scatter + allgather,
# in few pieces.
state_of() { "$src/tests/support/checkpoint_tensors.py" "$1"; }
host_path_same_bits() {  # host_path_same_bits LABEL DEVICE_RUN_DIR ARGS...
  local label=$1 device_run=$2 host_run="$tmp/$1-host-path"
  shift 2
  if ! train_emulated 2 "$host_run" "$@" --set communication.payload_path=host; then
    fail "$label on the host path"; grep -v "^\[20" "$host_run.log" | tail -5 | sed "s/^/    /"; return
  fi
  if diff <(state_of "$device_run") <(state_of "$host_run") >"$tmp/diff"; then
    echo "ok: $label: the device and the host payload paths end in the same bits ($(state_of "$host_run" | wc -l) tensors)"
  else
    fail "$label: the device and the host payload paths differ:"; head -3 "$tmp/diff" | sed "s/^/    /"
  fi
}
for method in qsgd onebit topk; do
  host_path_same_bits "$method" "$tmp/$method-cuda" --set quantization.method="$method"
done
if train_emulated 2 "$tmp/dettmers8-cuda" --set quantization.method=dettmers8; then
  host_path_same_bits dettmers8 "$tmp/dettmers8-cuda" --set quantization.method=dettmers8
else
  fail "dettmers8 on emulated GPUs"; tail -3 "$tmp/dettmers8-cuda.log" | sed "s/^/    /"
fi
topk_rs=(--set quantization.method=topk --set communication.algorithm=reduce_scatter_allgather
         --set communication.piece_mb=0.125 --set train.max_steps=6)
if train_emulated 2 "$tmp/topk-rs" "${topk_rs[@]}"; then
  host_path_same_bits topk-reduce-scatter "$tmp/topk-rs" "${topk_rs[@]}"
else
  fail "topk through reduce-scatter + allgather on emulated GPUs"; tail -3 "$tmp/topk-rs.log" | sed "s/^/    /"
fi

# Two levels (communication.hierarchy) on NCCL: 4 ranks as 2 nodes of 2 (ranks_per_node), each node
# summing in bf16 over its own NCCL communicator (ncclReduceScatter) and local rank l of each node
# exchanging stripe l with qsgd 4-bit over another; the same run on the CPU over MPI.
run_pair two-levels 4 "two levels: 2 node(s) x 2 rank(s)" --set communication.hierarchy=two_level \
  --set communication.ranks_per_node=2 --set communication.intra=bf16 --set quantization.method=qsgd \
  --set quantization.bits=4 --set train.max_steps=12
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
