#!/usr/bin/env bash
# From a fresh clone: install the dependencies (Debian 12), build, and run a default job on
# this machine: HMC, then SVGD, on the 64-dimensional standard Gaussian with 2 MPI ranks, on
# the GPU if there is one and the CUDA backend was built, else on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
mkdir -p runs
mpirun_flags=(-np 2)
if [ "$(id -u)" -eq 0 ]; then mpirun_flags+=(--allow-run-as-root); fi
mpirun_flags+=(--oversubscribe)
mpirun "${mpirun_flags[@]}" build/dsampler hmc --target gaussian --dim 64 --chains 1024 --warmup 300 \
  --draws 1000 --seed 7 --out runs/hmc.h5
mpirun "${mpirun_flags[@]}" build/dsampler svgd --target gaussian --dim 64 --particles 1024 --iters 100 \
  --step-size 0.1 --seed 7 --out runs/svgd.h5
for f in runs/hmc.h5 runs/svgd.h5; do
  echo "== $f"
  h5ls -r "$f"
done
