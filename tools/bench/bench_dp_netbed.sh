#!/usr/bin/env bash
# End-to-end data-parallel throughput of the MNIST MLP on the bandwidth-limited testbed: qtrain with
# every method against PyTorch DDP (gloo) without and with its fp16 compression hook, and qtrain's
# powersgd against DDP's powerSGD_hook (rank POWERSGD_RANK, 2; both compress from step
# POWERSGD_START, 10, PyTorch's start_powerSGD_iter, after plain allreduces), same model, per-rank
# batch (128), threads per rank (1) and testbed, in one run. Prints a Markdown table.
# Usage: tools/bench/bench_dp_netbed.sh [HOSTS=4] [RATE=1gbit] [STEPS=100]
# Needs root (network namespaces), data/mnist, build/qtrain and Debian's python3-torch.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
hosts=${1:-4}
rate=${2:-1gbit}
steps=${3:-100}
psgd_rank=${POWERSGD_RANK:-2}
psgd_start=${POWERSGD_START:-10}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ddp() {  # ddp HOOK [more ddp_mlp_peer.py arguments]
  tools/netbed.sh run --hosts "$hosts" --rate "$rate" -- env GLOO_SOCKET_IFNAME=eth0 \
    tools/bench/ddp_mlp_peer.py --master 10.77.0.1 --steps "$steps" --hook "$@" 2>/dev/null |
    python3 -c 'import json,sys; print("%.0f" % json.loads(sys.stdin.read().strip().splitlines()[-1])["samples_per_s"])'
}

qtrain() {  # qtrain METHOD [extra --set ...]
  local method=$1
  shift
  local out="$tmp/q-$method"
  tools/netbed.sh run --hosts "$hosts" --rate "$rate" -- build/qtrain train configs/mnist_mlp.yaml \
    --set data.path=data/mnist --set train.threads=1 --set train.max_steps="$steps" --set data.limit_test=1000 \
    --set output.progress=none --set output.dir="$out" --set quantization.method="$method" "$@" >/dev/null 2>&1
  python3 - "$out/metrics.csv" <<'PY'
import csv, sys
row = list(csv.DictReader(open(sys.argv[1])))[-1]
steps = float(row["step"])
print("%.0f %.1f %.1f" % (float(row["samples_per_s"]), 1e3 * float(row["exposed_comm_s"]) / steps,
                          float(row["bytes_sent_per_step"]) / 1e6))
PY
}

echo "MNIST MLP, $hosts ranks over $rate links (tools/netbed.sh), batch 128 per rank, 1 thread per rank, $steps steps"
echo
echo "| program | method | samples/s | exposed comm per step (ms) | MB sent per step per rank |"
echo "|---|---|---|---|---|"
ddp_plain=$(ddp none)
echo "| PyTorch DDP (gloo) | fp32 | $ddp_plain | | |"
ddp_fp16=$(ddp fp16)
echo "| PyTorch DDP (gloo) | fp16 hook | $ddp_fp16 | | |"
for m in fp32 fp16 dettmers8 qsgd onebit; do
  read -r sps exposed mb < <(qtrain "$m")
  echo "| qtrain | $m | $sps | $exposed | $mb |"
  eval "q_$m=$sps"
done
read -r sps exposed mb < <(qtrain qsgd --set quantization.bits=8)
echo "| qtrain | qsgd 8-bit | $sps | $exposed | $mb |"
ddp_psgd=$(ddp powersgd --powersgd-rank "$psgd_rank" --powersgd-start-iter "$psgd_start")
echo "| PyTorch DDP (gloo) | powerSGD_hook rank $psgd_rank from step $psgd_start | $ddp_psgd | | |"
read -r q_psgd exposed mb < <(qtrain powersgd --set quantization.rank="$psgd_rank" --set quantization.start_iter="$psgd_start")
echo "| qtrain | powersgd rank $psgd_rank from step $psgd_start | $q_psgd | $exposed | $mb |"
echo
python3 -c "import sys; print(f'qtrain powersgd / DDP powerSGD_hook (rank $psgd_rank): {float(sys.argv[1]) / float(sys.argv[2]):.2f}x')" \
  "$q_psgd" "$ddp_psgd"
python3 - "$q_fp32" "$ddp_plain" "$q_dettmers8" "$q_qsgd" "$ddp_fp16" "$sps" <<'PY'
import sys
qf, d, q8, q4, dh, qs8 = map(float, sys.argv[1:])
print(f"qtrain fp32 / DDP fp32: {qf / d:.2f}x; qtrain dettmers8 / DDP fp16 hook: {q8 / dh:.2f}x; "
      f"qtrain qsgd 8-bit / DDP fp16 hook: {qs8 / dh:.2f}x; qtrain qsgd 4-bit / DDP fp16 hook: {q4 / dh:.2f}x")
PY
