#!/usr/bin/env bash
# qtrain's sync.type diloco against a PyTorch peer on the same testbed (issue 38): the MNIST MLP,
# HOSTS ranks (4) over RATE links (10mbit), H = INNER (50), EPOCHS (2) whole epochs with the config's
# warm-up and cosine schedule, seeds SEEDS (1 2 3), programs alternating within each seed:
#   DiLoCo, fp32 pseudo-gradients: qtrain against tools/bench/diloco_mlp_peer.py --outer diloco
#   periodic averaging (outer lr 1, no momentum): qtrain against PyTorch's PeriodicModelAverager
#   and qtrain's DiLoCo with bf16 and int8-codebook pseudo-gradients (what the peer cannot send)
# Prints a Markdown table: median samples/s (range) and mean test accuracy (range) of each program.
# Usage: tools/bench/bench_diloco_peer_netbed.sh [HOSTS=4] [RATE=10mbit] [INNER=50] [EPOCHS=2] [SEEDS="1 2 3"]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
hosts=${1:-4}
rate=${2:-10mbit}
inner=${3:-50}
epochs=${4:-2}
seeds=${5:-1 2 3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

rows=("torch|PyTorch, DiLoCo (outer Nesterov SGD in PyTorch, fp32 allreduce)|diloco"
      "qtrain|qtrain, sync.type diloco, fp32 pseudo-gradients|--set sync.outer.lr=0.7"
      "torch|PyTorch, PeriodicModelAverager|average"
      "qtrain|qtrain, diloco with outer lr 1, no momentum (periodic averaging)|--set sync.outer.lr=1 --set sync.outer.momentum=0 --set sync.outer.nesterov=false"
      "qtrain|qtrain, sync.type diloco, bf16 pseudo-gradients|--set sync.outer.lr=0.7 --set quantization.method=bf16"
      "qtrain|qtrain, sync.type diloco, int8 codebook pseudo-gradients|--set sync.outer.lr=0.7 --set quantization.method=codebook")

run_torch() {  # run_torch SEED OUTER -> "samples/s accuracy"
  tools/netbed.sh run --hosts "$hosts" --rate "$rate" -- env GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 \
    tools/bench/diloco_mlp_peer.py --master 10.77.0.1 --outer "$2" --inner-steps "$inner" --epochs "$epochs" \
    --seed "$1" 2>/dev/null |
    /usr/bin/python3 tools/bench/run_result.py peer
}

run_qtrain() {  # run_qtrain SEED SETTINGS... -> "samples/s accuracy"
  local seed=$1 out
  out=$(mktemp -d "$tmp/q-$1-XXXXXX")
  shift
  # shellcheck disable=SC2068
  tools/netbed.sh run --hosts "$hosts" --rate "$rate" -- build/qtrain train configs/mnist_mlp.yaml \
    --set train.threads=1 --set train.epochs="$epochs" --set seed="$seed" --set sync.type=diloco \
    --set sync.inner_steps="$inner" --set output.progress=none --set output.dir="$out" $@ >/dev/null 2>&1
  /usr/bin/python3 tools/bench/run_result.py metrics "$out/metrics.csv"
}

for seed in $seeds; do
  for i in "${!rows[@]}"; do
    IFS='|' read -r kind label args <<< "${rows[$i]}"
    if [[ $kind == torch ]]; then run_torch "$seed" "$args" >> "$tmp/row$i"; else run_qtrain "$seed" $args >> "$tmp/row$i"; fi
  done
done

echo "MNIST MLP, $hosts ranks over $rate links (tools/netbed.sh), H = $inner, $epochs epochs, 1 thread per rank, seeds: $seeds"
echo
echo "| program | samples/s (median, range) | test accuracy (mean, range) |"
echo "|---|---|---|"
for i in "${!rows[@]}"; do
  IFS='|' read -r kind label args <<< "${rows[$i]}"
  /usr/bin/python3 tools/bench/seed_table_row.py "$label" "$tmp/row$i"
done
