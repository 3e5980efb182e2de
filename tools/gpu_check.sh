#!/usr/bin/env bash
# The first command on a machine with a GPU: everything the CUDA emulator cannot show (docs/gpu-checklist.md),
# in one run, written to one Markdown report.
#
#   tools/gpu_check.sh [REPORT.md]        (default: gpu-check-report.md; $OUT/gpu-check.md when $OUT is set)
#
# 1. the `cuda` test label on the real GPU (quantizers and optimizers bit for bit against the CPU,
#    every layer including the cuDNN ones, MpiComm staging and NcclComm);
# 2. bench-model --device cuda on the MNIST MLP and the CIFAR ResNet; bench-allreduce over NCCL, on
#    the device payload path and on the host one;
# 3. whole runs on one GPU: MNIST MLP training on the GPU against the CPU, two ranks sharing the GPU
#    over MPI with replicas checked, and the PyTorch peer on the same GPU (when python3 has torch);
#    then bench-quant --device cuda: encode/decode GB/s against a device-to-device copy of the run;
# 4. compute-sanitizer memcheck, racecheck and synccheck over the CUDA test binaries;
# 5. 2-rank training over NCCL with replicas checked (needs 2 GPUs on this host; said so otherwise),
#    and one rank killed mid-run: the survivor must stop with an NCCL error instead of hanging.
# Builds first when build/ has no qtrain (tools/build.sh; BUILD_DIR overrides; a machine without the
# project's dependencies takes a bundle: tools/gpu_bundle.sh here, tools/gpu_unpack.sh there). Every
# step runs even when an earlier one fails, each for at most GPU_CHECK_STEP_LIMIT seconds (default
# 600); with GPU_CHECK_TIME_LIMIT set, steps that would start after that many seconds are listed as
# not run (a lent GPU machine's minutes are few), and GPU_CHECK_SKIP (an extended regular expression)
# skips the steps whose titles match, for a second run after the first one's findings were fixed.
# The exit status is non-zero when any step failed. The full logs are kept in the report's folder as
# gpu-check-logs.tar.gz. Needs MNIST for steps 3 and 5 (tools/fetch_mnist.sh, or data/mnist copied).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-$root/build}
report=${1:-${OUT:+$OUT/gpu-check.md}}
report=${report:-gpu-check-report.md}
mkdir -p "$(dirname "$report")"
logs=$(mktemp -d)
step_limit=${GPU_CHECK_STEP_LIMIT:-600}
time_limit=${GPU_CHECK_TIME_LIMIT:-0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0
not_run=0

say() { printf '%s\n' "$*" >>"$report"; }
# step TITLE LOGNAME COMMAND...: runs COMMAND with its output in the log and the report's tail of it.
step() {
  local title=$1 name=$2
  shift 2
  if [[ -n "${GPU_CHECK_SKIP:-}" && "$title" =~ $GPU_CHECK_SKIP ]]; then
    say "### $title: not run (GPU_CHECK_SKIP)"
    return
  fi
  if [[ $time_limit -gt 0 && $SECONDS -ge $time_limit ]]; then
    say "### $title: not run (GPU_CHECK_TIME_LIMIT=$time_limit s reached)"
    not_run=$((not_run + 1))
    return
  fi
  local start=$SECONDS rc
  echo "gpu_check: $title" >&2
  if declare -F "$1" >/dev/null; then "$@" >"$logs/$name.log" 2>&1; else
    timeout -k 10 "$step_limit" "$@" >"$logs/$name.log" 2>&1
  fi
  rc=$?
  [[ $rc -eq 124 || $rc -eq 137 ]] && echo "(stopped after the step limit of $step_limit s)" >>"$logs/$name.log"
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
step "ctest -L cuda" ctest ctest --test-dir "$build" -L "^cuda$" --output-on-failure -j 4
if grep -q "Skipped\|Not Run" "$logs/ctest.log"; then
  say "Some cuda tests were skipped or not run on a machine with a GPU: read the log above."
  failures=$((failures + 1))
fi

# 2. Speed: whole training steps; the exchange on one rank over NCCL.
step "bench-model mnist_mlp --device cuda" bench-mlp "$build/qtrain" bench-model configs/mnist_mlp.yaml --device cuda \
  --batch 128 --steps 50 --warmup 5
step "bench-model cifar_resnet110 --device cuda" bench-resnet "$build/qtrain" bench-model configs/cifar_resnet110.yaml \
  --device cuda --batch 128 --steps 20 --warmup 3
step "bench-allreduce --backend nccl (one rank)" bench-allreduce "$build/qtrain" bench-allreduce --backend nccl \
  --sizes 4 64 --methods fp32,bf16,qsgd:bits=4,onebit,topk --iterations 20 --warmup 3
# The same with the payloads through host memory (the path before the device byte collectives).
step "bench-allreduce --backend nccl (one rank), host payload path" bench-allreduce-host \
  env QTRAIN_EXCHANGE_HOST_PAYLOADS=1 "$build/qtrain" bench-allreduce --backend nccl \
  --sizes 4 64 --methods qsgd:bits=4,onebit --iterations 20 --warmup 3

# 3. Whole runs on one GPU, against the CPU and PyTorch on the same machine.
if [[ -f data/mnist/train-images-idx3-ubyte ]]; then
  train=("$build/qtrain" train configs/mnist_mlp.yaml --set output.progress=none)
  step "MNIST MLP, 2 epochs on the GPU" train-gpu "${train[@]}" --set device=cuda --set train.epochs=2 \
    --set output.dir="$logs/run-gpu"
  step "MNIST MLP, 300 steps on the CPU" train-cpu "${train[@]}" \
    --set device=cpu --set train.max_steps=300 --set output.dir="$logs/run-cpu"
  step "MNIST MLP, 300 steps on the GPU" train-gpu300 "${train[@]}" --set device=cuda --set train.max_steps=300 \
    --set output.dir="$logs/run-gpu300"
  for method in qsgd onebit powersgd; do
    step "2 ranks sharing the GPU over MPI, $method" "shared-$method" mpirun --oversubscribe --bind-to none -np 2 \
      "${train[@]}" --set device=cuda --set communication.backend=mpi --set quantization.method=$method \
      --set train.max_steps=200 --set output.dir="$logs/run-shared-$method" --debug-check-replicas 10
  done
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    step "PyTorch peer on the GPU, 400 steps" torch-steps python3 tools/bench/torch_mlp_peer.py --data data/mnist \
      --device cuda --steps 400 --warmup 20
    step "PyTorch peer on the GPU, 2 epochs" torch-epochs python3 tools/bench/torch_mlp_peer.py --data data/mnist \
      --device cuda --epochs 2
    step "PyTorch peer of bench-model cifar_resnet110" torch-resnet python3 tools/bench/torch_resnet_peer.py \
      --batch 128 --steps 20 --warmup 5
  else
    say "### PyTorch peer: not run (python3 has no torch with CUDA)"
  fi
else
  say "### whole runs on one GPU: not run (data/mnist is absent: tools/fetch_mnist.sh)"
  failures=$((failures + 1))
fi

# Quantizers at the size where their floor matters. It is placed here because it is slow: on the
# H100 it spent about 2.5 s per method outside its timed region (38 methods), so one size only.
step "bench-quant --device cuda" bench-quant "$build/qtrain" bench-quant --device cuda --sizes 64M --repeat 10

# 4. compute-sanitizer over the test binaries (the tools print ERROR SUMMARY: 0 errors when clean).
cuda_tests=("$build/tests/quant/test_quant_cuda" "$build/tests/optim/test_optim_cuda"
            "$build/tests/layers/test_layers_cuda" "$build/tests/layers/test_sequence_cuda"
            "$build/tests/comm/test_powersgd_cuda")
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck synccheck; do
    for t in "${cuda_tests[@]}"; do
      # The [large] cases run the same kernels on 2^20 values: minutes under the sanitizers.
      filter=()
      [[ $(basename "$t") == test_quant_cuda ]] && filter=("~[large]")
      step "compute-sanitizer --tool $tool $(basename "$t")" "san-$tool-$(basename "$t")" \
        compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" "${filter[@]}"
    done
  done
else
  say "### compute-sanitizer: not found (it ships with the CUDA toolkit under \$CUDA_HOME/bin)"
  failures=$((failures + 1))
fi


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

tar -C "$logs" --exclude="*.safetensors" --exclude="*.bin" -czf "$(dirname "$report")/gpu-check-logs.tar.gz" . 2>/dev/null || true
say ""
say "Failed steps: $failures. Steps not run for time: $not_run. Full logs: $logs (and gpu-check-logs.tar.gz beside this report)"
echo "gpu_check: $failures failed step(s); report in $report" >&2
[[ $failures -eq 0 ]]
