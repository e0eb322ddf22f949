#!/usr/bin/env bash
# Compiles the CUDA backend where there is no GPU and no CUDA toolkit: NVIDIA's PyPI wheels (nvcc,
# the runtime, cuRAND, cuBLAS, NCCL), pinned to the CUDA 13.0 of the GPU machines, compile cuda/
# for sm_90 and link dsampler and the GPU test programs with it, so that a change which breaks
# the kernels' build fails here. Nothing is run. Usage: bash .ci/cuda-compile.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
venv=${DSAMPLER_CUDA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/dsampler/cuda-13.0}
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/pip" install -q --disable-pip-version-check \
  nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96 \
  nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35 nvidia-nccl-cu13==2.28.3
nv=$(ls -d "$venv"/lib/python3*/site-packages/nvidia | head -1)
# The wheels carry versioned libraries only; the linker looks for the plain names.
for lib in libcudart libcublas libcublasLt libcurand; do
  ln -sf "$(cd "$nv/cu13/lib" && ls $lib.so.* | head -1)" "$nv/cu13/lib/$lib.so"
done
ln -sf libnccl.so.2 "$nv/nccl/lib/libnccl.so"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_CUDA_COMPILER="$nv/cu13/bin/nvcc" -DCUDAToolkit_ROOT="$nv/cu13" -DNCCL_ROOT="$nv/nccl" >"$build.cmake.log" \
  || { cat "$build.cmake.log"; exit 1; }
grep -q "dsampler: CUDA backend ON" "$build.cmake.log" || { cat "$build.cmake.log"; echo "cuda-compile: the CUDA backend was not configured" >&2; exit 1; }
cmake --build "$build" -j "$(nproc)" --target dsampler test_gpu_svgd test_gpu_hmc test_gpu_philox test_targets_gpu bench_gpu
echo "cuda-compile: cuda/ compiled with $("$nv/cu13/bin/nvcc" --version | tail -1)"
