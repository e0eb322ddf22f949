#!/usr/bin/env bash
# Builds dsampler and runs the whole test suite (all labels but bench, and open: tests of known
# open problems, run with `ctest -L open`). GPU tests skip where
# there is no GPU. The tests that mostly wait take one CTest slot
# (tests/CMakeLists.txt). Usage: bash tests/run.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" -LE "bench|open" --output-on-failure -j "$(nproc)" --timeout 1200
