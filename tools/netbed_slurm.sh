#!/usr/bin/env bash
# A Slurm cluster on the network testbed (tools/netbed.sh): slurmctld in the switch's namespace and one
# slurmd per testbed host, each host with its own hostname and /tmp, so that `srun --mpi=pmix` and
# `sbatch` start qtrain across "nodes" joined by the shaped links, as on a cluster. `run` brings it up,
# runs COMMAND on host 0 (a login node: its namespace, hostname and /tmp, SLURM_CONF set, the current
# directory) and always tears everything down. Needs root and Debian's slurm-wlm and munge packages
# (apt-get install slurm-wlm munge; not installed by tools/install_deps.sh). See docs/netbed.md.
# Usage: tools/netbed_slurm.sh up|run|down [options] [-- COMMAND [ARGS...]]   (--help)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly here
readonly net=10.77.0 switch_ip=10.77.0.254  # tools/netbed.sh's addresses: host i is $net.(i+1)

usage() {
  cat <<EOF
Usage:
  tools/netbed_slurm.sh up   [--hosts K] [--cpus C] [--rate R] [--prefix P]
  tools/netbed_slurm.sh run  [--hosts K] [--cpus C] [--rate R] [--prefix P] -- COMMAND [ARGS...]
  tools/netbed_slurm.sh down [--prefix P]
  up     tools/netbed.sh up (hosts P-h0..P-h{K-1}, switch P-sw), then munged (if not running),
         slurmctld in P-sw and slurmd -N P-hI in each host; waits until every node is idle.
  run    up, then COMMAND on host 0 with SLURM_CONF set, in the current directory, then down
         (always). Exits with COMMAND's status. Example:
           tools/netbed_slurm.sh run -- srun --mpi=pmix -N 2 --ntasks-per-node=2 build/qtrain train ...
  down   stop the daemons, delete the testbed and the per-host /tmp folders (idempotent).
Options:
  --hosts K    Slurm nodes (testbed hosts), default 2
  --cpus C     CPUs each node announces, default this machine's ($(nproc)); tasks beyond them need
               srun --overcommit
  --rate R     per-port rate of the testbed's links (tools/netbed.sh --rate), default 1gbit
  --prefix P   testbed name prefix, default qtsl
Hosts share the machine's file systems except /tmp: output.dir must be outside /tmp (every rank
writes its error-feedback file there), e.g. /var/tmp/... State and logs: /var/lib/qtrain-netbed-slurm/P.
EOF
}

die() {
  echo "netbed_slurm: $*" >&2
  exit 2
}

cmd=${1:-}
[[ -z "$cmd" || "$cmd" == --help || "$cmd" == -h ]] && { usage; exit 0; }
shift
hosts=2 cpus=$(nproc) rate=1gbit prefix=qtsl
command=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
    --cpus) cpus=${2:?--cpus needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
    --) shift; command=("$@"); break ;;
    *) die "unknown option '$1' (tools/netbed_slurm.sh --help)" ;;
  esac
done
[[ "$hosts" =~ ^[1-9][0-9]*$ && "$hosts" -le 253 ]] || die "--hosts must be 1..253, got '$hosts'"
[[ "$cpus" =~ ^[1-9][0-9]*$ ]] || die "--cpus must be a positive integer, got '$cpus'"
[[ "$prefix" =~ ^[a-z][a-z0-9]{0,11}$ ]] || die "--prefix must match [a-z][a-z0-9]{0,11}, got '$prefix'"
readonly state=/var/lib/qtrain-netbed-slurm/$prefix
readonly conf=$state/slurm.conf

node_tmp() { echo "/var/tmp/$prefix-tmp-$1"; }

require_tools() {
  [[ $(id -u) == 0 ]] || die "needs root (network namespaces, mounts)"
  local missing=()
  for c in slurmctld slurmd srun sinfo munged munge; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
  [[ ${#missing[@]} -eq 0 ]] || die "not found: ${missing[*]} (Debian: apt-get install slurm-wlm munge)"
}

write_config() {
  mkdir -p "$state/state"
  {
    echo "# Written by tools/netbed_slurm.sh for testbed $prefix"
    echo "ClusterName=$prefix"
    echo "SlurmctldHost=$prefix-sw($switch_ip)"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "MpiDefault=pmix"
    # No cgroup confinement: the nodes are namespaces of one machine, and the machine's cgroups are a
    # v1/v2 hybrid that Slurm's v2 plugin refuses (slurmd mounts its own v1 hierarchies, below).
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "ReturnToService=2"
    echo "StateSaveLocation=$state/state"
    echo "SlurmctldPidFile=$state/slurmctld.pid"
    echo "SlurmctldLogFile=$state/slurmctld.log"
    echo "SlurmdPidFile=$state/slurmd-%n.pid"
    echo "SlurmdSpoolDir=$state/slurmd-%n"
    echo "SlurmdLogFile=$state/slurmd-%n.log"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    local names=()
    for ((i = 0; i < hosts; i++)); do
      echo "NodeName=$prefix-h$i NodeAddr=$net.$((i + 1)) CPUs=$cpus State=UNKNOWN"
      names+=("$prefix-h$i")
    done
    echo "PartitionName=testbed Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP"
  } >"$conf"
  printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nIgnoreSystemd=yes\n' >"$state/cgroup.conf"
}

start_munge() {
  if munge -n </dev/null >/dev/null 2>&1; then return; fi  # a munged already answers
  [[ -f /etc/munge/munge.key ]] || die "/etc/munge/munge.key is missing (the munge package creates it)"
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged
  touch "$state/started-munged"
}

# In a host's namespace: its hostname, its own /tmp, and the cgroup v1 hierarchies slurmd's plugin
# looks for (`ip netns exec` mounts a fresh /sys without them).
host_shell() {  # host_shell NAME SCRIPT [ARGS...]
  local name=$1 script=$2
  shift 2
  mkdir -p "$(node_tmp "$name")"
  ip netns exec "$name" unshare --uts --mount /bin/bash -c "hostname '$name' && mount --bind '$(node_tmp "$name")' /tmp && $script" \
    netbed_slurm "$@"
}

up() {
  require_tools
  "$here/netbed.sh" up --prefix "$prefix" --hosts "$hosts" --rate "$rate"
  write_config
  start_munge
  ip netns exec "$prefix-sw" unshare --uts /bin/bash -c "hostname '$prefix-sw' && SLURM_CONF='$conf' slurmctld -i"
  for ((i = 0; i < hosts; i++)); do
    mkdir -p "$state/slurmd-$prefix-h$i"
    host_shell "$prefix-h$i" "mount -t tmpfs cgroup_root /sys/fs/cgroup &&
      for c in freezer cpuset memory devices; do mkdir -p /sys/fs/cgroup/\$c && mount -t cgroup -o \$c none /sys/fs/cgroup/\$c; done &&
      SLURM_CONF='$conf' slurmd -N '$prefix-h$i'"
  done
  for ((t = 0; t < 60; t++)); do
    idle=$(ip netns exec "$prefix-h0" env SLURM_CONF="$conf" sinfo -h -t idle -o '%D' 2>/dev/null || true)
    if [[ "${idle:-0}" == "$hosts" ]]; then
      echo "netbed_slurm: up: $hosts node(s) $prefix-h0..$prefix-h$((hosts - 1)) idle, $cpus CPU(s) each, controller in $prefix-sw; SLURM_CONF=$conf"
      return
    fi
    sleep 0.5
  done
  die "the nodes did not become idle in 30 s; logs: $state/*.log"
}

down() {
  for f in "$state"/slurmd-*.pid "$state/slurmctld.pid"; do
    [[ -f "$f" ]] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  sleep 1
  "$here/netbed.sh" down --prefix "$prefix" >/dev/null 2>&1 || true
  if [[ -f "$state/started-munged" ]]; then
    pkill -x munged 2>/dev/null || true
    rm -f "$state/started-munged"
  fi
  rm -rf /var/tmp/"$prefix"-tmp-*
  echo "netbed_slurm: down: $prefix"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  run)
    [[ ${#command[@]} -gt 0 ]] || die "run needs a command after --"
    trap down EXIT
    up
    status=0
    cwd=$(pwd)
    host_shell "$prefix-h0" "cd '$cwd' && SLURM_CONF='$conf' exec \"\$@\"" "${command[@]}" || status=$?
    exit "$status"
    ;;
  *) die "unknown command '$cmd' (tools/netbed_slurm.sh --help)" ;;
esac
