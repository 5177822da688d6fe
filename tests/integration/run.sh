#!/bin/sh
# Runs the integration tests: makes (or reuses) a virtual environment with the packages in
# requirements.txt, then runs pytest against the ebb binary given as $1 (or $EBB_BIN).
# Environment: EBB_MODELS_DIR (models), EBB_TEST_DEVICE (default auto), EBB_VENV (venv path,
# default ~/.cache/ebb/venv).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ge 1 ]; then EBB_BIN=$1; shift; fi
: "${EBB_BIN:?usage: run.sh path/to/ebb [pytest args]}"
export EBB_BIN
venv=${EBB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ebb/venv}
# One run at a time makes or updates the venv (scripts/dev runs the suite and the allocation walk
# side by side).
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
stamp="$venv/.ebb-requirements"
if ! cmp -s "$here/requirements.txt" "$stamp" 2>/dev/null; then
    "$venv/bin/pip" install -q -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$stamp"
fi
exec 9>&-
cd "$here"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
