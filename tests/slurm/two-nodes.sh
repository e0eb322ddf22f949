#!/usr/bin/env bash
# A two-node Slurm cluster on one Linux machine, for the tests that need a job spanning nodes.
# Each "node" is a network namespace plus a UTS namespace (its own address and hostname, the
# file system shared), the two joined by a veth pair whose ends, 10.200.0.1 and 10.200.0.2, exist
# only inside the namespaces. node1 runs slurmctld and a slurmd, node2 a slurmd; one munged (in
# the root namespace) serves both through its socket file. Needs root, iproute2, util-linux,
# munge, slurmctld, slurmd and slurm-client.
#
#   two-nodes.sh up   DIR            set up (idempotent); exit 77 when namespaces, the veth pair
#                                    or the guard route cannot be made (an environment without them)
#   two-nodes.sh run  DIR NODE CMD   run CMD inside NODE (node1 or node2) with SLURM_CONF set
#   two-nodes.sh down DIR            cancel jobs, stop the daemons (by pid file), remove namespaces
#
# DIR holds the config, munge key, state and logs. The namespace and interface names carry a tag
# derived from DIR, so clusters made in different folders (another checkout's test) do not meet.
# Clients (sinfo, srun, sbatch) must run through "run": the root namespace has no route to the
# nodes. As a guard, "up" adds an unreachable route for 10.200.0.0/24 there when no route for it
# exists, so a client started outside fails at once instead of sending anything off the machine;
# "down" removes the route it added.
set -euo pipefail
cmd=${1:?usage: two-nodes.sh up|run|down DIR ...}
W=$(realpath -m "${2:?usage: two-nodes.sh $cmd DIR ...}")
shift 2
NODES=(node1 node2) NET=10.200.0 CONF=$W/slurm.conf
tag=tn$(( $(printf %s "$W" | cksum | cut -d' ' -f1) % 100000 ))   # e.g. tn4242: names for this DIR
CPUS=${TWONODE_CPUS:-$(( $(nproc) > 2 ? $(nproc) : 2 ))}

die() { echo "two-nodes: $1" >&2; exit "${2:-1}"; }
addr() { echo "$NET.${1#node}"; }                 # node1 -> 10.200.0.1
netns() { echo "$tag-$1"; }                       # node1 -> tn4242-node1 (under /run/netns)
veth() { echo "$tag-${1#node}"; }                 # node1 -> tn4242-1 (at most 15 characters)
in_node() {                                       # in_node NODE CMD...: enter both namespaces
  local node=$1; shift
  nsenter --net="/run/netns/$(netns "$node")" --uts="$W/ns/$node.uts" -- env SLURM_CONF="$CONF" "$@"
}
# Daemons are found by pid file and checked by name through /proc (no procps needed).
running() {                                       # running PID NAME: a live, not zombie, NAME?
  local stat
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}
alive() { local pid; pid=$(cat "$1" 2>/dev/null) && running "$pid" "$2"; }   # alive PIDFILE NAME
stop() {                                          # stop PIDFILE NAME: TERM, wait, then KILL
  local pid; pid=$(cat "$1" 2>/dev/null) || return 0
  if running "$pid" "$2"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do running "$pid" "$2" || break; sleep 0.1; done
    if running "$pid" "$2"; then kill -9 "$pid" 2>/dev/null || true; fi
    echo "two-nodes: stopped $2 (pid $pid)"
  fi
  rm -f "$1"
}
idle_nodes() { in_node node1 sinfo -h -N -o %T 2>/dev/null | grep -c '^idle' || true; }

up() {
  [ "$(id -u)" -eq 0 ] || die "needs root" 77
  for tool in ip nsenter unshare mountpoint runuser munged slurmctld slurmd sinfo srun; do
    command -v "$tool" >/dev/null || die "$tool not found" 77
  done
  # Containers without CAP_SYS_ADMIN / CAP_NET_ADMIN cannot make namespaces: that is a skip.
  unshare --net --uts true 2>/dev/null || die "cannot make network and UTS namespaces here" 77
  mkdir -p "$W"/{ns,run,log,state,munge} "$W"/{spool,tmp}/{node1,node2} && chmod 755 "$W"
  # 1. A named network namespace per node with lo up (the step's PMIx server reaches its ranks
  #    over 127.0.0.1; with lo down the step hangs in the PMIx fence), and a UTS namespace kept
  #    by a bind mount on $W/ns/NODE.uts whose hostname is the node's name.
  for node in "${NODES[@]}"; do
    [ -e "/run/netns/$(netns "$node")" ] || ip netns add "$(netns "$node")" ||
      die "cannot make network namespace $(netns "$node") (ip netns add)" 77
    ip -n "$(netns "$node")" link set lo up
    if ! mountpoint -q "$W/ns/$node.uts"; then
      touch "$W/ns/$node.uts" && unshare --uts="$W/ns/$node.uts" hostname "$node" ||
        die "cannot keep a UTS namespace on $W/ns/$node.uts (unshare --uts=FILE)" 77
    fi
  done
  # 2. The wire: one veth pair with an end in each node. The guard route in the root namespace.
  if [ -z "$(ip route show "$NET.0/24")" ]; then
    ip route add unreachable "$NET.0/24" || die "cannot add the guard route for $NET.0/24" 77
    touch "$W/run/guard-route"
  fi
  ip -n "$(netns node1)" link show "$(veth node1)" >/dev/null 2>&1 ||
    ip link add "$(veth node1)" netns "$(netns node1)" type veth peer name "$(veth node2)" netns "$(netns node2)" ||
    die "cannot make a veth pair between the nodes" 77
  for node in "${NODES[@]}"; do
    ip -n "$(netns "$node")" addr replace "$(addr "$node")/24" dev "$(veth "$node")"
    ip -n "$(netns "$node")" link set "$(veth "$node")" up
  done
  # 3. munge: a key of our own; the daemon on a socket file that both nodes see.
  local m=$W/munge
  if ! alive "$m/munged.pid" munged; then
    [ -s "$m/munge.key" ] || dd if=/dev/urandom bs=1 count=1024 of="$m/munge.key" status=none
    chown -R munge:munge "$m" && chmod 700 "$m" && chmod 400 "$m/munge.key"
    runuser -u munge -- munged --force --key-file="$m/munge.key" --socket="$m/munge.socket" \
      --pid-file="$m/munged.pid" --log-file="$m/munged.log" --seed-file="$m/seed"
    for _ in $(seq 25); do [ -S "$m/munge.socket" ] && break; sleep 0.2; done
  fi
  # 4. slurm.conf. Nodes are reached by NodeAddr (their names need not resolve). Spool, pid and
  #    log files per node (%n), and TmpFS per node: mpi/pmix makes TmpFS/spmix_appdir_UID_JOB.STEP
  #    on every node of a step, and with one shared TmpFS the second node fails with "File exists".
  #    (So SLURM_PMIX_TMPDIR must not be set for srun or sbatch: it is one path for both nodes.)
  #    cred_expire=10: a requeued job is held about that long (default 120 s) before it restarts.
  #    The daemons listen in the node namespaces, so the default ports meet nothing outside.
  cat > "$CONF" <<CONF
ClusterName=twonodes
SlurmctldHost=node1($(addr node1))
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$m/munge.socket,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
MpiDefault=pmix
JobRequeue=1
MinJobAge=600
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool/%n
TmpFS=$W/tmp/%n
SlurmctldPidFile=$W/run/slurmctld.pid
SlurmdPidFile=$W/run/slurmd-%n.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd-%n.log
NodeName=node1 NodeAddr=$(addr node1) NodeHostname=node1 CPUs=$CPUS RealMemory=1000 State=UNKNOWN
NodeName=node2 NodeAddr=$(addr node2) NodeHostname=node2 CPUs=$CPUS RealMemory=1000 State=UNKNOWN
PartitionName=two Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  # 5. The daemons, each inside its node (they daemonize and write their pid files).
  #    slurmctld -c: a scratch cluster, no job survives a restart of the controller.
  alive "$W/run/slurmctld.pid" slurmctld || in_node node1 slurmctld -c -f "$CONF"
  for node in "${NODES[@]}"; do
    alive "$W/run/slurmd-$node.pid" slurmd || in_node "$node" slurmd -f "$CONF" -N "$node"
  done
  for _ in $(seq 60); do [ "$(idle_nodes)" -eq 2 ] && break; sleep 0.5; done
  [ "$(idle_nodes)" -eq 2 ] || die "the nodes did not both come up idle; see $W/log"
  in_node node1 sinfo -N
}

down() {
  if [ -e "/run/netns/$(netns node1)" ] && alive "$W/run/slurmctld.pid" slurmctld; then
    in_node node1 scancel --partition=two 2>/dev/null || true      # end the jobs first
    for _ in $(seq 50); do [ -z "$(in_node node1 squeue -h -t R,CG -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for node in "${NODES[@]}"; do stop "$W/run/slurmd-$node.pid" slurmd; done
  stop "$W/run/slurmctld.pid" slurmctld
  stop "$W/munge/munged.pid" munged
  for node in "${NODES[@]}"; do
    if [ -e "/run/netns/$(netns "$node")" ]; then
      # Whatever is still inside (steps left by a stopped slurmd) was started there by us.
      for pid in $(ip netns pids "$(netns "$node")"); do
        echo "two-nodes: killing leftover pid $pid in $node"; kill -9 "$pid" 2>/dev/null || true
      done
      ip -n "$(netns "$node")" link del "$(veth "$node")" 2>/dev/null || true   # both ends go
      ip netns del "$(netns "$node")"
    fi
    if mountpoint -q "$W/ns/$node.uts"; then umount "$W/ns/$node.uts"; fi
    rm -f "$W/ns/$node.uts"
  done
  if [ -e "$W/run/guard-route" ]; then
    ip route del unreachable "$NET.0/24" 2>/dev/null || true
    rm -f "$W/run/guard-route"
  fi
}

case $cmd in
  up) up ;;
  down) down ;;
  run) [ $# -ge 2 ] || die "usage: two-nodes.sh run DIR NODE CMD..."
       node=$1; shift
       [ -e "/run/netns/$(netns "$node")" ] || die "no node $node in $W (run 'two-nodes.sh up $W' first)"
       in_node "$node" "$@" ;;
  *) die "usage: two-nodes.sh up DIR | run DIR NODE CMD... | down DIR" ;;
esac
