#!/bin/sh
# bind_one_gpu.sh: runs a command as Slurm's per-task GPU binding (--gpus-per-task=1,
# --gpu-bind=single:1) does: the rank sees one GPU only, its node-local rank's, as device 0.
# Usage, under mpiexec: bind_one_gpu.sh COMMAND [ARGS...]
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${SLURM_LOCALID:-0}}}
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  # Already narrowed by the caller: the local rank's entry of that list.
  device=$(printf '%s\n' "$CUDA_VISIBLE_DEVICES" | awk -F, -v field="$((local_rank + 1))" '{ print $field }')
else
  device=$local_rank
fi
if [ -z "$device" ]; then
  echo "bind_one_gpu.sh: no GPU for local rank $local_rank (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-})" >&2
  exit 1
fi
CUDA_VISIBLE_DEVICES=$device
export CUDA_VISIBLE_DEVICES
exec "$@"
