#!/bin/bash
# Submits a chain of N jobs, each starting when the previous one ends (--dependency=afterany):
# the first starts the run, each later one resumes from the checkpoint directory. Jobs in a
# chain do not requeue themselves. Extra arguments go to every sbatch call.
#   jobs/dsampler-chain.sh 5 jobs/dsampler-gpu.sbatch --nodes=8
set -euo pipefail
count=${1:?usage: dsampler-chain.sh COUNT SCRIPT [sbatch options...]}
script=${2:?usage: dsampler-chain.sh COUNT SCRIPT [sbatch options...]}
shift 2
previous=""
for ((i = 1; i <= count; i++)); do
  dependency=()
  [ -n "$previous" ] && dependency=(--dependency=afterany:"$previous")
  previous=$(sbatch --parsable --export=ALL,DSAMPLER_REQUEUE=0 "${dependency[@]}" "$@" "$script")
  echo "submitted job $previous (${i}/${count})"
done
