#!/usr/bin/env bash
# A full disk (CTest label e2e): a run writes into a small tmpfs that fills up before its next
# checkpoint. The run must stop with an error naming the file, the bytes needed and the room left;
# leave no temporary or partial file; keep the previous checkpoint loadable and metrics.csv whole;
# and resume once space is freed. Skips (77) where a tmpfs cannot be mounted (not root).
# Usage: full_disk.sh QTRAIN_BINARY SOURCE_DIR   (needs SOURCE_DIR/data/mnist; skips without it)
set -uo pipefail
qtrain=$1
src=$2
mnist="$src/data/mnist"
source "$src/tests/support/real_data.sh"
[[ -f "$mnist/train-images-idx3-ubyte" ]] || skip_without_data mnist "$mnist" "$mnist_hint"
tmp=$(mktemp -d)
disk="$tmp/disk"
mkdir -p "$disk"
if ! mount -t tmpfs -o size=4m tmpfs "$disk" 2>/dev/null; then
  rm -rf "$tmp"
  echo "skipped: cannot mount a tmpfs here (needs root and mount rights)"
  exit 77
fi
trap 'umount "$disk"; rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

# A small model: a checkpoint of about 310 KB (parameters and Adam's two moments).
cat >"$tmp/small.yaml" <<'EOF_CFG'
name: full-disk
data: {dataset: mnist, batch_size: 32}
model:
  input: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: dense, units: 32}
    - {type: relu}
    - {type: dense, units: 10}
optimizer: {type: adam, lr: 0.001}
EOF_CFG
common=(--set data.path="$mnist" --set data.limit_train=2048 --set data.limit_test=200 --set train.threads=1
        --set output.progress=none --set output.checkpoint_every_steps=10)
run="$disk/run"

"$qtrain" train "$tmp/small.yaml" "${common[@]}" --set train.max_steps=10 --set output.dir="$run" >"$tmp/log1" 2>&1 ||
  { fail "the first 10 steps did not train"; tail -3 "$tmp/log1"; exit 1; }
cp "$run/checkpoint.safetensors" "$tmp/checkpoint.step10"

# Fill the disk, leaving 64 KiB: room for the log lines and metrics rows, not for a checkpoint.
avail=$(df --output=avail -B1 "$disk" | tail -1)
fallocate -l $((avail - 65536)) "$disk/filler"
if "$qtrain" train --resume "$run" "${common[@]}" --set train.max_steps=20 >"$tmp/log2" 2>&1; then
  fail "the run did not notice the full disk"
fi
message=$(grep -m1 "error:" "$tmp/log2")
echo "    $message"
[[ "$message" == *"$run/checkpoint"* && "$message" == *"cannot write"* && "$message" == *"bytes free"* &&
   "$message" == *"more are needed"* ]] || fail "the error does not name the checkpoint, the bytes and the room left"
leftover=$(find "$run" -name '.*tmp*' -o -name '*.tmp' | head -3)
[[ -z "$leftover" ]] || fail "temporary files were left behind: $leftover"
cmp -s "$run/checkpoint.safetensors" "$tmp/checkpoint.step10" || fail "the step-10 checkpoint changed"
"$qtrain" eval "$run" --set data.path="$mnist" --set data.limit_test=200 >"$tmp/eval" 2>&1 ||
  { fail "the step-10 checkpoint does not load"; tail -3 "$tmp/eval"; }
header_commas=$(head -1 "$run/metrics.csv" | tr -cd , | wc -c)
while IFS= read -r line; do
  [[ $(printf '%s' "$line" | tr -cd , | wc -c) -eq $header_commas ]] || fail "metrics.csv has a cut row: $line"
done <"$run/metrics.csv"
[[ -z "$(tail -c1 "$run/metrics.csv")" ]] || fail "metrics.csv does not end with a whole line"

# Space freed: the run resumes from step 10 and finishes.
rm "$disk/filler"
if "$qtrain" train --resume "$run" "${common[@]}" --set train.max_steps=20 >"$tmp/log3" 2>&1; then
  echo "ok: resumed after space was freed"
else
  fail "no resume after space was freed"; tail -3 "$tmp/log3"
fi
[[ $status -eq 0 ]] && echo "ok: a full disk stops the run with its message and loses nothing"
exit $status
