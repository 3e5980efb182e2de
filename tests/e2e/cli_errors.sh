#!/usr/bin/env bash
# The qtrain CLI on bad input: each case must exit non-zero with ONE line on stderr that names what is
# wrong and where, and never crash (no signal, no "terminate called"). Also: --help of every
# subcommand, and a world of size 1 both without mpirun and under `mpirun -np 1`.
# Usage: cli_errors.sh QTRAIN_BINARY SOURCE_DIR
set -uo pipefail
qtrain=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$src/tests/support/real_data.sh"
failures=0

expect_error() {  # expect_error "what" "expected text" command...
  local what=$1 expected=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [[ $rc -eq 0 || $rc -gt 128 ]] || ! grep -qF -- "$expected" "$tmp/err" || [[ $lines -ne 1 ]] ||
     grep -q "terminate called" "$tmp/err"; then
    echo "FAIL: $what: exit $rc, $lines line(s) on stderr, expected one line containing '$expected':"
    sed 's/^/    /' "$tmp/err"
    failures=$((failures + 1))
  else
    echo "ok: $what: $(cat "$tmp/err")"
  fi
}

cfg="$src/configs/mnist_mlp.yaml"
expect_error "missing data directory" "/nonexistent/mnist" \
  "$qtrain" train "$cfg" --set data.path=/nonexistent/mnist --set output.dir="$tmp/r1"
sed 's/^optimizer:/optimiser:/' "$cfg" >"$tmp/typo.yaml"
line=$(grep -n '^optimizer:' "$cfg" | cut -d: -f1)
expect_error "config typo" "$tmp/typo.yaml:$line:1: unknown key 'optimiser' (did you mean 'optimizer'?)" \
  "$qtrain" train "$tmp/typo.yaml"
expect_error "negative learning rate" "optimizer.lr must be > 0, got -1" \
  "$qtrain" train "$cfg" --set optimizer.lr=-1
expect_error "missing config file" "$tmp/none.yaml: config file not found" "$qtrain" train "$tmp/none.yaml"
expect_error "bad --set syntax" "expected key.path=value" "$qtrain" train "$cfg" --set train.epochs
expect_error "empty --set value" "--set output.dir=: the value is empty" \
  "$qtrain" train "$cfg" --set output.dir= --set data.path=/nonexistent
expect_error "negative --seed" "--seed: must be a number >= 0, got '-1'" "$qtrain" bench-quant --seed=-1 --sizes 1K
expect_error "no subcommand" "qtrain: error: A subcommand is required" "$qtrain"
expect_error "option out of range" "qtrain: error: --batch" "$qtrain" bench-model "$cfg" --batch 0
mkdir -p "$tmp/run"
cp "$cfg" "$tmp/run/config.resolved.yaml"
printf 'not a checkpoint' >"$tmp/run/checkpoint.safetensors"
expect_error "corrupt checkpoint" "$tmp/run/checkpoint.safetensors: corrupt checkpoint" "$qtrain" eval "$tmp/run"
expect_error "resume without checkpoint" "no checkpoint.safetensors" \
  "$qtrain" train "$cfg" --resume "$tmp/empty" --set data.path="$src/data/mnist"

expect_error "bench-model batch beyond memory names its own option" "Reduce the model or --batch" \
  "$qtrain" bench-model "$src/configs/imagenet_alexnet.yaml" --device cpu --batch 100000
expect_error "bench-model on a sequence model" "runs on sequence batches" \
  "$qtrain" bench-model "$src/configs/an4_lstm.yaml" --device cpu --steps 1 --warmup 0
expect_error "bench-quant size not a whole number of columns" "not a whole number of columns of --column 3" \
  "$qtrain" bench-quant --methods onebit --column 3 --sizes 64K --repeat 1 --device cpu
expect_error "compare --ranks-per-host without --netbed" "--ranks-per-host places ranks on the hosts of --netbed" \
  "$qtrain" compare "$cfg" --methods fp32 --ranks 4 --ranks-per-host 2 --out "$tmp/c1"
expect_error "compare --ranks-per-host that does not divide --ranks" "--ranks 4 does not split into hosts of --ranks-per-host 3" \
  "$qtrain" compare "$cfg" --methods fp32 --ranks 4 --netbed 1gbit --ranks-per-host 3 --out "$tmp/c2"
mkdir -p "$tmp/p1" && touch "$tmp/p1/metrics.csv"
expect_error "predict with --gpus and --nodes" "--gpus and --nodes/--gpus-per-node both given" \
  "$qtrain" predict --from "$tmp/p1" --gpus 4 --nodes 2 --gpus-per-node 2

for sub in "" train eval; do
  if ! "$qtrain" $sub --help >/dev/null 2>&1; then echo "FAIL: qtrain $sub --help"; failures=$((failures + 1)); fi
done

if [[ -f "$src/data/mnist/train-images-idx3-ubyte" ]]; then
  # Backend auto is LocalComm in a world of one; backend mpi without mpirun starts MPI's singleton on
  # demand (MpiRuntime defers it), under mpirun it is running from the start.
  for launcher in "" "mpirun -np 1"; do
    for backend in auto mpi; do
      want=$([[ $backend == mpi ]] && echo mpi || echo local)
      if $launcher "$qtrain" train "$cfg" --set data.path="$src/data/mnist" --set train.max_steps=3 \
           --set data.limit_test=500 --set output.dir="$tmp/w1" --set output.progress=none \
           --set communication.backend=$backend >"$tmp/log" 2>&1 &&
         grep -q "data parallel: 1 rank(s) over $want" "$tmp/w1/train.log"; then
        echo "ok: world of size 1 ${launcher:-without mpirun}, backend $backend: over $want"
      else
        echo "FAIL: world of size 1 ${launcher:-without mpirun}, backend $backend (expected over $want):"
        sed 's/^/    /' "$tmp/log"; grep "data parallel" "$tmp/w1/train.log" 2>/dev/null | sed 's/^/    /'
        failures=$((failures + 1))
      fi
      rm -rf "$tmp/w1"
    done
  done
  cat >"$tmp/lstm_mnist.yaml" <<'YAML'
data: {dataset: mnist, batch_size: 8}
model:
  input: [1, 28, 28]
  layers: [{type: flatten}, {type: lstm, hidden_size: 8}, {type: dense, units: 10}]
  loss: softmax_cross_entropy
optimizer: {type: sgd, lr: 0.1}
YAML
  expect_error "lstm on a dataset of fixed-size samples" "runs on sequences, but dataset mnist holds fixed-size samples" \
    "$qtrain" train "$tmp/lstm_mnist.yaml" --set data.path="$src/data/mnist" --set output.dir="$tmp/w2"
else
  data_absent mnist "$src/data/mnist" "$mnist_hint" "the world-of-size-1 runs and the lstm-on-mnist case"
fi

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
