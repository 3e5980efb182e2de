#!/usr/bin/env bash
# Data-parallel training under mpirun on the CPU (CTest label mpi):
#  1. every method and algorithm trains for a few steps on 2 ranks with --debug-check-replicas
#     (bit-identical parameters on every rank, checked every 5 steps);
#  1b. a residual batch-norm net on 2 ranks: replicas and averaged buffers checked, resumed;
#  2. 4 ranks, 50 steps, replicas checked every 10 steps, for an error-feedback method;
#  2b. reduce-scatter + allgather in pipelined pieces, resumed, and a resume with other pieces refused;
#  2c. 4 ranks in two levels (nodes of 2), resumed bit for bit;
#  2d. PowerSGD: replicas identical, a resume bit for bit, a sensible accuracy in 300 steps;
#  2e. DiLoCo (sync.type diloco) with qsgd pseudo-gradients: replicas identical at every outer step,
#      a resume from inside an inner period bit for bit (per-rank parameters and optimizer state);
#  2f. Streaming DiLoCo (2 fragments, overlap 3: one lands at the step the other is sent): global
#      parameters identical every step, a resume inside a fragment's flight exact;
#  2g. DeMo (sync.type demo) on 4 ranks: replicas identical after every step, each rank's momentum its
#      own, a resume bit for bit, the payload's bytes in metrics.csv;
#  3. ranks started with different configs stop at start-up with a clear message;
#  4. a rank that dies (SIGKILL) stops the job within seconds instead of hanging;
#  5. communication.backend: nccl fails with a clear message when there is no GPU.
# Usage: mpi_train.sh QTRAIN_BINARY SOURCE_DIR   (needs SOURCE_DIR/data/mnist; skips without it)
set -uo pipefail
qtrain=$1
src=$2
mnist="$src/data/mnist"
source "$src/tests/support/real_data.sh"
[[ -f "$mnist/train-images-idx3-ubyte" ]] || skip_without_data mnist "$mnist" "$mnist_hint"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Shared memory between the ranks; ranks yield while they wait (2 cores, several ranks).
mpirun=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca mpi_yield_when_idle 1)
cfg="$src/configs/mnist_mlp.yaml"
common=(--set data.path="$mnist" --set data.limit_train=4096 --set data.limit_test=500 --set train.threads=1
        --set output.progress=none --set data.batch_size=64)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# 1. every method x algorithm on 2 ranks
while read -r method algorithm; do
  out="$tmp/run-$method-$algorithm"
  if "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=12 \
       --set output.dir="$out" --set communication.algorithm="$algorithm" --set quantization.method="$method" \
       --debug-check-replicas 4 </dev/null >"$tmp/log" 2>&1; then
    echo "ok: 2 ranks, $method $algorithm"
  else
    fail "2 ranks, $method $algorithm"; grep -v "^\[20" "$tmp/log" | head -3 | sed "s/^/    /"
  fi
done <<'EOF_CASES'
fp32 allreduce
fp16 allreduce
bf16 allreduce
dettmers8 allgather
dettmers8 reduce_scatter_allgather
onebit reduce_scatter_allgather
onebit allgather
qsgd reduce_scatter_allgather
qsgd allgather
adaptive reduce_scatter_allgather
topk allgather
EOF_CASES

# 1b. a residual net with batch norm: parameters identical every 4 steps, running statistics averaged
#     identically on both ranks before each evaluation and checkpoint (--debug-check-replicas checks
#     both), and a resume from the checkpoint on 2 ranks
cat >"$tmp/bn.yaml" <<'EOF_BN'
name: mpi-bn
data: {dataset: mnist}
model:
  input: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: dense, units: 32, name: stem}
    - repeat: 2
      name: block
      layers:
        - {type: dense, units: 32}
        - {type: batchnorm1d, name: bn}
        - {type: relu}
        - {type: add, inputs: [relu1, input]}
    - {type: dense, units: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
EOF_BN
if "${mpirun[@]}" -np 2 "$qtrain" train "$tmp/bn.yaml" "${common[@]}" --set train.max_steps=12 \
     --set output.dir="$tmp/bn" --set quantization.method=qsgd --debug-check-replicas 4 >"$tmp/log" 2>&1 &&
   "${mpirun[@]}" -np 2 "$qtrain" train --resume "$tmp/bn" "${common[@]}" --set train.max_steps=20 \
     --set quantization.method=qsgd --debug-check-replicas 4 >"$tmp/log" 2>&1; then
  echo "ok: 2 ranks, residual batch-norm net, buffers averaged identically, resumed"
else
  fail "2 ranks, residual batch-norm net"; tail -5 "$tmp/log" | sed 's/^/    /'
fi

# 2. 4 ranks, 50 steps, error feedback (onebit), checked every 10 steps
if "${mpirun[@]}" -np 4 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=50 \
     --set output.dir="$tmp/np4" --set quantization.method=onebit --debug-check-replicas 10 >"$tmp/log" 2>&1; then
  echo "ok: 4 ranks, 50 steps, onebit, replicas identical"
else
  fail "4 ranks, 50 steps"; tail -5 "$tmp/log" | sed 's/^/    /'
fi

# 2b. reduce-scatter + allgather in pieces (onebit, 0.5 MB pieces: about 3 per stripe of the first
#     layer): replicas identical, resumed; resuming with whole stripes is refused, naming piece_mb
pieces=(--set quantization.method=onebit --set communication.piece_mb=0.5 --debug-check-replicas 4)
if "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=12 \
     --set output.dir="$tmp/pieces" "${pieces[@]}" >"$tmp/log" 2>&1 &&
   "${mpirun[@]}" -np 2 "$qtrain" train --resume "$tmp/pieces" "${common[@]}" --set train.max_steps=20 \
     "${pieces[@]}" >"$tmp/log" 2>&1; then
  echo "ok: 2 ranks, onebit in pipelined pieces, replicas identical, resumed"
else
  fail "2 ranks, onebit in pieces"; tail -5 "$tmp/log" | sed 's/^/    /'
fi
"${mpirun[@]}" -np 2 "$qtrain" train --resume "$tmp/pieces" "${common[@]}" --set train.max_steps=24 \
  --set quantization.method=onebit --set communication.piece_mb=0 >"$tmp/log" 2>&1
if [[ $? -ne 0 ]] && grep -q "communication.piece_mb" "$tmp/log"; then
  echo "ok: resuming pieces as whole stripes: $(grep -m1 -o 'tensor .*' "$tmp/log" | cut -c1-100)..."
else
  fail "resuming pieces as whole stripes was not a clear error"; tail -5 "$tmp/log" | sed 's/^/    /'
fi

# 2c. two levels (communication.hierarchy, nodes of 2 ranks on 4), in 4 chunks overlapping backward
#     (piece_mb 1): replicas identical every 4 steps, and 8 steps + a resume of 8 end with the
#     parameters and every rank's residuals of 16 straight
two=(--set quantization.method=onebit --set communication.hierarchy=two_level --set communication.ranks_per_node=2
     --set communication.piece_mb=1 --debug-check-replicas 4)
tensors() { "$src/tests/support/checkpoint_tensors.py" "$1"; }
if "${mpirun[@]}" -np 4 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=16 --set output.dir="$tmp/two" \
     "${two[@]}" >"$tmp/log" 2>&1 &&
   grep -q "two levels: 2 node(s) x 2 rank(s).*in 4 chunks" "$tmp/two/train.log" &&
   "${mpirun[@]}" -np 4 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=8 --set output.dir="$tmp/two-r" \
     "${two[@]}" >"$tmp/log" 2>&1 &&
   "${mpirun[@]}" -np 4 "$qtrain" train --resume "$tmp/two-r" "${common[@]}" --set train.max_steps=16 \
     "${two[@]}" >"$tmp/log" 2>&1 &&
   diff <(tensors "$tmp/two") <(tensors "$tmp/two-r") >/dev/null &&
   [[ $(tensors "$tmp/two" | grep -c "/inter/\| inter/") -gt 0 ]]; then
  echo "ok: 4 ranks in two levels (2 nodes x 2): replicas identical, 8 + resumed 8 steps = 16 straight, bit for bit"
else
  fail "4 ranks in two levels"; tail -5 "$tmp/log" | sed 's/^/    /'
fi

# 2d. PowerSGD (rank 2, compressing from step 4) on 2 ranks: replicas identical; 12 steps + resume +
#     8 steps give the parameters and optimizer state of 20 uninterrupted steps bit for bit (its Q and
#     residuals come back from the rank files); and 300 steps reach a sensible test accuracy
psgd=(--set quantization.method=powersgd --set quantization.rank=2 --set quantization.start_iter=4
      --debug-check-replicas 4)
# The tensor bytes of a safetensors file (after its 8-byte header length and JSON header, which holds
# the run directory).
tensor_bytes() { local n; n=$(od -An -t u8 -N8 "$1" | tr -d ' '); tail -c +$((9 + n)) "$1" | md5sum; }
if "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=20 \
     --set output.dir="$tmp/psgd_full" "${psgd[@]}" >"$tmp/log" 2>&1 &&
   "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=12 \
     --set output.dir="$tmp/psgd_split" "${psgd[@]}" >"$tmp/log" 2>&1 &&
   "${mpirun[@]}" -np 2 "$qtrain" train --resume "$tmp/psgd_split" "${common[@]}" --set train.max_steps=20 \
     "${psgd[@]}" >"$tmp/log" 2>&1; then
  if [[ "$(tensor_bytes "$tmp/psgd_full/checkpoint.safetensors")" == "$(tensor_bytes "$tmp/psgd_split/checkpoint.safetensors")" ]]; then
    echo "ok: 2 ranks, powersgd, replicas identical, 12 steps + resume + 8 steps = 20 steps bit for bit"
  else
    fail "2 ranks, powersgd: the resumed run's parameters differ from the uninterrupted run's"
  fi
else
  fail "2 ranks, powersgd"; tail -5 "$tmp/log" | sed 's/^/    /'
fi
if "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set data.limit_train=16384 --set train.max_steps=300 \
     --set output.dir="$tmp/psgd_acc" --set quantization.method=powersgd --set quantization.rank=2 \
     --set quantization.start_iter=10 >"$tmp/log" 2>&1; then
  acc=$(tail -n1 "$tmp/psgd_acc/metrics.csv" | cut -d, -f8)
  if awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }'; then
    echo "ok: 2 ranks, powersgd rank 2, 300 steps: test accuracy $acc"
  else
    fail "2 ranks, powersgd rank 2, 300 steps: test accuracy $acc < 0.9"
  fi
else
  fail "2 ranks, powersgd 300 steps"; tail -5 "$tmp/log" | sed 's/^/    /'
fi

# 2e. DiLoCo every 5 steps on 2 ranks, qsgd 4-bit pseudo-gradients with error feedback: the parameters
#     identical on both ranks after every outer step (checked every 5 steps); 12 steps (a checkpoint
#     inside the third inner period, where the replicas differ) + a resume to 23 give every rank's
#     tensors of 23 uninterrupted steps bit for bit; the evaluation says it used the global parameters.
diloco=(--set sync.type=diloco --set sync.inner_steps=5 --set quantization.method=qsgd
        --set quantization.error_feedback=true --debug-check-replicas 5)
if "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=23 --set output.dir="$tmp/dl" \
     "${diloco[@]}" >"$tmp/log" 2>&1 &&
   "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=12 --set output.dir="$tmp/dl-r" \
     "${diloco[@]}" >"$tmp/log" 2>&1 &&
   [[ $(tensors "$tmp/dl-r" | grep -c " replica/") -gt 0 ]] &&
   "${mpirun[@]}" -np 2 "$qtrain" train --resume "$tmp/dl-r" "${common[@]}" --set train.max_steps=23 \
     "${diloco[@]}" >"$tmp/log" 2>&1 &&
   diff <(tensors "$tmp/dl") <(tensors "$tmp/dl-r") >/dev/null &&
   grep -q "evaluating the global parameters of sync.type diloco" "$tmp/dl/train.log"; then
  echo "ok: 2 ranks, diloco every 5 steps, replicas identical at outer steps, 12 + resumed 11 = 23 straight"
else
  fail "2 ranks, diloco"; tail -5 "$tmp/log" | sed 's/^/    /'
fi

# 2f. Streaming DiLoCo on 2 ranks: 2 fragments synced in turn every 6 steps, each merged 3 steps after it
#     is sent (its exchange on the exchange thread meanwhile), at the step the other fragment is sent
#     (the exchanges share the communicator: the one due lands before the other begins), qsgd 4-bit pseudo-gradients: the global
#     parameters identical on both ranks at every step (checked every step); 9 steps (a checkpoint inside
#     fragment 1's flight: sent at 9, merged at 12) + a resume to 20 give every rank's tensors of 20
#     uninterrupted steps bit for bit.
streaming=(--set sync.type=diloco --set sync.inner_steps=6 --set sync.fragments=2 --set sync.overlap=3
           --set quantization.method=qsgd --debug-check-replicas 1)
if "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=20 --set output.dir="$tmp/sd" \
     "${streaming[@]}" >"$tmp/log" 2>&1 &&
   "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=9 --set output.dir="$tmp/sd-r" \
     "${streaming[@]}" >"$tmp/log" 2>&1 &&
   [[ $(tensors "$tmp/sd-r" | grep -c "in_flight") -gt 0 ]] &&
   "${mpirun[@]}" -np 2 "$qtrain" train --resume "$tmp/sd-r" "${common[@]}" --set train.max_steps=20 \
     "${streaming[@]}" >"$tmp/log" 2>&1 &&
   diff <(tensors "$tmp/sd") <(tensors "$tmp/sd-r") >/dev/null; then
  echo "ok: 2 ranks, streaming diloco (2 fragments, overlap 3), global parameters identical every step, 9 + resumed 11 = 20 straight"
else
  fail "2 ranks, streaming diloco"; tail -5 "$tmp/log" | sed 's/^/    /'
fi

# 2g. DeMo on 4 ranks, chunks of 64 with the top 4 DCT coefficients: the parameters identical on every
#     rank after every step (checked every step), the momenta different (each rank's own, in its own
#     file); 6 steps + a resume to 12 give every file of 12 uninterrupted steps bit for bit; bytes per
#     step in metrics.csv are the payload's times 3 (an allgather to 3 other ranks).
demo=(--set sync.type=demo --set sync.topk=4 --set "optimizer={type: sgd, lr: 0.001}" --debug-check-replicas 1)
if "${mpirun[@]}" -np 4 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=12 --set output.dir="$tmp/demo" \
     "${demo[@]}" >"$tmp/log" 2>&1 &&
   "${mpirun[@]}" -np 4 "$qtrain" train "$cfg" "${common[@]}" --set train.max_steps=6 --set output.dir="$tmp/demo-r" \
     "${demo[@]}" >"$tmp/log" 2>&1 &&
   "${mpirun[@]}" -np 4 "$qtrain" train --resume "$tmp/demo-r" "${common[@]}" --set train.max_steps=12 \
     "${demo[@]}" >"$tmp/log" 2>&1 &&
   diff <(tensors "$tmp/demo") <(tensors "$tmp/demo-r") >/dev/null; then
  momenta=$(tensors "$tmp/demo" | grep "step 12 demo/momentum" | awk '{print $NF}' | sort -u | wc -l)
  payload=$(grep -o "DeMo: .* \([0-9]*\) bytes per rank per step" "$tmp/demo/train.log" | grep -o "[0-9]* bytes per rank" | cut -d' ' -f1)
  per_step=$(tail -n1 "$tmp/demo/metrics.csv" | cut -d, -f"$(head -n1 "$tmp/demo/metrics.csv" | tr , '\n' | grep -n '^bytes_sent_per_step$' | cut -d: -f1)")
  if [[ $momenta -eq 4 && -n "$payload" ]] && awk -v b="$per_step" -v p="$payload" 'BEGIN { exit !(b == 3 * p) }'; then
    echo "ok: 4 ranks, demo, replicas identical every step, 4 different momenta, 6 + resumed 6 = 12 straight, $per_step bytes sent per step"
  else
    fail "4 ranks, demo: $momenta distinct momenta (want 4), payload '$payload', bytes per step '$per_step'"
  fi
else
  fail "4 ranks, demo"; tail -5 "$tmp/log" | sed 's/^/    /'
fi

# 3. mismatched configs (MPMD: rank 1 gets another learning rate)
"${mpirun[@]}" -np 1 "$qtrain" train "$cfg" "${common[@]}" --set output.dir="$tmp/mm" : \
  -np 1 "$qtrain" train "$cfg" "${common[@]}" --set output.dir="$tmp/mm" --set optimizer.lr=0.1 >"$tmp/log" 2>&1
if [[ $? -ne 0 ]] && grep -q "different config than rank 0" "$tmp/log"; then
  echo "ok: mismatched configs: $(grep -m1 'different config' "$tmp/log")"
else
  fail "mismatched configs were not reported"; tail -5 "$tmp/log" | sed 's/^/    /'
fi

# 4. a rank killed mid-training stops the job within seconds
"${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set data.limit_train=60000 --set train.epochs=50 \
  --set output.dir="$tmp/die" >"$tmp/log" 2>&1 &
job=$!
victim=""
for _ in $(seq 1 100); do  # wait until both ranks train, then kill one
  victim=$(pgrep -f "output.dir=$tmp/die" | while read -r p; do [[ $(ps -o comm= -p "$p") == qtrain ]] && echo "$p"; done | tail -n1)
  [[ -n "$victim" ]] && grep -q "data parallel" "$tmp/log" && break
  sleep 0.2
done
sleep 1
kill -9 "$victim" 2>/dev/null
start=$(date +%s)
for _ in $(seq 1 150); do kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$job" 2>/dev/null; then
  fail "the job still runs 30 s after a rank was killed"; kill -9 "$job"; pkill -9 -f "output.dir=$tmp/die"
else
  wait "$job"; rc=$?
  echo "ok: killed rank $victim: mpirun exited with $rc after $(( $(date +%s) - start )) s: $(grep -m1 -iE 'exited|killed|signal' "$tmp/log")"
  [[ $rc -ne 0 ]] || fail "mpirun returned 0 after a rank was killed"
fi

# 5. nccl without a GPU
if ! nvidia-smi >/dev/null 2>&1; then
  "${mpirun[@]}" -np 2 "$qtrain" train "$cfg" "${common[@]}" --set output.dir="$tmp/nccl" \
    --set communication.backend=nccl >"$tmp/log" 2>&1
  if [[ $? -ne 0 ]] && grep -q "nccl" "$tmp/log"; then
    echo "ok: nccl without a GPU: $(grep -m1 -i 'error' "$tmp/log")"
  else
    fail "nccl without a GPU was not a clear error"; tail -5 "$tmp/log" | sed 's/^/    /'
  fi
fi

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
