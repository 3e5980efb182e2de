#!/usr/bin/env bash
# Network faults on the testbed (tools/netbed.sh; CTest label netbed):
#  1. 1% packet loss on one host's link (nftables; netem, and so jitter, is not in every kernel): a
#     4-rank run finishes with replicas checked every 10 steps and ends bit-identical to the same run
#     without loss (TCP repairs the loss, the exchange never sees it); the slowdown is reported.
#  2. a link down for longer than communication.timeout_s: every rank stops with the watchdog's
#     message instead of waiting (the ranks on both sides of the link end within timeout + 15 s).
#     Open MPI's mpirun itself keeps waiting for the daemon behind the dead link until the link is
#     back (or its TCP connection times out); the test brings it back after 30 s and checks that the
#     whole job then ends.
# Skips (77) without root, network namespaces, nftables or MNIST.
# Usage: netbed_faults.sh QTRAIN_BINARY SOURCE_DIR
set -uo pipefail
qtrain=$1
src=$2
mnist="$src/data/mnist"
netbed="$src/tools/netbed.sh"
source "$src/tests/support/real_data.sh"
skip() { echo "SKIPPED: $*"; exit 77; }
[[ -f "$mnist/train-images-idx3-ubyte" ]] || skip_without_data mnist "$mnist" "$mnist_hint"
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v nft >/dev/null || skip "nft is not installed (Debian's nftables; tools/install_deps.sh installs it)"
prefix="qtnf$$"
ip netns add "$prefix-probe" 2>/dev/null || skip "'ip netns add' is not permitted here"
if ! ip netns exec "$prefix-probe" nft add table inet probe 2>/dev/null; then
  ip netns del "$prefix-probe"; skip "nftables does not work in a network namespace here"
fi
ip netns del "$prefix-probe"
tmp=$(mktemp -d)
job=
cleanup() {
  [[ -n "$job" ]] && kill -TERM "$job" 2>/dev/null && wait "$job" 2>/dev/null
  "$netbed" down --prefix "$prefix" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
fail() { echo "FAIL: $*"; status=1; }
common=(--set data.path="$mnist" --set data.limit_train=8192 --set data.limit_test=200 --set train.threads=1
        --set output.progress=none --set quantization.method=qsgd)

# 1. Loss.
run_loss() {  # run_loss NAME [netbed options]: 4 ranks, 60 steps; prints samples/s
  local name=$1
  shift
  "$netbed" run --hosts 4 --prefix "$prefix" "$@" -- "$qtrain" train "$src/configs/mnist_mlp.yaml" "${common[@]}" \
    --set train.max_steps=60 --set output.dir="$tmp/$name" --debug-check-replicas 10 >"$tmp/$name.log" 2>&1 ||
    { fail "the 4-rank run ($name) failed"; grep -a "error" "$tmp/$name.log" | head -3; return; }
  tail -1 "$tmp/$name/metrics.csv" | cut -d, -f9
}
clean=$(run_loss clean)
lossy=$(run_loss lossy --loss 1)
if [[ -n $clean && -n $lossy ]]; then
  if [[ "$("$src/tests/support/checkpoint_tensors.py" "$tmp/clean/checkpoint.safetensors" | cut -d' ' -f2-)" == \
        "$("$src/tests/support/checkpoint_tensors.py" "$tmp/lossy/checkpoint.safetensors" | cut -d' ' -f2-)" ]]; then
    echo "ok: 1% loss on one of 4 links: replicas identical every 10 steps, parameters bit-identical to the run without loss"
  else
    fail "with 1% loss the parameters differ from the run without loss"
  fi
  echo "    samples/s without loss $clean, with 1% loss $lossy (slowdown $(awk -v a="$clean" -v b="$lossy" 'BEGIN{printf "%.2fx", a/b}'))"
fi

# 2. A link down for longer than the timeout.
timeout_s=3 down_at=8 down_for=30
"$netbed" run --hosts 2 --prefix "$prefix" --link-down "$down_at:$down_for" -- "$qtrain" train \
  "$src/configs/mnist_mlp.yaml" "${common[@]}" --set train.epochs=1000 --set communication.timeout_s=$timeout_s \
  --set output.dir="$tmp/down" >"$tmp/down.log" 2>&1 &
job=$!
started=$(date +%s)
ranks_left() { for h in 0 1; do ip netns pids "$prefix-h$h" 2>/dev/null; done | xargs -r ps -o comm= -p 2>/dev/null | grep -c qtrain; }
# Wait for the link to go down, then for the ranks to end.
for _ in $(seq 1 300); do grep -q "link is down" "$tmp/down.log" && break; sleep 0.1; done
grep -q "link is down" "$tmp/down.log" || fail "the link was never taken down"
down=$(date +%s)
gone=
for _ in $(seq 1 $(((timeout_s + 15 + 10) * 10))); do
  if [[ $(ranks_left) -eq 0 ]]; then gone=$(date +%s); break; fi
  sleep 0.1
done
if [[ -n $gone ]]; then
  echo "ok: link down: both ranks ended $((gone - down)) s after the link went down (timeout_s $timeout_s)"
else
  fail "ranks still run $((timeout_s + 25)) s after the link went down"
fi
wait "$job"
rc=$?
job=
echo "    the job (mpirun) ended $(($(date +%s) - started)) s after its start, exit code $rc"
[[ $rc -ne 0 ]] || fail "the job exited 0"
grep -a "watchdog: no progress" "$tmp/down.log" | head -2 | sed 's/^/    /'
grep -q "rank 0 of 2 .*watchdog: no progress .*waiting for" "$tmp/down.log" ||
  fail "rank 0 did not print the watchdog's message"
exit $status
