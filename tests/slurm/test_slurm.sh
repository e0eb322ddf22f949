#!/usr/bin/env bash
# The job scripts against a real Slurm on this machine (slurmctld, slurmd and munge on
# localhost, configured here in a scratch folder; CPU backend): submit jobs/dsampler-cpu.sbatch,
# deliver the time-limit signal to the batch shell, and check that the run checkpoints, is
# requeued, resumes, and ends with output bitwise equal to an uninterrupted run. Then a chain
# of two jobs (--dependency=afterany) does the same without requeueing.
# Usage: test_slurm.sh DSAMPLER_BIN SOURCE_DIR WORK_DIR. Exits 77 (skip) without Slurm or root.
set -uo pipefail
bin=$1 source_dir=$2 work=$3
for tool in slurmctld slurmd sbatch munged h5diff; do
  command -v "$tool" >/dev/null || { echo "skip: $tool not installed"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root to run slurmd"; exit 77; }

rm -rf "$work" && mkdir -p "$work"/{state,spool,log} && cd "$work" || exit 1
failures=0
check() { if eval "$1"; then echo "ok   $2"; else echo "FAIL $2"; failures=$((failures + 1)); fi; }
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  sleep 1
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
}
trap cleanup EXIT

# munge: a key of our own, the daemon on its own socket.
mkdir -p "$work/munge" && chown munge:munge "$work/munge" 2>/dev/null
dd if=/dev/urandom bs=1 count=1024 of="$work/munge/munge.key" status=none
chown munge:munge "$work/munge/munge.key" && chmod 400 "$work/munge/munge.key"
socket="$work/munge/munge.socket"
runuser -u munge -- /usr/sbin/munged --force --key-file="$work/munge/munge.key" --socket="$socket" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" --seed-file="$work/munge/seed" || exit 1
sleep 0.5
pids+=("$(cat "$work/munge/munged.pid")")

host=$(hostname -s)
cat > slurm.conf <<CONF
ClusterName=dsamplertest
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$socket,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
JobRequeue=1
MinJobAge=600
NodeName=$host CPUs=$(nproc) RealMemory=4000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$work/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF" || exit 1
/usr/sbin/slurmd -f "$SLURM_CONF" || exit 1
sleep 1
pids+=("$(cat "$work/slurmctld.pid")" "$(cat "$work/slurmd.pid")")
for _ in $(seq 60); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.5; done
check 'sinfo -h -o %T | grep -q idle' "slurm: the node is idle"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=yes
# 2048 chains for a run long enough to signal; 128 of them written (14 MB an output, not 440).
args="hmc --target gaussian --dim 64 --chains 2048 --output-chains 128 --warmup 20 --draws 800 --steps 10 --step-size 0.1"
args+=" --seed 3 --backend cpu"

# The uninterrupted reference (any rank count gives the same draws).
mpirun -np 2 "$bin" $args --out "$work/reference.h5" --checkpoint-dir "$work/reference.ckpt" --quiet >/dev/null
check '[ -f reference.h5 ]' "reference run written"

job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
restart_count() { scontrol show job "$1" 2>/dev/null | grep -o 'Restarts=[0-9]*' | cut -d= -f2; }
wait_for_file() { for _ in $(seq 1200); do compgen -G "$1" >/dev/null && return 0; sleep 0.1; done; return 1; }
wait_done() {
  for _ in $(seq 1800); do
    case "$(job_state "$1")" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|"") return 0 ;; esac
    sleep 0.2
  done
  return 1
}
same_output() {
  for d in /posterior/x /sample_stats/lp /sample_stats/energy /sample_stats/acceptance_rate; do
    h5diff -q "$work/reference.h5" "$1" "$d" "$d" || return 1
  done
}

# 1. One job, signalled as at its time limit, requeued, resumed.
export DSAMPLER_BIN=$bin DSAMPLER_HOME=$source_dir DSAMPLER_LAUNCH="srun --mpi=pmix"
export DSAMPLER_CKPT_DIR=$work/run.ckpt
export DSAMPLER_ARGS="$args --out $work/run.h5 --checkpoint-dir $DSAMPLER_CKPT_DIR --checkpoint-every 100 --quiet"
job=$(sbatch --parsable --ntasks=2 --time=10 --output="$work/job-%j.log" "$source_dir/jobs/dsampler-cpu.sbatch")
check '[ -n "$job" ]' "sbatch accepted jobs/dsampler-cpu.sbatch (job $job)"
wait_for_file "$DSAMPLER_CKPT_DIR/ckpt-*.h5"
check 'compgen -G "$DSAMPLER_CKPT_DIR/ckpt-*.h5" >/dev/null' "a scheduled checkpoint appeared while the job ran"
scancel --signal=USR1 --batch "$job"
wait_done "$job"
log=$(cat "$work"/job-"$job".log)
echo "$log" | sed 's/^/    | /'
check 'echo "$log" | grep -q "time-limit signal"' "the batch shell trapped the signal"
check 'echo "$log" | grep -q "step exited with 75"' "the step checkpointed and exited 75"
check 'echo "$log" | grep -q "requeueing job"' "the job requeued itself"
check 'echo "$log" | grep -q "resuming from"' "the requeued job resumed from the checkpoint"
check '[ "$(job_state "$job")" = COMPLETED ]' "the job completed (state $(job_state "$job"), restarts $(restart_count "$job"))"
check 'same_output "$work/run.h5"' "the output equals the uninterrupted run bitwise"

# 2. A chain of two jobs: the first is signalled and ends at a checkpoint, the second resumes.
export DSAMPLER_CKPT_DIR=$work/chain.ckpt
export DSAMPLER_ARGS="$args --out $work/chain.h5 --checkpoint-dir $DSAMPLER_CKPT_DIR --checkpoint-every 100 --quiet"
chain=$(bash "$source_dir/jobs/dsampler-chain.sh" 2 "$source_dir/jobs/dsampler-cpu.sbatch" --ntasks=2 --time=10 \
        --output="$work/chain-%j.log")
first=$(echo "$chain" | awk 'NR == 1 {print $3}') second=$(echo "$chain" | awk 'NR == 2 {print $3}')
check '[ -n "$first" ] && [ -n "$second" ]' "chain submitted: $first then $second"
wait_for_file "$DSAMPLER_CKPT_DIR/ckpt-*.h5"
scancel --signal=USR1 --batch "$first"
wait_done "$first"
wait_done "$second"
check 'grep -q "stopped at a checkpoint" "$work/chain-$first.log"' "the first job of the chain stopped at a checkpoint"
check 'grep -q "resuming from" "$work/chain-$second.log"' "the second job resumed"
check 'same_output "$work/chain.h5"' "the chain's output equals the uninterrupted run bitwise"

echo "slurm: $failures failure(s)"
# A passed run's outputs and checkpoints go; a failed one's stay, for the evidence.
[ "$failures" -eq 0 ] && rm -rf "$work"/*.h5 "$work"/*.ckpt
[ "$failures" -eq 0 ]
