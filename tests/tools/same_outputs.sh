#!/usr/bin/env bash
# same_outputs.sh BEFORE AFTER WORKDIR [BACKEND] [PLUGIN_DIR]: runs one fixed set of HMC and
# SVGD jobs with two dsampler binaries and compares every output and summary, so that a change
# meant to keep every output bit (a refactor) can show that it does. BACKEND is cpu (default) or
# cuda; PLUGIN_DIR holds example_banana.so (tests/plugin's build) to include a plugin job.
# Needs python3 with numpy and h5py (PYTHON overrides it). Prints one line a job and
# 'N passed, N failed' at the end; exits 1 when any job differs.
set -uo pipefail
before=$(realpath "$1") after=$(realpath "$2") work=$3 backend=${4:-cpu} plugins=${5:-}
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mpirun=${MPIEXEC:-mpirun}
mkdir -p "$work/data" && work=$(realpath "$work")
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# A logistic regression data set and a start file, the same bytes for both binaries.
"$python" - "$work/data" <<'PY' || exit 1
import sys, h5py, numpy as np
rng = np.random.default_rng(7)
X = rng.normal(size=(300, 5)).astype(np.float32)
w = np.array([1.0, -0.5, 0.25, 0.0, 2.0], dtype=np.float32)
y = (rng.uniform(size=300) < 1 / (1 + np.exp(-X @ w))).astype(np.float32)
with h5py.File(f"{sys.argv[1]}/logistic.h5", "w") as f:
    f["X"], f["y"] = X, y
with h5py.File(f"{sys.argv[1]}/init.h5", "w") as f:
    f["x"] = rng.uniform(-1, 1, size=(40, 3)).astype(np.float32)
PY

common="--backend $backend --quiet"
jobs=(
  "1|hmc --target gaussian --dim 6 --chains 8 --warmup 150 --draws 100 --seed 3"
  "3|hmc --target gaussian --dim 6 --chains 8 --warmup 150 --draws 100 --seed 3"
  "2|hmc --target banana --chains 6 --warmup 120 --draws 80 --adapt per-chain --save-warmup --thin 2"
  "2|hmc --target funnel --dim 5 --chains 5 --warmup 100 --draws 60 --steps 8 --metric unit --jitter 0.3"
  "1|hmc --target corr-gaussian --dim 4 --target-args rho=0.9 --chains 4 --warmup 100 --draws 50 --output-chains 3"
  "2|hmc --target mixture1d --dim 2 --chains 7 --warmup 100 --draws 50 --adapt none --steps 5 --chains-per-start 7"
  "2|hmc --target logistic --data $work/data/logistic.h5 --chains 4 --warmup 100 --draws 50"
  "2|hmc --target gaussian --dim 3 --chains 40 --warmup 50 --draws 30 --init $work/data/init.h5 --checkpoint-every 40"
  "1|svgd --target gaussian --dim 8 --particles 64 --iters 40"
  "3|svgd --target gaussian --dim 8 --particles 64 --iters 40"
  "2|svgd --target banana --particles 50 --iters 30 --update adagrad --kernel imq --ksd-every 10"
  "2|svgd --target mixture1d --particles 33 --iters 30 --update adam --bandwidth 0.5 --save-every 10"
  "2|svgd --target gaussian --dim 200 --particles 41 --iters 10 --ksd-kernel imq"
  "2|svgd --target logistic --data $work/data/logistic.h5 --particles 30 --iters 20 --batch-size 50"
)
if [ -d "${DSAMPLER_STAN_HOME:-$HOME/.local/share/dsampler/stan}" ]; then
  jobs+=("2|hmc --target stan:$here/../stan/eight_schools.stan --data $here/../stan/eight_schools.json --chains 4 --warmup 100 --draws 50")
fi
if [ -n "$plugins" ] && [ -f "$plugins/example_banana.so" ]; then
  jobs+=("2|hmc --target plugin:$(realpath "$plugins/example_banana.so") --chains 4 --warmup 60 --draws 40")
fi

passed=0 failed=0
for index in "${!jobs[@]}"; do
  ranks=${jobs[$index]%%|*} args=${jobs[$index]#*|}
  for side in before after; do
    dir=$work/$side/job$index
    rm -rf "$dir" && mkdir -p "$dir"
    binary=$before; [ $side = after ] && binary=$after
    (cd "$dir" && "$mpirun" -n "$ranks" "$binary" $args $common --out run.h5 >stdout 2>stderr; echo $? >rc
     [ -f run.h5 ] && "$binary" summary run.h5 >summary 2>&1)
  done
  b=$work/before/job$index a=$work/after/job$index verdict=same
  cmp -s "$b/rc" "$a/rc" || verdict="exit $(cat "$b/rc") vs $(cat "$a/rc")"
  [ "$verdict" = same ] && [ "$(cat "$b/rc")" != 0 ] && verdict="both failed: $(head -c 200 "$b/stderr")"
  if [ "$verdict" = same ]; then
    "$python" "$here/h5_same.py" "$b/run.h5" "$a/run.h5" >"$a/diff" || verdict="run.h5 differs: $(head -3 "$a/diff" | tr '\n' ';')"
  fi
  if [ "$verdict" = same ]; then
    cmp -s "$b/summary" "$a/summary" || verdict="summary differs"
  fi
  if [ "$verdict" = same ]; then
    for ckpt in "$b"/run.ckpt/ckpt-*.h5; do
      [ -f "$ckpt" ] || continue
      "$python" "$here/h5_same.py" "$ckpt" "$a/run.ckpt/$(basename "$ckpt")" >"$a/diff" || verdict="$(basename "$ckpt") differs"
    done
  fi
  if [ "$verdict" = same ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  printf '%-6s np %s %s: %s\n' "$([ "$verdict" = same ] && echo ok || echo FAIL)" "$ranks" "$args" "$verdict"
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
