#!/usr/bin/env bash
# Installs the Stan toolchain dsampler compiles Stan models with: the httpstan 4.13.0 wheel from
# PyPI, which ships stanc (stanc3 v2.35, a static binary), the Stan, Stan Math, Eigen, Boost and
# Sundials headers, the Sundials libraries and libtbb.so.2. Only its files are used (no Python
# runs from it), so the wheel is unpacked with pip into a folder of its own, whatever the local
# Python version. pip keeps the downloaded wheel in its cache; a second run does nothing.
#
# Usage: bash src/targets/stan/install-stan.sh [DIR]
#   DIR defaults to $DSAMPLER_STAN_PREFIX, else ${XDG_DATA_HOME:-$HOME/.local/share}/dsampler/stan,
#   where dsampler looks for it (DSAMPLER_STAN_HOME=DIR/httpstan names another place).
set -euo pipefail
version=4.13.0
prefix=${1:-${DSAMPLER_STAN_PREFIX:-${XDG_DATA_HOME:-$HOME/.local/share}/dsampler/stan}}
if [ -x "$prefix/httpstan/stanc" ] && [ -f "$prefix/.httpstan-$version" ]; then
  echo "Stan toolchain: $prefix/httpstan (httpstan $version, already installed)"
  exit 0
fi
pip=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "install-stan.sh: needs pip for python3 (Debian: apt-get install python3-pip)" >&2
  exit 1
fi
mkdir -p "$prefix"
# The cp311 manylinux wheel on any local Python: --target with an explicit platform and version
# installs files only; --no-deps skips httpstan's own server dependencies.
"${pip[@]}" install --quiet --disable-pip-version-check --no-deps --upgrade --target "$prefix" \
  --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp \
  "httpstan==$version"
test -x "$prefix/httpstan/stanc"
touch "$prefix/.httpstan-$version"
echo "Stan toolchain: $prefix/httpstan (httpstan $version, $("$prefix/httpstan/stanc" --version))"
