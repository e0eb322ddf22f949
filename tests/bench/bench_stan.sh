#!/usr/bin/env bash
# bench_stan.sh: a Stan model's gradient through dsampler's plugin against Stan Math called
# directly (bench_stan.cpp), for the test models eight schools (dim 10) and a logistic regression
# (N = 1000, D = 10; dim 11). Builds each model with `dsampler stan` (cached), then the
# benchmark with the toolchain's compile command (tool-*/compile-command.txt), the model's C++
# included. Usage: bash tests/bench/bench_stan.sh build/dsampler [work-dir]
set -euo pipefail
dsampler=$(realpath "$1")
work=${2:-$(mktemp -d)}
mkdir -p "$work"
here=$(cd "$(dirname "$0")" && pwd)
home=${DSAMPLER_STAN_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/dsampler/stan/httpstan}
if [ ! -x "$home/stanc" ]; then
  echo "skipped: no Stan toolchain at $home (bash src/targets/stan/install-stan.sh installs it)"
  exit 77
fi
stan=$here/../stan
python3 - "$work/logistic.json" <<'PY'
import json, random, sys, math
random.seed(3)
N, D = 1000, 10
beta = [random.gauss(0, 1) for _ in range(D)]
X = [[random.gauss(0, 1) for _ in range(D)] for _ in range(N)]
y = [int(random.random() < 1 / (1 + math.exp(-(0.3 + sum(a * b for a, b in zip(row, beta)))))) for row in X]
json.dump({"N": N, "D": D, "X": X, "y": y}, open(sys.argv[1], "w"))
PY
echo "$(date -u) on $(hostname): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
for model in eight_schools logistic; do
  data=$stan/$model.json
  [ "$model" = logistic ] && data=$work/logistic.json
  library=$("$dsampler" stan "$stan/$model.stan" --quiet)
  model_dir=$(dirname "$library")
  tool=$(ls -d "$(dirname "$model_dir")"/tool-* | head -1)
  for dir in "$(dirname "$model_dir")"/tool-*; do
    # The toolchain whose path the library's rpath names.
    if readelf -d "$library" | grep -q "$dir"; then tool=$dir; fi
  done
  start=$(date +%s.%N)
  # shellcheck disable=SC2046
  $(cat "$tool/compile-command.txt") -I"$here/../../src/shared" -include "$model_dir/model.cpp" "$here/bench_stan.cpp" \
    -o "$work/bench_$model" -L"$tool" -l:libtbb.so.2 -Wl,-rpath,"$tool" -ldl
  echo "== $model (benchmark compiled in $(echo "$(date +%s.%N) - $start" | bc) s)"
  OMP_NUM_THREADS=1 "$work/bench_$model" "$library" "$data" 7
done
