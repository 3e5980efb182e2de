#!/usr/bin/env bash
# A K-host, bandwidth-limited network testbed on this one machine, so that qtrain's MPI benchmarks can
# measure the slow-interconnect regime (e.g. 1 Gbit/s). Hosts are network namespaces <prefix>-h0..h{K-1},
# joined by a bridge that lives in its own namespace <prefix>-sw; both directions of every port are shaped
# with tbf (a full-duplex NIC). Nothing is created in the root namespace. `run` brings the testbed up,
# runs one MPI rank per host over TCP and always tears it down. Needs root. See docs/netbed.md.
# Usage: tools/netbed.sh up|down|run|status [options]   (tools/netbed.sh --help)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly here
readonly rsh_agent="$here/netbed_rsh.sh"
readonly net=10.77.0             # the private /24, used only inside the testbed's namespaces
readonly subnet="$net.0/24"
readonly switch_ip="$net.254"     # host i is $net.(i+1)
readonly burst=256kb tbf_latency=50ms
# Environment variables forwarded to the ranks with `mpirun -x` when set (QTRAIN_* too); -x NAME adds one.
readonly forward_env=(PATH LD_LIBRARY_PATH PYTHONPATH OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS
                      OMP_NUM_THREADS OMP_WAIT_POLICY OMP_PROC_BIND OMP_PLACES)

usage() {
  cat <<EOF
Usage:
  tools/netbed.sh up     [--hosts K] [--rate R] [--latency D] [--prefix P] [FAULTS]
  tools/netbed.sh run    [--hosts K] [--ranks-per-host R] [--rate R] [--latency D] [--prefix P] [FAULTS]
                         [--link-down T:D]
                         [--btl-tcp-links N] [--mca KEY VALUE]... [-x NAME]... -- COMMAND [ARGS...]
  tools/netbed.sh down   [--prefix P]
  tools/netbed.sh status [--prefix P]

  up      create namespaces P-h0..P-h{K-1} (hosts, $net.1..K on eth0) and P-sw (bridge br0,
          $switch_ip); shape host egress and switch-port egress with
          'tbf rate R burst $burst latency $tbf_latency'. Fails if testbed P already exists.
  run     up, then 'mpirun' in P-sw with one rank per host over TCP ($subnet), in the current
          directory; then down, always (also on failure or Ctrl-C). Exits with COMMAND's status.
  down    kill what runs in testbed P and delete its namespaces (idempotent).
  status  list testbed P's namespaces, addresses and qdiscs.

Options:
  --hosts K           number of hosts, 1..253 (default 2)
  --ranks-per-host R  run: R ranks on each host (a node of several GPUs: ranks 0..R-1 on host 0, and
                      so on; shared memory between the ranks of a host, the shaped links between
                      hosts); default 1
  --rate R            per-port rate in tc syntax (100mbit, 1gbit, 10gbit) or 'none' (default 1gbit)
  --latency D         extra one-way host-to-host delay, e.g. 1ms (netem on host egress; needs the
                      kernel's sch_netem; default none)
  --prefix P          namespace name prefix, [a-z][a-z0-9]{0,11} (default qtnb)
Faults, on one host's link (--fault-host, default the last host):
  --loss P            drop P percent of the packets the host sends, at random (0 < P < 100; nftables
                      in the host's namespace, needs the nft command and the kernel's nf_tables)
  --jitter D          vary the host's egress delay by up to D (netem delay/jitter; needs sch_netem)
  --link-down T:D     run only: T seconds after the command starts, take the host's link down for D
                      seconds (ip link set down on both ends), then up again
  --fault-host N      the host of the faults, 0..K-1 (default K-1)

  --btl-tcp-links N   Open MPI TCP connections per peer pair (btl_tcp_links; default Open MPI's 1)
  --mca KEY VALUE     extra mpirun MCA parameter, or a replacement for a default (repeatable)
  -x NAME             forward environment variable NAME to the ranks (repeatable); these are always
                      forwarded when set: ${forward_env[*]} QTRAIN_*

Example:
  tools/netbed.sh run --hosts 4 --rate 1gbit --btl-tcp-links 2 -- build/qtrain train configs/mnist_mlp.yaml
EOF
}

die() { echo "netbed: error: $*" >&2; exit 1; }
log() { echo "netbed: $*" >&2; }

# Options shared by every subcommand; run-only ones are rejected elsewhere.
hosts=2 rate=1gbit latency=none prefix=qtnb btl_tcp_links="" extra_mca=() extra_env=() command=()
loss=none jitter=none link_down=none fault_host="" ranks_per_host=1

parse_args() {  # parse_args SUBCOMMAND ARGS...
  local sub=$1
  shift
  while [[ $# -gt 0 ]]; do
    case $1 in
      --hosts|--rate|--latency|--prefix|--btl-tcp-links|-x|--loss|--jitter|--link-down|--fault-host|--ranks-per-host)
        [[ $# -ge 2 ]] || die "$1 needs a value"
        case $1 in
          --ranks-per-host) ranks_per_host=$2 ;;
          --loss) loss=$2 ;;
          --jitter) jitter=$2 ;;
          --link-down) link_down=$2 ;;
          --fault-host) fault_host=$2 ;;
          --hosts) hosts=$2 ;;
          --rate) rate=$2 ;;
          --latency) latency=$2 ;;
          --prefix) prefix=$2 ;;
          --btl-tcp-links) btl_tcp_links=$2 ;;
          -x) extra_env+=("$2") ;;
        esac
        shift 2 ;;
      --mca)
        [[ $# -ge 3 ]] || die "--mca needs KEY VALUE"
        extra_mca+=(--mca "$2" "$3")
        shift 3 ;;
      --) shift; command=("$@"); break ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown argument '$1' for '$sub' (see tools/netbed.sh --help)" ;;
    esac
  done
  if ! [[ $hosts =~ ^[0-9]+$ ]] || ((hosts < 1 || hosts > 253)); then
    die "--hosts must be 1..253, got '$hosts'"
  fi
  [[ $rate == none || $rate =~ ^[0-9]+(\.[0-9]+)?([kKmMgGtT]i?)?(bit|bps)$ ]] ||
    die "--rate must be a tc rate such as 100mbit, 1gbit, 10gbit, or 'none'; got '$rate'"
  [[ $latency == none || $latency =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] ||
    die "--latency must be a tc time such as 500us or 2ms, or 'none'; got '$latency'"
  [[ $loss == none || ($loss =~ ^[0-9]+(\.[0-9]{1,2})?$ && $loss != 0 && $loss != 0.0 && $loss != 0.00 &&
     ${loss%%.*} -lt 100) ]] || die "--loss must be a percentage above 0 and below 100 (at most 2 decimals), got '$loss'"
  [[ $jitter == none || $jitter =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] ||
    die "--jitter must be a tc time such as 20ms, got '$jitter'"
  [[ $link_down == none || $link_down =~ ^[0-9]+(\.[0-9]+)?:[0-9]+(\.[0-9]+)?$ ]] ||
    die "--link-down must be T:D in seconds (down T s after the start, for D s), e.g. 5:60; got '$link_down'"
  if [[ -z $fault_host ]]; then fault_host=$((hosts - 1))
  elif ! [[ $fault_host =~ ^[0-9]+$ ]] || ((fault_host >= hosts)); then
    die "--fault-host must be a host number 0..$((hosts - 1)), got '$fault_host'"
  fi
  if ! [[ $ranks_per_host =~ ^[0-9]+$ ]] || ((ranks_per_host < 1 || ranks_per_host > 64)); then
    die "--ranks-per-host must be 1..64, got '$ranks_per_host'"
  fi
  [[ $prefix =~ ^[a-z][a-z0-9]{0,11}$ ]] || die "--prefix must match [a-z][a-z0-9]{0,11}, got '$prefix'"
  [[ -z $btl_tcp_links || $btl_tcp_links =~ ^[1-9][0-9]?$ ]] ||
    die "--btl-tcp-links must be 1..99, got '$btl_tcp_links'"
  local name
  for name in "${extra_env[@]}"; do
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "-x needs a variable name, got '$name'"
  done
  if [[ $sub == run ]]; then
    [[ ${#command[@]} -gt 0 ]] || die "run needs a command after '--' (see tools/netbed.sh --help)"
  elif [[ ${#command[@]} -gt 0 || -n $btl_tcp_links || ${#extra_mca[@]} -gt 0 ||
          ${#extra_env[@]} -gt 0 || $link_down != none || $ranks_per_host != 1 ]]; then
    die "'--', --ranks-per-host, --link-down, --btl-tcp-links, --mca and -x are for 'run' only"
  fi
}

require_namespaces() {
  [[ $(id -u) -eq 0 ]] || die "network namespaces need root: run as root (or with sudo)"
  command -v ip >/dev/null || die "'ip' not found: install iproute2"
  command -v tc >/dev/null || die "'tc' not found: install iproute2"
}

sw() { echo "$prefix-sw"; }
host() { echo "$prefix-h$1"; }

existing() {  # the namespaces of testbed $prefix, one per line
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-(sw|h[0-9]+)\$" | sort -V || true
}

shape() {  # shape NAMESPACE DEV DELAY [JITTER]: tbf at $rate on DEV's egress, netem DELAY (JITTER) before it
  local ns=$1 dev=$2 delay=$3 vary=${4:-none} parent=root
  if [[ $delay != none || $vary != none ]]; then
    local err netem=(delay "${delay/none/0ms}")
    [[ $vary == none ]] || netem+=("$vary")
    err=$(tc -n "$ns" qdisc add dev "$dev" root handle 1: netem "${netem[@]}" limit 100000 2>&1) ||
      die "--latency/--jitter: tc could not add netem in $ns: ${err:-?} (they need the kernel's sch_netem)"
    parent="parent 1:1"
  fi
  if [[ $rate != none ]]; then
    # shellcheck disable=SC2086  # $parent is 'root' or 'parent 1:1'
    tc -n "$ns" qdisc add dev "$dev" $parent handle 10: tbf rate "$rate" burst $burst latency $tbf_latency
  fi
}

require_absent() {  # before any trap that tears down: an existing testbed is not ours to remove
  local old
  old=$(existing)
  [[ -z $old ]] ||
    die "testbed '$prefix' already exists (${old//$'\n'/ }): 'tools/netbed.sh down --prefix $prefix' first"
}

on_exit() {  # on_exit COMMAND: run COMMAND when the script ends, also through Ctrl-C, TERM or HUP
  # shellcheck disable=SC2064  # expanded now, on purpose
  trap "$1" EXIT
  trap 'exit 130' INT   # through exit, so that the EXIT trap runs
  trap 'exit 143' TERM
  trap 'exit 129' HUP
}

cmd_up() {
  require_absent
  on_exit 'log "up failed: removing what was created"; cmd_down'
  bring_up
  trap - EXIT INT TERM HUP
}

bring_up() {  # the caller's EXIT trap must run cmd_down
  local s i h
  s=$(sw)
  ip netns add "$s"
  ip -n "$s" link set lo up
  ip -n "$s" link add br0 type bridge
  ip -n "$s" addr add "$switch_ip/24" dev br0
  ip -n "$s" link set br0 up
  for ((i = 0; i < hosts; i++)); do
    h=$(host "$i")
    ip netns add "$h"
    ip -n "$h" link set lo up
    # Created directly inside the two namespaces: the root namespace never holds either end.
    ip link add eth0 netns "$h" type veth peer name "p$i" netns "$s"
    ip -n "$s" link set "p$i" master br0
    ip -n "$s" link set "p$i" up
    ip -n "$h" addr add "$net.$((i + 1))/24" dev eth0
    ip -n "$h" link set eth0 up
    if ((i == fault_host)); then shape "$h" eth0 "$latency" "$jitter"; else shape "$h" eth0 "$latency"; fi
    ((i == fault_host)) && [[ $loss != none ]] && drop_packets "$h" "$loss"
    shape "$s" "p$i" none        # switch -> host
  done
  [[ $loss == none && $jitter == none ]] ||
    log "faults on $(host "$fault_host"): loss ${loss/none/0}%, jitter $jitter"
  log "up: $hosts host(s) $(host 0)..$(host $((hosts - 1))) = $net.1..$net.$hosts, switch $s = $switch_ip," \
      "rate $rate per direction per port, extra latency $latency"
}

drop_packets() {  # drop_packets NAMESPACE PERCENT: drop that share of the packets it sends, at random
  local ns=$1 per10k err
  per10k=$(awk -v p="$2" 'BEGIN { printf "%d", p * 100 + 0.5 }')
  command -v nft >/dev/null || die "--loss needs the nft command: install nftables"
  err=$(ip netns exec "$ns" nft -f - 2>&1 <<EOF_NFT
table inet netbed_faults {
  chain out {
    type filter hook output priority 0; policy accept;
    numgen random mod 10000 < $per10k drop
  }
}
EOF_NFT
) || die "--loss: nft could not add the drop rule in $ns: ${err:-?} (needs the kernel's nf_tables)"
}

link_down_later() {  # link_down_later T D: in the background, host $fault_host's link down at T for D s
  local at=${link_down%%:*} for=${link_down##*:} h
  h=$(host "$fault_host")
  (
    sleep "$at"
    ip -n "$h" link set eth0 down 2>/dev/null && ip -n "$(sw)" link set "p$fault_host" down 2>/dev/null &&
      log "fault: $h's link is down for ${for}s"
    sleep "$for"
    ip -n "$h" link set eth0 up 2>/dev/null && ip -n "$(sw)" link set "p$fault_host" up 2>/dev/null &&
      log "fault: $h's link is up again"
  ) &
}

pids_in() {  # the pids of processes running in the given namespaces
  local ns
  for ns in "$@"; do ip netns pids "$ns" 2>/dev/null || true; done
}

stop_all() {  # stop_all SIGNAL SECONDS NAMESPACES...: signal what runs there, wait until it is gone
  local sig=$1 tenths=$(($2 * 10)) pid
  shift 2
  for pid in $(pids_in "$@"); do kill "-$sig" "$pid" 2>/dev/null || true; done
  while ((tenths-- > 0)) && [[ -n $(pids_in "$@") ]]; do sleep 0.1; done
}

cmd_down() {
  local names
  names=$(existing)
  [[ -n $names ]] || return 0
  # A namespace outlives 'ip netns del' while processes run in it. mpirun (in the switch) goes first
  # and stops its job cleanly; what is left is terminated, then killed.
  # shellcheck disable=SC2086  # $names is a list of namespace names
  if [[ -n $(pids_in $names) ]]; then
    stop_all TERM 5 "$(sw)"
    stop_all TERM 2 $names
    stop_all KILL 1 $names
  fi
  local ns left
  for ns in $names; do ip netns del "$ns" 2>/dev/null || true; done
  left=$(existing)
  [[ -z $left ]] || die "could not delete namespaces: ${left//$'\n'/ }"
  log "down: removed ${names//$'\n'/ }"
}

cmd_status() {
  local names ns
  names=$(existing)
  if [[ -z $names ]]; then
    echo "testbed '$prefix': not up"
    return 0
  fi
  echo "testbed '$prefix': $(echo "$names" | grep -c -- '-h') host(s), subnet $subnet"
  for ns in $(echo "$names" | sort -V); do
    echo "$ns:"
    ip -n "$ns" -br addr show | grep -v '^lo ' | sed 's/^/  /'
    tc -n "$ns" qdisc show | grep -E 'tbf|netem' | sed 's/^/  /' || true
    if command -v nft >/dev/null && ip netns exec "$ns" nft list table inet netbed_faults >/dev/null 2>&1; then
      ip netns exec "$ns" nft list table inet netbed_faults | grep -o 'numgen.*drop' | sed 's/^/  fault: /'
    fi
  done
}

cmd_run() {
  command -v mpirun >/dev/null || die "'mpirun' not found: install openmpi-bin"
  [[ -x $rsh_agent ]] || die "$rsh_agent is missing or not executable"
  # Open MPI splits plm_rsh_agent at blanks and colons.
  [[ $rsh_agent != *[[:space:]:]* ]] || die "the path '$rsh_agent' must not contain blanks or ':'"
  if [[ -v OPENBLAS_CORETYPE && -z $OPENBLAS_CORETYPE ]]; then
    log "warning: OPENBLAS_CORETYPE is set but empty, which selects a wrong core: unsetting it"
    unset OPENBLAS_CORETYPE
  fi
  require_absent
  local tmp
  tmp=$(mktemp -d /tmp/netbed.XXXXXX)
  # Always tear down, whatever happens next. $tmp is expanded now: the trap may run after this
  # function's locals are gone.
  on_exit "cmd_down; rm -rf '$tmp'"
  bring_up
  local h
  for ((h = 0; h < hosts; h++)); do echo "$(host "$h") slots=$ranks_per_host"; done >"$tmp/hostfile"

  # By slot: a host's ranks are consecutive (ranks 0..R-1 on host 0), as on a cluster's nodes.
  local args=(-np "$((hosts * ranks_per_host))" --hostfile "$tmp/hostfile" --map-by slot
    --bind-to none    # every daemon believes it owns the whole machine: binding would stack ranks on core 0
    --wdir "$PWD")
  # MCA defaults; a --mca KEY VALUE of the caller replaces the default for KEY (mpirun rejects a key
  # given twice).
  # shellcheck disable=SC2054  # 'tcp,self' is one value
  local -A mca=(
    [plm_rsh_agent]=$rsh_agent [plm_rsh_no_tree_spawn]=1
    [pml]=ob1 [btl]=tcp,vader,self [btl_tcp_if_include]=$subnet [oob_tcp_if_include]=$subnet
    [mpi_yield_when_idle]=1   # busy-polling ranks starve the kernel's packet processing (4 ms/message)
    [orte_leave_session_attached]=1)  # daemons stay children of mpirun: their errors are shown, not lost
  [[ -z $btl_tcp_links ]] || mca[btl_tcp_links]=$btl_tcp_links
  local i key
  for ((i = 0; i < ${#extra_mca[@]}; i += 3)); do mca[${extra_mca[i + 1]}]=${extra_mca[i + 2]}; done
  for key in $(printf '%s\n' "${!mca[@]}" | sort); do args+=(--mca "$key" "${mca[$key]}"); done
  local name
  for name in "${forward_env[@]}" $(compgen -e | grep '^QTRAIN_') "${extra_env[@]}"; do
    if [[ -v $name ]]; then args+=(-x "$name"); fi
  done
  if [[ $(id -u) -eq 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  log "run: ip netns exec $(sw) mpirun$(printf ' %q' "${args[@]}" "${command[@]}")"
  # In the background with `wait`, because bash runs a trap only after the foreground command ends:
  # a TERM would wait for the whole job. stdin is redirected explicitly, or it would be /dev/null.
  local rc=0
  ip netns exec "$(sw)" mpirun "${args[@]}" "${command[@]}" <&0 &
  local job=$!
  [[ $link_down == none ]] || link_down_later
  wait $job || rc=$?
  [[ $rc -eq 0 ]] || log "run: the command exited with status $rc"
  exit "$rc"
}

main() {
  [[ $# -gt 0 ]] || { usage >&2; exit 2; }
  local sub=$1
  shift
  case $sub in
    -h|--help|help) usage; exit 0 ;;
    up|down|run|status) ;;
    *) die "unknown subcommand '$sub': expected up, down, run or status (see tools/netbed.sh --help)" ;;
  esac
  parse_args "$sub" "$@"
  require_namespaces
  "cmd_$sub"
}

main "$@"
