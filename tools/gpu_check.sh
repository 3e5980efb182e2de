#!/usr/bin/env bash
# The first command on a machine with a GPU: everything the CUDA emulator cannot show (docs/gpu-checklist.md),
# in one run, written to one Markdown report.
#
#   tools/gpu_check.sh [REPORT.md]        (default: gpu-check-report.md; $OUT/gpu-check.md when $OUT is set)
#
# 1. the `cuda` test label on the real GPU (quantizers and optimizers bit for bit against the CPU,
#    every layer including the cuDNN ones, MpiComm staging and NcclComm);
# 2. compute-sanitizer memcheck, racecheck and synccheck over the CUDA test binaries;
# 3. bench-quant --device cuda: encode/decode GB/s against a device-to-device copy of the same run;
# 4. bench-model --device cuda on the MNIST MLP and the CIFAR ResNet;
# 5. 2-rank training over NCCL with replicas checked (needs 2 GPUs on this host; said so otherwise),
#    and one rank killed mid-run: the survivor must stop with an NCCL error instead of hanging.
# Builds first when build/ has no qtrain (tools/build.sh; BUILD_DIR overrides). Every step runs even
# when an earlier one fails; the exit status is non-zero when any failed. Needs MNIST for step 5
# (tools/fetch_mnist.sh, or data/mnist copied along).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-$root/build}
report=${1:-${OUT:+$OUT/gpu-check.md}}
report=${report:-gpu-check-report.md}
mkdir -p "$(dirname "$report")"
logs=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0

say() { printf '%s\n' "$*" >>"$report"; }
# step TITLE LOGNAME COMMAND...: runs COMMAND with its output in the log and the report's tail of it.
step() {
  local title=$1 name=$2
  shift 2
  local start=$SECONDS rc
  echo "gpu_check: $title" >&2
  "$@" >"$logs/$name.log" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then say "### $title: ok ($((SECONDS - start)) s)"; else
    say "### $title: FAILED (exit $rc, $((SECONDS - start)) s)"
    failures=$((failures + 1))
  fi
  say '```'
  say "\$ $*"
  tail -n 40 "$logs/$name.log" >>"$report"
  say '```'
}

: >"$report"
say "# GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
say ""
say "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
say "- host: $(uname -n), $(nproc) cores"
if command -v nvidia-smi >/dev/null; then
  say "- GPUs: $(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | paste -sd ';')"
else
  say "- nvidia-smi: not found"
fi
say "- nvcc: $(nvcc --version 2>/dev/null | tail -1)"
say ""

if [[ ! -x "$build/qtrain" ]]; then
  step "build" build tools/build.sh
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [[ ${gpus:-0} -eq 0 ]]; then
  say "No GPU is visible (nvidia-smi -L lists none): nothing below can run. Stop here."
  echo "gpu_check: no GPU visible; report in $report" >&2
  exit 1
fi

# 1. The cuda label: on a GPU the tests run instead of reporting Skipped.
step "ctest -L cuda" ctest ctest --test-dir "$build" -L "^cuda$" --output-on-failure
if grep -q "Skipped\|Not Run" "$logs/ctest.log"; then
  say "Some cuda tests were skipped or not run on a machine with a GPU: read the log above."
  failures=$((failures + 1))
fi

# 2. compute-sanitizer over the test binaries (the tools print ERROR SUMMARY: 0 errors when clean).
cuda_tests=("$build/tests/quant/test_quant_cuda" "$build/tests/optim/test_optim_cuda"
            "$build/tests/layers/test_layers_cuda" "$build/tests/layers/test_sequence_cuda")
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck synccheck; do
    for t in "${cuda_tests[@]}"; do
      step "compute-sanitizer --tool $tool $(basename "$t")" "san-$tool-$(basename "$t")" \
        compute-sanitizer --tool "$tool" --error-exitcode 99 "$t"
    done
  done
else
  say "### compute-sanitizer: not found (it ships with the CUDA toolkit under \$CUDA_HOME/bin)"
  failures=$((failures + 1))
fi

# 3-4. Speed: quantizers against a device-to-device copy in the same run; whole training steps.
step "bench-quant --device cuda" bench-quant "$build/qtrain" bench-quant --device cuda --sizes 1M,16M,64M --repeat 20
step "bench-model mnist_mlp --device cuda" bench-mlp "$build/qtrain" bench-model configs/mnist_mlp.yaml --device cuda \
  --batch 128 --steps 50 --warmup 5
step "bench-model cifar_resnet110 --device cuda" bench-resnet "$build/qtrain" bench-model configs/cifar_resnet110.yaml \
  --device cuda --batch 128 --steps 20 --warmup 3

# 5. Two ranks over NCCL: replicas identical, and a killed rank stops its peer.
if [[ $gpus -lt 2 ]]; then
  say "### 2-rank NCCL training: not run ($gpus GPU on this host; NCCL needs one GPU per rank)"
elif [[ ! -f data/mnist/train-images-idx3-ubyte ]]; then
  say "### 2-rank NCCL training: not run (data/mnist is absent: tools/fetch_mnist.sh)"
  failures=$((failures + 1))
else
  run=(mpirun --oversubscribe --bind-to none -np 2 "$build/qtrain" train configs/mnist_mlp.yaml
       --set device=cuda --set communication.backend=nccl --set output.progress=none --set train.max_steps=200)
  for method in fp32 qsgd onebit topk; do
    step "2-rank NCCL training, $method" "nccl-$method" "${run[@]}" --set quantization.method=$method \
      --set output.dir="$logs/run-$method" --debug-check-replicas 10
  done
  step "2-rank NCCL training, overlap off" nccl-nooverlap "${run[@]}" --set communication.overlap=false \
    --set output.dir="$logs/run-nooverlap" --debug-check-replicas 10
  # One rank killed after 10 s: the job must end (not hang), and the survivor's log should name NCCL.
  kill_test() {
    "${run[@]}" --set train.max_steps=100000 --set output.dir="$logs/run-kill" &
    local job=$!
    sleep 10
    pkill -9 -f -n "qtrain train configs/mnist_mlp.yaml" || true
    local waited=0
    while kill -0 "$job" 2>/dev/null && [[ $waited -lt 60 ]]; do sleep 1; waited=$((waited + 1)); done
    if kill -0 "$job" 2>/dev/null; then
      echo "the job still runs 60 s after a rank was killed: it hangs"
      kill -9 "$job"
      return 1
    fi
    echo "the job ended $waited s after a rank was killed"
  }
  step "a rank killed mid-run over NCCL" nccl-kill kill_test
fi

say ""
say "Failed steps: $failures. Full logs: $logs"
echo "gpu_check: $failures failed step(s); report in $report" >&2
[[ $failures -eq 0 ]]
