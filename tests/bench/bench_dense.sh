#!/usr/bin/env bash
# The dense metric's cost on the GPU beside the diagonal one: HMC warmup iterations of 2^20
# chains (or $CHAINS) in d = 64 (or $DIM), --steps 10, pooled adaptation, end to end through
# `dsampler hmc --backend cuda`. The cost of an iteration is the difference of two runs' wall
# times, warmup 400 and warmup 200 (start-up, the allocations and the first windows cancel; both
# have Stan's 75 / 25 / 50 schedule), over 200; each run repeated $REPEATS times (default 3), the
# median taken. The dense runs are dense from iteration 100 on (the first window's end); both
# kinds accumulate their windows' moments (the dense one also each chain's covariance) until
# iteration 350, and search the step at each window's end. $STEPS (default 10) leapfrog steps.
#   Rows: gaussian diag (the fused kernel), corr-gaussian diag and dense (the generic path).
# Usage: bench_dense.sh DSAMPLER WORKDIR
set -euo pipefail
bin=$1 work=$2
chains=${CHAINS:-1048576} dim=${DIM:-64} repeats=${REPEATS:-3} steps=${STEPS:-10}
mkdir -p "$work"
wall() { # args...: seconds of one run
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" hmc "$@" --chains "$chains" --dim "$dim" --steps "$steps" --draws 0 --backend cuda --quiet \
    --out "$work/bench_dense.h5" > /dev/null
  t1=$(date +%s.%N)
  rm -f "$work/bench_dense.h5"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
per_iteration() { # label args...
  local label=$1
  shift
  local diffs=()
  for _ in $(seq "$repeats"); do
    local long short
    long=$(wall --warmup 400 "$@")
    short=$(wall --warmup 200 "$@")
    diffs+=("$(awk -v a="$long" -v b="$short" 'BEGIN { printf "%.4f\n", (a - b) * 1000 / 200 }')")
  done
  printf "| %-40s | %8.3f ms | %s |\n" "$label" "$(printf '%s\n' "${diffs[@]}" | median)" "${diffs[*]}"
}
echo "HMC warmup iteration, $chains chains, d = $dim, $steps leapfrog steps, $(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
echo "| run | ms / iteration (median) | repeats |"
echo "|---|---|---|"
per_iteration "gaussian, diag (fused kernel)" --target gaussian --metric diag
per_iteration "corr-gaussian rho 0.5, diag (generic)" --target corr-gaussian --target-args rho=0.5 --metric diag
per_iteration "corr-gaussian rho 0.5, dense (generic)" --target corr-gaussian --target-args rho=0.5 --metric dense
