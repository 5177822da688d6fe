#!/usr/bin/env bash
# Fetches llama.cpp's vocabulary-only GGUFs (models/ggml-vocab-*.gguf) and their expected
# tokenizations (.gguf.inp test strings, .gguf.out token ids) from the llama-cpp-python sdist on
# PyPI into a cache directory, for the tokenizer conformance test (tests/unit/test-vocabs.c).
# Nothing here is committed. Idempotent and offline once cached: the sdist is shared with
# scripts/fetch-chat-templates.sh under $XDG_CACHE_HOME/ebb/sdist.
# Usage: fetch-vocabs.sh [DEST]   (default $XDG_CACHE_HOME/ebb/vocabs, XDG_CACHE_HOME defaulting
# to ~/.cache). Prints DEST.
set -euo pipefail
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ebb
dest=${1:-$cache/vocabs}
ver=0.3.36
sdist_dir=$cache/sdist
py=${PYTHON:-python3}
log() { printf 'fetch-vocabs: %s\n' "$*" >&2; }

stamp="$dest/.llama-cpp-python-$ver"
if [ -f "$stamp" ] && ls "$dest"/ggml-vocab-*.gguf >/dev/null 2>&1; then
    echo "$dest"
    exit 0
fi
mkdir -p "$sdist_dir"
sdist="$sdist_dir/llama_cpp_python-$ver.tar.gz"
if [ ! -f "$sdist" ]; then
    log "downloading llama-cpp-python==$ver (sdist) from PyPI"
    "$py" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$ver" -d "$sdist_dir"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "$sdist" -C "$tmp" --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*'
rm -rf "$dest"
mkdir -p "$dest"
cp "$tmp"/llama_cpp_python-*/vendor/llama.cpp/models/ggml-vocab-* "$dest"/
touch "$stamp"
log "$(ls "$dest"/ggml-vocab-*.gguf | wc -l) vocabularies in $dest"
echo "$dest"
