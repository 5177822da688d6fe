#!/usr/bin/env bash
# Fetches the reference chat templates (the ~70 models/templates/*.jinja that llama.cpp keeps as
# test data) from the llama-cpp-python sdist on PyPI into a cache directory, for the chat
# template conformance test (tests/unit/test-jinja-conformance.c). Nothing here is committed.
# Idempotent and offline once cached: the sdist is kept under $XDG_CACHE_HOME/ebb/sdist.
# Usage: fetch-chat-templates.sh [DEST]   (default $XDG_CACHE_HOME/ebb/chat-templates,
# XDG_CACHE_HOME defaulting to ~/.cache). Prints DEST.
set -euo pipefail
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ebb
dest=${1:-$cache/chat-templates}
ver=0.3.36
sdist_dir=$cache/sdist
py=${PYTHON:-python3}
log() { printf 'fetch-chat-templates: %s\n' "$*" >&2; }

stamp="$dest/.llama-cpp-python-$ver"
if [ -f "$stamp" ] && ls "$dest"/*.jinja >/dev/null 2>&1; then
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
tar xzf "$sdist" -C "$tmp" --wildcards '*/vendor/llama.cpp/models/templates/*.jinja'
rm -rf "$dest"
mkdir -p "$dest"
cp "$tmp"/llama_cpp_python-*/vendor/llama.cpp/models/templates/*.jinja "$dest"/
touch "$stamp"
log "$(ls "$dest"/*.jinja | wc -l) templates in $dest"
echo "$dest"
