# dsampler-job.sh: sourced by the sbatch scripts in this folder. Runs one job step of dsampler
# that starts fresh or, when the checkpoint directory holds a checkpoint, resumes from it;
# forwards Slurm's early-warning signal to the step; and requeues the job when the step
# stopped at a checkpoint (exit 75), at most DSAMPLER_MAX_RESTARTS times.
#
# Settings (environment, usually set in the sbatch script or with `sbatch --export`):
#   DSAMPLER_BIN          the dsampler binary (default: dsampler on PATH)
#   DSAMPLER_ARGS         the run's arguments, e.g. "hmc --target gaussian --dim 64 --chains 65536 ..."
#                         (must include --out and --checkpoint-dir, or their defaults apply)
#   DSAMPLER_CKPT_DIR     the checkpoint directory named in DSAMPLER_ARGS (to find a checkpoint)
#   DSAMPLER_LAUNCH       how a step is launched (default: srun --mpi=pmix); e.g. "mpirun"
#   DSAMPLER_MAX_RESTARTS requeues allowed (default 10); DSAMPLER_REQUEUE=0 to exit instead
#                         (for job chains made with --dependency=afterany)

dsampler_job_run() {
  local bin=${DSAMPLER_BIN:-dsampler}
  local launch=${DSAMPLER_LAUNCH:-srun --mpi=pmix}
  local ckpt_dir=${DSAMPLER_CKPT_DIR:?set DSAMPLER_CKPT_DIR to the run\'s --checkpoint-dir}
  local restarts=${SLURM_RESTART_COUNT:-0}
  local max_restarts=${DSAMPLER_MAX_RESTARTS:-10}
  local -a command
  if compgen -G "$ckpt_dir/ckpt-*.h5" >/dev/null; then
    echo "dsampler-job: resuming from $ckpt_dir (restart $restarts)"
    command=($bin resume "$ckpt_dir")
  else
    echo "dsampler-job: starting a fresh run"
    # shellcheck disable=SC2206  # DSAMPLER_ARGS is a list of words by design
    command=($bin $DSAMPLER_ARGS)
  fi

  # Slurm signals the batch shell (--signal=B:USR1@T, and SIGTERM at scancel or the limit);
  # the step is told to checkpoint and stop. Whatever arrives here, the step gets SIGUSR1:
  # srun and mpirun both forward it to every rank, the ranks checkpoint and exit 75, and the
  # launcher passes 75 on. SIGTERM or SIGINT sent to mpirun itself (Open MPI 4) makes mpirun
  # end the job on its own and exit 1, even though the ranks checkpointed: no requeue.
  local step_pid=""
  trap 'echo "dsampler-job: time-limit signal: asking the step to checkpoint"; [ -n "$step_pid" ] && kill -USR1 "$step_pid"' USR1
  trap 'echo "dsampler-job: SIGTERM: asking the step to checkpoint"; [ -n "$step_pid" ] && kill -USR1 "$step_pid"' TERM
  trap 'echo "dsampler-job: SIGINT: asking the step to checkpoint"; [ -n "$step_pid" ] && kill -USR1 "$step_pid"' INT
  $launch "${command[@]}" &
  step_pid=$!
  local rc=0
  wait "$step_pid" || rc=$?
  # A trap interrupts `wait` (it then returns > 128); wait again for the step's own exit code.
  while kill -0 "$step_pid" 2>/dev/null; do
    rc=0
    wait "$step_pid" || rc=$?
  done
  trap - USR1 TERM INT
  echo "dsampler-job: step exited with $rc"
  if [ "$rc" -eq 75 ]; then
    if [ "${DSAMPLER_REQUEUE:-1}" = 1 ] && [ "$restarts" -lt "$max_restarts" ]; then
      echo "dsampler-job: requeueing job $SLURM_JOB_ID (restart $((restarts + 1)) of at most $max_restarts)"
      scontrol requeue "$SLURM_JOB_ID"
      return 0
    fi
    echo "dsampler-job: stopped at a checkpoint; resume with: dsampler resume $ckpt_dir"
  fi
  return "$rc"
}
