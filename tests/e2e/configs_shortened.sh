#!/usr/bin/env bash
# The first thing anyone does with a shipped config is to shorten it: every config in configs/ must
# train with `--set train.epochs=1` and with `--set train.max_steps=2`, on tiny data (label e2e).
# Warm-ups longer than such a run are shortened with a note in the log, never refused.
#   MNIST: data/mnist (tools/fetch_mnist.sh). CIFAR-10: a few records in the official binary format,
#   written here (random pixels: this checks that the configs run, not what they learn). AN4: the
#   real corpus in the shared data when present, else skipped with a message (a failure where
#   QTRAIN_REQUIRE_DATA requires it: tests/support/real_data.sh). ImageNet configs:
#   test_imagenet_smoke, on a JPEG tree it writes.
# Usage: configs_shortened.sh QTRAIN SOURCE_DIR
set -uo pipefail
qtrain=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 ran=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
source "$src/tests/support/real_data.sh"
an4="$(shared_data_dir "$src")/an4"

# CIFAR-10 binary records: 1 label byte (0-9) then 3072 pixel bytes; 64 training and 32 test records.
cifar="$tmp/cifar10"
mkdir -p "$cifar"
write_records() {  # FILE COUNT
  local i
  for ((i = 0; i < $2; i++)); do
    printf "\\x$(printf %02x $((i % 10)))"
    head -c 3072 /dev/urandom
  done >"$1"
}
for b in 1 2 3 4 5; do write_records "$cifar/data_batch_$b.bin" 64; done
write_records "$cifar/test_batch.bin" 32

for cfg in "$src"/configs/*.yaml; do
  name=$(basename "$cfg" .yaml)
  data=()
  case "$name" in
    mnist_*)
      [[ -f "$src/data/mnist/train-images-idx3-ubyte" ]] || { data_absent mnist "$src/data/mnist" "$mnist_hint" "$name"; continue; }
      data=(--set data.path="$src/data/mnist" --set data.limit_train=256 --set data.limit_test=64) ;;
    cifar_*) data=(--set data.path="$cifar" --set data.limit_train=64 --set data.limit_test=32) ;;
    an4_*)
      [[ -f "$an4/etc/an4_train.fileids" ]] || { data_absent an4 "$an4" "the shared real data" "$name"; continue; }
      data=(--set data.path="$an4" --set data.limit_train=32 --set data.limit_test=16) ;;
    imagenet_*) continue ;;  # test_imagenet_smoke
    *) fail "$name: no tiny data for this config: add it to configs_shortened.sh"; continue ;;
  esac
  small=(--set data.batch_size=16 --set data.eval_batch_size=16 --set train.threads=1 --set output.progress=none)
  for shortening in "train.epochs=1" "train.max_steps=2"; do
    out="$tmp/run-$name-${shortening%%=*}"
    if "$qtrain" train "$cfg" "${data[@]}" "${small[@]}" --set "$shortening" --set output.dir="$out" \
         </dev/null >"$out.log" 2>&1; then
      echo "ok: $name with --set $shortening$(grep -o 'note: .*' "$out.log" | head -1 | sed 's/^/ (/; s/$/)/')"
      ran=$((ran + 1))
    else
      fail "$name with --set $shortening"; grep -v "^\[20" "$out.log" | tail -3 | sed "s/^/    /"
    fi
  done
done
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
[[ $ran -gt 0 ]] || { echo "SKIPPED: no config had data"; exit 77; }
echo "all $ran runs passed"
