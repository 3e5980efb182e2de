#!/usr/bin/env bash
# qtrain's DDP communication hooks (docs/python.md) against PyTorch DDP's own, end to end on the
# bandwidth-limited testbed: the MNIST MLP of configs/mnist_mlp.yaml in PyTorch 1.13
# (tools/bench/ddp_mlp_peer.py: RMSProp lr 0.003, constant, batch 128 per rank, 1 thread per rank:
# torch.set_num_threads(1) and OPENBLAS_NUM_THREADS=1, since Debian's PyTorch does its GEMMs in
# OpenBLAS, whose thread count torch.set_num_threads does not reach: left at its default, each rank's
# second OpenBLAS thread polls with sched_yield on the cores the other ranks need),
# HOSTS ranks (4) over RATE links (1gbit), EPOCHS whole epochs (2), then the test accuracy, for each
# seed of SEEDS (1 2 3). Rows: DDP without hook, with its fp16 hook and with its PowerSGD hook (rank 2,
# from step 10), qtrain's hook with qsgd 4-bit, onebit, dettmers8 and powersgd (rank 2, from step 10),
# a hook that exchanges nothing (the ceiling compute alone sets), and qtrain's own trainer with qsgd
# 4-bit (configs/mnist_mlp.yaml as it is: its warm-up and cosine schedule over the EPOCHS; at a
# constant 0.003 qtrain's MLP, initialized otherwise than PyTorch's, ends 2 epochs near 86-90%). The programs alternate within each seed. Prints a Markdown table: the
# median samples/s over the seeds (and their range) and the mean test accuracy (and its range).
# Usage: tools/bench/bench_ddp_hooks_netbed.sh [HOSTS=4] [RATE=1gbit] [EPOCHS=2] [SEEDS="1 2 3"]
# Needs root (network namespaces), data/mnist, build/qtrain, build/python (tools/build.sh) and
# Debian's python3-torch.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
hosts=${1:-4}
rate=${2:-1gbit}
epochs=${3:-2}
seeds=${4:-1 2 3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

rows=("ddp|none|--hook none"
      "ddp|fp16 hook|--hook fp16"
      "ddp|powerSGD_hook rank 2 from step 10|--hook powersgd --powersgd-rank 2 --powersgd-start-iter 10"
      "ddp|qtrain hook qsgd 4-bit|--hook qtrain --method qsgd:bits=4"
      "ddp|qtrain hook onebit|--hook qtrain --method onebit"
      "ddp|qtrain hook dettmers8|--hook qtrain --method dettmers8"
      "ddp|qtrain hook powersgd rank 2 from step 10|--hook qtrain --method powersgd:rank=2:start_iter=10"
      "ddp|no exchange (compute alone)|--hook local"
      "qtrain|qtrain trainer, qsgd 4-bit (its config's schedule)|qsgd")

run_ddp() {  # run_ddp SEED ARGS... -> "samples/s accuracy"
  local seed=$1
  shift
  tools/netbed.sh run --hosts "$hosts" --rate "$rate" -- env GLOO_SOCKET_IFNAME=eth0 OPENBLAS_NUM_THREADS=1 \
    PYTHONPATH="$root/build/python" /usr/bin/python3 tools/bench/ddp_mlp_peer.py --master 10.77.0.1 \
    --epochs "$epochs" --seed "$seed" "$@" 2>/dev/null |
    /usr/bin/python3 tools/bench/run_result.py peer
}

run_qtrain() {  # run_qtrain SEED METHOD -> "samples/s accuracy"
  local seed=$1 method=$2 out="$tmp/q-$1-$2"
  tools/netbed.sh run --hosts "$hosts" --rate "$rate" -- build/qtrain train configs/mnist_mlp.yaml \
    --set data.path=data/mnist --set train.threads=1 --set train.epochs="$epochs" --set seed="$seed" \
    --set output.progress=none --set output.dir="$out" \
    --set quantization.method="$method" >/dev/null 2>&1
  /usr/bin/python3 tools/bench/run_result.py metrics "$out/metrics.csv"
}

for seed in $seeds; do
  for i in "${!rows[@]}"; do
    IFS='|' read -r kind label args <<< "${rows[$i]}"
    if [[ $kind == ddp ]]; then
      # shellcheck disable=SC2086
      run_ddp "$seed" $args >> "$tmp/row$i"
    else
      run_qtrain "$seed" "$args" >> "$tmp/row$i"
    fi
  done
done

echo "MNIST MLP, $hosts ranks over $rate links (tools/netbed.sh), batch 128 per rank, 1 thread per rank,"
echo "$epochs epochs, RMSProp lr 0.003 constant, seeds: $seeds"
echo
echo "| program | samples/s (median, range) | test accuracy (mean, range) |"
echo "|---|---|---|"
for i in "${!rows[@]}"; do
  IFS='|' read -r kind label args <<< "${rows[$i]}"
  /usr/bin/python3 tools/bench/seed_table_row.py "$label" "$tmp/row$i"
done
