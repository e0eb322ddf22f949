#!/usr/bin/env bash
# Installs what dsampler needs to build and test on Debian 12: a C compiler, CMake, Open MPI,
# parallel HDF5, FFTW, json-c and OpenSSL's libcrypto (JAX bundles' manifests and checksums), and Python with venv for the tests; and the Stan toolchain (stanc and
# Stan Math from the httpstan wheel, src/targets/stan/install-stan.sh: once, then a no-op) with the C++
# compiler it needs. CUDA is optional and not installed here: where nvcc and NCCL are present, the
# CUDA backend is built too.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config ca-certificates iproute2 \
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools libfftw3-dev libjson-c-dev libssl-dev \
  python3 python3-venv python3-pip \
  slurmctld slurmd slurm-client munge >/dev/null
bash "$(dirname "$0")/../src/targets/stan/install-stan.sh"
