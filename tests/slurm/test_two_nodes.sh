#!/usr/bin/env bash
# dsampler jobs spanning two Slurm nodes, on one machine: two-nodes.sh (beside this file) makes
# node1 and node2 from network + UTS namespaces joined by a veth pair, so MPI between the nodes
# goes over TCP and each step is wired up by PMIx on both nodes. Checked, each against a 1-rank
# run without any launcher, bitwise in every dataset of the output:
#   1. HMC and SVGD with srun -N2 --ntasks-per-node=2 --mpi=pmix (4 ranks, uneven blocks);
#   2. jobs/dsampler-cpu.sbatch on 2 nodes x 2 tasks, given the time-limit signal after its
#      first checkpoint: the step stops at a checkpoint on both nodes (exit 75), the job
#      requeues itself, resumes and completes;
#   3. a chain of two such jobs (jobs/dsampler-chain.sh, --dependency=afterany).
# Usage: test_two_nodes.sh DSAMPLER_BIN SOURCE_DIR WORK_DIR. Exits 77 (skip) without root,
# Slurm, h5diff, PMIx in Slurm, or the right to make namespaces. Every daemon and namespace it
# starts is removed on exit, whatever the outcome.
set -uo pipefail
bin=$1 source_dir=$2 work=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$work/cluster
for tool in slurmctld slurmd sbatch munged h5diff h5ls ip; do
  command -v "$tool" >/dev/null || { echo "skip: $tool not installed"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root to make namespaces and run slurmd"; exit 77; }

# A cluster left by an earlier run in this folder (killed before its trap ran) goes first.
[ -d "$cluster" ] && bash "$here/two-nodes.sh" down "$cluster" >/dev/null 2>&1
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
cleanup() { bash "$here/two-nodes.sh" down "$cluster"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
bash "$here/two-nodes.sh" up "$cluster"
status=$?
if [ "$status" -eq 77 ]; then echo "skip: no two-node cluster on this machine (see above)"; exit 77; fi
[ "$status" -eq 0 ] || { echo "FAIL two-nodes.sh up (logs in $cluster/log)"; exit 1; }
on_node1() { bash "$here/two-nodes.sh" run "$cluster" node1 "$@"; }   # clients run inside node1
on_node1 srun --mpi=list 2>&1 | grep -q pmix || { echo "skip: Slurm has no mpi/pmix plugin"; exit 77; }

failures=0
check() { if eval "$1"; then echo "ok   $2"; else echo "FAIL $2"; failures=$((failures + 1)); fi; }
# Every dataset of the reference, compared bitwise (h5diff without a tolerance compares values
# exactly; floats are equal only when their bits are, NaN aside, and no output holds NaN).
same_output() {                                   # same_output REFERENCE FILE
  local dataset count=0
  for dataset in $(h5ls -r "$1" | awk '$2 == "Dataset" {print $1}'); do
    h5diff -q "$1" "$2" "$dataset" "$dataset" || { echo "    differs: $dataset"; return 1; }
    count=$((count + 1))
  done
  [ "$count" -gt 0 ] && echo "    $count datasets equal"
}

# Open MPI as root; 4 ranks on 2 cores: yield instead of busy-polling, one OpenMP thread each
# (task/none binds nothing, so each rank's OpenMP would otherwise take every core).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
two_by_two=(srun -N2 --ntasks-per-node=2 --mpi=pmix)

# 0. The step geometry: ranks 0-1 on node1, 2-3 on node2.
check '[ "$(on_node1 "${two_by_two[@]}" -l hostname | sort | cut -d" " -f2 | tr "\n" " ")" = "node1 node1 node2 node2 " ]' \
  "srun -N2 --ntasks-per-node=2 places ranks 0-1 on node1 and 2-3 on node2"

# 1. HMC and SVGD on 2 nodes x 2 tasks against 1 rank. 18 items on 4 ranks: blocks of 4 and 5.
hmc="hmc --target gaussian --dim 4 --chains 18 --warmup 100 --draws 300 --seed 3 --backend cpu --quiet"
svgd="svgd --target gaussian --dim 4 --particles 18 --iters 300 --step-size 0.1 --seed 3 --backend cpu --quiet"
"$bin" $hmc --out "$work/hmc-1rank.h5" >/dev/null
"$bin" $svgd --out "$work/svgd-1rank.h5" >/dev/null
# The btl log says which transport carries each peer's messages: TCP to the other node.
OMPI_MCA_btl_base_verbose=100 on_node1 "${two_by_two[@]}" "$bin" $hmc --out "$work/hmc-2x2.h5" \
  >"$work/hmc-2x2.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]' "HMC on 2 nodes x 2 tasks ran (exit $rc)"
check 'grep -q "Using tcp btl for send to .* on node node2" "$work/hmc-2x2.log"' \
  "HMC: node1's ranks reach node2's over TCP"
check 'same_output "$work/hmc-1rank.h5" "$work/hmc-2x2.h5"' "HMC: 2 nodes x 2 tasks bitwise equal to 1 rank"
on_node1 "${two_by_two[@]}" "$bin" $svgd --out "$work/svgd-2x2.h5" >"$work/svgd-2x2.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]' "SVGD on 2 nodes x 2 tasks ran (exit $rc)"
check 'same_output "$work/svgd-1rank.h5" "$work/svgd-2x2.h5"' "SVGD: 2 nodes x 2 tasks bitwise equal to 1 rank"

# 2. The job script across nodes, stopped by the time-limit signal. The run is long enough
#    (about 4 s on 2 cores) that the signal, sent once the first checkpoint is there, lands
#    while the step runs.
long="hmc --target gaussian --dim 16 --chains 256 --warmup 100 --draws 500 --steps 2000 --seed 5 --backend cpu --quiet"
"$bin" $long --out "$work/long-1rank.h5" >/dev/null
job_state() { on_node1 scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
restart_count() { on_node1 scontrol show job "$1" 2>/dev/null | grep -o 'Restarts=[0-9]*' | cut -d= -f2; }
job_nodes() { on_node1 scontrol show job "$1" 2>/dev/null | grep -o ' NodeList=[^ ]*' | cut -d= -f2; }
wait_for_file() { for _ in $(seq 1200); do compgen -G "$1" >/dev/null && return 0; sleep 0.1; done; return 1; }
wait_done() {
  for _ in $(seq 900); do
    case "$(job_state "$1")" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|"") return 0 ;; esac
    sleep 0.2
  done
  return 1
}
job_geometry=(-N2 --ntasks=4 --ntasks-per-node=2 --time=10)
export DSAMPLER_BIN=$bin DSAMPLER_HOME=$source_dir DSAMPLER_LAUNCH="srun --mpi=pmix"
export DSAMPLER_CKPT_DIR=$work/run.ckpt
export DSAMPLER_ARGS="$long --out $work/run.h5 --checkpoint-dir $DSAMPLER_CKPT_DIR --checkpoint-every 50"
job=$(on_node1 sbatch --parsable "${job_geometry[@]}" --output="$work/job-%j.log" "$source_dir/jobs/dsampler-cpu.sbatch")
check '[ -n "$job" ]' "sbatch -N2 --ntasks-per-node=2 accepted jobs/dsampler-cpu.sbatch (job $job)"
wait_for_file "$DSAMPLER_CKPT_DIR/ckpt-*.h5"
check 'compgen -G "$DSAMPLER_CKPT_DIR/ckpt-*.h5" >/dev/null' "a scheduled checkpoint appeared while the job ran"
check '[ "$(job_nodes "$job")" = "node[1-2]" ]' "the job holds both nodes ($(job_nodes "$job"))"
on_node1 scancel --signal=USR1 --batch "$job"
wait_done "$job"
log=$(cat "$work/job-$job.log")
echo "$log" | sed 's/^/    | /'
check 'echo "$log" | grep -q "time-limit signal"' "the batch shell trapped the signal"
check 'echo "$log" | grep -q "node1: tasks 0-1: Exited with exit code 75"' "node1's ranks checkpointed and exited 75"
check 'echo "$log" | grep -q "node2: tasks 2-3: Exited with exit code 75"' "node2's ranks checkpointed and exited 75"
check 'echo "$log" | grep -q "requeueing job"' "the job requeued itself"
check 'echo "$log" | grep -q "resuming from"' "the requeued job resumed from the checkpoint"
check '[ "$(job_state "$job")" = COMPLETED ] && [ "$(restart_count "$job")" = 1 ]' \
  "the job completed after one restart (state $(job_state "$job"), restarts $(restart_count "$job"))"
check 'same_output "$work/long-1rank.h5" "$work/run.h5"' \
  "the stopped, requeued and resumed job's output is bitwise equal to an uninterrupted 1-rank run"

# 3. A chain of two jobs across the nodes: the first is signalled and ends at a checkpoint,
#    the second (afterany) resumes.
export DSAMPLER_CKPT_DIR=$work/chain.ckpt
export DSAMPLER_ARGS="$long --out $work/chain.h5 --checkpoint-dir $DSAMPLER_CKPT_DIR --checkpoint-every 50"
chain=$(on_node1 bash "$source_dir/jobs/dsampler-chain.sh" 2 "$source_dir/jobs/dsampler-cpu.sbatch" \
        "${job_geometry[@]}" --output="$work/chain-%j.log")
first=$(echo "$chain" | awk 'NR == 1 {print $3}') second=$(echo "$chain" | awk 'NR == 2 {print $3}')
check '[ -n "$first" ] && [ -n "$second" ]' "chain submitted across the nodes: $first then $second"
wait_for_file "$DSAMPLER_CKPT_DIR/ckpt-*.h5"
on_node1 scancel --signal=USR1 --batch "$first"
wait_done "$first"
wait_done "$second"
check 'grep -q "node2: tasks 2-3: Exited with exit code 75" "$work/chain-$first.log" &&
       grep -q "stopped at a checkpoint" "$work/chain-$first.log"' "the chain's first job stopped at a checkpoint on both nodes"
check 'grep -q "resuming from" "$work/chain-$second.log" && [ "$(job_state "$second")" = COMPLETED ]' \
  "the chain's second job resumed and completed"
check '[ "$(job_nodes "$second")" = "node[1-2]" ]' "the second job held both nodes too"
check 'same_output "$work/long-1rank.h5" "$work/chain.h5"' "the chain's output is bitwise equal to an uninterrupted 1-rank run"

echo "slurm two nodes: $failures failure(s)"
[ "$failures" -eq 0 ]
