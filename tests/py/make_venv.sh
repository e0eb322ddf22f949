#!/usr/bin/env bash
# Creates the tests' Python environment at $2 with interpreter $1 from requirements file $3
# (default: requirements.txt beside this script), once; a stamp file holding the requirements'
# hash makes later runs free.
set -euo pipefail
python=$1
venv=$2
requirements=${3:-$(dirname "$0")/requirements.txt}
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
echo "$want" > "$stamp"
