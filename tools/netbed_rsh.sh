#!/usr/bin/env bash
# Open MPI's rsh agent for tools/netbed.sh (--mca plm_rsh_agent): mpirun calls it like ssh,
# `netbed_rsh.sh HOST COMMAND...`, to start its daemon on HOST. Here a host is a network namespace of
# the same name (<prefix>-h<i>): COMMAND runs there through a shell, like ssh's remote side (Open MPI
# quotes the command for a shell), with the environment passed through unchanged.
set -euo pipefail
while [[ $# -gt 0 && $1 == -* ]]; do shift; done   # ssh-style options, if any were configured
[[ $# -ge 2 ]] || { echo "netbed_rsh.sh: usage: netbed_rsh.sh HOST COMMAND..." >&2; exit 1; }
host=$1
shift
[[ $host =~ ^[a-z][a-z0-9]*-h[0-9]+$ ]] ||
  { echo "netbed_rsh.sh: '$host' is not a netbed host name (<prefix>-h<i>)" >&2; exit 1; }
[[ -e /run/netns/$host ]] ||
  { echo "netbed_rsh.sh: network namespace '$host' does not exist (is the testbed up?)" >&2; exit 1; }
# Each host also gets its own hostname (a UTS namespace). Without it every daemon is named after the
# real machine, so they share one session directory (/tmp/ompi.<hostname>.<uid>/...) and race on it:
# about 1 launch in 6 failed (mkdir 'File exists', a segfault writing the shared hwloc topology, or a
# silent hang, since daemons are started with --daemonize and mpirun has no launch timeout).
exec ip netns exec "$host" unshare --uts /bin/sh -c "echo $host >/proc/sys/kernel/hostname && $*"
