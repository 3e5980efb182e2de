#!/usr/bin/env bash
# The first command on a machine with a GPU: everything the CUDA emulator cannot show (docs/gpu-checklist.md),
# in one run, written to one Markdown report, the most valuable steps first (a lent GPU's minutes are few).
#
#   tools/gpu_check.sh [REPORT.md]            (default: gpu-check-report.md; $OUT/gpu-check.md when $OUT is set)
#   tools/gpu_check.sh --dry-run [REPORT.md]  (a machine without a GPU: every step that needs no hardware)
#
# The steps, with what each should take on an H100 (about 7.5 minutes in all, plus about 30 s for the
# machine's start and the bundle; GPU_CHECK_TIME_LIMIT=400 keeps it near 8, cutting from the end):
#  1. bench-quant --device cuda at 16M and 64M values: encode/decode GB/s of every method against a
#     device-to-device copy of the same run (~30 s);
#  2. Nsight Compute (ncu) over one encode and one decode of each method at 16M values (bench-quant
#     --profile-once; 17 methods, GPU_CHECK_NCU_METHODS overrides them): per kernel its time, DRAM
#     throughput and achieved occupancy, as a table (tools/gpu_check/ncu_table.py; ~60 s, at most 150 s);
#  3. bench-allreduce over NCCL on one rank at 4 and 64 MB, with the payloads in device memory and
#     through the host (--payload-path host) (~30 s);
#  4. the `cuda` test label: quantizers and optimizers bit for bit against the CPU, every layer
#     including the cuDNN ones, MpiComm staging and NcclComm (~30 s);
#  5. ResNet-110 training with qsgd 4-bit on 2 ranks sharing the GPU over MPI, on synthetic CIFAR
#     images (tools/gpu_check/synthetic_cifar.py): per-phase time of a step and the exchange's share of
#     it (tools/gpu_check/step_phases.py; ~40 s);
#  6. bench-model --device cuda on the MNIST MLP and the CIFAR ResNet (~20 s);
#  7. whole runs on one GPU: MNIST MLP training on the GPU against the CPU, two ranks sharing the GPU
#     over MPI with replicas checked, and the PyTorch peers on the same GPU (when python3 has torch;
#     ~80 s);
#  8. compute-sanitizer memcheck, synccheck, then racecheck over the CUDA test programs (~150 s;
#     racecheck of test_quant_cuda alone about 100 s, so it is the last of them);
#  9. 2-rank training over NCCL with replicas checked (needs 2 GPUs on this host; said so otherwise),
#     and one rank killed mid-run: the survivor must stop with an NCCL error instead of hanging.
# The host synchronizations per exchange call do not depend on the hardware: qtrain has no single
# place to count them on a GPU, so the dry run counts them under the CUDA emulator
# (tools/gpu_check/host_syncs.py with CUEMU_STATS) and the GPU run leaves them out.
#
# --dry-run, on a machine without a GPU (a few minutes on 2 cores): the emulated program
# (cuemu_qtrain) stands in for qtrain where it can: bench-quant at 64K values, its --profile-once run
# and the ncu table formatted from the canned CSV of tests/tools/fixtures, bench-allreduce at 0.25 MB,
# the host synchronizations per call, the `cuda_emu` label (index order only) instead of `cuda`,
# bench-model of the MLP, and the ResNet step on the CPU (tiny batches); the steps that need the
# hardware are listed as "not run (dry run)". It checks the script, the options and the formatters
# before a GPU's minutes are spent on them.
#
# Builds first when the build has no qtrain (or, for a dry run, no cuemu_qtrain): tools/build.sh, with
# BUILD_DIR for the build folder; a GPU machine without the project's dependencies takes a bundle
# (tools/gpu_bundle.sh here, tools/gpu_unpack.sh there). Every step runs even when an earlier one
# fails, each for at most GPU_CHECK_STEP_LIMIT seconds (default 600; ncu and the ResNet step less);
# with GPU_CHECK_TIME_LIMIT set, steps that would start after that many seconds are listed as not run,
# and GPU_CHECK_SKIP (an extended regular expression) skips the steps whose titles match, for a
# second run after the first one's findings were fixed. The exit status is non-zero when any step
# failed. The full logs are kept in the report's folder as gpu-check-logs.tar.gz. Needs MNIST for
# steps 7 and 9 (tools/fetch_mnist.sh, or data/mnist copied; the bundle brings it).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
dry=0
if [[ ${1:-} == --dry-run ]]; then
  dry=1
  shift
fi
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
qtrain=$build/qtrain
emu=$build/tests/cuemu/cuemu_qtrain
fixtures=$root/tests/tools/fixtures

say() { printf '%s\n' "$*" >>"$report"; }
# step TITLE LOGNAME COMMAND...: runs COMMAND with its output in the log and the report's tail of it.
# COMMAND may be a function of this script, which bounds its own commands' time (timeout cannot run a
# function). Before `step`, step_lines=N shows N lines of the log instead of 40 (for a table), and
# step_timeout=S bounds a command by S seconds instead of GPU_CHECK_STEP_LIMIT (for the build).
step() {
  local title=$1 name=$2 limit=${step_timeout:-$step_limit} lines=${step_lines:-40}
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
    timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
  fi
  rc=$?
  [[ $rc -eq 124 || $rc -eq 137 ]] && echo "(stopped after the step limit of $limit s)" >>"$logs/$name.log"
  if [[ $rc -eq 0 ]]; then say "### $title: ok ($((SECONDS - start)) s)"; else
    say "### $title: FAILED (exit $rc, $((SECONDS - start)) s)"
    failures=$((failures + 1))
  fi
  say '```'
  say "\$ $*"
  tail -n "$lines" "$logs/$name.log" >>"$report"
  say '```'
}
# hardware TITLE: a step only a GPU can run, in a dry run.
hardware() { say "### $1: not run (dry run)"; }

: >"$report"
if [[ $dry -eq 1 ]]; then
  say "# GPU check, DRY RUN (no GPU: emulated or CPU stand-ins), $(date -u '+%Y-%m-%d %H:%M UTC')"
else
  say "# GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
fi
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

# A build from nothing takes about 25 minutes on 2 cores (a few with a warm ccache).
if [[ ! -x "$qtrain" || ($dry -eq 1 && ! -x "$emu") ]]; then
  step_timeout=3600 step "build" build tools/build.sh
fi
gpus=0
if [[ $dry -eq 0 ]]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [[ ${gpus:-0} -eq 0 ]]; then
    say "No GPU is visible (nvidia-smi -L lists none): nothing below can run. Stop here" \
        "(tools/gpu_check.sh --dry-run rehearses without one)."
    echo "gpu_check: no GPU visible; report in $report" >&2
    exit 1
  fi
fi

# 1. Quantizers at the sizes where their floor matters: against the copy of the same run.
if [[ $dry -eq 0 ]]; then
  step_lines=100 step "bench-quant --device cuda, 16M and 64M values" bench-quant "$qtrain" bench-quant \
    --device cuda --sizes 16M,64M --repeat 10
else
  step_lines=50 step "bench-quant --device cuda, emulated at 64K values" bench-quant "$emu" bench-quant \
    --device cuda --sizes 64K --repeat 2
fi

# 2. Nsight Compute over one encode and one decode per method at 16M values. ncu replays every kernel
# it profiles (a few passes each, device memory saved and restored around them), hence --profile-once
# and one variant per method; the marks bench-quant launches between them name the kernels' methods.
ncu_methods=fp32,fp16,bf16,dettmers8,onebit,qsgd,qsgd:bits=8,adaptive,topk,fp8,mx,mx:element=fp4_e2m1,nvfp4
ncu_methods=${GPU_CHECK_NCU_METHODS:-$ncu_methods,terngrad,signsgd,efsign,randomk}
ncu_metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
ncu_metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active
find_ncu() {
  local c
  for c in "$(command -v ncu 2>/dev/null)" "${CUDA_HOME:-/usr/local/cuda}/bin/ncu" /usr/local/cuda/bin/ncu \
           /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/nsight-compute*/ncu \
           /usr/local/NVIDIA-Nsight-Compute*/ncu; do
    [[ -n "$c" && -x "$c" ]] && { echo "$c"; return 0; }
  done
  return 1
}
ncu_pass() {
  local ncu opts=() rc
  ncu=$(find_ncu) || { echo "ncu not found (PATH, \$CUDA_HOME/bin, /opt/nvidia/nsight-compute/*)"; return 1; }
  echo "ncu: $ncu ($("$ncu" --version 2>/dev/null | tail -1))"
  # Options an older ncu lacks are left out rather than failing the pass: the table reads ncu's units.
  "$ncu" --help 2>/dev/null | grep -q -- --print-units && opts+=(--print-units base)
  "$ncu" --help 2>/dev/null | grep -q -- --print-kernel-base && opts+=(--print-kernel-base demangled)
  # LC_ALL=C: no decimal commas. --clock-control none: the card's own clocks (ncu would lock them at
  # base otherwise, and its settings are not ours to change). --launch-count: a bound if the methods'
  # kernels were more than expected (17 methods launch about 120, marks included).
  LC_ALL=C timeout -k 10 $((step_limit < 150 ? step_limit : 150)) "$ncu" --csv --log-file "$logs/ncu.csv" \
    --metrics "$ncu_metrics" --clock-control none --launch-count 600 "${opts[@]}" \
    "$qtrain" bench-quant --device cuda --sizes 16M --profile-once --methods "$ncu_methods" \
    >"$logs/ncu-bench-quant.log" 2>&1
  rc=$?
  [[ $rc -eq 0 ]] || { echo "ncu exited with $rc:"; tail -n 20 "$logs/ncu-bench-quant.log"; }
  python3 tools/gpu_check/ncu_table.py "$logs/ncu.csv" --methods "$logs/ncu-bench-quant.log" --values 16777216 ||
    rc=1
  return "$rc"
}
# The dry run: --profile-once on the emulator (every method marked and run once), and the formatter on
# the canned CSV of tests/tools/fixtures (what ncu writes; ctest -L tools holds it to that too).
ncu_dry() {
  local want got
  "$emu" bench-quant --device cuda --sizes 64K --profile-once --methods "$ncu_methods" >"$logs/profile-once.log" 2>&1 ||
    { cat "$logs/profile-once.log"; return 1; }
  want=$(tr ',' '\n' <<<"$ncu_methods" | grep -c .)
  got=$(grep -c '^profile-once method: ' "$logs/profile-once.log")
  echo "bench-quant --profile-once under the emulator: $got of $want methods ran once each"
  [[ $got -eq $want ]] || return 1
  echo "ncu_table.py on the fixture tests/tools/fixtures/ncu_profile_once.csv (a canned ncu CSV):"
  python3 tools/gpu_check/ncu_table.py "$fixtures/ncu_profile_once.csv" --methods "$fixtures/ncu_profile_once.log" \
    --values 16777216
}
if [[ $dry -eq 0 ]]; then
  step_lines=150 step "ncu: one encode and one decode per method, 16M values" ncu ncu_pass
else
  hardware "ncu: one encode and one decode per method, 16M values"
  step_lines=150 step "ncu table from a canned CSV; bench-quant --profile-once emulated" ncu-dry ncu_dry
fi

# 3. The exchange on one rank over NCCL, with the payloads in device memory (the device byte
# collectives) and through host memory (the path before them).
if [[ $dry -eq 0 ]]; then
  step "bench-allreduce --backend nccl (one rank)" bench-allreduce "$qtrain" bench-allreduce --backend nccl \
    --sizes 4 64 --methods fp32,bf16,qsgd:bits=4,onebit,topk --iterations 20 --warmup 3
  step "bench-allreduce --backend nccl (one rank), host payload path" bench-allreduce-host \
    "$qtrain" bench-allreduce --backend nccl --payload-path host \
    --sizes 4 64 --methods qsgd:bits=4,onebit --iterations 20 --warmup 3
  say "### host synchronizations per exchange call: counted by \`tools/gpu_check.sh --dry-run\` under the" \
      "emulator (they do not depend on the hardware)"
else
  step "bench-allreduce --backend nccl (one rank), emulated at 0.25 MB" bench-allreduce "$emu" bench-allreduce \
    --backend nccl --sizes 0.25 --methods fp32,bf16,qsgd:bits=4,onebit,topk --iterations 2 --warmup 1
  step "bench-allreduce --backend nccl (one rank), host payload path, emulated at 0.25 MB" bench-allreduce-host \
    "$emu" bench-allreduce --backend nccl --payload-path host \
    --sizes 0.25 --methods qsgd:bits=4,onebit --iterations 2 --warmup 1
  step_lines=30 step "host synchronizations per exchange call (CUEMU_STATS)" host-syncs \
    python3 tools/gpu_check/host_syncs.py "$emu" --work "$logs/host-syncs"
fi

# 4. The cuda label: on a GPU the tests run instead of reporting Skipped. The dry run runs their
# emulated twins in index order (the shuffled and ASan runs are CI's).
if [[ $dry -eq 0 ]]; then
  step "ctest -L cuda" ctest ctest --test-dir "$build" -L "^cuda$" --output-on-failure -j 4
  if [[ -f "$logs/ctest.log" ]] && grep -q "Skipped\|Not Run" "$logs/ctest.log"; then
    say "Some cuda tests were skipped or not run on a machine with a GPU: read the log above."
    failures=$((failures + 1))
  fi
else
  step "ctest -L cuda_emu (index order)" ctest ctest --test-dir "$build" -L "^cuda_emu$" -E "_shuffled$|_asan$" \
    --output-on-failure -j "$(nproc)"
fi

# 5. The exchange's share of a ResNet-110 step: qsgd 4-bit, 2 ranks sharing the GPU over MPI (staged
# through pinned memory), the paper's batch of 128 split over them. Two epochs of random CIFAR-format
# images: the second epoch's row of metrics.csv has no warm-up in it. The dry run trains on the CPU with
# tiny batches, for the commands and the parsing.
resnet_share() {
  local records=$1 batch=$2 device=$3
  shift 3
  python3 tools/gpu_check/synthetic_cifar.py "$logs/cifar-synthetic" --records "$records" || return 1
  # The run's own log (its parameter table is long) stays in the logs; the report gets its epoch lines.
  timeout -k 10 $((step_limit < 240 ? step_limit : 240)) mpirun --oversubscribe --bind-to none -np 2 \
    "$qtrain" train configs/cifar_resnet110.yaml --set device="$device" --set communication.backend=mpi \
    --set quantization.method=qsgd --set quantization.bits=4 --set data.path="$logs/cifar-synthetic" \
    --set data.batch_size="$batch" --set data.eval_batch_size="$batch" --set train.epochs=2 \
    --set output.checkpoint_every_epochs=0 --set output.progress=none --set output.dir="$logs/run-resnet" "$@" \
    >"$logs/resnet-train.log" 2>&1 || { tail -n 30 "$logs/resnet-train.log"; return 1; }
  grep -E '\] (epoch [0-9]+/|done:)' "$logs/resnet-train.log"
  python3 tools/gpu_check/step_phases.py "$logs/run-resnet/metrics.csv" --batch "$batch" --ranks 2
}
if [[ $dry -eq 0 ]]; then
  step "ResNet-110, qsgd 4-bit, 2 ranks sharing the GPU over MPI: the exchange's share" resnet \
    resnet_share 1000 64 cuda
else
  # One BLAS thread per rank: the two ranks share the machine's cores.
  step "ResNet-110, qsgd 4-bit, 2 ranks over MPI on the CPU (dry run: tiny batches)" resnet \
    resnet_share 32 8 cpu --set train.threads=1
fi

# 6. Speed of whole training steps on one GPU (no exchange).
if [[ $dry -eq 0 ]]; then
  step "bench-model mnist_mlp --device cuda" bench-mlp "$qtrain" bench-model configs/mnist_mlp.yaml --device cuda \
    --batch 128 --steps 50 --warmup 5
  step "bench-model cifar_resnet110 --device cuda" bench-resnet "$qtrain" bench-model configs/cifar_resnet110.yaml \
    --device cuda --batch 128 --steps 20 --warmup 3
else
  step "bench-model mnist_mlp --device cuda, emulated" bench-mlp "$emu" bench-model configs/mnist_mlp.yaml \
    --device cuda --batch 32 --steps 2 --warmup 1
  hardware "bench-model cifar_resnet110 --device cuda (cuDNN)"
fi

# 7. Whole runs on one GPU, against the CPU and PyTorch on the same machine.
if [[ $dry -eq 1 ]]; then
  hardware "whole runs on one GPU (MNIST MLP on the GPU and the CPU, 2 ranks sharing the GPU, PyTorch peers)"
elif [[ -f data/mnist/train-images-idx3-ubyte ]]; then
  train=("$qtrain" train configs/mnist_mlp.yaml --set output.progress=none)
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

# 8. compute-sanitizer over the test binaries (the tools print ERROR SUMMARY: 0 errors when clean):
# memcheck and synccheck first (seconds each), racecheck last (test_quant_cuda's alone about 100 s).
cuda_tests=("$build/tests/quant/test_quant_cuda" "$build/tests/optim/test_optim_cuda"
            "$build/tests/layers/test_layers_cuda" "$build/tests/layers/test_sequence_cuda"
            "$build/tests/exchange/test_powersgd_cuda")
if [[ $dry -eq 1 ]]; then
  hardware "compute-sanitizer memcheck, synccheck and racecheck over the CUDA test programs"
elif command -v compute-sanitizer >/dev/null; then
  for tool in memcheck synccheck racecheck; do
    for t in "${cuda_tests[@]}"; do
      # The [large] cases run the same kernels on 2^20 values: minutes under the sanitizers.
      filter=()
      [[ $(basename "$t") == test_quant_cuda ]] && filter=("~[large]")
      # racecheck of test_quant_cuda goes after every other program's.
      [[ $tool == racecheck && $(basename "$t") == test_quant_cuda ]] && continue
      step "compute-sanitizer --tool $tool $(basename "$t")" "san-$tool-$(basename "$t")" \
        compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" "${filter[@]}"
    done
  done
  # Over 120 s on the H100 since the unaligned and ragged spans joined the test (twenty-first session):
  # its own limit, so that a short GPU_CHECK_STEP_LIMIT does not stop it halfway.
  step_timeout=$((step_limit > 300 ? step_limit : 300)) step "compute-sanitizer --tool racecheck test_quant_cuda" \
    san-racecheck-test_quant_cuda compute-sanitizer --tool racecheck --error-exitcode 99 \
    "$build/tests/quant/test_quant_cuda" "~[large]"
else
  say "### compute-sanitizer: not found (it ships with the CUDA toolkit under \$CUDA_HOME/bin)"
  failures=$((failures + 1))
fi

# 9. Two ranks over NCCL: replicas identical, and a killed rank stops its peer.
if [[ $dry -eq 1 ]]; then
  hardware "2-rank NCCL training (needs 2 GPUs)"
elif [[ $gpus -lt 2 ]]; then
  say "### 2-rank NCCL training: not run ($gpus GPU on this host; NCCL needs one GPU per rank)"
elif [[ ! -f data/mnist/train-images-idx3-ubyte ]]; then
  say "### 2-rank NCCL training: not run (data/mnist is absent: tools/fetch_mnist.sh)"
  failures=$((failures + 1))
else
  run=(mpirun --oversubscribe --bind-to none -np 2 "$qtrain" train configs/mnist_mlp.yaml
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
say "Failed steps: $failures. Steps not run for time: $not_run. Took $SECONDS s. Full logs: $logs (and gpu-check-logs.tar.gz beside this report)"
echo "gpu_check: $failures failed step(s); report in $report" >&2
[[ $failures -eq 0 ]]
