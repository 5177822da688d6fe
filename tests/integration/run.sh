#!/bin/sh
# Runs the integration tests: makes (or reuses) a virtual environment with the packages in
# requirements.txt, then runs pytest against the ebb binary given as $1 (or $EBB_BIN).
# Environment: EBB_MODELS_DIR (models), EBB_TEST_DEVICE (default auto), EBB_VENV (venv path,
# default ~/.cache/ebb/venv). `run.sh --venv-only` makes the venv and stops (scripts/dev test
# starts it beside the build, so that the downloads wait on the network while the compiler runs).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv_only=0
if [ "${1:-}" = --venv-only ]; then
    venv_only=1
elif [ $# -ge 1 ]; then
    EBB_BIN=$1
    shift
fi
[ "$venv_only" = 1 ] || : "${EBB_BIN:?usage: run.sh path/to/ebb [pytest args] | --venv-only}"
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
[ "$venv_only" = 0 ] || exit 0
export EBB_BIN
cd "$here"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
