#!/usr/bin/env bash
#SBATCH --job-name=dsampler-svgd-classic
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --time=01:00:00
# svgd_classic.sh: the two classic runs of Liu & Wang's SVGD paper (NeurIPS 2016).
#
#  1. The 1-D toy: 100 particles from N(-10, 1) on 1/3 N(-2, 1) + 2/3 N(2, 1) (adagrad,
#     step 0.1, 1000 iterations); prints the share of particles above 0 (target mass 0.659).
#  2. Bayesian logistic regression on Covertype (581012 x 54, class 2 against the rest, 80/20
#     split): 100 particles, adagrad, step 0.05, N(0, 1) prior, minibatches of 50 rows as in
#     the paper (BATCH=0: full-batch gradients); prints
#     the test accuracy. With covtype.data(.gz) in $DATA_DIR it is converted; without it, a
#     synthetic set of the same shape is drawn from a known weight vector and the generating
#     model's accuracy is printed beside.
#
# Run from the repository root after building (bash tests/run.sh or cmake), under Slurm
# (sbatch jobs/svgd_classic.sh) or directly (bash jobs/svgd_classic.sh). Environment:
#   DSAMPLER (build/dsampler), RANKS (1), ITERS (1000), BATCH (50), BACKEND (auto), DATA_DIR (.),
#   WORK (svgd_classic), PYTHON (python3 with numpy and h5py).
set -euo pipefail
DSAMPLER=${DSAMPLER:-build/dsampler}
RANKS=${RANKS:-${SLURM_NTASKS:-1}}
ITERS=${ITERS:-1000}
BATCH=${BATCH:-50}
BACKEND=${BACKEND:-auto}
DATA_DIR=${DATA_DIR:-.}
WORK=${WORK:-svgd_classic}
PYTHON=${PYTHON:-python3}
JOBS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${SLURM_JOB_ID:-}" ]; then LAUNCH=(srun); else LAUNCH=(mpirun -np "$RANKS"); fi
mkdir -p "$WORK"

echo "== 1-D mixture toy"
"$PYTHON" - "$WORK/mixture_init.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["x"] = np.random.default_rng(0).normal(-10.0, 1.0, size=(100, 1)).astype(np.float32)
PY
"${LAUNCH[@]}" "$DSAMPLER" svgd --target mixture1d --particles 100 --iters 1000 --update adagrad --step-size 0.1 \
  --init "$WORK/mixture_init.h5" --backend "$BACKEND" --quiet --out "$WORK/mixture.h5"
"$PYTHON" - "$WORK/mixture.h5" <<'PY'
import sys, h5py, numpy as np
x = h5py.File(sys.argv[1], "r")["posterior/x"][0, :, 0]
print(f"share of particles above 0: {(x > 0).mean():.2f} (target 0.659); "
      f"means below/above 0: {x[x < 0].mean():.2f} / {x[x > 0].mean():.2f} (modes -2 / 2)")
PY

echo "== Bayesian logistic regression, Covertype-shaped"
data="$WORK/covtype.h5"
if [ ! -f "$data" ]; then
  if [ -f "$DATA_DIR/covtype.data.gz" ] || [ -f "$DATA_DIR/covtype.data" ]; then
    src="$DATA_DIR/covtype.data.gz"; [ -f "$src" ] || src="$DATA_DIR/covtype.data"
    "$PYTHON" "$JOBS/csv_to_h5.py" "$src" --out "$data"
  else
    echo "no covtype.data(.gz) in $DATA_DIR: drawing a synthetic 581012 x 54 set from known weights"
    "$PYTHON" "$JOBS/csv_to_h5.py" --synthetic 581012 54 --out "$data"
  fi
fi
start=$(date +%s)
"${LAUNCH[@]}" "$DSAMPLER" svgd --target logistic --data "$data" --target-args sigma=1 --particles 100 \
  --iters "$ITERS" --batch-size "$BATCH" --update adagrad --step-size 0.05 --seed 1 --backend "$BACKEND" --quiet \
  --out "$WORK/logistic.h5"
echo "SVGD, $ITERS iterations, minibatches of ${BATCH} rows (0: all): $(( $(date +%s) - start )) s"
"$PYTHON" "$JOBS/logistic_accuracy.py" "$WORK/logistic.h5" "$data"
